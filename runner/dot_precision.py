"""The ``dot_precision`` transform (card ``dot-input-precision``): fp32 ``tl.dot`` onto tensor cores.

A ``tl.dot`` over fp32 tiles with ``input_precision="ieee"`` (or ``allow_tf32=False``, which is what
TorchInductor's GEMM and convolution templates pass unless ``torch.backends.cuda.matmul.allow_tf32``
is set) runs on the CUDA cores. ``"tf32x3"`` splits each operand into a TF32 high part and a TF32
low part and sums three tensor-core products (the 3xTF32 method), close to fp32 accuracy;
``"tf32"`` is one tensor-core product with a 10-bit mantissa; Triton feeds the fp32 operands to the
tensor cores as they are, so their low 13 mantissa bits are dropped (truncation, biased toward zero:
triton-lang/triton#4574), where cuDNN and cuBLAS round. ``"tf32r"`` (:data:`ROUNDED`) is ``"tf32"``
with each operand first rounded to the nearest TF32 value in the kernel (ties away from zero, as
PTX's ``cvt.rna.tf32.f32``; infinities and NaNs kept), so its error is that of a library's TF32
product rather than a larger, one-sided one. This module rewrites the source text
of every such call (kernels written in the module and kernels passed as strings to
``async_compile.triton`` alike), one variant per precision; the reviewer decides which variant is
still correct, so a plain ``tf32`` variant only survives where the reference itself is no more
accurate (cuDNN convolutions run in TF32 by default).

Kernels over fp16 / bf16 data are left alone (input precision only concerns fp32 operands).

:func:`dot_precisions` also tells the reviewer which candidates multiply in TF32 (label
``tf32_dot``): within the tolerance, but not fp32-exact products.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

ROUNDED = "tf32r"
PRECISIONS = ("tf32x3", "tf32", ROUNDED)
TF32 = {"tf32", ROUNDED}  # one tensor-core product per tile: not fp32-exact (label tf32_dot)
_ROUND_MASK = "0xFFFFE000"  # keeps sign, exponent and TF32's 10 mantissa bits
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
            return ROUNDED if name == "tf32" and args and _ROUND_MASK in args[0] else name
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


def tf32_rounded(operand: str) -> str:
    """A Triton expression: the fp32 tile ``operand`` rounded to the nearest TF32 values (ties away from zero).

    Adding half a unit of the last kept place to the bits and clearing the 13 dropped ones rounds the
    magnitude (a carry into the exponent is the correct rounding up); exponent-all-ones values
    (infinities, NaNs) are kept. ``operand`` is evaluated twice: a name in the kernels this rewrites.
    """
    x = operand if re.fullmatch(r"[A-Za-z_][\w.]*", operand) else f"({operand})"
    bits = f"{x}.to(tl.uint32, bitcast=True)"
    return (
        f"tl.where(({bits} & 0x7F800000) == 0x7F800000, {x}, "
        f"(({bits} + 0x1000) & {_ROUND_MASK}).to(tl.float32, bitcast=True))"
    )


def _keyword_or_value(arg: str, wrap: Callable[[str], str]) -> str:
    """``wrap`` applied to a call argument's value (``input=a`` -> ``input=wrap(a)``, ``a`` -> ``wrap(a)``)."""
    m = re.fullmatch(r"([A-Za-z_]\w*)\s*=(?!=)\s*(.+)", arg, re.S)
    return f"{m.group(1)}={wrap(m.group(2))}" if m else wrap(arg)


def with_precision(source: str, precision: str, among: tuple[str, ...] = ("ieee",)) -> str:
    """``source`` with every fp32 ``tl.dot`` whose precision is in ``among`` set to ``input_precision=precision``.

    :data:`ROUNDED` writes ``input_precision="tf32"`` with both operands wrapped in :func:`tf32_rounded`.
    """
    out, last = [], 0
    for start, end, args, _ in (d for d in _fp32_dots(source) if d[3] in among):
        kept = [a for a in args if a.partition("=")[0].strip() not in ("allow_tf32", "input_precision")]
        name = precision
        if precision == ROUNDED:
            kept[:2], name = [_keyword_or_value(a, tf32_rounded) for a in kept[:2]], "tf32"
        out += [source[last:start], f'tl.dot({", ".join(kept)}, input_precision="{name}")']
        last = end
    return "".join(out) + source[last:]


def precision_variants(source: str, tf32: bool = True) -> list[tuple[str, str]]:
    """(source, note) per precision in PRECISIONS; empty when no fp32-exact dot exists.

    ``tf32`` False (the precision policy forbids single-pass TF32 products for the task): only the
    fp32-accurate ``tf32x3``.
    """
    n = count_exact_dots(source)
    if not n:
        return []
    allowed = PRECISIONS if tf32 else tuple(p for p in PRECISIONS if p not in TF32)
    return [(with_precision(source, p), f"dot_precision: {n} fp32 tl.dot call(s) set to {p}") for p in allowed]


def applied_precision(source: str) -> str | None:
    """The precision an earlier ``with_precision`` gave this source's dots (None when none was set)."""
    for _, _, args, p in _fp32_dots(source):
        if p in PRECISIONS and any(a.partition("=")[0].strip() == "input_precision" for a in args):
            return p
    return None
