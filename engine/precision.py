"""The ``dot_precision`` transform (card ``dot-input-precision``): fp32 ``tl.dot`` onto tensor cores.

This rewrites the source text of every fp32-exact ``tl.dot`` call (kernels written in the module and
kernels passed as strings to ``async_compile.triton`` alike), one variant per precision of
:data:`~kernelskill.runner.dot_precision.PRECISIONS`: ``tf32x3`` (3xTF32, close to fp32 accuracy),
``tf32`` (one tensor-core product), and ``tf32r`` (``tf32`` with each operand first rounded to the
nearest TF32 value in the kernel, ties away from zero as PTX's ``cvt.rna.tf32.f32``, infinities and
NaNs kept: a library's TF32 error rather than Triton's truncation). The reviewer decides which
variant is still correct, and the precision policy which may be proposed at all: under ``fp32`` only
``tf32x3``, unless the reference itself multiplies in TF32 (cuDNN convolutions).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernelskill.runner.dot_precision import PRECISIONS, ROUND_MASK, ROUNDED, TF32, _fp32_dots, count_exact_dots


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
        f"(({bits} + 0x1000) & {ROUND_MASK}).to(tl.float32, bitcast=True))"
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
