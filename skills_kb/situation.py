"""The current situation as text: the query whose similarity to each card ranks the allowed skills.

It names what the task computes (task name, the reference module's docstring and the operations
its ``forward`` calls), the bottleneck class and the rule that chose it, the candidate's kernel
traits and the profile signals. Deterministic: the same state gives the same text.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from kernelskill.runner.static_check import dotted_name

from .policy import Decision, fmt

_IGNORED_METHODS = {
    "view", "reshape", "size", "contiguous", "to", "permute", "transpose", "unsqueeze", "squeeze",
    "expand", "expand_as", "flatten", "float", "half", "bfloat16", "type_as", "dim", "numel", "clone",
    "detach", "cpu", "cuda", "item", "new_zeros", "new_empty", "stride", "append", "super", "__init__",
}  # fmt: skip


def _words(name: str) -> str:
    """``LayerNorm`` -> ``layer norm``; ``log_softmax`` -> ``log softmax``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace("_", " ").lower().strip()


def reference_ops(source: str) -> list[str]:
    """Operations the reference ``Model.forward`` performs, in order of first use (best effort)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    ops: list[str] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        modules: dict[str, str] = {}
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if fn.name != "__init__":
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and dotted_name(t).startswith("self."):
                            modules[t.attr] = dotted_name(node.value.func).rsplit(".", 1)[-1]
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"):
            for node in ast.walk(fn):
                name = ""
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    name = "matmul"
                elif isinstance(node, ast.Call):
                    dotted = dotted_name(node.func)
                    root, _, tail = dotted.rpartition(".")
                    if root == "self" and tail in modules:
                        name = modules[tail]
                    elif tail and tail not in _IGNORED_METHODS and not (root == "self" and tail not in modules):
                        name = tail
                if name and _words(name) not in ops:
                    ops.append(_words(name))
    return ops


def _docstrings(source: str) -> str:
    """First lines of the module's and the reference ``Model``'s docstrings."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    nodes: list[ast.AST] = [tree] + [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"]
    lines = []
    for node in nodes:
        doc = (ast.get_docstring(node) or "").strip()  # type: ignore[arg-type]
        if doc:
            lines.append(doc.splitlines()[0])
    return " ".join(lines)


def describe_situation(
    decision: Decision, features: dict[str, Any], task_name: str = "", reference_source: str = ""
) -> str:
    """Natural-language description of the current situation, for retrieval."""
    lines = []
    if task_name:
        what = re.sub(r"^\d+_", "", task_name).replace("_", " ")
        doc = _docstrings(reference_source)
        lines.append(f"Task: {what}." + (f" {doc}" if doc else ""))
    ops = reference_ops(reference_source) if reference_source else []
    if ops:
        lines.append(f"Reference computes: {', '.join(ops)}.")
    lines.append(f"Bottleneck: {_words(decision.bottleneck)} (rule {decision.rule.replace('-', ' ')}).")
    traits = [_words(k) for k, v in sorted(features.items()) if v is True]
    counts = [f"{_words(k)} {v}" for k, v in sorted(features.items()) if k.startswith("num_") and v]
    if traits or counts:
        lines.append("Kernel traits: " + ", ".join(traits + counts) + ".")
    signals = [f"{_words(k)} {fmt(v)}" for k, v in sorted(decision.metrics.items())]
    signals += [f"{_words(k)} {fmt(v)}" for k, v in decision.derived.items() if v is not None and k != "headroom_pct"]
    if signals:
        lines.append("Signals: " + ", ".join(signals) + f"; headroom tier {_words(decision.tier)}.")
    return "\n".join(lines)
