"""Convolutions in our own Triton kernel: implicit GEMM, 1-D / 2-D / 3-D, forward and transposed.

One kernel (:func:`ks_conv_fwd`) computes every form. 1-D and 2-D inputs are views with unit depth
(and height), so there is no copy. The output tile is ``BLOCK_M`` output positions (batch and space
flattened) by ``BLOCK_N`` output channels of one group. The reduction runs over the kernel taps (a
scalar loop) and, inside each tap, over the group's input channels in ``BLOCK_K`` slices, each one
``tl.dot``. The im2col matrix is never written: each slice is gathered from the input as it is
needed, with out-of-bounds taps masked (padding, dilation, stride).

Transposed convolutions use the phase (sub-pixel) decomposition, not a dense convolution over a
zero-upsampled input. Output positions congruent modulo the stride (one *phase*) see the same
subset of taps. Each program handles one phase, and the taps that do not reach it are skipped
whole: a scalar test per tap, so no product is spent on an inserted zero.

Inputs and outputs are addressed through their strides (contiguous or channels-last alike). The
weight is re-laid once to ``(groups, taps, in-channels of a group, out-channels of a group)`` by
:func:`pack_weight`, so each slice of it is one contiguous tile. The epilogue adds the bias, then
runs in registers whatever element-wise steps followed the convolution in the task's graph (numbers
and per-channel tensors as operands, activations, clamps: :func:`epilogue_lines`), before the single
store of the output tile. Each distinct epilogue is its own generated kernel (:func:`epilogue_kernel`).

Numerics: fp32 inputs multiply in ``precision``: ``ieee`` (exact fp32), ``tf32x3`` (3xTF32, near fp32),
``tf32`` (one TF32 product), or ``tf32r``, which is ``tf32`` with both operands first rounded to the
nearest TF32 value, as cuDNN's TF32 convolutions do (the precision policy decides which is allowed).
fp16 / bf16 inputs multiply in their own type. Accumulation is always fp32.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

PRECISIONS = ("ieee", "tf32x3", "tf32", "tf32r")
ACTIVATIONS = {None: 0, "relu": 1}  # fused after the bias, in registers


@triton.jit
def _round_tf32(x):
    """``x`` (fp32) rounded to the nearest TF32 value, ties away from zero; infinities and NaNs kept."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where((bits & 0x7F800000) == 0x7F800000, x, rounded)


@triton.jit
def ks_conv_fwd(
    X, Wp, Bias, Out,
    N, C, D, H, W,  # input batch, channels of a group, spatial size
    OD, OH, OW, OC,  # output spatial size, output channels of a group
    QD, QH, QW,  # output positions per phase (= OD, OH, OW for a forward convolution)
    sxn, sxc, sxd, sxh, sxw,
    son, soc, sod, soh, sow,
    SD, SH, SW, PD, PH, PW, DD, DH, DW,  # stride, padding, dilation
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr, ROUND_TF32: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """One (output positions x output channels) tile of one group and, when transposed, one phase."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_gp = tl.program_id(2)
    phases = SD * SH * SW if TRANSPOSED else 1
    g = pid_gp // phases
    phase = pid_gp % phases
    phase_d = phase // (SH * SW)
    phase_h = (phase // SW) % SH
    phase_w = phase % SW

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    qw = rows % QW
    qh = (rows // QW) % QH
    qd = (rows // (QW * QH)) % QD
    n = rows // (QW * QH * QD)
    if TRANSPOSED:
        od = phase_d + SD * qd
        oh = phase_h + SH * qh
        ow = phase_w + SW * qw
    else:
        od, oh, ow = qd, qh, qw
    row_ok = (n < N) & (od < OD) & (oh < OH) & (ow < OW)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < OC
    ks = tl.arange(0, BLOCK_K)
    x_rows = X + n.to(tl.int64) * sxn + (g * C).to(tl.int64) * sxc
    w_group = Wp + g.to(tl.int64) * (KD * KH * KW * C * OC)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for tap in range(0, KD * KH * KW):
        kd = tap // (KH * KW)
        kh = (tap // KW) % KH
        kw = tap % KW
        if TRANSPOSED:  # output o = i * S - P + k * Dil: this phase's rows see tap k iff S divides (o + P - k * Dil)
            td = phase_d + PD - kd * DD
            th = phase_h + PH - kh * DH
            tw = phase_w + PW - kw * DW
            reaches = (td % SD == 0) & (th % SH == 0) & (tw % SW == 0)
            idd = td // SD + qd
            ih = th // SH + qh
            iw = tw // SW + qw
        else:
            reaches = True
            idd = od * SD - PD + kd * DD
            ih = oh * SH - PH + kh * DH
            iw = ow * SW - PW + kw * DW
        if reaches:
            in_ok = row_ok & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            x_tap = x_rows + idd.to(tl.int64) * sxd + ih.to(tl.int64) * sxh + iw.to(tl.int64) * sxw
            w_tap = w_group + tap * (C * OC)
            for c0 in range(0, C, BLOCK_K):
                k_ok = (c0 + ks) < C
                a = tl.load(
                    x_tap[:, None] + (c0 + ks)[None, :].to(tl.int64) * sxc,
                    mask=in_ok[:, None] & k_ok[None, :],
                    other=0.0,
                )
                b = tl.load(
                    w_tap + (c0 + ks)[:, None] * OC + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0
                )
                if ROUND_TF32:
                    a = _round_tf32(a)
                    b = _round_tf32(b)
                acc += tl.dot(a, b, input_precision=PRECISION)

    if HAS_BIAS:
        acc += tl.load(Bias + g * OC + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    out = (
        Out
        + n.to(tl.int64)[:, None] * son
        + (g * OC + cols).to(tl.int64)[None, :] * soc
        + (od.to(tl.int64) * sod + oh.to(tl.int64) * soh + ow.to(tl.int64) * sow)[:, None]
    )
    tl.store(out, acc.to(Out.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def per_dim(value: int | Sequence[int], dims: int) -> list[int]:
    """A convolution parameter (one number, or one per spatial dimension) as ``dims`` numbers."""
    vals = [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]
    if len(vals) != dims:
        raise ValueError(f"expected {dims} values, got {vals}")
    return vals


def _triple(value: int | Sequence[int], dims: int, fill: int) -> tuple[int, int, int]:
    """A per-dimension parameter of a ``dims``-D convolution as (depth, height, width)."""
    return tuple([fill] * (3 - dims) + per_dim(value, dims))  # type: ignore[return-value]


def pack_weight(weight: torch.Tensor, groups: int, transposed: bool) -> torch.Tensor:
    """The weight as ``(groups, taps, in-channels of a group, out-channels of a group)``, contiguous.

    ``weight`` is PyTorch's: ``(out, in / groups, *kernel)`` for a convolution, ``(in, out / groups,
    *kernel)`` for a transposed one. Done once per weight (at a module's init), not per call.
    """
    dims = weight.dim() - 2
    w = weight.reshape(*weight.shape[:2], *([1] * (3 - dims)), *weight.shape[2:])  # (a, b, kd, kh, kw)
    a, b, kd, kh, kw = w.shape
    if transposed:  # (groups * in_g, out_g, k...) -> (groups, k..., in_g, out_g)
        w = w.reshape(groups, a // groups, b, kd, kh, kw).permute(0, 3, 4, 5, 1, 2)
    else:  # (groups * out_g, in_g, k...) -> (groups, k..., in_g, out_g)
        w = w.reshape(groups, a // groups, b, kd, kh, kw).permute(0, 3, 4, 5, 2, 1)
    return w.reshape(groups, kd * kh * kw, w.shape[-2], w.shape[-1]).contiguous()


def output_size(size: int, k: int, stride: int, pad: int, dil: int, transposed: bool, output_padding: int = 0) -> int:
    """PyTorch's output extent of one spatial dimension."""
    if transposed:
        return (size - 1) * stride - 2 * pad + dil * (k - 1) + output_padding + 1
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def launch_config(in_per_group: int, out_per_group: int) -> dict[str, int]:
    """Tile sizes and warps (``tl.dot`` needs every tile side to be at least 16)."""
    return {
        "BLOCK_M": 64,
        "BLOCK_N": max(16, min(64, triton.next_power_of_2(out_per_group))),
        "BLOCK_K": max(16, min(32, triton.next_power_of_2(in_per_group))),
        "num_warps": 4,
        "num_stages": 3,
    }


def conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    transposed: bool = False,
    output_padding: int | Sequence[int] = 0,
    precision: str = "ieee",
    activation: str | None = None,
    packed: torch.Tensor | None = None,
    epilogue: list[list[Any]] | None = None,
    vectors: Sequence[torch.Tensor] = (),
) -> torch.Tensor:
    """``F.conv{1,2,3}d`` / ``F.conv_transpose{1,2,3}d`` (then ``activation``) through :func:`ks_conv_fwd`.

    ``x`` is ``(batch, channels, *space)`` with 1 to 3 spatial dimensions and ``weight`` PyTorch's
    layout (see :func:`pack_weight`; pass ``packed`` to reuse a packed weight). ``padding`` is numbers,
    not ``"same"``. The output is contiguous in PyTorch's layout. ``epilogue``: element-wise steps after
    the bias (:func:`epilogue_lines`), whose per-channel operands ``"E<i>"`` are ``vectors[i]``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: one of {', '.join(map(str, ACTIVATIONS))}")
    dims = x.dim() - 2
    if dims not in (1, 2, 3) or weight.dim() != x.dim():
        raise ValueError(f"a 1-D, 2-D or 3-D convolution: input {tuple(x.shape)}, weight {tuple(weight.shape)}")
    s, p, d = (_triple(v, dims, f) for v, f in ((stride, 1), (padding, 0), (dilation, 1)))
    op = _triple(output_padding, dims, 0)
    k = (1,) * (3 - dims) + tuple(weight.shape[2:])
    x5 = x
    for _ in range(3 - dims):  # views: (N, C, W) -> (N, C, 1, 1, W), no copy
        x5 = x5.unsqueeze(2)
    n, c = x5.shape[:2]
    c_g = c // groups
    out_g = weight.shape[1] if transposed else weight.shape[0] // groups
    space = [output_size(x5.shape[2 + i], k[i], s[i], p[i], d[i], transposed, op[i]) for i in range(3)]
    out5 = torch.empty((n, out_g * groups, *space), dtype=x.dtype, device=x.device)
    wp = packed if packed is not None else pack_weight(weight, groups, transposed)
    q = [triton.cdiv(space[i], s[i]) if transposed else space[i] for i in range(3)]
    phases = s[0] * s[1] * s[2] if transposed else 1
    cfg = launch_config(c_g, out_g)
    grid = (triton.cdiv(n * q[0] * q[1] * q[2], cfg["BLOCK_M"]), triton.cdiv(out_g, cfg["BLOCK_N"]), groups * phases)
    fp32 = x.dtype == torch.float32
    from torch.library import wrap_triton  # eager: a plain launch; under torch.compile: a kernel node

    kernel = epilogue_kernel(epilogue, len(vectors)) if epilogue else ks_conv_fwd
    flat = [a for v in vectors for a in (v.reshape(-1).contiguous(), v.numel())] if epilogue else []
    wrap_triton(kernel)[grid](
        x5, wp, bias if bias is not None else wp, out5, *flat,
        n, c_g, *x5.shape[2:],
        *space, out_g,
        *q,
        *x5.stride(),
        *out5.stride(),
        *s, *p, *d,
        KD=k[0], KH=k[1], KW=k[2],
        TRANSPOSED=transposed, HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation],
        PRECISION=("tf32" if precision == "tf32r" else precision) if fp32 else "ieee",
        ROUND_TF32=fp32 and precision == "tf32r",
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out5.reshape(n, out_g * groups, *space[3 - dims :])


def from_module(module: Any, x: torch.Tensor, precision: str = "ieee") -> torch.Tensor:
    """An ``nn.Conv{1,2,3}d`` / ``nn.ConvTranspose{1,2,3}d`` module's forward through :func:`conv`."""
    transposed = "Transpose" in type(module).__name__
    if getattr(module, "padding_mode", "zeros") != "zeros" or isinstance(module.padding, str):
        raise ValueError("only zero padding given as numbers")
    return conv(
        x,
        module.weight,
        module.bias,
        module.stride,
        module.padding,
        module.dilation,
        module.groups,
        transposed=transposed,
        output_padding=module.output_padding if transposed else 0,
        precision=precision,
    )


OP_NAME = "kernelskill::conv"
_OP: Any = None


def _conv_op_body(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    transposed: bool,
    output_padding: list[int],
    precision: str,
    epilogue: str,
    vectors: list[torch.Tensor],
) -> torch.Tensor:
    import json

    steps = json.loads(epilogue) if epilogue else None
    return conv(
        x, weight, bias, stride, padding, dilation, groups, transposed, output_padding, precision,
        epilogue=steps, vectors=vectors,
    )  # fmt: skip


def conv_op() -> Any:
    """``torch.ops.kernelskill.conv`` (registered on first use, once per process).

    A ``torch.library.triton_op``: Inductor traces through it, so a compiler seed captured with it
    carries :func:`ks_conv_fwd`'s source like Inductor's own kernels, and stays standalone.
    """
    global _OP
    if _OP is None:
        ns = torch.ops.kernelskill
        _OP = ns.conv if hasattr(ns, "conv") else torch.library.triton_op(OP_NAME, _conv_op_body, mutates_args=())
    return _OP


def conv_nd(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    precision: str = "ieee",
    epilogue: str = "",
    vectors: Sequence[torch.Tensor] = (),
) -> torch.Tensor:
    """``torch.conv{1,2,3}d``'s signature through our kernel (what a rewritten graph node calls).

    ``epilogue``: JSON of the element-wise steps fused after it (:func:`epilogue_lines`), ``vectors`` their
    per-channel operands.
    """
    dims = input.dim() - 2
    s, p, d = (per_dim(v, dims) for v in (stride, padding, dilation))
    return conv_op()(input, weight, bias, s, p, d, int(groups), False, [0] * dims, precision, epilogue, list(vectors))


def conv_transpose_nd(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    precision: str = "ieee",
    epilogue: str = "",
    vectors: Sequence[torch.Tensor] = (),
) -> torch.Tensor:
    """``torch.conv_transpose{1,2,3}d``'s signature through our kernel (phase decomposition), as :func:`conv_nd`."""
    dims = input.dim() - 2
    s, p, op, d = (per_dim(v, dims) for v in (stride, padding, output_padding, dilation))
    return conv_op()(input, weight, bias, s, p, d, int(groups), True, op, precision, epilogue, list(vectors))


# ---------------------------------------------------------------- epilogues fused from the graph

# one element-wise step after the convolution: (what it computes from ``acc`` and operand ``v``)
UNARY = {
    "relu": "tl.maximum(acc, 0.0)",
    "sigmoid": "tl.sigmoid(acc)",
    "tanh": "2.0 * tl.sigmoid(2.0 * acc) - 1.0",
    "gelu": "0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))",
    "silu": "acc * tl.sigmoid(acc)",
    "hardswish": "acc * tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0",
    "mish": "acc * (2.0 * tl.sigmoid(2.0 * tl.where(acc > 20.0, acc, tl.log(1.0 + tl.exp(acc)))) - 1.0)",
}
BINARY = {"add": "acc + {v}", "sub": "acc - {v}", "rsub": "{v} - acc", "mul": "acc * {v}", "div": "acc / {v}",
          "rdiv": "{v} / acc"}  # fmt: skip


def epilogue_lines(steps: list[list[Any]]) -> list[str]:
    """Kernel lines for ``steps``: ``[op]``, ``[op, scalar]``, ``[op, "E<i>"]`` (a per-channel vector) or a clamp.

    ``["clamp", lo, hi]`` (either may be None) and ``["leaky_relu", slope]`` take numbers.
    """
    lines = []
    for step in steps:
        op, args = step[0], step[1:]
        if op in UNARY:
            lines.append(f"acc = {UNARY[op]}")
        elif op == "leaky_relu":
            lines.append(f"acc = tl.where(acc >= 0.0, acc, acc * {float(args[0])!r})")
        elif op == "clamp":
            lo, hi = args
            if lo is not None:
                lines.append(f"acc = tl.maximum(acc, {float(lo)!r})")
            if hi is not None:
                lines.append(f"acc = tl.minimum(acc, {float(hi)!r})")
        elif op in BINARY:
            (operand,) = args
            if isinstance(operand, str):  # E<i>: one value per output channel (or one for all)
                v = f"v{operand[1:]}"
                lines.append(
                    f"{v} = tl.load({operand} + ((g * OC + cols) % {operand}_n), mask=col_ok, other=0.0)"
                    ".to(tl.float32)[None, :]"
                )
            else:
                v = repr(float(operand))
            lines.append(f"acc = {BINARY[op].format(v=v)}")
        else:
            raise ValueError(f"no epilogue step {op!r}")
    return lines


_EPILOGUE_KERNELS: dict[str, Any] = {}


def epilogue_kernel(steps: list[list[Any]], n_vectors: int) -> Any:
    """:func:`ks_conv_fwd` with ``steps`` applied to the tile after the bias, as its own ``@triton.jit`` kernel.

    The source is generated once per distinct epilogue and imported from a file (Triton and Inductor
    read a kernel's source); per-channel operands are the extra pointer arguments ``E0``, ``E1``, ...
    with their lengths ``E0_n``, ...
    """
    import hashlib
    import importlib.util
    import inspect
    import json
    import tempfile
    from pathlib import Path

    spec = json.dumps([steps, n_vectors])
    key = hashlib.sha256(spec.encode()).hexdigest()[:16]
    if key in _EPILOGUE_KERNELS:
        return _EPILOGUE_KERNELS[key]

    def undecorated(fn: Any) -> str:
        return "".join(line for line in inspect.getsource(fn).splitlines(keepends=True) if not line.startswith("@"))

    src = undecorated(ks_conv_fwd.fn)
    name = f"ks_conv_fwd_ep_{key}"
    src = src.replace("def ks_conv_fwd(", f"def {name}(", 1)
    extra = "".join(f"E{i}, E{i}_n, " for i in range(n_vectors))
    src = src.replace("    X, Wp, Bias, Out,\n", f"    X, Wp, Bias, Out, {extra}\n", 1)
    marker = "    if ACTIVATION == 1:\n"
    body = "".join(f"    {line}\n" for line in epilogue_lines(steps))
    src = src.replace(marker, body + marker, 1)
    helper = undecorated(_round_tf32.fn)
    text = f"import triton\nimport triton.language as tl\n\n\n@triton.jit\n{helper}\n\n@triton.jit\n{src}"
    folder = Path(tempfile.gettempdir()) / "kernelskill-conv-epilogues"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # whole, even with several processes writing it
    mod_spec = importlib.util.spec_from_file_location(name, path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    _EPILOGUE_KERNELS[key] = getattr(module, name)
    return _EPILOGUE_KERNELS[key]
