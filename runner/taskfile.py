"""Load KernelBench-format task files and candidate sources as modules (stdlib + torch only).

A task file defines ``Model`` (an ``nn.Module``), ``get_inputs()`` and ``get_init_inputs()``; its
module-level constants (``batch_size = 4096`` ...) size the problem for a large GPU. kernelskill adds
one optional constant, ``CPU_SHAPES``: a dict of module-level names to smaller values used when
the task runs on the CPU (Triton's interpreter is orders of magnitude slower than a GPU). With
``cpu=True`` those values replace the module's globals before ``get_inputs`` and
``get_init_inputs`` are called. KernelBench itself ignores the constant.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class TaskFileError(ValueError):
    """A task file that fails to import or lacks a required name."""


def load_source_module(source: str, name: str, filename: str | None = None) -> types.ModuleType:
    """Execute ``source`` as a fresh module registered under ``name``.

    Registering in ``sys.modules`` and giving the module a real file name lets ``@triton.jit``
    (which reads the kernel's source with ``inspect``) work on code that only exists as a string.
    """
    if filename is None:
        filename = f"<{name}>"
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)  # noqa: S102 - running task/candidate code is the point
    return module


def load_task_module(path: str | Path, cpu: bool = False, name: str | None = None) -> types.ModuleType:
    """Import a task file by path, applying ``CPU_SHAPES`` when ``cpu`` is true."""
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"{path}: no such task file")
    mod_name = name or f"kernelskill_task_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise TaskFileError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # any error in the user's file is a task error, reported with its type
        raise TaskFileError(f"{path}: failed to import: {type(e).__name__}: {e}") from e
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise TaskFileError(f"{path}: missing {', '.join(missing)} (KernelBench format needs {REQUIRED})")
    if cpu:
        apply_cpu_shapes(module)
    return module


def apply_cpu_shapes(module: types.ModuleType) -> bool:
    """Replace module globals by the task's ``CPU_SHAPES`` values; False when it has none."""
    shapes = getattr(module, "CPU_SHAPES", None)
    if not shapes:
        return False
    unknown = [k for k in shapes if k not in module.__dict__]
    if unknown:
        raise TaskFileError(f"CPU_SHAPES names globals the task does not define: {unknown}")
    module.__dict__.update(shapes)
    return True
