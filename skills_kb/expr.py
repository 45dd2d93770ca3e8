"""A tiny, safe expression language for the policy's derived fields.

Derived fields in ``policy.yaml`` are written as expressions such as
``"coalesce(max(metrics.dram_throughput_pct, metrics.sm_throughput_pct), metrics.sol_pct)"`` or
``"metrics.arithmetic_intensity < const.ridge_flops_per_byte"``. The text is parsed with Python's
``ast`` module and then *interpreted* by walking a whitelist of node types; nothing is ever passed
to ``eval``. The grammar:

- literals: numbers, ``true`` / ``false`` (also ``True`` / ``False``)
- names: ``metrics.NAME``, ``features.NAME``, ``derived.NAME`` (defined earlier), ``const.NAME``
- arithmetic ``+ - * /`` and unary minus; comparisons ``< <= > >= == !=`` (chains allowed)
- boolean ``and`` / ``or`` / ``not``
- functions ``max(a, b, ...)``, ``min(a, b, ...)``, ``abs(a)``, ``coalesce(a, b, ...)``

Missing values are *unknown* (``None``) and propagate: arithmetic or a comparison with an unknown
operand is unknown, ``and`` / ``or`` follow three-valued logic (``false and unknown`` is false),
``max`` / ``min`` ignore unknown arguments (unknown when all are), and ``coalesce`` returns its
first known argument. Division by zero is unknown. Evaluation never raises on data.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

NAMESPACES = ("metrics", "features", "derived", "const")
FUNCTIONS = ("max", "min", "abs", "coalesce")

_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
_BOOL_WORDS = {"true": True, "false": False, "True": True, "False": False}


class ExprError(ValueError):
    """An expression that does not parse, uses a construct outside the grammar, or names an unknown field."""


@dataclass(frozen=True)
class Expr:
    """A parsed, validated expression: its text, its tree, and the fields it reads."""

    text: str
    tree: ast.expr
    names: tuple[tuple[str, str], ...]  # (namespace, name) pairs, in order of appearance

    def evaluate(self, scope: Mapping[str, Mapping[str, Any]]) -> Any:
        """Value of the expression; ``scope`` maps a namespace to its values (unknown = absent)."""
        return _eval(self.tree, scope)

    def inputs(self, scope: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
        """The known fields the value was computed from (``coalesce`` counts only the argument it took)."""
        used: list[tuple[str, str]] = []
        _inputs(self.tree, scope, used)
        return used


def parse_expr(text: str, vocab: Mapping[str, Any] | None = None) -> Expr:
    """Parse and validate ``text``; ``vocab`` maps a namespace to its allowed names (unchecked if absent)."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval").body
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {text!r}: {e.msg}") from None
    names: list[tuple[str, str]] = []
    _check(tree, text, names)
    if vocab is not None:
        for ns, name in names:
            allowed = vocab.get(ns)
            if allowed is not None and name not in allowed:
                raise ExprError(f"unknown field {ns}.{name} in expression {text!r}")
    return Expr(str(text), tree, tuple(names))


def _check(node: ast.AST, text: str, names: list[tuple[str, str]]) -> None:
    """Reject every construct outside the grammar (raises :class:`ExprError`)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or isinstance(node.value, (int, float)):
            return
        raise ExprError(f"only numbers and true/false are literals, not {node.value!r}, in {text!r}")
    if isinstance(node, ast.Name):
        if node.id in _BOOL_WORDS:
            return
        raise ExprError(f"bare name {node.id!r} in {text!r}: write NAMESPACE.NAME ({', '.join(NAMESPACES)})")
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in NAMESPACES:
            names.append((node.value.id, node.attr))
            return
        raise ExprError(f"unknown namespace in {ast.unparse(node)!r} in {text!r} (want {', '.join(NAMESPACES)})")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, text, names)
        _check(node.right, text, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        _check(node.operand, text, names)
        return
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, text, names)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        for v in [node.left, *node.comparators]:
            _check(v, text, names)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise ExprError(f"only {', '.join(FUNCTIONS)}(...) may be called, in {text!r}")
        if not node.args or (node.func.id == "abs" and len(node.args) != 1):
            raise ExprError(f"wrong number of arguments to {node.func.id}() in {text!r}")
        for a in node.args:
            _check(a, text, names)
        return
    raise ExprError(f"{type(node).__name__} is not allowed in policy expressions ({text!r})")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))


def _eval(node: ast.expr, scope: Mapping[str, Mapping[str, Any]]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return _BOOL_WORDS[node.id]
    if isinstance(node, ast.Attribute):
        assert isinstance(node.value, ast.Name)
        return (scope.get(node.value.id) or {}).get(node.attr)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, scope), _eval(node.right, scope)
        if not (_num(a) and _num(b)):
            return None
        if isinstance(node.op, ast.Div) and b == 0:
            return None
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, scope)
        if isinstance(node.op, ast.Not):
            return None if v is None else not v
        return -v if _num(v) else None
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, scope) for v in node.values]
        if isinstance(node.op, ast.And):
            if any(v is not None and not v for v in values):
                return False
            return None if any(v is None for v in values) else True
        if any(v is not None and bool(v) for v in values):
            return True
        return None if any(v is None for v in values) else False
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, scope)
            if left is None or right is None:
                return None
            try:
                if not _CMPOPS[type(op)](left, right):
                    return False
            except TypeError:
                return None
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        args = [_eval(a, scope) for a in node.args]
        fn = node.func.id
        if fn == "coalesce":
            return next((a for a in args if a is not None), None)
        if fn == "abs":
            return abs(args[0]) if _num(args[0]) else None
        known = [a for a in args if _num(a)]
        if not known:
            return None
        return max(known) if fn == "max" else min(known)
    raise ExprError(f"{type(node).__name__} is not allowed")  # unreachable after _check


def _inputs(node: ast.AST, scope: Mapping[str, Mapping[str, Any]], used: list[tuple[str, str]]) -> None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = (node.value.id, node.attr)
        if (scope.get(key[0]) or {}).get(key[1]) is not None and key not in used:
            used.append(key)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "coalesce":
        for arg in node.args:
            if _eval(arg, scope) is not None:
                _inputs(arg, scope, used)
                return
        return
    for child in ast.iter_child_nodes(node):
        _inputs(child, scope, used)
