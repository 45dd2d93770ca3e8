"""Which precision each fp32 ``tl.dot`` of a candidate multiplies in (the reviewer's side).

A ``tl.dot`` over fp32 tiles with ``input_precision="ieee"`` (or ``allow_tf32=False``, which is what
TorchInductor's GEMM and convolution templates pass unless ``torch.backends.cuda.matmul.allow_tf32``
is set) runs on the CUDA cores. ``"tf32x3"`` splits each operand into a TF32 high part and a TF32
low part and sums three tensor-core products (the 3xTF32 method), close to fp32 accuracy;
``"tf32"`` is one tensor-core product with a 10-bit mantissa; Triton feeds the fp32 operands to the
tensor cores as they are, so their low 13 mantissa bits are dropped (truncation, biased toward zero:
triton-lang/triton#4574), where cuDNN and cuBLAS round. ``"tf32r"`` (:data:`ROUNDED`) is ``"tf32"``
with each operand first rounded to the nearest TF32 value in the kernel.

Kernels over fp16 / bf16 data are left alone (input precision only concerns fp32 operands), and
kernels passed as strings to ``async_compile.triton`` (TorchInductor's modules) are read too.
:func:`dot_precisions` tells the reviewer which candidates multiply in TF32 (label ``tf32_dot``);
the offline engine's rewrites of these calls are in ``engine/precision.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

ROUNDED = "tf32r"
PRECISIONS = ("tf32x3", "tf32", ROUNDED)
ROUND_MASK = "0xFFFFE000"  # keeps sign, exponent and TF32's 10 mantissa bits (how a rounded operand reads)
TF32 = {"tf32", ROUNDED}  # one tensor-core product per tile: not fp32-exact (label tf32_dot)
_DOT = re.compile(r"\btl\.dot\(")
_HALF = re.compile(
    r"'\*(fp16|bf16)'|\btl\.(float16|bfloat16)\b|\btorch\.(float16|bfloat16|half)\b|\.(half|bfloat16)\(\)"
)
_CONSTEXPR = r"\b{name}\s*:\s*tl\.constexpr\s*=\s*(\S+)"


def _unquoted(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth before it) of each character of ``text`` outside string quotes."""
    depth, quote, i = 0, "", start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        else:
            yield i, c, depth
            depth += (c in "([{") - (c in ")]}")
        i += 1


def _call_span(text: str, open_paren: int) -> int:
    """Index just past the parenthesis closing the one at ``open_paren`` (-1 when unbalanced)."""
    return next((i + 1 for i, c, depth in _unquoted(text, open_paren) if c in ")]}" and depth == 1), -1)


def _split_args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a call's inside."""
    cuts = [i for i, c, depth in _unquoted(inner) if c == "," and depth == 0]
    pieces = [inner[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(inner)], strict=True)]
    return [a.strip() for a in pieces if a.strip()]


def _resolve(value: str, text: str) -> str:
    """A keyword's value, with a ``NAME : tl.constexpr = VALUE`` in ``text`` substituted for NAME."""
    if re.fullmatch(r"[A-Za-z_]\w*", value):
        m = re.search(_CONSTEXPR.format(name=re.escape(value)), text)
        if m:
            return m.group(1)
    return value


def _precision(args: list[str], text: str) -> str:
    """``ieee``, ``tf32``, ``tf32x3`` (or another name Triton knows) from the keywords; ``default`` without one."""
    for a in args:
        key, eq, value = a.partition("=")
        if not eq:
            continue
        key, value = key.strip(), _resolve(value.strip(), text)
        if key == "input_precision":
            name = value.strip("'\"").lower()
            return ROUNDED if name == "tf32" and args and ROUND_MASK in args[0] else name
        if key == "allow_tf32":
            return "ieee" if value in ("False", "0") else "tf32" if value in ("True", "1") else "unknown"
    return "default"


def _fp32_dots(source: str) -> list[tuple[int, int, list[str], str]]:
    """(start, end, arguments, precision) of every ``tl.dot`` call in ``source``; none over fp16/bf16 data."""
    if _HALF.search(source):
        return []
    found = []
    for m in _DOT.finditer(source):
        end = _call_span(source, m.end() - 1)
        if end < 0:
            continue
        args = _split_args(source[m.end() : end - 1])
        found.append((m.start(), end, args, _precision(args, source)))
    return found


def dot_precisions(source: str) -> set[str]:
    """The input precisions of the source's fp32 ``tl.dot`` calls (empty over fp16/bf16 data).

    ``default`` (no keyword) is Triton's default for fp32 operands on NVIDIA GPUs: ``tf32``.
    """
    return {p for *_, p in _fp32_dots(source)}


def count_exact_dots(source: str) -> int:
    """How many fp32 ``tl.dot`` calls in ``source`` stay off tensor cores (``ieee``)."""
    return sum(p == "ieee" for *_, p in _fp32_dots(source))


def applied_precision(source: str) -> str | None:
    """The precision an earlier ``with_precision`` gave this source's dots (None when none was set)."""
    for _, _, args, p in _fp32_dots(source):
        if p in PRECISIONS and any(a.partition("=")[0].strip() == "input_precision" for a in args):
            return p
    return None
