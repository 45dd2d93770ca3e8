"""Compiler seeds: TorchInductor's kernels for the task, as candidates (see ``engine/inductor_seed.py``).

Each variant is captured in its own child process (TorchInductor compiles and runs the reference on
the GPU) with ``Context.seed_timeout_s`` as its limit. ``default`` is what ``torch.compile`` makes;
when its main work stays in a library call (cuBLAS / cuDNN through ``extern_kernels``), or all of
it in ATen fallbacks, the ``triton`` variant asks Inductor for Triton GEMM / convolution templates,
with ops rewritten first into forms Inductor makes Triton kernels of (``engine/reformulate.py``), so
that a custom-kernel candidate exists too. ``autotune`` (max-autotune + coordinate-descent tuning) is the
``autotune_sweep`` skill applied to a compiler seed (``engine/transforms.py``).
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelskill.graph import deadline
from kernelskill.graph.context import Context
from kernelskill.runner.sandbox import ChildFailure, alone_request, needs_gpu_alone, run_child
from kernelskill.runner.static_check import HEAVY_MODULES, HEAVY_OPS, forward_compute_ops

SEED_MARK = "kernelskill compiler seed for"
UNAVAILABLE = " unavailable: "  # in the note of a capture that made no seed (SeedOutcome.note)


@dataclass
class SeedOutcome:
    """One variant's capture: the candidate source, or why there is none."""

    variant: str
    source: str = ""
    error: str = ""
    capture: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        """A candidate source was produced."""
        return bool(self.source)

    @property
    def needs_custom_variant(self) -> bool:
        """No seed, one whose main work is a library call, or one of library calls only: ``triton`` is wanted.

        The last case is an op Inductor leaves to ATen for some shapes (e.g. an adaptive pooling with
        windows over 5x5); the ``triton`` capture rewrites such ops first (``engine/reformulate.py``).
        """
        if not self.ok or self.capture.get("heavy_extern_calls"):
            return True
        return bool(self.capture.get("extern_calls")) and "async_compile.triton(" not in self.source

    def note(self) -> str:
        """One line for the candidate's note or the run's progress."""
        if not self.ok:
            return f"compiler seed ({self.variant}){UNAVAILABLE}{self.error}"
        heavy = self.capture.get("heavy_extern_calls") or []
        lib = f"; main work in library calls {', '.join(heavy)}" if heavy else ""
        forms = self.capture.get("reformulated") or []
        lib += f"; reformulated {', '.join(forms)}" if forms else ""
        if self.capture.get("compensated"):
            n = self.capture["compensated"]
            lib += f"; compensated_dot on {n} loop(s): the plain capture missed the tolerance"
        return f"compiler seed: TorchInductor, variant {self.variant} ({self.wall_s:.0f} s to capture{lib})"


def is_compiler_seed(source: str) -> str | None:
    """The Inductor variant a candidate source was captured with, or None."""
    m = re.search(re.escape(SEED_MARK) + r" .*?\(variant '(\w+)'\)", source[:2000], re.S)
    return m.group(1) if m else None


def capture_variant(
    ctx: Context,
    task_path: str,
    variant: str,
    workdir: Path,
    tf32: bool = False,
    reserve_s: float = deadline.REVIEW_RESERVE_S,
    conv_gemm: bool = False,
    split_gemm: bool = False,
    flash: bool = False,
    reformulate: bool = True,
    conv_kernel: str | None = None,
    precision: str | None = None,
    cancel: threading.Event | None = None,
) -> SeedOutcome:
    """Capture one Inductor variant of the task in a child process.

    ``tf32``: TF32 matmuls allowed; ``conv_gemm``: 2-D convolutions as im2col + GEMM; ``split_gemm``:
    GEMMs over 3xTF32 split operands (TF32 allowed); ``flash``: attention as one fused Triton kernel;
    ``conv_kernel``: every convolution in our implicit-GEMM kernel (``engine/conv.py``), in that precision.
    ``precision``: the fp32 dots of the emitted seed (single-pass TF32 ones of a ``tf32`` capture too) set
    to that product precision (``engine/precision.py``) before the self-check, which then judges the
    candidate that will be reviewed.
    Its time limit is ``Context.seed_timeout_s``,
    capped by the launch deadline minus ``reserve_s``; setting ``cancel`` stops it earlier.
    """
    req = {
        "task_path": str(Path(task_path).resolve()),
        "variant": variant,
        "seed": ctx.seed,
        "tf32": tf32,
        "conv_gemm": conv_gemm,
        "split_gemm": split_gemm,
        "flash": flash,
        "reformulate": reformulate,
        "conv_kernel": conv_kernel,
        "precision": precision,
        "precision_policy": ctx.precision,  # what the self-check allows the reference (runner/correctness.py)
    }
    name = (
        f"seed_{variant}"
        + ("" if reformulate else "_plain")
        + ("_tf32" if tf32 else "")
        + ("_gemm" if conv_gemm else "")
    )
    name += (
        ("_split" if split_gemm else "") + ("_flash" if flash else "") + (f"_conv_{conv_kernel}" if conv_kernel else "")
    ) + (f"_{precision}" if precision else "")
    limit = deadline.timeout(ctx.seed_timeout_s, reserve_s)
    out = run_child("kernelskill.engine.inductor_seed", req, workdir, name, limit, spare=True, cancel=cancel)
    if not isinstance(out, ChildFailure) and needs_gpu_alone(out.result, req):
        limit = deadline.timeout(ctx.seed_timeout_s, reserve_s)
        alone = {**req, **alone_request(out.result)}
        out = run_child("kernelskill.engine.inductor_seed", alone, workdir, name + "_alone", limit, cancel=cancel)
    if isinstance(out, ChildFailure):
        what = {"timeout": "timed out", "cancelled": "stopped"}.get(out.status, "crashed")
        return SeedOutcome(variant, error=f"capture {what}: {out.digest}", wall_s=out.wall_s)
    res = out.result
    if not res.get("ok"):
        return SeedOutcome(variant, error=str(res.get("error", "unknown error")), wall_s=out.wall_s)
    return SeedOutcome(variant, source=res["source"], capture=res.get("capture", {}), wall_s=out.wall_s)


def likely_library_work(task_source: str) -> bool:
    """True when the reference's forward calls a GEMM / convolution / attention / RNN op or module."""
    ops = forward_compute_ops(task_source, "Model")
    return bool(ops & HEAVY_OPS) or any(op.startswith(tuple(m.lower() for m in HEAVY_MODULES)) for op in ops)


def compiler_seeds(ctx: Context, task_path: str, workdir: Path) -> list[SeedOutcome]:
    """The ``default`` variant, plus ``triton`` when the default's main work is a library call.

    When the reference's forward visibly calls a heavy op, both captures run at once (two child
    processes: compiling is mostly CPU work); the ``triton`` one is kept only if it is needed, and is
    stopped once the ``default`` one succeeds without needing it, or leaves its review too little time
    (:func:`bound_second`). When every capture failed, the fallbacks follow in order until one succeeds:
    ``triton`` without the graph rewrites, then the ``safe`` variant (fewer rewrites and fusions).
    """
    if likely_library_work(Path(task_path).read_text()):
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=2) as pool:
            first_f = pool.submit(capture_variant, ctx, task_path, "default", workdir)
            second_f = pool.submit(capture_variant, ctx, task_path, "triton", workdir, cancel=stop)
            first = first_f.result()
            timer = bound_second(first, stop)
            try:
                second = second_f.result()
            finally:
                if timer is not None:
                    timer.cancel()
        if stop.is_set() and not second.ok and second.error.startswith("capture stopped"):
            second.error = (
                f"capture stopped after {second.wall_s:.0f} s: the default seed ({first.wall_s:.0f} s to capture) "
                "needs the time left for its review"
            )
        outcomes = [first, second] if first.needs_custom_variant else [first]
    else:
        first = capture_variant(ctx, task_path, "default", workdir)
        outcomes = (
            [first, capture_variant(ctx, task_path, "triton", workdir)] if first.needs_custom_variant else [first]
        )
    for variant, reformulate in FALLBACKS:
        if any(o.ok for o in outcomes) or deadline.stop_reason(deadline.left()):
            break
        outcomes.append(capture_variant(ctx, task_path, variant, workdir, reformulate=reformulate))
    return outcomes


def bound_second(first: SeedOutcome, stop: threading.Event) -> threading.Timer | None:
    """Stop the ``triton`` capture running beside ``first`` (``default``) when it can no longer pay.

    At once when ``first`` succeeded without needing it; otherwise, once ``first`` succeeded, when the
    launch's deadline is nearer than the review reserve plus as long again as ``first`` took (the
    review of a seed imports and compiles the same program, then checks it): a network whose Triton
    templates autotune for minutes must not leave its finished seed unreviewed. A timer that sets
    ``stop`` is returned (the caller cancels it), or None.
    """
    if not first.ok:
        return None  # the second capture may be the only seed
    if not first.needs_custom_variant:
        stop.set()
        return None
    remaining = deadline.left()
    if remaining is None:
        return None
    wait = remaining - deadline.REVIEW_RESERVE_S - first.wall_s
    if wait <= 0:
        stop.set()
        return None
    timer = threading.Timer(wait, stop.set)
    timer.daemon = True
    timer.start()
    return timer


FALLBACKS = (("triton", False), ("safe", True))  # captures tried in order when every other one failed
