"""Speed-of-light: the least time a task can take on this GPU, from bytes and FLOPs.

Ceilings are measured once per GPU model and cached: device-to-device copy bandwidth (bytes read +
written per second) and dense matmul rates (fp32 with TF32 allowed, bf16) through cuBLAS. A task's
floor is ``max(bytes that must move / bandwidth, FLOPs / peak)`` where the bytes are every input,
parameter and output touched once, and the FLOPs are counted on the reference with
``torch.utils.flop_counter`` (matmuls, convolutions, attention; elementwise work counts as zero,
so the floor is a true lower bound). A measured time below ~0.8 of the floor is physically
implausible and gets flagged.
"""

from __future__ import annotations

from typing import Any

from . import cache

IMPLAUSIBLE = 0.8


def measure_ceilings() -> dict[str, float]:
    """Copy bandwidth (GB/s) and matmul rates (TFLOP/s) of the current GPU."""
    import torch

    from .timing import time_cuda

    n = 1 << 28  # 1 GiB of fp32
    src = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), trials=20, warmup=3)["median_ms"]
    bw = 2 * n * 4 / (t * 1e-3) / 1e9
    out: dict[str, float] = {"bandwidth_gbps": bw}
    size = 8192
    for name, dtype, tf32 in (("tf32_tflops", torch.float32, True), ("bf16_tflops", torch.bfloat16, False)):
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            t = time_cuda(lambda: torch.mm(a, b), trials=10, warmup=3)["median_ms"]  # noqa: B023
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        out[name] = 2 * size**3 / (t * 1e-3) / 1e12
    return out


def ceilings(gpu_name: str) -> dict[str, float]:
    """Cached ceilings of this GPU model (measured on first use)."""
    found = cache.get("ceilings", gpu_name)
    if found:
        return dict(found)
    measured = measure_ceilings()
    cache.put("ceilings", gpu_name, measured)
    return measured


def _bytes(objs: Any) -> int:
    import torch

    if isinstance(objs, torch.Tensor):
        return objs.numel() * objs.element_size()
    if isinstance(objs, (list, tuple)):
        return sum(_bytes(o) for o in objs)
    return 0


def task_work(model: Any, inputs: list[Any], output: Any) -> dict[str, float]:
    """Bytes that must move and FLOPs of one reference forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    state = sum(_bytes(t) for t in list(model.parameters()) + list(model.buffers()))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
    return {
        "bytes": float(_bytes(inputs) + _bytes(output) + state),
        "flops": float(counter.get_total_flops()),
        "half": float(any(getattr(t, "dtype", None) in (torch.float16, torch.bfloat16) for t in inputs)),
    }


def speed_of_light(work: dict[str, float], ceil: dict[str, float]) -> dict[str, float]:
    """The floor time and which resource sets it."""
    peak = ceil["bf16_tflops"] if work.get("half") else ceil["tf32_tflops"]
    t_mem = work["bytes"] / (ceil["bandwidth_gbps"] * 1e9) * 1e3
    t_math = work["flops"] / (peak * 1e12) * 1e3
    return {
        "sol_ms": max(t_mem, t_math),
        "sol_memory_ms": t_mem,
        "sol_compute_ms": t_math,
        "arithmetic_intensity": work["flops"] / work["bytes"] if work["bytes"] else 0.0,
    }


def metrics_for(runtime_ms: float, work: dict[str, float], ceil: dict[str, float]) -> dict[str, float]:
    """Fallback profile signals from one measured time: SOL %, bandwidth % and FLOP %."""
    sol = speed_of_light(work, ceil)
    peak = ceil["bf16_tflops"] if work.get("half") else ceil["tf32_tflops"]
    seconds = runtime_ms * 1e-3
    return {
        "sol_pct": 100.0 * sol["sol_ms"] / runtime_ms if runtime_ms > 0 else 0.0,
        "bandwidth_pct": 100.0 * work["bytes"] / seconds / (ceil["bandwidth_gbps"] * 1e9) if seconds else 0.0,
        "flop_pct": 100.0 * work["flops"] / seconds / (peak * 1e12) if seconds else 0.0,
        "arithmetic_intensity": sol["arithmetic_intensity"],
        "sol_ms": sol["sol_ms"],
    }
