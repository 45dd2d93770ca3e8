"""Where a forward's answer came from: PyTorch's ops on what existed before the call, or the candidate's kernels.

A candidate can compute the answer with PyTorch ops that the other checks do not name (``clamp_min`` or a
``where`` for a ReLU, a product as a broadcast multiply and sum) and pass it through a kernel of its own that
only copies it, after the PyTorch ops or before them. :class:`AnswerTrace`, active during the first trial's
call, follows every tensor's storage:

- a storage that existed before the call (the inputs, the module's tensors) is *given*;
- an aten op whose tensor reads are all given or derived from given ones by PyTorch (*derived*) writes a
  derived storage; a compute op (not a view, copy, fill or allocation: :data:`.profiling.PLUMBING_OPS`)
  makes it *computed*, and each computed tensor's values are sampled on a few hundred positions;
- an allocation (``empty``...) writes a storage that is neither (other ops of no tensor read make constants,
  which count as given);
- a kernel launch (Triton's ``JITFunction``, autotuner or interpreter, Inductor's ``CachingAutotuner``) writes its
  tensor arguments whose sampled values changed: a written argument equal to another argument as it was
  before the launch, on the sampled positions or, in any order, in its sum, sum of magnitudes and norm (a
  transpose, a flip), within the dtype's tolerance, is a copy of it (that argument's state passes on); any
  other is the kernel's own work.

The answer is PyTorch's (:meth:`AnswerTrace.answer_op`) when each of the output's tensors equals, on the
sampled positions and within the dtype's tolerance, a tensor that PyTorch computed so. Answers that are
near-constant on the sample are not judged (a constant is anyone's). Not seen: PyTorch work inside a CUDA
graph replay, and work split between PyTorch and the kernel (PyTorch the ReLU, the kernel the multiply-add).

Everything is logged during the call (samples gathered on the device, no synchronization) and resolved in
order afterwards; any failure of the trace itself leaves the answer unjudged, never the candidate's call.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Any

from .correctness import flatten, tensors_in
from .gpu_share import capturing

SAMPLE = 256  # positions sampled per tensor
MAX_EVENTS = 20_000  # a call logging more is not judged (each event holds a few samples on the device)
ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
# In-place ops that overwrite ``self`` without reading it (``copy_`` reads its source).
NOT_READ_SELF = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_", "exponential_",
                 "geometric_", "cauchy_", "log_normal_", "set_", "resize_"}  # fmt: skip


@dataclass
class _State:
    derived: bool  # from given tensors by PyTorch ops only (given ones included)
    computed: bool  # and at least one compute op on the way


GIVEN = _State(True, False)
FRESH = _State(False, False)


@dataclass
class _Op:
    name: str
    reads: list[int]
    writes: list[tuple[int, Any]]  # (storage key, sample on the device or None)
    compute: bool
    fresh: bool  # an allocation: what it holds is whoever writes it next


@dataclass
class _Launch:
    keys: list[int]
    dtypes: list[Any]
    before: list[Any]  # per tensor argument: (sample, signature), each None where not taken
    after: list[Any]


@dataclass
class AnswerTrace:
    """During ``with``: a log of the aten ops and kernel launches of the call; then :meth:`answer_op`."""

    events: list[Any] = field(default_factory=list)
    broken: bool = False
    _idx: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _stack: contextlib.ExitStack | None = None
    _depth: int = 0

    def __enter__(self) -> AnswerTrace:
        from torch.utils._python_dispatch import TorchDispatchMode

        trace = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                trace._op(func, args, kwargs or {}, out)
                return out

        self._stack = contextlib.ExitStack()
        for cls in _launchers():
            self._stack.enter_context(self._patched(cls))
        self._stack.enter_context(_Mode())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._stack is not None:
            self._stack.close()

    # --- logging (during the call) ---

    def _sample(self, t: Any) -> tuple[int, Any] | None:
        """(``t``'s element count, ``SAMPLE`` of its values in float64 on its device).

        The same row-major positions for every tensor of that count, whatever its shape or strides.
        """
        import torch

        n = t.numel()
        if n == 0 or t.is_complex() or t.is_sparse or t.device.type == "meta":
            return None
        key = (tuple(t.shape), t.device)
        where = self._idx.get(key)
        if where is None:
            k = min(n, SAMPLE)
            flat = (torch.arange(k, dtype=torch.int64) * 2654435761 + 12345) % n  # a fixed spread of positions
            where = tuple(i.to(t.device) for i in torch.unravel_index(flat, t.shape)) if t.dim() else ()
            self._idx[key] = where
        return n, (t[where] if t.dim() else t.reshape(1)).to(torch.float64)

    def _log(self, event: Any) -> None:
        self.events.append(event)
        if len(self.events) > MAX_EVENTS:
            self.broken = True

    def _op(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        if self.broken or self._depth:  # inside a kernel launch (the interpreter's copies): the launch's record
            return
        if capturing():  # a CUDA graph's capture: no sampling kernel goes into it, no verdict
            self.broken = True
            return
        try:
            from .profiling import _NO_KERNEL_OPS, PLUMBING_OPS

            name = func.overloadpacket.__name__
            schema = func._schema.arguments
            reads: list[int] = []
            written: list[Any] = []
            for i, arg in enumerate(schema):
                value = args[i] if i < len(args) else kwargs.get(arg.name)
                tensors = tensors_in(value)
                is_write = arg.alias_info is not None and arg.alias_info.is_write
                if is_write:
                    written += tensors
                if (is_write and (arg.kwarg_only or (i == 0 and name in NOT_READ_SELF))) or not tensors:
                    continue  # an out= argument, or self overwritten unread
                if name in ALLOCATIONS:
                    continue  # ``empty_like(x)`` reads x's shape, not its values
                reads += [_key(t) for t in tensors]
            for t in tensors_in(out):
                if not any(t is w for w in written):
                    written.append(t)
            compute = name not in PLUMBING_OPS and name not in _NO_KERNEL_OPS
            fresh = name in ALLOCATIONS  # other ops of no tensor read make constants
            writes = [(_key(t), self._sample(t) if compute else None) for t in written]
            self._log(_Op(name, reads, writes, compute, fresh))
        except Exception:  # noqa: BLE001 - the trace never changes the call; it gives up judging
            self.broken = True

    @contextlib.contextmanager
    def _patched(self, cls: Any) -> Any:
        orig = cls.run
        trace = self

        def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
            if trace._depth or trace.broken:  # an autotuner's own launches of the kernel: logged there
                return orig(fn, *args, **kwargs)
            try:
                tensors = [t for a in (*args, *kwargs.values()) for t in tensors_in(_base(a))]
                keys = [_key(t) for t in tensors]
            except Exception:  # noqa: BLE001
                tensors, keys, trace.broken = [], [], True
            before = trace._samples(tensors)
            trace._depth += 1
            try:
                result = orig(fn, *args, **kwargs)
            finally:
                trace._depth -= 1
            after = trace._samples(tensors)
            if before is not None and after is not None:
                trace._log(_Launch(keys, [t.dtype for t in tensors], before, after))
            return result

        cls.run = run
        try:
            yield
        finally:
            cls.run = orig

    def _samples(self, tensors: list[Any]) -> list[Any] | None:
        from torch.utils._python_dispatch import _disable_current_modes

        if self.broken or capturing():
            self.broken = True
            return None
        try:
            with _disable_current_modes():
                return [(self._sample(t), _signature(t)) for t in tensors]
        except Exception:  # noqa: BLE001
            self.broken = True
            return None

    # --- the verdict (after the call) ---

    def answer_op(self, output: Any, tolerance: Any) -> str | None:
        """The PyTorch op that computed the answer from what the call was given, or None.

        ``output``: the candidate's output (tensors, possibly nested); ``tolerance(dtype)`` gives (atol, rtol).
        None as well when the trace gave up, an output is not a tensor, or its sample is near-constant.
        """
        if self.broken:
            return None
        try:
            return self._answer_op(output, tolerance)
        except Exception:  # noqa: BLE001
            return None

    def _answer_op(self, output: Any, tolerance: Any) -> str | None:
        outs = tensors_in(output)
        if not outs or len(outs) != len(flatten(output)):
            return None  # no output, or one that is not a tensor
        computed: list[tuple[str, tuple[int, Any] | None]] = []  # (op, sample): PyTorch computed from given
        state: dict[int, _State] = {}
        for ev in self.events:
            if isinstance(ev, _Op):
                ins = [state.get(k, GIVEN) for k in ev.reads]
                derived = not ev.fresh and all(s.derived for s in ins)  # no read: a constant (a scalar, zeros)
                new = _State(derived, derived and (ev.compute or any(s.computed for s in ins)))
                for key, sample in ev.writes:
                    state[key] = new
                    if new.computed and sample is not None:
                        computed.append((ev.name, _on_host(sample)))
                continue
            before = [(_on_host(b), _on_host(sig)) for b, sig in ev.before]
            for i, key in enumerate(ev.keys):
                after, after_sig = _on_host(ev.after[i][0]), _on_host(ev.after[i][1])
                if after is None or before[i][0] is None or _same(after, before[i][0], 0.0, 0.0):
                    continue  # not written, or written with what was there
                atol, rtol = tolerance(ev.dtypes[i])
                src = next(  # a copy, in order or reordered (a transpose, a flip), or the kernel's own work
                    (
                        j
                        for j, (b, sig) in enumerate(before)
                        if j != i and (_same(after, b, atol, rtol) or _same_signature(after_sig, sig, atol, rtol))
                    ),
                    None,
                )
                state[key] = state.get(ev.keys[src], GIVEN) if src is not None else FRESH
        ops: list[str] = []
        for t in outs:
            atol, rtol = tolerance(t.dtype)
            mine = _on_host(self._sample(t.detach()))
            if mine is None:
                return None
            values = mine[1]
            if values.numel() > 1 and float(values.max() - values.min()) <= atol + rtol * float(values.abs().max()):
                return None  # near-constant: not judged
            if values.numel() == 1 and float(values.abs().max()) <= 10 * atol:
                return None
            op = next((name for name, s in computed if _same(mine, s, atol, rtol)), None)
            if op is None:
                return None
            ops.append(op)
        return ", ".join(dict.fromkeys(ops))


def _on_host(sample: tuple[int, Any] | None) -> tuple[int, Any] | None:
    return None if sample is None else (sample[0], sample[1].cpu())


def _signature(t: Any) -> tuple[int, Any] | None:
    """(element count, [sum, sum of magnitudes, Euclidean norm] in float64): the same for any order of the values.

    Floating-point tensors only; reduced in place (no float64 copy of the tensor).
    """
    import torch

    if t.numel() == 0 or not t.is_floating_point() or t.device.type == "meta":
        return None
    parts = [
        torch.sum(t, dtype=torch.float64),
        torch.linalg.vector_norm(t, 1, dtype=torch.float64),
        torch.linalg.vector_norm(t, 2, dtype=torch.float64),
    ]
    return t.numel(), torch.stack(parts)


def _same_signature(a: tuple[int, Any] | None, b: tuple[int, Any] | None, atol: float, rtol: float) -> bool:
    """Signatures of the same values in any order, within (atol, rtol) per value (NaN never the same)."""
    if a is None or b is None or a[0] != b[0]:
        return False
    n, (s1, l1, n1), (s2, l2, n2) = a[0], a[1].tolist(), b[1].tolist()
    scale = max(l1, l2)
    return (
        abs(s1 - s2) <= rtol * scale + atol * n
        and abs(l1 - l2) <= rtol * scale + atol * n
        and abs(n1 - n2) <= rtol * max(n1, n2) + atol * n**0.5
    )


def _same(a: tuple[int, Any] | None, b: tuple[int, Any] | None, atol: float, rtol: float) -> bool:
    """Two samples of tensors of one element count, equal within (atol, rtol) (NaN equal to NaN)."""
    import torch

    if a is None or b is None or a[0] != b[0]:
        return False
    return bool(torch.allclose(a[1], b[1], rtol=rtol, atol=atol, equal_nan=True))


def _base(value: Any) -> Any:
    """A Triton tensor descriptor's tensor; anything else as it is."""
    return getattr(value, "base", value) if type(value).__name__ == "TensorDescriptor" else value


def _key(t: Any) -> int:
    """The storage a tensor views (its data pointer; every view of it shares the key)."""
    return int(t.untyped_storage().data_ptr())


def _launchers() -> list[Any]:
    """The classes whose ``run`` launches a kernel.

    Triton's JIT function, autotuner, heuristics and interpreter; Inductor's autotuner.
    """
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    out: list[Any] = [JITFunction, Autotuner, Heuristics]  # an autotuner's benchmark launches: inside its one
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is not None:
        out.append(interpreter.InterpretedFunction)
    heuristics = sys.modules.get("torch._inductor.runtime.triton_heuristics")
    if heuristics is not None:
        out.append(heuristics.CachingAutotuner)
    return out
