"""python -m kernelskill."""

from kernelskill.cli import main

main()
