"""Checks of the benchmark task suite under evals/tasks/level*/ (KernelBench format + CPU_SHAPES).

Every task is imported with its CPU_SHAPES applied, built under a fixed seed and run once (twice,
to check determinism) on the CPU. The GPU-sized shapes are never allocated here.
"""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest
import torch

from kernelskill.runner.taskfile import apply_cpu_shapes, load_task_module

TASKS_DIR = Path(__file__).resolve().parents[1] / "evals" / "tasks"
MIN_COUNTS = {"level1": 40, "level2": 30, "level3": 10}
TASK_FILES = sorted(TASKS_DIR.glob("level*/*.py"))
NAME_RE = re.compile(r"^(\d\d)_[a-z0-9]+(_[a-z0-9]+)*\.py$")
ALLOWED_IMPORTS = {"torch", "torch.nn", "torch.nn.functional"}
MAX_CPU_SECONDS = 1.0
# Triton's CPU interpreter is ~1000x slower than a GPU: keep every input and weight small.
MAX_CPU_NUMEL = 4096


def _task_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _tensors(item)]
    return []


def _is_tensor_or_tuple(out) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    return isinstance(out, tuple) and len(out) > 0 and all(isinstance(t, torch.Tensor) for t in out)


@pytest.mark.parametrize("level,minimum", sorted(MIN_COUNTS.items()))
def test_level_counts(level: str, minimum: int) -> None:
    files = sorted((TASKS_DIR / level).glob("*.py"))
    assert len(files) >= minimum, f"{level}: {len(files)} tasks, expected >= {minimum}"


@pytest.mark.parametrize("level", sorted(MIN_COUNTS))
def test_level_numbering(level: str) -> None:
    names = sorted(p.name for p in (TASKS_DIR / level).glob("*.py"))
    bad = [n for n in names if not NAME_RE.match(n)]
    assert not bad, f"{level}: badly named task files {bad}"
    numbers = [int(n[:2]) for n in names]
    assert numbers == list(range(1, len(names) + 1)), f"{level}: numbers not 01..{len(names)}"


@pytest.mark.parametrize("path", TASK_FILES, ids=_task_id)
def test_task_source(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    first = tree.body[0] if tree.body else None
    assert (
        isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    ), "task file must start with a docstring"
    doc = first.value.value.strip()
    assert doc and "\n" not in doc, "module docstring must be one line"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods = {node.module or ""}
        else:
            continue
        extra = sorted(mods - ALLOWED_IMPORTS)
        assert not extra, f"task files import only torch, torch.nn, torch.nn.functional: {extra}"
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "Model" in classes and ast.get_docstring(classes["Model"]), "Model needs a docstring"
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"get_inputs", "get_init_inputs"} <= funcs


@pytest.mark.parametrize("path", TASK_FILES, ids=_task_id)
def test_task_runs_on_cpu_shapes(path: Path) -> None:
    module = load_task_module(path, cpu=False)
    shapes = getattr(module, "CPU_SHAPES", None)
    assert isinstance(shapes, dict) and shapes, "CPU_SHAPES must be a non-empty dict"
    gpu_values = {k: module.__dict__[k] for k in shapes if k in module.__dict__}
    assert apply_cpu_shapes(module)  # raises on keys that are not module constants
    same = [k for k, v in gpu_values.items() if v == shapes[k]]
    assert not same, f"CPU_SHAPES keeps the GPU value for {same}"

    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(1)
    inputs = module.get_inputs()
    torch.manual_seed(1)
    inputs_again = module.get_inputs()
    assert isinstance(inputs, list) and inputs, "get_inputs must return a non-empty list"
    for a, b in zip(inputs, inputs_again, strict=True):
        assert isinstance(a, torch.Tensor) and a.device.type == "cpu"
        assert torch.equal(a, b), "get_inputs is not reproducible under a fixed seed"
        if a.is_floating_point():
            assert a.dtype == torch.float32, f"input dtype {a.dtype}, expected float32"
    big = [tuple(t.shape) for t in inputs if t.numel() > MAX_CPU_NUMEL]
    big += [n for n, p in model.named_parameters() if p.numel() > MAX_CPU_NUMEL]
    assert not big, f"CPU shapes too large for the Triton interpreter: {big}"

    timings = []
    outputs = []
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            outputs.append(model(*inputs))
            timings.append(time.perf_counter() - start)
    out = outputs[0]
    assert _is_tensor_or_tuple(out), f"forward returned {type(out).__name__}"
    for t in _tensors(out):
        assert t.numel() > 0
        assert torch.isfinite(t).all(), "forward produced non-finite values"
    for a, b in zip(_tensors(out), _tensors(outputs[1]), strict=True):
        assert torch.equal(a, b), "forward is not deterministic"
    assert min(timings) < MAX_CPU_SECONDS, f"CPU forward took {min(timings):.2f}s"
