"""The reviewer's own process stays as it was while a candidate runs in it.

A candidate is imported and called in the reviewer's process, next to the reference, PyTorch and the
reviewer's own functions (the comparison, the timers). The static checks reject the plain ways of
reaching them; this is the check at run time: a snapshot of what the judgement depends on is taken
before the candidate is imported, and compared after each time the candidate ran (import, build, each
correctness trial, timing). What is watched:

- the functions and classes of the reviewer's package (``kernelskill.*`` and the worker itself, which runs as
  ``__main__``), of ``torch``,
  ``torch.nn.functional``, ``torch.Tensor`` and its base, ``torch.nn.Module``, ``torch.cuda``,
  ``time`` and ``builtins``, by identity: a rebound one (a comparison that always agrees, a patched
  timer) is found; and the constants of the reviewer's package and the worker (module-level
  ``UPPER_CASE`` names) by value: a tolerance loosened in place or rebound is found;
- the task module (``Model``, ``get_inputs``, ...) and ``Model``'s own attributes, by identity; and the
  calls of the reference's ``forward`` (counted): a candidate that answers by calling the reference
  computes nothing of its own;
- once built, every submodule of the reference, from just before each candidate call: its attributes
  and its class's (and base classes') by identity (an instance or class ``forward``, a switch to eval
  mode) and a float64 sum and sum of squares of each parameter and buffer (weights or a buffer changed in
  place to match a wrong answer; the reference's own forward, which may update its buffers, runs outside
  the candidate's calls).

- what changes every op or module of the process without rebinding a function: the stacks of torch
  function and dispatch modes (a mode entered at import sees the reference's calls too), PyTorch's global
  module hooks (a global forward hook can rewrite the reference's output), its numerics flags (TF32 and
  reduced-precision matmuls, cuDNN's settings, the default dtype: the reference would compute with them
  too, however the candidate reached the flag), and the dispatcher's kernels
  of every operator that existed before the import, registered from outside PyTorch (``torch.library``
  overriding ``aten::relu`` changes the reference's relu). A candidate's own new operators are allowed.

- the processes, sockets and file writes the candidate's code asked for (refused by :mod:`.audit`).

New attributes of the watched modules are allowed (PyTorch imports submodules lazily); only a
changed or removed one, or a new attribute of the reference's submodules or their classes, counts.
Outside the reviewer's package and the task, PyTorch's own wrapper of a watched function is not a
change: TorchDynamo wraps ``torch.manual_seed`` when it is first imported (an Inductor module imports
it) and ``nn.Module.__init__`` on its first compile (:func:`torch_wrapper`).
"""

from __future__ import annotations

import builtins
import os
import re
import sys
import time
from typing import Any

WATCHED_PREFIX = "kernelskill."
MAIN = "__main__"  # the worker runs as ``python -m kernelskill.runner.worker``: its globals live here
_MISSING = object()
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")


class Tampered(Exception):
    """The candidate changed what the reviewer's judgement depends on."""


def _callables(space: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in space.items() if callable(v) or isinstance(v, (staticmethod, classmethod))}


def _spaces(task: Any, own: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    spaces = dict(own)  # :func:`_own_spaces`
    for label, obj in (
        ("torch", torch),
        ("torch.nn.functional", F),
        ("torch.Tensor", torch.Tensor),
        ("torch._C.TensorBase", torch._C.TensorBase),
        ("torch.nn.Module", torch.nn.Module),
        ("torch.cuda", torch.cuda),
        ("torch.cuda.Event", torch.cuda.Event),
        ("time", time),
        ("builtins", builtins),
    ):
        spaces[label] = dict(vars(obj))
    if task is not None:
        spaces["task"] = dict(vars(task))
        model = getattr(task, "Model", None)
        if isinstance(model, type):
            spaces["task.Model"] = dict(vars(model))
    return {label: _callables(space) for label, space in spaces.items()}


def _own_spaces() -> dict[str, dict[str, Any]]:
    """The globals of the reviewer's package and of ``__main__`` (the worker, when it runs as a script)."""
    spaces = {name: dict(vars(mod)) for name, mod in list(sys.modules.items()) if name.startswith(WATCHED_PREFIX)}
    main = sys.modules.get(MAIN)
    if main is not None:
        spaces[MAIN] = dict(vars(main))
    return spaces


def _constants(own: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``module.NAME``: ``repr`` of each module-level constant of ``own`` (:func:`_own_spaces`'s spaces).

    Constants: ``UPPER_CASE`` names, neither callables nor modules.
    """
    found = {}
    for label, space in own.items():
        for name, value in space.items():
            if _CONSTANT.match(name) and not callable(value) and not isinstance(value, type(sys)):
                try:
                    found[f"{label}.{name}"] = repr(value)
                except Exception:  # noqa: BLE001 - a value whose repr fails: watched by identity alone
                    found[f"{label}.{name}"] = f"<id {id(value)}>"
    return found


_BUILT_IN = re.compile(r"\.(cpp|cc|cu|h|hpp):\d+$")  # a kernel registered by PyTorch's C++ sources


def _dispatcher(known: set[str] | None = None) -> tuple[set[str], set[str]]:
    """Every operator's name, and ``"op (dispatch key)"`` for each kernel registered from outside PyTorch.

    ``known``: only operators in it (the snapshot's): an operator a candidate defines is its own.
    """
    import torch

    if not hasattr(torch._C, "_dispatch_get_all_op_names"):  # a PyTorch without the dispatcher's listing
        return set(), set()
    root = os.path.dirname(torch.__file__) + os.sep
    names = set(torch._C._dispatch_get_all_op_names())
    foreign = set()
    for op in names if known is None else names & known:
        for line in torch._C._dispatch_dump(op).splitlines():
            key, sep, rest = line.partition(": registered at ")
            where = rest.split(" :: ", 1)[0]
            if sep and not key.endswith("(inactive)") and not where.startswith(root) and not _BUILT_IN.search(where):
                foreign.add(f"{op} ({key})")
    return names, foreign


# PyTorch's global numerics flags: the reference runs in the same process, so a candidate that turns on TF32
# matmuls or reduced-precision reductions (however it reaches the flag) loosens the reference it is judged by
NUMERICS_FLAGS = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.enabled",
    "torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.deterministic",
)


def _numerics() -> dict[str, Any]:
    """The values of :data:`NUMERICS_FLAGS`, the float32 matmul precision and the default dtype."""
    import torch

    state: dict[str, Any] = {"torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision()}
    state["torch.get_default_dtype()"] = torch.get_default_dtype()
    for flag in NUMERICS_FLAGS:
        obj: Any = torch
        for part in flag.split(".")[1:]:
            obj = getattr(obj, part, None)
        state[flag] = obj
    return state


def _process_state() -> dict[str, Any]:
    """Mode stacks, PyTorch's global module hooks and numerics flags: each value compared by equality."""
    import torch
    from torch.nn.modules import module as nn_module

    state: dict[str, Any] = {
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
        **_numerics(),
    }
    for name, hooks in sorted(vars(nn_module).items()):
        if name.startswith("_global_") and isinstance(hooks, dict):
            state[f"torch.nn.modules.module.{name}"] = tuple(hooks)  # registered hook handles' ids
    return state


def _strict(label: str) -> bool:
    """The reviewer's package and the task: nothing there may change, not even by PyTorch."""
    return label.startswith(WATCHED_PREFIX) or label.startswith("task") or label == MAIN


def torch_wrapper(new: Any, old: Any) -> bool:
    """``new`` is PyTorch's own wrapper of ``old``: its code lives in PyTorch's package and it wraps ``old``.

    TorchDynamo wraps ``torch.manual_seed`` when it is imported and ``nn.Module.__init__`` on its first
    compile (``__wrapped__`` / a closure holding the original); a candidate's replacement is neither.
    """
    import torch

    code = getattr(new, "__code__", None)
    root = os.path.dirname(torch.__file__) + os.sep
    if code is None or not code.co_filename.startswith(root):
        return False
    v = new
    for _ in range(8):
        v = getattr(v, "__wrapped__", None)
        if v is None:
            break
        if v is old:
            return True
    for cell in getattr(new, "__closure__", None) or ():
        try:
            if cell.cell_contents is old:
                return True
        except ValueError:  # an empty cell
            continue
    return False


def _reference_state(ref: Any) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """Every submodule's attributes, its classes' callables, and (sum, sum of squares) of each parameter and buffer.

    The sums are hex strings; complex buffers are left out.
    """
    import torch

    attrs = {name or "(model)": dict(vars(m)) for name, m in ref.named_modules()}
    classes = {c for m in ref.modules() for c in type(m).__mro__ if c is not object}  # nn.Linear.forward, say
    methods = {f"class {c.__module__}.{c.__qualname__}": _callables(dict(vars(c))) for c in classes}
    params = [p.detach() for p in ref.parameters()]
    params += [b.detach() for b in ref.buffers() if not b.is_complex()]  # a shift or mask the candidate could zero
    if not params:
        return attrs, methods, []
    with torch.no_grad():
        stats = torch.stack([torch.stack([p.double().sum(), p.double().square().sum()]) for p in params])
    return attrs, methods, [float(x).hex() for x in stats.flatten().tolist()]  # hex: NaN reads equal to NaN


def _changed(
    before: dict[str, dict[str, Any]],
    after: dict[str, dict[str, Any]],
    prefix: str,
    added: bool,
    wrappers: bool = True,
) -> list[str]:
    """``prefix + space.name`` of each entry that changed; ``added``: new names count too.

    With ``wrappers``, outside the strict spaces, PyTorch's own wrapper of an entry (:func:`torch_wrapper`)
    is no change.
    """
    found = []
    for label, space in before.items():
        now = after.get(label, {})
        exempt = wrappers and not _strict(label)
        names = sorted(set(space) | set(now)) if added else list(space)
        for name in names:
            old, new = space.get(name, _MISSING), now.get(name, _MISSING)
            if new is old:
                continue
            if exempt and old is not _MISSING and new is not _MISSING and torch_wrapper(new, old):
                continue
            found.append(f"{prefix}{label}.{name}")
    return found


class Integrity:
    """The snapshot, and :meth:`verify` against it (raises :class:`Tampered`)."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.ref_calls = 0  # calls of the task's Model.forward (counted from here on)
        self.calls_at_mark = 0
        model = getattr(task, "Model", None)
        if isinstance(model, type) and callable(getattr(model, "forward", None)):
            forward = getattr(model, "forward")  # noqa: B009 - a class of any type
            setattr(model, "forward", self._counted(forward))  # noqa: B010
        self._snapshot()
        self.ref: Any = None
        self.ref_attrs: dict[str, dict[str, Any]] = {}
        self.ref_methods: dict[str, dict[str, Any]] = {}
        self.ref_sums: list[str] = []

    def _counted(self, forward: Any) -> Any:
        import functools

        @functools.wraps(forward)
        def counted_forward(*args: Any, **kwargs: Any) -> Any:
            self.ref_calls += 1
            return forward(*args, **kwargs)

        return counted_forward

    def watch_reference(self, ref: Any) -> None:
        """Watch the built reference from now on (call :meth:`mark` before each candidate call)."""
        self.ref = ref
        self.mark()

    def mark(self) -> None:
        """The reference's state now: what :meth:`verify` compares with.

        The reference's own forward may update its buffers; the candidate's calls may change nothing of it.
        """
        self.calls_at_mark = self.ref_calls
        if self.ref is not None:
            self.ref_attrs, self.ref_methods, self.ref_sums = _reference_state(self.ref)

    def _snapshot(self) -> None:
        """The process-wide state :meth:`changes` compares with (the reference's own: :meth:`mark`)."""
        own = _own_spaces()
        self.spaces, self.constants = _spaces(self.task, own), _constants(own)
        self.process = _process_state()
        self.ops, self.foreign = _dispatcher()

    def renew(self) -> None:
        """A new snapshot (after the reviewer's own work that may rebind, e.g. torch.compile baselines)."""
        self._snapshot()
        self.mark()

    def changes(self) -> list[str]:
        """What differs from the snapshot, as ``space.name`` strings (empty: nothing)."""
        from .audit import attempts

        found = [f"tried {what}" for what in attempts()]  # a process, a socket, a file written (.audit)
        own = _own_spaces()
        found += _changed(self.spaces, _spaces(self.task, own), "", added=False)  # PyTorch imports lazily: new names
        constants = _constants(own)
        found += [f"{k} (its value)" for k, v in self.constants.items() if constants.get(k) != v]
        now = _process_state()
        found += [name for name, value in self.process.items() if now.get(name) != value]
        found += [f"the kernel of {k}" for k in sorted(_dispatcher(self.ops)[1] - self.foreign)]
        if self.ref_calls != self.calls_at_mark:
            found.append(f"the reference's forward was called {self.ref_calls - self.calls_at_mark} time(s)")
        if self.ref is not None:
            attrs, methods, sums = _reference_state(self.ref)
            found += _changed(self.ref_attrs, attrs, "reference ", added=True, wrappers=False)
            found += _changed(self.ref_methods, methods, "reference ", added=True)
            if sums != self.ref_sums:
                found.append("the reference's parameters or buffers")
        return found

    def verify(self, when: str) -> None:
        """Raise :class:`Tampered` naming what changed since the snapshot, if anything did."""
        changed = self.changes()
        if changed:
            more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            raise Tampered(
                f"the candidate reached into the reviewer's process {when}: {', '.join(changed[:5])}{more} "
                "(the reference, PyTorch and the reviewer share its process; a candidate computes its output from "
                "its inputs alone and changes nothing else)"
            )
