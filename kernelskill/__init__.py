"""kernelskill: verified, faster GPU kernels from PyTorch modules, by a six-role LangGraph agent."""

__version__ = "0.1.0"
