"""Profile signals of a candidate on CUDA: compiled-kernel resources, launch counts, ncu metrics.

- :func:`kernel_resources`: registers per thread, spills and shared memory of every compiled
  Triton kernel in the candidate module (from Triton's own kernel cache: no profiler needed).
- :func:`launch_counts`: kernels launched by one forward call (``torch.profiler``).
- :func:`run_ncu`: a fixed Nsight Compute metric set over one forward call, in a child process
  (``python -m kernelskill.runner.profiling TARGET.json`` under ``ncu``), parsed into the metric
  names of ``skills_kb.schema.METRICS``; time-weighted over the kernels of that call.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from . import gpu_share

NCU_METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
}
STALLS = (
    "long_scoreboard", "short_scoreboard", "barrier", "math_pipe_throttle", "mio_throttle", "wait",
    "lg_throttle", "not_selected", "selected", "no_instruction", "dispatch_stall", "membar",
)  # fmt: skip
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
NVTX_RANGE = "kernelskill_profile"


def _jit_functions(module: types.ModuleType) -> list[Any]:
    from triton.runtime.jit import JITFunction

    found = []
    for value in vars(module).values():
        obj = value
        for _ in range(4):  # Autotuner / Heuristics wrap the JITFunction in .fn
            if isinstance(obj, JITFunction):
                found.append(obj)
                break
            obj = getattr(obj, "fn", None)
    return found


def _inductor_kernels(module: types.ModuleType) -> list[Any]:
    """TorchInductor's kernel objects (``CachingAutotuner``) among the module's globals."""
    heuristics = sys.modules.get("torch._inductor.runtime.triton_heuristics")
    if heuristics is None:
        return []
    return [v for v in vars(module).values() if isinstance(v, heuristics.CachingAutotuner)]


def _resources(kernel: str, binary: Any, meta: Any, config: Any) -> dict[str, Any]:
    """One compiled kernel's resource row.

    Registers and spills come from ``binary``, shared memory from ``meta``, warps and stages from
    ``config`` (a Triton kernel: the compiled kernel and its metadata; an Inductor launcher: the
    launcher and its config).
    """
    spills = getattr(binary, "n_spills", None)
    return {
        "kernel": kernel,
        "registers_per_thread": getattr(binary, "n_regs", None),
        "spill_bytes": 4 * spills if spills is not None else None,
        "shared_mem_bytes": getattr(meta, "shared", None),
        "num_warps": getattr(config, "num_warps", None),
        "num_stages": getattr(config, "num_stages", None),
    }


def kernel_resources(module: types.ModuleType) -> list[dict[str, Any]]:
    """Resource usage of every compiled specialization of the module's Triton kernels.

    Kernels written with ``@triton.jit`` are read from Triton's per-function cache; kernels of a
    TorchInductor output module from the launchers of its ``CachingAutotuner`` objects.
    """
    out = []
    for tuner in _inductor_kernels(module):
        for launcher in getattr(tuner, "launchers", []):
            out.append(_resources(tuner.fn.__name__, launcher, launcher, getattr(launcher, "config", None)))
    for jit in _jit_functions(module):
        for entry in getattr(jit, "device_caches", {}).values():
            for kernel in entry[0].values():
                out.append(_resources(jit.fn.__name__, kernel, kernel.metadata, kernel.metadata))
    return out


_NO_KERNEL_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view",
    "as_strided", "detach", "t", "transpose", "permute", "expand", "reshape", "alias", "slice", "select",
    "unsqueeze", "squeeze", "split", "chunk", "unbind", "lift_fresh",
}  # fmt: skip


def launched_kernels(fn: Any) -> list[str]:
    """Kernels one call of ``fn`` launches, counted without a profiler (CUPTI takes seconds to start).

    Triton launches are counted by patching ``JITFunction.run`` and, when TorchInductor's runtime is
    loaded, ``CachingAutotuner.run`` (both named after the kernel); PyTorch work by a dispatch mode
    that records every aten op except views and allocations (named
    ``aten::OP``). An approximation of the CUDA launch list, good for launch counts and for "did
    the candidate's own kernel run".
    """
    import torch
    from triton.runtime.jit import JITFunction

    names: list[str] = []
    heuristics = sys.modules.get("torch._inductor.runtime.triton_heuristics")
    launchers = [JITFunction] + ([heuristics.CachingAutotuner] if heuristics is not None else [])
    with contextlib.ExitStack() as patches:
        for cls in launchers:
            patches.enter_context(_counting_runs(cls, names))
        with aten_ops(names):
            fn()
        torch.cuda.synchronize()
    return names


@contextlib.contextmanager
def aten_ops(names: list[str], only_while: Callable[[], bool] | None = None) -> Iterator[None]:
    """While active, every aten op dispatched in this thread but views and allocations appends ``aten::OP``.

    ``only_while``: only the ops dispatched while it holds (``gpu_share.capturing``: those a CUDA graph
    captures, which its replays run again without passing the dispatcher).
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            op = func.overloadpacket.__name__
            if op not in _NO_KERNEL_OPS and (only_while is None or only_while()):
                names.append(f"aten::{op}")
            return func(*args, **(kwargs or {}))

    with _Ops():
        yield


@contextlib.contextmanager
def library_calls(names: list[str]) -> Iterator[None]:
    """While active, PyTorch's profiler records every op (host side only); on exit, the heavy ones append.

    Appended as ``aten::OP``, the library ops among the recorded (:func:`library_ops`). The profiler sees
    what a dispatch mode does not: an op run with the Python dispatch key switched off, and the ops inside
    an operator the candidate defined itself (``torch.library.custom_op`` around ``torch.matmul``).
    Where the profiler cannot start (another one is running), nothing is recorded.
    """
    import torch

    try:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False)
        prof.__enter__()
    except Exception:  # noqa: BLE001 - a profiler already running in this process: the dispatch mode's record only
        yield
        return
    try:
        yield
    finally:
        prof.__exit__(None, None, None)
        names.extend(f"aten::{op}" for op in library_ops([e.name for e in prof.events()]))


# Ops that move, fill or convert data rather than compute the task: not evidence of the reference's work.
PLUMBING_OPS = {
    "clone", "copy_", "_to_copy", "contiguous", "fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like",
    "full_like", "new_zeros", "new_ones", "new_full", "arange", "scalar_tensor", "lift_fresh_copy",
    "_local_scalar_dense", "resize_", "set_", "as_strided_", "index_select", "cat", "stack", "flatten", "narrow",
}  # fmt: skip


def compute_ops(names: list[str]) -> set[str]:
    """The distinct ``aten::OP`` names among recorded launches that compute (not :data:`PLUMBING_OPS`)."""
    return {n for n in names if n.startswith("aten::") and n[6:] not in PLUMBING_OPS}


def library_ops(names: list[str]) -> list[str]:
    """The heavy PyTorch ops among recorded launches (``aten::mm``, ``aten::convolution``...): cuBLAS / cuDNN work."""
    from .static_check import HEAVY_LIBRARY_OPS

    return sorted({n[6:] for n in names if n.startswith("aten::") and HEAVY_LIBRARY_OPS.match(n[6:])})


@contextlib.contextmanager
def _counting_runs(cls: Any, names: list[str]) -> Any:
    """While active, every ``cls.run`` call appends the kernel's name to ``names``."""
    orig = cls.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(self.fn.__name__)
        return orig(self, *args, **kwargs)

    cls.run = run
    try:
        yield
    finally:
        cls.run = orig


def launch_counts(names: list[str]) -> dict[str, int]:
    """Kernel launches and distinct kernels."""
    return {"launch_count": len(names), "kernel_count": len(set(names))}


def ncu_available() -> bool:
    """True when the ``ncu`` binary is on PATH."""
    return shutil.which("ncu") is not None


def parse_ncu_csv(text: str) -> dict[str, float]:
    """Time-weighted metrics over all kernels in an ncu ``--csv`` report."""
    per_kernel: dict[str, dict[str, float]] = {}
    start = text.find('"ID"')
    for row in csv.DictReader(io.StringIO(text[start:] if start >= 0 else "")):
        try:
            value = float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        per_kernel.setdefault(row["ID"], {})[row["Metric Name"]] = value
    if not per_kernel:
        return {}
    weights = {k: m.get("gpu__time_duration.sum", 1.0) for k, m in per_kernel.items()}
    total = sum(weights.values()) or 1.0
    out: dict[str, float] = {"launch_count": float(len(per_kernel)), "ncu_time_ms": total / 1e6}
    for raw, name in NCU_METRICS.items():
        if raw == "gpu__time_duration.sum":
            continue
        vals = [(m[raw], weights[k]) for k, m in per_kernel.items() if raw in m]
        if vals:
            if name == "registers_per_thread":
                out[name] = max(v for v, _ in vals)
            else:
                out[name] = sum(v * w for v, w in vals) / sum(w for _, w in vals)
    stall_totals = {
        s: sum(m.get(STALL_METRIC.format(s), 0.0) * weights[k] for k, m in per_kernel.items()) for s in STALLS
    }
    denominator = sum(stall_totals.values())
    if denominator > 0:
        for s, v in stall_totals.items():
            out[f"stall_{s}_pct"] = 100.0 * v / denominator
    return out


def run_ncu(request: dict[str, Any], workdir: str, timeout_s: float = 240.0) -> dict[str, Any]:
    """Profile one forward call of the candidate under ncu; {} plus an error when it fails."""
    target = os.path.join(workdir, "ncu_target.json")
    with open(target, "w") as f:
        json.dump(request, f)
    metrics = ",".join(list(NCU_METRICS) + [STALL_METRIC.format(s) for s in STALLS])
    cmd = [
        "ncu", "--csv", "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
        "--metrics", metrics, sys.executable, "-m", "kernelskill.runner.profiling", target,
    ]  # fmt: skip
    env = gpu_share.without_share(dict(os.environ))  # the child runs inside this process's hold
    try:
        with gpu_share.exclusive("ncu"):  # ncu replays kernels: nothing else on the GPU meanwhile
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu exceeded {timeout_s:g} s"}
    parsed = parse_ncu_csv(proc.stdout)
    if not parsed:
        return {"error": f"ncu produced no metrics (exit {proc.returncode}): {proc.stderr[-500:]}"}
    return {"metrics": parsed}


def _profile_target(path: str) -> None:
    """Under ncu: build the models, warm up, then run one forward inside the NVTX range."""
    import torch

    from .audit import install
    from .worker import load_for_profiling

    with open(path) as f:
        req = json.load(f)
    install(os.path.dirname(os.path.realpath(req["candidate_path"])))
    new, inputs = load_for_profiling(req)
    with torch.no_grad():
        for _ in range(3):
            new(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        new(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    _profile_target(sys.argv[1])
