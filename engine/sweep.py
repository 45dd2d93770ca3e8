"""sweep: deterministic launch-configuration neighbours of a candidate (tile sizes, warps, stages; no model).

A correct but slow candidate often only needs another ``BLOCK_SIZE`` or ``num_warps``. This module finds
the launch sites ``kernel[grid](..., BLOCK_SIZE=1024, num_warps=4)`` of the module's own ``@triton.jit``
kernels and changes one knob of one launch per variant, at the knob's single source: the literal at the
launch, or the one assignment of the variable the launch names. The grid, usually derived from that same
value, therefore stays consistent. Each rewrite replaces one exact source span (AST positions), so the
rest of the file, comments and formatting included, is untouched.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from kernelskill.runner.static_check import dotted_name as _dotted

KnobKind = Literal["block", "warps", "stages"]

_BLOCK_BOUNDS = (16, 8192)
_DOT_TILE_BOUNDS = (16, 256)  # BM/BLOCK_K-style names in kernels calling tl.dot: >= 16 for dot, <= 256 for smem
_WARPS_BOUNDS = (1, 16)
_STAGES_BOUNDS = (1, 6)
_DEFAULT_NUM_WARPS = 4  # what Triton launches with when num_warps is not passed
_KIND_ORDER: tuple[KnobKind, ...] = ("block", "warps", "stages")
_Pos = tuple[int, int]  # (1-based line, UTF-8 byte column), as the AST reports positions

# Upper-case constexpr names that denote a tile: *BLOCK*, *TILE*, *_SIZE, BM/BN/BK.
_TILE_NAME = re.compile(r"^(?:[A-Z0-9_]*(?:BLOCK|TILE)[A-Z0-9_]*|B[MNK]|[A-Z0-9_]*_SIZE(?:_[A-Z0-9]+)?)$")
# ... unless the name says it is a count or a problem dimension (NUM_BLOCKS, KERNEL_SIZE, BLOCK_DMODEL).
_NOT_TILE = re.compile(
    r"^(?:NUM_|N_)|GROUP|KERNEL|HEAD|HIDDEN|VOCAB|BATCH|EMBED|CHANNEL|FEATURE|POOL|WINDOW|STRIDE|DIM|MODEL|SEQ"
)
_DOT_TILE = re.compile(r"^(?:B|BLOCK|BLOCK_SIZE|TILE|TILE_SIZE)_?[MNK]$")


@dataclass(frozen=True)
class Knob:
    """One tunable value at a launch site, and the single span of source that sets it."""

    name: str
    """The kernel parameter or launch option: ``BLOCK_SIZE``, ``num_warps``, ``num_stages``."""
    kind: KnobKind
    value: int
    bounds: tuple[int, int]
    """Smallest and largest value a variant may give the knob."""
    via: str = ""
    """The variable the launch passes, whose one assignment holds the literal ("" for a literal at the launch)."""
    added: bool = False
    """True for ``num_warps`` not passed at the launch (Triton's default); a variant adds the keyword."""
    start: _Pos = (0, 0)
    """(line, UTF-8 column) where the text to replace begins."""
    end: _Pos = (0, 0)
    """(line, UTF-8 column) where the text to replace ends (equal to ``start`` for an insertion)."""
    template: str = "{}"
    """The replacement text, formatted with the new value."""

    def neighbours(self) -> list[int]:
        """The one-step moves from the current value within ``bounds``: x2 then /2, or +1 then -1 for stages."""
        lo, hi = self.bounds
        moves = [self.value + 1, self.value - 1] if self.kind == "stages" else [self.value * 2, self.value // 2]
        return [v for v in moves if lo <= v <= hi and v != self.value]


@dataclass(frozen=True)
class Launch:
    """A launch ``kernel[grid](...)`` of a ``@triton.jit`` kernel defined in the same module."""

    kernel: str
    lineno: int
    knobs: tuple[Knob, ...] = ()
    skip_reason: str = ""
    """Why no variant touches this launch ("" when it is swept)."""
    ignored: tuple[str, ...] = ()
    """Knob-like arguments left alone, each with the reason."""


def sweepable_launches(source: str) -> list[Launch]:
    """Every launch of the module's own jit kernels, in source order, with its knobs or its ``skip_reason``."""
    tree = _parse(source)
    if tree is None:
        return []
    return _Module(tree).launches()


def sweep_variants(source: str, max_variants: int = 6) -> list[tuple[str, str]]:
    """Rewritten sources, each changing one knob of one launch by one step, with a one-line note.

    Order: block-size moves of every launch first (x2 before /2), then ``num_warps``, then ``num_stages``.
    At most ``max_variants``; deterministic; never the unchanged source; ``[]`` when nothing parses or
    nothing can be swept.
    """
    launches = sweepable_launches(source)
    # A value shared with a launch whose grid repeats it as a literal must not move, whichever launch asks.
    frozen = {k.start for lc in launches if lc.skip_reason for k in lc.knobs if k.kind == "block"}
    per_kernel: dict[str, int] = {}
    for lc in launches:
        per_kernel[lc.kernel] = per_kernel.get(lc.kernel, 0) + 1
    text = _Text(source)
    variants: list[tuple[str, str]] = []
    seen = {source}
    for kind in _KIND_ORDER:
        for lc in launches:
            if lc.skip_reason:
                continue
            for knob in lc.knobs:
                if knob.kind != kind or knob.start in frozen:
                    continue
                for new in knob.neighbours():
                    if len(variants) >= max_variants:
                        return variants
                    variant = text.replace(knob.start, knob.end, knob.template.format(new))
                    if variant in seen or _parse(variant) is None:
                        continue
                    seen.add(variant)
                    variants.append((variant, _note(lc, knob, new, per_kernel[lc.kernel] > 1)))
    return variants


def _note(launch: Launch, knob: Knob, new: int, several: bool) -> str:
    note = f"{launch.kernel}: {knob.name} {knob.value}->{new}"
    if knob.via:
        note += f" (via {knob.via})"
    if knob.added:
        note += " (was unset: Triton's default)"
    if several:
        note += f" [launch at line {launch.lineno}]"
    return note


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@dataclass(frozen=True)
class _Literal:
    """An int literal of the source and its span."""

    value: int
    start: _Pos
    end: _Pos


def _int_literal(node: ast.AST | None) -> _Literal | None:
    if not isinstance(node, ast.Constant) or node.end_lineno is None or node.end_col_offset is None:
        return None
    if not isinstance(node.value, int) or isinstance(node.value, bool):
        return None
    return _Literal(node.value, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset))


def _power_of_two(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _is_tile(name: str) -> bool:
    return bool(_TILE_NAME.match(name)) and not _NOT_TILE.search(name)


class _Text:
    """Maps AST positions (1-based line, UTF-8 byte column) to string offsets."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]

    def offset(self, pos: _Pos) -> int:
        lineno, col = pos
        start = self.starts[lineno - 1]
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.source)
        return start + len(self.source[start:end].encode()[:col].decode(errors="ignore"))

    def replace(self, start: _Pos, end: _Pos, new: str) -> str:
        return self.source[: self.offset(start)] + new + self.source[self.offset(end) :]


class _Scope:
    """The names a function or the module binds: how often, to what, and the single-literal assignments."""

    def __init__(self, node: ast.AST) -> None:
        self.node = node
        self.label = f"{node.name}()" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else "the module"
        self.count: dict[str, int] = {}
        self.values: dict[str, list[ast.expr]] = {}
        self.literal: dict[str, _Literal] = {}
        for child in self._nodes(node):
            self._visit(child)

    def _nodes(self, node: ast.AST) -> Iterator[ast.AST]:
        # A function's own scope includes its nested functions (over-counting only makes us skip);
        # the module's scope stops at function and class bodies.
        for child in ast.iter_child_nodes(node):
            yield child
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda)
            if nested and isinstance(self.node, ast.Module):
                continue
            yield from self._nodes(child)

    def _bind(self, name: str, value: ast.expr | None = None) -> None:
        self.count[name] = self.count.get(name, 0) + 1
        if value is not None:
            self.values.setdefault(name, []).append(value)

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id)
        elif isinstance(node, ast.arg):
            self._bind(node.arg)
        elif isinstance(node, ast.alias):
            self._bind(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self._bind(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            for name in node.names:
                self._bind(name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self._bind(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            self._bind(node.name)
        # Values feed the grid scan; the Name targets above already counted the bindings.
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        self.values.setdefault(sub.id, []).append(node.value)
            const = _int_literal(node.value)
            if const and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.literal[node.targets[0].id] = const
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and isinstance(node.target, ast.Name):
            if node.value is not None:
                self.values.setdefault(node.target.id, []).append(node.value)
            const = _int_literal(node.value)
            if const and isinstance(node, ast.AnnAssign):
                self.literal[node.target.id] = const


class _Module:
    """One parsed candidate: its jit kernels, scopes and launch sites."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.kernels: dict[str, ast.FunctionDef] = {}
        self.parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
            if isinstance(node, ast.FunctionDef) and any(
                _dotted(d) == "jit" or _dotted(d).endswith(".jit") for d in node.decorator_list
            ):
                self.kernels[node.name] = node
        self._scopes: dict[int, _Scope] = {}

    def launches(self) -> list[Launch]:
        calls = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in self.kernels
        ]
        calls.sort(key=lambda c: (c.lineno, c.col_offset))
        return [self._launch(c) for c in calls]

    def _scope(self, node: ast.AST) -> _Scope:
        if id(node) not in self._scopes:
            self._scopes[id(node)] = _Scope(node)
        return self._scopes[id(node)]

    def _chain(self, node: ast.AST) -> list[_Scope]:
        """Enclosing function scopes, innermost first, then the module (class bodies are not visible)."""
        chain = []
        parent = self.parents.get(id(node))
        while parent is not None:
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
                chain.append(self._scope(parent))
            parent = self.parents.get(id(parent))
        return [*chain, self._scope(self.tree)]

    def _launch(self, call: ast.Call) -> Launch:
        assert isinstance(call.func, ast.Subscript) and isinstance(call.func.value, ast.Name)
        kernel = self.kernels[call.func.value.id]
        lineno = call.lineno
        if any(_dotted(d).split(".")[-1] == "autotune" for d in kernel.decorator_list):
            return Launch(kernel.name, lineno, skip_reason="autotuned: @triton.autotune chooses its own configs")
        chain = self._chain(call)
        params = [a.arg for a in [*kernel.args.posonlyargs, *kernel.args.args]]
        constexpr = {
            a.arg
            for a in [*kernel.args.posonlyargs, *kernel.args.args, *kernel.args.kwonlyargs]
            if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
        }
        uses_dot = any(
            isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] in ("dot", "dot_scaled")
            for n in ast.walk(kernel)
        )
        passed: list[tuple[str, ast.expr]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break  # later positions no longer map to parameters
            if i < len(params):
                passed.append((params[i], arg))
        passed += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]

        knobs: list[Knob] = []
        ignored: list[str] = []
        for name, value in passed:
            kind: KnobKind
            if name in constexpr and _is_tile(name):
                kind = "block"
                dot = uses_dot and bool(_DOT_TILE.match(name))
                bounds = _DOT_TILE_BOUNDS if dot else _BLOCK_BOUNDS
            elif name == "num_warps":
                kind, bounds = "warps", _WARPS_BOUNDS
            elif name == "num_stages":
                kind, bounds = "stages", _STAGES_BOUNDS
            else:
                continue
            const, via, why = self._source_of(value, chain)
            if const is None:
                ignored.append(f"{name}: {why}")
                continue
            if kind != "stages" and not _power_of_two(const.value):
                ignored.append(f"{name}: {const.value} is not a power of two")
                continue
            knobs.append(Knob(name, kind, const.value, bounds, via=via, start=const.start, end=const.end))
        if all(name != "num_warps" for name, _ in passed):
            if any(kw.arg is None for kw in call.keywords):
                ignored.append("num_warps: not passed, and **kwargs may carry it")
            else:
                knobs.append(self._added_num_warps(call))

        skip_reason = ""
        block_values = {k.value for k in knobs if k.kind == "block"}
        if block_values:
            sources = {(k.start, k.end) for k in knobs}
            clash = sorted(block_values & self._grid_ints(call.func.slice, chain, sources))
            if clash:
                skip_reason = (
                    f"the grid repeats the literal {clash[0]} instead of using the block size, "
                    "so changing the block size would desynchronise it"
                )
        return Launch(kernel.name, lineno, tuple(knobs), skip_reason, tuple(ignored))

    def _source_of(self, value: ast.expr, chain: list[_Scope]) -> tuple[_Literal | None, str, str]:
        """The int literal that sets ``value``, the variable it goes through, or why there is none."""
        const = _int_literal(value)
        if const is not None:
            return const, "", ""
        if not isinstance(value, ast.Name):
            return None, "", f"{ast.unparse(value)} is not an int literal or a variable assigned one"
        for scope in chain:
            count = scope.count.get(value.id, 0)
            if not count:
                continue
            if count != 1:
                return None, "", f"{value.id} is bound {count} times in {scope.label}"
            if value.id not in scope.literal:
                return None, "", f"{value.id} is not assigned an int literal in {scope.label}"
            return scope.literal[value.id], value.id, ""
        return None, "", f"{value.id} is not assigned in this module"

    @staticmethod
    def _added_num_warps(call: ast.Call) -> Knob:
        """``num_warps`` at Triton's default, rewritten by adding the keyword after the last argument."""
        ends = [(a.end_lineno or 0, a.end_col_offset or 0) for a in call.args]
        ends += [(k.end_lineno or 0, k.end_col_offset or 0) for k in call.keywords]
        if ends:
            pos, template = max(ends), ", num_warps={}"
        else:  # no arguments: insert before the closing parenthesis
            assert call.end_lineno is not None and call.end_col_offset is not None
            pos, template = (call.end_lineno, call.end_col_offset - 1), "num_warps={}"
        return Knob(
            "num_warps", "warps", _DEFAULT_NUM_WARPS, _WARPS_BOUNDS, added=True, start=pos, end=pos, template=template
        )

    @staticmethod
    def _grid_ints(expr: ast.expr, chain: list[_Scope], sources: set[tuple[_Pos, _Pos]]) -> set[int]:
        """Int literals the grid depends on, following the names it reads, minus the knobs' own sources."""
        ints: set[int] = set()
        seen: set[str] = set()
        todo: list[ast.expr] = [expr]
        while todo:
            for node in ast.walk(todo.pop()):
                const = _int_literal(node)
                if const is not None:
                    if (const.start, const.end) not in sources:
                        ints.add(const.value)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in seen:
                    seen.add(node.id)
                    scope = next((s for s in chain if node.id in s.count), None)
                    if scope is not None:
                        todo.extend(scope.values.get(node.id, []))
        return ints
