"""What this machine can run candidates on."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """True when torch sees a CUDA device."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken torch install means no CUDA here
        return False


CPUS_ENV = "KERNELSKILL_CPUS"
EVAL_PID_ENV = "KERNELSKILL_EVAL_PID"  # in a task's environment: the process that launched it (the eval's)


def cpu_shares(workers: int) -> list[list[int]]:
    """This process's CPUs split into ``workers`` contiguous shares ([] each when not possible)."""
    import os

    if workers < 2 or not hasattr(os, "sched_getaffinity"):
        return [[] for _ in range(workers)]
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 * workers:  # too few to split usefully
        return [[] for _ in range(workers)]
    size = len(cpus) // workers
    return [cpus[i * size : (i + 1) * size] for i in range(workers)]


def apply_cpu_share() -> list[int]:
    """Pin this process (and so every child it starts) to the CPUs in ``KERNELSKILL_CPUS``.

    The eval runner gives each GPU worker its own share of the cores, so one task's compile pool
    (TorchInductor uses up to 32 processes, sized by the CPUs it may use) does not slow the other
    GPU's timing loop. Returns the CPUs applied ([] when unset or not possible).
    """
    import os

    raw = os.environ.get(CPUS_ENV, "").strip()
    if not raw or not hasattr(os, "sched_setaffinity"):
        return []
    try:
        cpus = [int(c) for c in raw.split(",") if c.strip()]
        os.sched_setaffinity(0, cpus)
    except (ValueError, OSError):
        return []
    return cpus


def policy_numerics(precision: str) -> None:
    """Set this process's TF32 flags to the precision policy's, for everything it runs from now on.

    Under ``tf32`` the baselines are timed with TF32 matmuls allowed, so the candidate runs so too: a
    cuBLAS product it calls (``torch.matmul``, a compiled program's ``extern_kernels.mm``) reads the flag
    when it runs, and a candidate may not set it itself (it would loosen the reference it is judged by).
    Under ``fp32`` nothing changes: PyTorch's defaults (TF32 cuDNN convolutions, fp32 matmuls).
    """
    if precision != "tf32":
        return
    import torch

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True


def tf32_matmuls(on: bool) -> Any:
    """Context allowing TF32 in matmuls (cuDNN convolutions already allow it by default), restored after."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def allowed() -> Any:
        before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before

    return allowed() if on else contextlib.nullcontext()


# aten ops whose fp32 numerics TF32 flags can change: cuBLAS products, cuDNN convolutions and RNNs, and what
# Inductor turns into tl.dot (a superset: an op named like one of these counts)
TF32_OPS = ("mm", "matmul", "linear", "conv", "dot", "einsum", "attention", "rnn", "lstm", "gru", "mv", "bilinear")


def tf32_ops(ops: list[str]) -> bool:
    """True when the recorded aten ops (``aten::OP``, :func:`.profiling.aten_ops`) hold one TF32 flags can change.

    Where nothing of the kind runs (element-wise work, reductions, scans), TF32 allowed or not computes
    the same program.
    """
    return any(op in name for name in ops for op in TF32_OPS)
