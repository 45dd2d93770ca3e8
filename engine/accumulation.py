"""The ``compensated_dot`` repair (offline diagnoser): Kahan-summed ``tl.dot`` loops.

A GEMM loop that adds every K block's product into one fp32 tile (``acc += tl.dot(a, b, ...)``;
Triton folds the add into the MMA's accumulator) sums K / BLOCK_K partial products in sequence. Its
rounding error grows with the number of blocks: on long reductions it can exceed what cuBLAS (split
and tree reductions) and the tolerance allow. Measured on an H200: TorchInductor's Triton GEMV for a
16384-long row was 6e-4 from a float64 run where the reference was 3e-5 (measured on an H200, level-1 task 5).

This rewrite keeps a compensation tile per accumulator (Kahan summation): each block's product is
computed on its own, and the rounding lost when adding it to the accumulator is carried into the
next block, so the sum over blocks is nearly exact and only the error inside one block's product
remains. It costs three tile additions per block: nothing on a memory-bound loop, a few percent on
a compute-bound one. Only products near fp32 accuracy (``ieee``, ``tf32x3``) are rewritten: a plain
TF32 product's error is in its rounded inputs, which no summation order recovers. Plain Python
source and kernels passed as strings to ``async_compile.triton`` (TorchInductor's modules) are
handled alike, line by line.
"""

from __future__ import annotations

import re

from kernelskill.runner.dot_precision import _fp32_dots, _unquoted

COMPENSABLE = ("ieee", "tf32x3")  # products near fp32 accuracy: their error is in the summation
_STMT = re.compile(r"^(?P<ind>[ \t]*)(?P<acc>[A-Za-z_]\w*)\s*\+=\s*(?P<dot>tl\.dot\()")
_LOOP = re.compile(r"^[ \t]*(for|while)\b.*:\s*(#.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _balanced(text: str) -> bool:
    """True when ``text`` closes every bracket it opens (outside string quotes)."""
    depth = 0
    for _, c, _ in _unquoted(text):
        depth += (c in "([{") - (c in ")]}")
    return depth == 0


def _site(lines: list[str], i: int, acc: str) -> int | None:
    """Index of the line that starts ``acc`` before a loop enclosing line ``i`` (None: no such line).

    The line is ``acc = ...``, a whole statement on one line, in a block around the loop.
    """
    level, in_loop = _indent(lines[i]), False
    assign = re.compile(rf"^[ \t]*{re.escape(acc)}\s*=\s*(?!=)")
    for j in range(i - 1, -1, -1):
        line = lines[j]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "'''" in line or '"""' in line:
            return None  # the start of the string that holds the kernel
        ind = _indent(line)
        if ind > level:
            continue  # inside an earlier block
        if ind == level:
            if in_loop and assign.match(line):
                return j if _balanced(line) else None
            continue
        if _LOOP.match(line):  # the header of an enclosing block
            in_loop = True
        elif line.lstrip().startswith(("def ", "class ")):
            return None
        level = ind
    return None


def compensable(source: str) -> int:
    """How many ``acc += tl.dot(...)`` loop statements over near-fp32 products could be compensated."""
    return compensated(source)[1]


def compensated(source: str) -> tuple[str, int]:
    """``source`` with every compensable accumulation rewritten (Kahan), and how many were."""
    exact = {(s, e) for s, e, _, p in _fp32_dots(source) if p in COMPENSABLE}
    if not exact:
        return source, 0
    ends = dict(exact)  # start -> end of each call
    lines = source.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    out: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    count = 0
    for i, line in enumerate(lines):
        m = _STMT.match(line)
        if m is None:
            continue
        start = offsets[i] + m.start("dot")
        if start not in ends or ends[start] > offsets[i] + len(line):
            continue  # not an fp32 dot to compensate, or a call continued on the next lines
        dot = source[start : ends[start]]
        rest = source[ends[start] : offsets[i] + len(line)].strip()
        if rest and not rest.startswith("#"):
            continue  # more after the call on this line (e.g. ``acc += tl.dot(a, b) * s``)
        acc, pad = m["acc"], m["ind"]
        kc, kp, kt = f"{acc}_kc", f"{acc}_kp", f"{acc}_kt"
        if any(re.search(rf"\b{n}\b", source) for n in (kc, kp, kt)):
            continue
        j = _site(lines, i, acc)
        if j is None:
            continue
        init_pad = lines[j][: _indent(lines[j])]
        after.setdefault(j, []).append(f"{init_pad}{kc} = tl.zeros_like({acc})  # Kahan compensation")
        out[i] = [
            f"{pad}{kp} = {dot} - {kc}  # compensated_dot: Kahan sum over the K blocks",
            f"{pad}{kt} = {acc} + {kp}",
            f"{pad}{kc} = ({kt} - {acc}) - {kp}",
            f"{pad}{acc} = {kt}",
        ]
        count += 1
    if not count:
        return source, 0
    result: list[str] = []
    for i, line in enumerate(lines):
        result += out.get(i, [line])
        result += after.get(i, [])
    return "\n".join(result), count
