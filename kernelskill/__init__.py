"""kernelskill: verified, faster GPU kernels from PyTorch modules, by a six-role LangGraph agent."""

import os as _os

__version__ = "0.1.0"

# The subpackages (kernelskill.engine, .runner, ...) live at the checkout's top level (pyproject's
# package-dir). Imported from a checkout whose folder comes first on sys.path (`python -m pytest` in
# its root) while the installed copy is not an editable one, this kernelskill/ shadows the installed
# package: its subpackages are then found beside it.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_ROOT, "pyproject.toml")) and _os.path.isfile(
    _os.path.join(_ROOT, "engine", "__init__.py")
):
    __path__.append(_ROOT)
