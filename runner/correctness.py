"""The one correctness rule: a candidate's outputs against the reference's, with bounded memory.

Used by the reviewer (:mod:`.worker`), the compiler seed's self-check (:mod:`.inductor_seed`) and,
through them, the evals. An output passes when, element by element, it is within ``atol + rtol * |ref|``
of the reference's (tolerance by dtype, :data:`DEFAULT_TOL`), with no NaN or inf the reference does
not have, and when its relative L2 distance from the reference is at most :data:`MAGNITUDE_GUARD`
(an all-zero or constant answer would otherwise pass on ``atol`` alone where outputs are tiny).

A float64 run of the reference (``truth``) is the second chance of a floating output, computed only
when one of those two checks fails:

- *elementwise*: two correct float32 programs that sum in different orders (cuBLAS vs a Triton GEMM,
  cuDNN's TF32 default vs exact fp32) can differ by more than ``atol`` where the result is near zero.
  Such an output passes when it is within ``allclose`` of the float64 result with ``atol`` raised to
  :data:`TRUTH_MARGIN` times the reference's own error against float64 (:func:`reference_noise`).
- *magnitude*: the guard is meant for outputs that stand clearly above their own float32 noise. On a
  near-constant output (a mean over a normalized tensor, say) the reference's float32 rounding *is*
  the signal, and two exact programs differ by 100 % in relative L2. The guard is then judged
  against float64: the output passes when its L2 distance from the float64 result is at most
  ``max(MAGNITUDE_GUARD * |truth|, TRUTH_MARGIN * |ref - truth|)``. Where the reference is well
  above its noise, the second term is negligible and this is the same 5 % guard (zeros or a
  constant in place of a small but real output still fail).

The reference's own error is the larger of its run's and, where PyTorch's defaults let its
convolutions run in TF32 (``torch.backends.cudnn.allow_tf32``, True unless a user turns it off),
that of a run with its convolution operands rounded to TF32 (``permitted``, :func:`tf32_operands`):
cuDNN picks a TF32 algorithm or an exact one by shape and layout, so the same convolution may be
exact in eager mode and TF32 in a compiled program. A candidate is allowed the error the reference
would have had with the algorithm PyTorch permits it, not only the one cuDNN happened to pick.
Under the ``tf32`` precision policy, cuBLAS products count the same way (:func:`permitted_ops`).

Every pass over the outputs works in chunks: temporaries take at most :func:`chunk_budget` bytes of
extra device memory (max(1 GiB, 10 % of one output)), so a multi-GB output is compared without
float64 copies of it. Imports: stdlib at the top, torch inside (the worker sets the interpreter flag
before anything imports triton).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import gpu_share
from .result import HELD_ELSEWHERE

DEFAULT_TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}  # (atol, rtol)
MAGNITUDE_GUARD = 0.05  # relative L2 error above which "allclose" alone is not trusted
TRUTH_MARGIN = 2.0  # a candidate may be this many times as far from float64 as the reference is
MIN_BUDGET = 1 << 30  # bytes of extra memory a comparison may always use
TEMPORARIES = 12  # float64 chunk-sized temporaries alive at once in one pass (measured peak: under 10)


def flatten(out: Any) -> list[Any]:
    """The tensors (or other leaves) of a possibly nested tuple / list output, in order."""
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    return [out]


def tensors_in(value: Any) -> list[Any]:
    """The tensors of ``value`` (a tensor, or a possibly nested tuple / list), in order; other leaves dropped."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def chunk_budget(output_bytes: int, low_memory: bool = False) -> int:
    """Extra bytes a comparison may allocate for one output: max(1 GiB, 10 % of it); 1 GiB in low-memory mode."""
    return MIN_BUDGET if low_memory else max(MIN_BUDGET, output_bytes // 10)


def blocks(shape: tuple[int, ...], step: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples that cover a tensor of ``shape`` in row-major order, each at most ``step`` elements.

    A block is a basic index (a view, never a copy), so outputs of any strides are walked the same
    way; a dimension longer than ``step`` is cut into slices of ``step`` too.
    """
    numel = math.prod(shape)
    if numel <= step or not shape:
        yield ()
        return
    inner = math.prod(shape[1:])
    if inner <= step:
        rows = max(1, step // inner)
        for i in range(0, shape[0], rows):
            yield (slice(i, min(i + rows, shape[0])),)
        return
    for i in range(shape[0]):
        for rest in blocks(shape[1:], step):
            yield (i, *rest)


def _chunks(step: int, *tensors: Any) -> Iterator[tuple[int, list[Any]]]:
    """(flat offset, float64 flat chunks) of same-shaped tensors, walked together.

    The chunks are compared on the GPU when any of the tensors is there (one may wait on the host in
    low-memory mode), else on the CPU.
    """
    import torch

    device = next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
    offset = 0
    for idx in blocks(tuple(tensors[0].shape), step):
        parts = [t[idx].to(device=device, dtype=torch.float64).contiguous().view(-1) for t in tensors]
        yield offset, parts
        offset += parts[0].numel()


@dataclass
class Scan:
    """Streaming statistics of one output against one target (reference or float64 run)."""

    numel: int = 0
    bad: int = 0  # elements outside atol + rtol * |target|
    worst_excess: float = -math.inf
    worst_index: int = 0
    worst_got: float = 0.0
    worst_want: float = 0.0
    got_nan: int = 0
    got_inf: int = 0
    want_nan: int = 0
    want_inf: int = 0
    diff_sq: float = 0.0  # over elements where the target is finite
    want_sq: float = 0.0
    got_sq: float = 0.0

    @property
    def rel_l2(self) -> float:
        """Relative L2 distance of the output from the target (0 when the target is all zero)."""
        return math.sqrt(self.diff_sq) / math.sqrt(self.want_sq) if self.want_sq > 0 else 0.0

    def worst(self, shape: tuple[int, ...], atol: float, rtol: float) -> str:
        """How many elements miss the target, and the worst one."""
        where, rem = [], self.worst_index
        for d in reversed(shape):
            where.append(rem % d)
            rem //= d
        return (
            f"{self.bad}/{self.numel} elements exceed atol={atol:g} rtol={rtol:g}; worst at "
            f"{tuple(reversed(where))}: got {self.worst_got:.6g}, expected {self.worst_want:.6g}"
        )


def scan(got: Any, want: Any, atol: float, rtol: float, budget: int) -> Scan:
    """Compare ``got`` with ``want`` (same shape) elementwise and in L2, chunk by chunk."""
    import torch

    s = Scan(numel=got.numel())
    step = max(1 << 16, budget // (8 * TEMPORARIES))
    for offset, (g, w) in _chunks(step, got, want):
        g_nan, w_nan = torch.isnan(g), torch.isnan(w)
        w_fin = torch.isfinite(w)
        s.got_nan += int(g_nan.sum())
        s.got_inf += int(torch.isinf(g).sum())
        s.want_nan += int(w_nan.sum())
        s.want_inf += int(torch.isinf(w).sum())
        err = (g - w).abs()
        close = (g == w) | (g_nan & w_nan) | (w_fin & (err <= atol + rtol * w.abs()))
        n_bad = int((~close).sum())
        if n_bad:
            excess = torch.where(close, -math.inf, (err - (atol + rtol * w.abs())).nan_to_num(math.inf))
            i = int(excess.argmax())
            e = float(excess[i])
            if s.bad == 0 or e > s.worst_excess:
                s.worst_excess, s.worst_index = e, offset + i
                s.worst_got, s.worst_want = float(g[i]), float(w[i])
            s.bad += n_bad
        d = torch.where(w_fin, g - w, 0.0)
        s.diff_sq += float((d * d).sum())
        wf = torch.where(w_fin, w, 0.0)
        s.want_sq += float((wf * wf).sum())
        gf = torch.where(w_fin, g, 0.0)
        s.got_sq += float((gf * gf).sum())
    return s


def reference_noise(ref: Any, truth: Any, rtol: float, budget: int | None = None) -> float:
    """The absolute tolerance the reference itself needs to match its float64 run at ``rtol``."""
    import torch

    budget = budget or chunk_budget(ref.numel() * ref.element_size())
    step = max(1 << 16, budget // (8 * TEMPORARIES))
    worst = 0.0
    for _, (r, t) in _chunks(step, ref, truth):
        excess = (r - t).abs() - rtol * t.abs()
        finite = torch.isfinite(excess)
        if bool(finite.any()):
            worst = max(worst, float(excess[finite].max()))
    return worst


def tf32_round(x: Any) -> Any:
    """``x`` (float32) rounded to TF32's 10-bit mantissa, to nearest with ties to even; inf / NaN kept."""
    import torch

    bits = x.contiguous().view(torch.int32)
    rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & -0x2000).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x.contiguous())


# aten ops whose float32 operands TF32 tensor cores round: cuDNN convolutions (PyTorch's default allows it)
# and, where the precision policy allows TF32 matmuls, cuBLAS products (nn.Linear and matmul reach these)
CONV_OPS = ("convolution", "_convolution")
MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm")


def permitted_ops(precision: str, on_cuda: bool) -> tuple[str, ...]:
    """The aten ops whose float32 operands the precision policy lets run in TF32 on this device.

    Convolutions where cuDNN may use TF32 (PyTorch's default, ``torch.backends.cudnn.allow_tf32``);
    under ``tf32`` also cuBLAS products. Nothing on the CPU, which has no TF32.
    """
    import torch

    if not on_cuda:
        return ()
    ops = CONV_OPS if torch.backends.cudnn.allow_tf32 else ()
    return ops + MATMUL_OPS if precision == "tf32" else ops


def tf32_operands(ops: tuple[str, ...] = CONV_OPS) -> Any:
    """A dispatch mode that rounds the float32 operands of ``ops`` (input and weight) to TF32.

    Products of TF32 operands are exact in float32 and accumulated in float32, so a float32 run under
    this mode has the error a TF32 tensor-core algorithm has (up to summation order). ``calls``
    counts the ops it rounded; zero means the run was the reference's own program.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    packets = {getattr(aten, name) for name in ops}
    operands = {getattr(aten, name): (0, 1) for name in ("convolution", "_convolution", "mm", "bmm")}
    operands.update({getattr(aten, name): (1, 2) for name in ("addmm", "baddbmm")})  # (bias, a, b)

    class _Mode(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func.overloadpacket in packets:
                idx = operands[func.overloadpacket]
                if any(isinstance(args[i], torch.Tensor) and args[i].dtype == torch.float32 for i in idx):
                    self.calls += 1
                    args = tuple(
                        tf32_round(a) if i in idx and isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                        for i, a in enumerate(args)
                    )
            return func(*args, **kwargs)

    return _Mode()


def permitted_run(run: Callable[[], Any], ops: tuple[str, ...]) -> Any:
    """``run()`` (a forward of the reference) with the float32 operands of ``ops`` in TF32 (:func:`tf32_operands`).

    None when ``ops`` is empty or none of them ran: the reference's own run is then the permitted one.
    """
    if not ops:
        return None
    with tf32_operands(ops) as mode:
        out = run()
    return out if mode.calls else None


def device_room() -> int:
    """Bytes the current CUDA device can still give: free memory plus what the caching allocator holds unused."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def tolerances(dtype: Any, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """(atol, rtol): the given ones, else the defaults of ``dtype``."""
    a_def, r_def = DEFAULT_TOL.get(str(dtype).replace("torch.", ""), (1e-4, 1e-4))
    return (atol if atol is not None else a_def, rtol if rtol is not None else r_def)


class Truth:
    """The float64 run of the reference, computed at most once and only when asked for.

    ``compute`` returns the reference's outputs in float64, or raises (an op without a float64
    kernel, no memory for it...); the reason is then kept and every later ask gets None.
    ``permitted`` (optional) returns the reference's float32 outputs under the numerics PyTorch's
    defaults permit it (TF32 convolutions), or None when that is the reference's own run; it is
    computed with the float64 run, and a failure there only drops it.
    """

    def __init__(self, compute: Callable[[], Any] | None, permitted: Callable[[], Any] | None = None) -> None:
        self._compute, self.error, self.asked = compute, "", False
        self._outs: list[Any] | None = None
        self._permitted, self.permitted_error = permitted, ""
        self._alt: list[Any] | None = None

    @property
    def enabled(self) -> bool:
        """A float64 run may be asked for."""
        return self._compute is not None

    def get(self, i: int) -> Any:
        """Output ``i`` of the float64 run, or None when there is none (see ``error``)."""
        if self._compute is None:
            return None
        if not self.asked:
            self.asked = True
            try:
                self._outs = flatten(self._compute())
            except Exception as e:  # noqa: BLE001 - no float64 kernel, out of memory...: no second chance
                self.error = f"{type(e).__name__}: {str(e).strip()[:160]}"
            if self._outs is not None and self._permitted is not None:
                try:
                    alt = self._permitted()
                    self._alt = flatten(alt) if alt is not None else None
                except Exception as e:  # noqa: BLE001 - out of memory...: the reference's own error only
                    self.permitted_error = f"{type(e).__name__}: {str(e).strip()[:160]}"
        return self._outs[i] if self._outs is not None else None

    def alternative(self, i: int) -> Any:
        """Output ``i`` of the permitted-numerics run (after :meth:`get`), or None when there is none."""
        return self._alt[i] if self._alt is not None else None

    def floor(self, ref: Any, t: Any, i: int, rtol: float, budget: int) -> tuple[float, float]:
        """(the reference's own error against float64, that of the permitted-numerics run or 0)."""
        alt = self.alternative(i)
        own = reference_noise(ref, t, rtol, budget)
        return own, (reference_noise(alt, t, rtol, budget) if alt is not None else 0.0)


def compare(
    ref_out: Any,
    new_out: Any,
    atol: float | None,
    rtol: float | None,
    truth: Callable[[], Any] | None = None,
    noise: list[float] | None = None,
    notes: list[str] | None = None,
    low_memory: bool = False,
    permitted: Callable[[], Any] | None = None,
) -> str | None:
    """None when the outputs match under the rule in the module docstring; else a one-line reason.

    ``truth`` (a callable returning the reference's outputs computed in float64, or None) is called
    at most once, and only when an output fails against the reference. ``permitted`` (a callable
    returning the reference's outputs with the numerics PyTorch's defaults permit it, or None) is
    called with it. ``noise`` receives the reference's own error of each output that passed on its
    second chance; ``notes`` one line per output judged against float64 (the review's warnings).
    """
    import torch

    refs, news = flatten(ref_out), flatten(new_out)
    if len(refs) != len(news):
        return f"returned {len(news)} outputs, reference returns {len(refs)}"
    t64 = Truth(truth, permitted)
    for i, (r, n) in enumerate(zip(refs, news, strict=True)):
        tag = f"output {i}: " if len(refs) > 1 else ""
        if not isinstance(n, torch.Tensor):
            return f"{tag}returned {type(n).__name__}, expected a tensor"
        if not isinstance(r, torch.Tensor):
            continue  # a non-tensor reference output (a shape, say) is not compared
        if n.shape != r.shape:
            return f"{tag}shape {tuple(n.shape)} != reference {tuple(r.shape)}"
        if n.dtype != r.dtype:
            return f"{tag}dtype {n.dtype} != reference {r.dtype}"
        reason = _compare_one(
            r.detach(), n.detach(), *tolerances(r.dtype, atol, rtol), t64, i, noise, notes, low_memory
        )
        if reason:
            return tag + reason
    return None


def _compare_one(
    r: Any,
    n: Any,
    a: float,
    rt: float,
    t64: Truth,
    i: int,
    noise: list[float] | None,
    notes: list[str] | None,
    low_memory: bool,
) -> str | None:
    """One output: elementwise, then the magnitude guard, each with its float64 second chance."""
    budget = chunk_budget(r.numel() * r.element_size(), low_memory)
    s = scan(n, r, a, rt, budget)
    if s.got_nan and not s.want_nan:
        return f"NaN in output ({s.got_nan} of {s.numel} elements)"
    if s.got_inf and not s.want_inf:
        return f"inf in output ({s.got_inf} of {s.numel} elements)"
    floating = r.is_floating_point()
    if s.bad:
        reason = s.worst(tuple(r.shape), a, rt)
        if not floating or not t64.enabled:
            return reason
        t = t64.get(i)
        if t is None:
            return f"{reason} (no float64 reference: {t64.error})"
        own, alt = t64.floor(r, t, i, rt, budget)
        floor = max(own, alt)
        a_eff = max(a, TRUTH_MARGIN * floor)
        st = scan(n, t, a_eff, rt, budget)
        source = f"the reference's own error {own:.3g}" + (
            f", {alt:.3g} with its products in TF32 as the precision policy allows" if alt > own else ""
        )
        if st.bad:
            return (
                f"{reason}; against the float64 reference (atol {a_eff:.3g} = max(atol, {TRUTH_MARGIN:g} x "
                f"{source})): {st.worst(tuple(r.shape), a_eff, rt)}"
            )
        if noise is not None:
            noise.append(floor)
        if notes is not None and alt > own and scan(n, t, max(a, TRUTH_MARGIN * own), rt, budget).bad:
            notes.append(
                f"output {i}: within {TRUTH_MARGIN:g}x the error of the reference with its products in TF32 "
                f"({alt:.3g} against float64; its own run: {own:.3g}), as the precision policy allows (cuDNN "
                "convolutions: PyTorch's default): accepted"
            )
    if s.rel_l2 <= MAGNITUDE_GUARD:
        return None
    guard = (
        f"relative L2 error {s.rel_l2:.3g} > {MAGNITUDE_GUARD} although within atol={a:g}: output magnitude "
        f"{math.sqrt(s.got_sq):.3g} vs reference {math.sqrt(s.want_sq):.3g} (near-zero or constant output?)"
    )
    if not floating or not t64.enabled:
        return guard
    t = t64.get(i)
    if t is None:
        return f"{guard} (no float64 reference to tell: {t64.error})"
    return _guard_against_truth(r, n, t, guard, budget, i, notes, t64.alternative(i))


def _guard_against_truth(
    r: Any, n: Any, t: Any, guard: str, budget: int, i: int, notes: list[str] | None, alt: Any = None
) -> str | None:
    """The magnitude guard judged against float64: see the module docstring."""
    cand, ref = scan(n, t, 0.0, 0.0, budget), scan(r, t, 0.0, 0.0, budget)
    truth_norm, ref_err, cand_err = math.sqrt(ref.want_sq), math.sqrt(ref.diff_sq), math.sqrt(cand.diff_sq)
    if alt is not None:  # the reference's distance with the numerics PyTorch permits it (TF32 convolutions)
        ref_err = max(ref_err, math.sqrt(scan(alt, t, 0.0, 0.0, budget).diff_sq))
    bound = max(MAGNITUDE_GUARD * truth_norm, TRUTH_MARGIN * ref_err)
    if cand_err > bound:
        return (
            f"{guard}; against the float64 reference: L2 distance {cand_err:.3g} > {bound:.3g} = max("
            f"{MAGNITUDE_GUARD} x its norm {truth_norm:.3g}, {TRUTH_MARGIN:g} x the reference's own distance "
            f"{ref_err:.3g})"
        )
    if notes is not None:
        notes.append(
            f"output {i}: L2 distance {cand_err:.3g} from a float64 run of the reference, whose own float32 "
            f"distance is {ref_err:.3g} (norm {truth_norm:.3g}: an output near its own rounding noise): accepted"
        )
    return None


class NoRoom(RuntimeError):
    """The float64 run of the reference fits neither on the device nor, in time, on the CPU."""


# Models run as their constructor leaves them (training mode unless it says otherwise: batch-statistics
# BatchNorm, active dropout), under no_grad, as KernelBench's protocol runs them; the global RNG is seeded
# with this value before every compared forward, the reference's and the candidate's alike, so a forward
# that draws random numbers (dropout) draws the same ones in both when it draws them the same way.
FORWARD_SEED = 20240


def seeded_forward() -> None:
    """Seed the global RNG (CPU and every GPU) before a compared forward (:data:`FORWARD_SEED`)."""
    import torch

    torch.manual_seed(FORWARD_SEED)


def float64_reference(model: Any, inputs: list[Any], need_bytes: int, low_memory: bool, cpu_ok: bool) -> Any:
    """The reference's outputs computed in float64 (a float64 copy of ``model`` on float64 inputs).

    On the model's device when ``need_bytes`` (the caller's estimate of the run's memory) fit in
    what is free there and not ``low_memory``; else on the CPU when ``cpu_ok`` and the host has
    room; else :class:`NoRoom`. An out-of-memory error on the device falls back to the CPU the same
    way. The outputs stay where they were computed (the comparison moves chunks).
    """
    import copy
    import os

    import torch

    params = list(model.parameters()) + list(model.buffers())
    device = params[0].device if params else (inputs[0].device if inputs and hasattr(inputs[0], "device") else None)
    on_cuda = device is not None and device.type == "cuda"

    def run(where: Any) -> Any:
        m = copy.deepcopy(model).to(where).double()
        xs = [
            x.to(where, torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in (i.to(where) if isinstance(i, torch.Tensor) else i for i in inputs)
        ]
        with torch.no_grad():
            seeded_forward()
            return m(*xs)

    if not on_cuda:
        return run(device or "cpu")
    if not low_memory:
        if need_bytes <= 0.9 * device_room():
            try:
                return run(device)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
    host_free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if cpu_ok and need_bytes <= 0.5 * host_free:
        return run("cpu")
    elsewhere = 0 if low_memory else gpu_share.elsewhere_bytes()
    theirs = elsewhere >= gpu_share.ROOM_SLACK_BYTES and need_bytes <= 0.9 * (device_room() + elsewhere)
    raise NoRoom(
        f"the float64 run needs about {need_bytes / 2**30:.1f} GiB: it fits neither on the device"
        + (" (low-memory mode)" if low_memory else "")
        + (f" ({HELD_ELSEWHERE} {elsewhere / 2**30:.1f} GiB of it)" if theirs else "")
        + (" nor, in time, on the CPU" if not cpu_ok else " nor in host memory")
    )
