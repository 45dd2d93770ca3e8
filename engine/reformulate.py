"""Equivalent forms of ops that Inductor hands to a library or covers with a slow template.

Inductor generates Triton kernels (templates) for 2-D and 3-D convolutions with unit dilation; a 1-D
convolution or a transposed one stays a cuDNN call (``extern_kernels.convolution``), so a compiler seed
of such a task is "correct, main work not custom". Before a Triton-template capture, the Dynamo graph
is rewritten into forms Inductor generates Triton kernels for (:func:`triton_forms`):

- ``conv1d`` -> ``conv2d`` over a height-1 view (input ``(N, C, 1, L)``, weight ``(O, I, 1, k)``);
- a dilated ``conv2d`` / ``conv3d`` (the templates take unit dilation only) -> the same convolution
  with a zero-stuffed kernel (``d - 1`` zeros between taps: ``d^2`` / ``d^3`` times the multiply-adds);
- ``conv_transposeNd`` -> a stride-1 convolution of the zero-stuffed input: ``s - 1``
  zeros between neighbours along each dimension of stride ``s``, ``k - 1 - p`` zeros (a crop when
  negative) on each side plus ``output_padding`` at the end, and the weight's in/out channels swapped
  per group and its taps flipped. It does ``s^d`` times the multiply-adds of the transposed
  convolution (3/4 of them on zeros for ``s = 2`` in 2-D): the reviewer times it against the cuDNN
  seed and the record says which is faster;
- a grouped convolution whose reduction is short (input channels per group x kernel taps at most
  :data:`DIRECT_MAX_TERMS`, e.g. a depthwise 3x3 or 7x7) -> a sum of shifted, strided slices of the
  padded input times per-channel weights (:func:`grouped_direct`), which Inductor fuses into one
  elementwise kernel. The convolution template runs a grouped convolution one group at a time with
  output tiles far wider than the group (a depthwise 3x3 of 128 channels on an H200: 193 ms against
  cuDNN's 1.26 ms), and the GEMM forms need one group;
- ``adaptive_avg_pool1d`` / ``adaptive_avg_pool2d``, which Inductor leaves to ATen when a pooling
  window is larger than 5x5 -> a mean over reshaped windows (sizes that divide) or PyTorch's own
  decomposition (uneven, overlapping windows: a masked sum over gathered windows), both lowered by
  Inductor to a reduction kernel (:func:`adaptive_avg_pool_decomposed`);
- ``avg_pool2d`` / ``avg_pool3d`` whose windows overlap and have more than 25 positions (a 3x3x3 window
  with stride 2, say), which Inductor leaves to ATen -> a sum of strided slices of the zero-padded input
  over the window's positions, divided as PyTorch divides (:func:`avg_pool3d_decomposed`; ``ceil_mode``
  off, at most :data:`AVG_POOL_MAX_TERMS` positions a window);
- a 2-D fp32 GEMM (``@``, ``matmul``, ``mm``, ``linear``) with few output tiles and a reduction
  that dwarfs them (:func:`split_k_splits`: a 256 x 256 output over K = 524288, say) -> split-K: one
  batched GEMM of the products over slices of the reduction (views, no copy), then their sum
  (:func:`matmul_split_k`). Inductor's templates run one program per output tile, and its own split
  (``decompose_k``) hands the batched GEMM to cuBLAS.

With ``split`` (the ``dot_precision`` skill's recapture of a compiler seed), every fp32 GEMM
(``@``, ``matmul``, ``mm``, ``bmm``, ``addmm``, ``linear``; im2col GEMMs and the two products of a
``scaled_dot_product_attention`` without dropout too) becomes one GEMM over
three times the reduction: ``[a_lo | a_hi | a_hi] @ [b_hi ; b_lo ; b_hi]``, where ``x_hi`` is ``x``
rounded to the nearest TF32 value and ``x_lo = x - x_hi`` (exact). Captured with TF32 allowed, its
products run on tensor cores at TF32 speed with 3xTF32 accuracy (only ``a_lo * b_lo`` and the
truncation of the low parts are lost), where Triton's ``tf32x3`` splits the tiles inside the loop.

Before the others, linear layers (and matmuls by one right operand) applied to most of the slices of
one tensor along a batch-like dimension, as an unrolled RNN applies its input projection to
``x[:, t]`` at each step, become one product over the whole tensor, sliced afterwards
(:func:`hoist_sliced_products`): one large GEMM instead of one per step, and one Inductor autotune
instead of one per slice (each slice's storage offset makes a new autotuning key).

``nn.TransformerEncoderLayer``'s eval-mode fast path (one ``_transformer_encoder_layer_fwd`` op, which
Inductor leaves to PyTorch) is written out as the layer's ops when it has no mask and a batch-first input
(``engine/flash_attention.encoder_layer``).

With ``flash`` (the ``flash_attention`` skill's recapture), each attention call without masks or dropout
(``scaled_dot_product_attention``; ``nn.MultiheadAttention``'s ``multi_head_attention_forward`` when it
returns no weights; a written-out encoder layer's attention) becomes one fused Triton kernel
(``engine/flash_attention.py``), which Inductor copies into its output module as a user-defined kernel.

A dilated transposed or 1-D convolution gets both rewrites. With ``as_gemm`` (the ``conv_gemm``
skill's recapture), every 2-D convolution of one group (1-D ones lifted, transposed ones stuffed
first) becomes an explicit im2col gather (one copy kernel of ``kh * kw`` times the input) and one
GEMM, so Inductor's matmul template does the math instead of its convolution template. Each form
is exact up to floating-point summation order (tests compare them with PyTorch on the CPU).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Container, Sequence
from typing import Any

import torch
import torch.nn.functional as F

_CONV = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}
_TRANSPOSED = {torch.conv_transpose1d: 1, torch.conv_transpose2d: 2, torch.conv_transpose3d: 3}
_TRANSPOSED_BY_N = {n: f for f, n in _TRANSPOSED.items()}
DIRECT_MAX_TERMS = 64  # a grouped convolution of at most this many (channel, tap) products per output: direct form


def _tuple(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    return (int(value),) * n  # type: ignore[arg-type]


def conv_for_template(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | str = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    as_gemm: bool = False,
    split: bool = False,
) -> torch.Tensor:
    """``torch.conv{1,2,3}d`` (same arguments, same result) with unit dilation, in 2-D or 3-D.

    A grouped one with a short reduction runs as a sum of shifted inputs (:func:`grouped_direct`);
    otherwise dilation becomes a zero-stuffed kernel; a 1-D convolution runs as a ``conv2d`` of
    height 1; ``as_gemm``: a 2-D one of one group runs as im2col + GEMM (:func:`im2col_gemm`).
    """
    n = weight.dim() - 2
    if isinstance(padding, str) or input.dim() != n + 2:
        return _CONV[n](input, weight, bias, stride, padding, dilation, groups)
    if direct_form(weight.shape, groups):
        return grouped_direct(input, weight, bias, stride, padding, dilation, groups)
    weight = _dilate(weight, _tuple(dilation, n))
    if n == 1:
        (s,), (p,) = _tuple(stride, 1), _tuple(padding, 1)
        out = conv_for_template(
            input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), 1, groups, as_gemm, split
        )
        return out.squeeze(2)
    if as_gemm and n == 2 and groups == 1:
        return im2col_gemm(input, weight, bias, _tuple(stride, 2), _tuple(padding, 2), split)
    return _CONV[n](input, weight, bias, stride, padding, 1, groups)


def _both_ends(padding: Sequence[int]) -> list[int]:
    """``F.pad``'s list for ``padding[i]`` at both ends of each of the last ``len(padding)`` dimensions."""
    return [q for i in reversed(range(len(padding))) for q in (padding[i], padding[i])]


def _strided(starts: Sequence[int], stride: Sequence[int], out: Sequence[int]) -> tuple[slice, ...]:
    """The slices that take ``out[i]`` positions ``stride[i]`` apart from ``starts[i]`` along each dimension."""
    return tuple(slice(a, a + stride[i] * (out[i] - 1) + 1, stride[i]) for i, a in enumerate(starts))


def direct_form(weight_shape: Sequence[int], groups: int) -> bool:
    """True for a grouped convolution whose outputs each sum at most :data:`DIRECT_MAX_TERMS` products."""
    return groups > 1 and math.prod(weight_shape[1:]) <= DIRECT_MAX_TERMS


def grouped_direct(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int | Sequence[int],
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    groups: int,
) -> torch.Tensor:
    """``torch.conv{1,2,3}d`` as a sum over (input channel of the group, kernel tap) of weighted input slices.

    Output channel ``j * m + r`` of group ``j`` (``m`` outputs per group) is the sum, over the group's
    input channels ``c`` and taps ``t``, of the padded input's channel ``j * cg + c`` sliced at offset
    ``t * dilation`` with step ``stride``, times ``weight[j * m + r, c, t]``. Every term is elementwise,
    so Inductor fuses the whole sum (and the padding, as masked loads) into one kernel.
    """
    n = weight.dim() - 2
    s, p, d = _tuple(stride, n), _tuple(padding, n), _tuple(dilation, n)
    o, cg, k = weight.shape[0], weight.shape[1], weight.shape[2:]
    m = o // groups
    if any(p):
        input = F.pad(input, _both_ends(p))
    batch, size = input.shape[0], input.shape[2:]
    out = [(size[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(n)]
    x = input.reshape(batch, groups, 1, cg, *size)
    w = weight.reshape(groups, m, cg, *k)
    acc: torch.Tensor | None = None
    every: tuple[slice, ...] = (slice(None),) * 2
    for c in range(cg):
        for tap in itertools.product(*(range(ki) for ki in k)):
            window = _strided([t * d[i] for i, t in enumerate(tap)], s, out)
            x_index: tuple[slice | int, ...] = (*every, slice(None), c, *window)
            w_index: tuple[slice | int, ...] = (*every, c, *tap)
            term = x[x_index] * w[w_index].reshape(1, groups, m, *([1] * n))
            acc = term if acc is None else acc + term
    assert acc is not None
    result = acc.reshape(batch, o, *out)
    return result if bias is None else result + bias.reshape(1, o, *([1] * n))


def adaptive_avg_pool_decomposed(input: torch.Tensor, output_size: Any) -> torch.Tensor:
    """``F.adaptive_avg_pool2d`` (same arguments, same result) in ops that Inductor lowers to its own kernels.

    Sizes that divide evenly: a mean over the windows of a reshaped view; otherwise PyTorch's own
    decomposition of ``aten._adaptive_avg_pool2d`` (a masked sum over gathered, clamped windows).
    """
    from torch._decomp.decompositions import adaptive_avg_pool2d as decomposition

    sizes = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size] * 2
    oh, ow = (input.shape[i - 2] if o is None else int(o) for i, o in enumerate(sizes))
    h, w = input.shape[-2:]
    if h % oh == 0 and w % ow == 0:
        return input.reshape(*input.shape[:-2], oh, h // oh, ow, w // ow).mean(dim=(-3, -1))
    return decomposition(input, (oh, ow))


def adaptive_avg_pool1d_decomposed(input: torch.Tensor, output_size: Any) -> torch.Tensor:
    """``torch.adaptive_avg_pool1d`` as a 2-D adaptive pooling of height 1."""
    size = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    return adaptive_avg_pool_decomposed(input.unsqueeze(-2), (1, size)).squeeze(-2)


AVG_POOL_MAX_TERMS = 125  # an average pooling of at most this many positions a window: a sum of strided slices


def _avg_pool_sum(
    input: torch.Tensor,
    dims: int,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    """``F.avg_pool{dims}d`` (``ceil_mode`` off) as a sum of strided slices of the zero-padded input.

    One slice a window position (``a : a + s * (o - 1) + 1 : s`` along each dimension), added up, then
    divided by the window's size, ``divisor_override``, or without ``count_include_pad`` by the number
    of input (not padding) positions under each window, the same sums over a ones tensor. Inductor fuses
    it into one elementwise kernel. A batch dimension is optional, as in PyTorch.
    """
    if ceil_mode:
        raise ValueError("ceil_mode windows are not decomposed")
    k = _per_dim_static(kernel_size, dims)
    s = _per_dim_static(stride if stride else kernel_size, dims)  # PyTorch's default (None or []): the window
    p = _per_dim_static(padding, dims)
    space = input.shape[-dims:]
    out = [(space[i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(dims)]

    def window_sum(t: torch.Tensor) -> torch.Tensor:
        t = F.pad(t, _both_ends(p))
        total = None
        for start in itertools.product(*(range(n) for n in k)):
            index: tuple[Any, ...] = (..., *_strided(start, s, out))
            part = t[index]
            total = part if total is None else total + part
        assert total is not None
        return total

    total = window_sum(input)
    if divisor_override:
        return total / divisor_override
    if count_include_pad:
        return total / math.prod(k)
    return total / window_sum(torch.ones(space, dtype=input.dtype, device=input.device))


def avg_pool2d_decomposed(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``F.avg_pool2d`` (same arguments, same result; ``ceil_mode`` off) as :func:`_avg_pool_sum`."""
    return _avg_pool_sum(input, 2, *args, **kwargs)


def avg_pool3d_decomposed(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``F.avg_pool3d`` (same arguments, same result; ``ceil_mode`` off) as :func:`_avg_pool_sum`."""
    return _avg_pool_sum(input, 3, *args, **kwargs)


_AVG_POOL_FORMS = {F.avg_pool2d: avg_pool2d_decomposed, F.avg_pool3d: avg_pool3d_decomposed}


def _avg_pool_form(node: Any) -> str:
    """What :func:`triton_forms` makes of an average pooling Inductor leaves to ATen ("" to leave it).

    Inductor lowers one itself (a reduction over the window) unless its window has more than 25
    positions and overlaps the next (a stride other than the window): that one is an ATen call. Taken:
    such a pooling with static arguments, at most :data:`AVG_POOL_MAX_TERMS` positions a window,
    ``ceil_mode`` off.
    """
    if node.target not in _AVG_POOL_FORMS or _static_arg(node, 4, "ceil_mode", False) is not False:
        return ""
    dims = _AVG_POOLS[node.target]
    try:  # static arguments only
        window = _per_dim_static(_static_arg(node, 1, "kernel_size", None), dims)
        stride = _per_dim_static(_static_arg(node, 2, "stride", None) or window, dims)
        _per_dim_static(_static_arg(node, 3, "padding", 0), dims)
    except (TypeError, ValueError):
        return ""
    size = math.prod(window)
    if not 25 < size <= AVG_POOL_MAX_TERMS or stride == window:
        return ""
    return f"avg_pool{dims}d -> sum of strided slices ({size} a window)"


def split_tf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hi, lo)``: fp32 ``x`` rounded to the nearest TF32 value (ties away from zero), and ``x - hi``.

    ``hi`` has TF32's 10 mantissa bits, so a TF32 product takes it unchanged; ``lo`` is exact in fp32.
    Infinities and NaNs stay in ``hi`` (``lo`` 0); a finite value that would round up to infinity is
    truncated instead, so that ``hi + lo == x`` holds for every finite ``x``.
    """
    bits = x.view(torch.int32)
    special = (bits & 0x7F800000) == 0x7F800000
    rounded = (bits + 0x1000) & -0x2000
    rounded = torch.where((rounded & 0x7F800000) == 0x7F800000, bits & -0x2000, rounded)
    hi = torch.where(special, bits, rounded).view(torch.float32)
    return hi, torch.where(special, torch.zeros_like(x), x - hi)


def matmul_3xtf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for fp32 matrices (or batches) as one GEMM over ``[a_lo | a_hi | a_hi] @ [b_hi ; b_lo ; b_hi]``.

    The small products come first in the reduction, so the large ones are added to their sum.
    Other dtypes and vectors are left to ``torch.matmul``.
    """
    if a.dtype != torch.float32 or b.dtype != torch.float32 or a.dim() < 2 or b.dim() < 2:
        return torch.matmul(a, b)
    a_hi, a_lo = split_tf32(a)
    b_hi, b_lo = split_tf32(b)
    return torch.matmul(torch.cat([a_lo, a_hi, a_hi], -1), torch.cat([b_hi, b_lo, b_hi], -2))


def linear_3xtf32(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` through :func:`matmul_3xtf32`."""
    out = matmul_3xtf32(input, weight.t())
    return out if bias is None else out + bias


def addmm_3xtf32(
    input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> torch.Tensor:
    """``torch.addmm`` through :func:`matmul_3xtf32`."""
    out = matmul_3xtf32(mat1, mat2)
    out = out if alpha == 1 else out * alpha
    return out + (input if beta == 1 else input * beta)


def sdpa_3xtf32(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` without dropout, its two products through :func:`matmul_3xtf32`.

    PyTorch's reference formula: ``softmax(q @ k^T * scale + mask) @ v``, a causal mask aligned to the
    top left, a boolean mask keeping where it is True, a float mask added; with ``enable_gqa`` the key
    and value heads repeated to the query's.
    """
    if dropout_p:
        raise ValueError("sdpa_3xtf32 has no dropout (the rewrite skips calls that may drop out)")
    length, source = query.shape[-2], key.shape[-2]
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], -3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], -3)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = matmul_3xtf32(query, key.transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return matmul_3xtf32(torch.softmax(scores, dim=-1), value)


SPLIT_K_MIN_K = 4096  # a GEMM whose reduction is shorter than this, or than 8x its longer output side, is left
SPLIT_K_TILE = 128  # the output tile a GEMM template typically takes
SPLIT_K_FEW_TILES = 64  # a GEMM with at least this many such tiles fills the GPU without splitting
SPLIT_K_TARGET = 256  # split until tiles x splits reaches this (about two waves of programs on 132 SMs)
SPLIT_K_MIN_CHUNK = 1024  # and each split keeps at least this much of the reduction


def split_k_splits(m: int, n: int, k: int) -> int:
    """How many slices of the reduction an ``(m, k) @ (k, n)`` GEMM is split into (1: not split).

    Only a GEMM with few output tiles and a reduction that dwarfs them is split (a Triton template runs
    one program per output tile, so a 256 x 256 output with K = 524288 would keep 4 of 132 SMs busy
    along the whole reduction); the number of splits is a power of two that divides ``k``.
    """
    tiles = math.ceil(m / SPLIT_K_TILE) * math.ceil(n / SPLIT_K_TILE)
    if k < SPLIT_K_MIN_K or k < 8 * max(m, n) or tiles >= SPLIT_K_FEW_TILES:
        return 1
    splits = 1
    while splits * tiles < SPLIT_K_TARGET and k % (2 * splits) == 0 and k // (2 * splits) >= SPLIT_K_MIN_CHUNK:
        splits *= 2
    return splits


def matmul_split_k(a: torch.Tensor, b: torch.Tensor, splits: int) -> torch.Tensor:
    """``a @ b`` for 2-D ``a (m, k)``, ``b (k, n)`` as ``splits`` partial products over slices of ``k``, summed.

    The slices are views (no copy): one batched GEMM of ``splits`` products, then a reduction.
    """
    m, k = a.shape
    part = torch.bmm(a.reshape(m, splits, k // splits).transpose(0, 1), b.reshape(splits, k // splits, b.shape[1]))
    return part.sum(0)


def linear_split_k(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, splits: int) -> torch.Tensor:
    """``F.linear`` of a 2-D input through :func:`matmul_split_k` (the weight's transpose splits into views too)."""
    out = matmul_split_k(input, weight.t(), splits)
    return out if bias is None else out + bias


_SPLIT_K_GEMMS = (operator.matmul, torch.matmul, torch.mm, torch._C._nn.linear)


def _split_k_form(node: Any) -> tuple[Any, tuple, str] | None:
    """``(function, args, what)`` for a split-K rewrite of a 2-D fp32 GEMM node, or None to leave it.

    Other dtypes are left: half-precision partial sums would lose accuracy, and Inductor's GEMM templates
    take no fp64 (its batched GEMM would be cuBLAS's too).
    """
    if node.kwargs or len(node.args) < 2:
        return None
    a, b = (getattr(arg, "meta", {}).get("example_value") for arg in node.args[:2])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim() == 2):
        return None
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        return None
    linear = node.target is torch._C._nn.linear
    (m, k), n = a.shape, b.shape[0] if linear else b.shape[1]
    if (b.shape[1] if linear else b.shape[0]) != k:
        return None
    splits = split_k_splits(int(m), int(n), int(k))
    if splits < 2:
        return None
    what = f"GEMM ({m} x {k}) by ({k} x {n}) -> {splits} split-K partial products (one bmm) and their sum"
    if linear:
        return linear_split_k, (*node.args[:2], node.args[2] if len(node.args) > 2 else None, splits), what
    return matmul_split_k, (*node.args[:2], splits), what


_SPLIT_GEMMS = {
    operator.matmul: matmul_3xtf32,
    torch.matmul: matmul_3xtf32,
    torch.mm: matmul_3xtf32,
    torch.bmm: matmul_3xtf32,
    torch._C._nn.linear: linear_3xtf32,
    torch.addmm: addmm_3xtf32,
}


def im2col_gemm(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    split: bool = False,
) -> torch.Tensor:
    """A one-group ``conv2d`` with unit dilation as an explicit im2col gather and one GEMM.

    The columns are a strided view of the padded input (``Tensor.unfold``) copied once into
    ``(N * OH * OW, C * KH * KW)``; the product with the ``(C * KH * KW, O)`` weight is returned
    as an ``(N, O, OH, OW)`` view of the ``(N, OH, OW, O)`` result.
    """
    (sh, sw), (ph, pw) = stride, padding
    o, c, kh, kw = weight.shape
    x = F.pad(input, (pw, pw, ph, ph)) if ph or pw else input
    patches = x.unfold(2, kh, sh).unfold(3, kw, sw)  # (N, C, OH, OW, KH, KW), a view
    n, _, oh, ow = patches.shape[:4]
    cols = patches.permute(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    w = weight.reshape(o, c * kh * kw).t()
    out = matmul_3xtf32(cols, w) if split else cols @ w
    if bias is not None:
        out = out + bias
    return out.view(n, oh, ow, o).permute(0, 3, 1, 2)


def _dilate(weight: torch.Tensor, d: Sequence[int]) -> torch.Tensor:
    """A kernel with ``d - 1`` zeros between its taps along each spatial dimension."""
    for i, di in enumerate(d):
        weight = _stuff(weight, 2 + i, di)
    return weight


def _stuff(x: torch.Tensor, dim: int, s: int) -> torch.Tensor:
    """``s - 1`` zeros between neighbours along ``dim`` (length L -> (L - 1) * s + 1)."""
    if s == 1:
        return x
    length = x.shape[dim]
    x = x.unsqueeze(dim + 1)
    zeros = x.new_zeros(*x.shape[: dim + 1], s - 1, *x.shape[dim + 2 :])
    x = torch.cat([x, zeros], dim=dim + 1).flatten(dim, dim + 1)
    return x.narrow(dim, 0, (length - 1) * s + 1)


def conv_transpose_as_conv(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    output_padding: int | Sequence[int] = 0,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
    as_gemm: bool = False,
    split: bool = False,
) -> torch.Tensor:
    """``torch.conv_transpose{1,2,3}d`` computed as a stride-1 convolution of the zero-stuffed input."""
    n = weight.dim() - 2
    s, p, op, d = (_tuple(v, n) for v in (stride, padding, output_padding, dilation))
    if input.dim() != n + 2:
        return _TRANSPOSED_BY_N[n](input, weight, bias, stride, padding, output_padding, groups, dilation)
    weight = _dilate(weight, d)
    k = weight.shape[2:]
    x = input
    for i in range(n):
        x = _stuff(x, 2 + i, s[i])
    pads: list[int] = []
    for i in reversed(range(n)):  # F.pad lists the last dimension first
        pads += [k[i] - 1 - p[i], k[i] - 1 - p[i] + op[i]]
    x = F.pad(x, pads)
    c_in, c_out_g = weight.shape[0], weight.shape[1]
    w = (
        weight.reshape(groups, c_in // groups, c_out_g, *k)
        .transpose(1, 2)
        .reshape(groups * c_out_g, c_in // groups, *k)
    )
    w = w.flip(list(range(2, 2 + n)))
    return conv_for_template(x, w, bias, 1, 0, 1, groups, as_gemm, split)


def _static_arg(node: Any, index: int, name: str, default: Any) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _weight_shape(node: Any) -> tuple[int, ...] | None:
    """The static shape of a convolution node's weight (Dynamo's example value), when known."""
    value = node.args[1].meta.get("example_value") if len(node.args) > 1 and hasattr(node.args[1], "meta") else None
    try:
        return tuple(int(v) for v in value.shape) if value is not None else None
    except TypeError:  # symbolic sizes
        return None


def _numeric_padding(node: Any) -> bool:
    """Make a forward convolution's string padding numbers, in place; False where it stays a string.

    ``"valid"`` is 0, ``"same"`` half of each dimension's ``dilation * (kernel - 1)`` at both ends; where that
    total is odd, PyTorch pads one more at the end, which becomes the node's ``pad_end`` (:func:`.conv.conv_nd`'s:
    the node must then call that). Left alone: a weight whose shape is not static.
    """
    padding = _static_arg(node, 4, "padding", 0)
    if not isinstance(padding, str):
        return True
    shape = _weight_shape(node)
    if padding not in ("same", "valid") or shape is None:
        return False
    taps = shape[2:]
    dilation = _tuple(_static_arg(node, 5, "dilation", 1), len(taps))
    totals = [d * (k - 1) if padding == "same" else 0 for d, k in zip(dilation, taps, strict=True)]
    numbers = tuple(t // 2 for t in totals)
    if len(node.args) > 4:
        node.args = (*node.args[:4], numbers, *node.args[5:])
    else:
        node.kwargs = {**node.kwargs, "padding": numbers}
    if any(t % 2 for t in totals):
        node.kwargs = {**node.kwargs, "pad_end": tuple(t % 2 for t in totals)}
    return True


def _stencil(shape: tuple[int, ...], transposed: bool) -> bool:
    """Whether a convolution of this weight shape runs the depthwise stencil, not the implicit GEMM.

    The stencil (:func:`.conv.ks_conv_depthwise`) takes a forward convolution of one input channel per group.
    """
    return not transposed and shape[1] == 1


def _direct_products(node: Any) -> int:
    """Products per output of a convolution node run in the direct form (static shape and groups), else 0."""
    groups, shape = _static_arg(node, 6, "groups", 1), _weight_shape(node)
    if isinstance(groups, int) and shape is not None and direct_form(shape, groups):
        return math.prod(shape[1:])
    return 0


def _conv_form(node: Any, as_gemm: bool, products: int) -> str:
    """What rewriting convolution ``node`` into :func:`conv_for_template` does ('' for nothing).

    ``products``: :func:`_direct_products` of the node. A ``conv1d`` is always rewritten.
    """
    name, groups = node.target.__name__, _static_arg(node, 6, "groups", 1)
    if products:
        return f"grouped {name} -> sum of shifted inputs ({products} products per output)"
    if node.target is torch.conv1d:
        return "conv1d -> conv2d"
    what = ""
    dilation = _static_arg(node, 5, "dilation", 1)
    if isinstance(dilation, (int, tuple, list)) and any(int(d) > 1 for d in _tuple(dilation, 1)):
        what = f"dilated {name} -> dense kernel with zeros between taps"
    if as_gemm and node.target is torch.conv2d and groups == 1:
        what = f"{what}; " if what else ""
        what += "conv2d -> im2col + GEMM"
    return what


_SLICED_PRODUCTS = {torch._C._nn.linear: "linear", operator.matmul: "matmul", torch.matmul: "matmul"}


def _slice_of(node: Any) -> tuple[Any, int, tuple] | None:
    """``(tensor, dim, index)`` when ``node`` is ``tensor[:, ..., :, i]`` (full slices, then one int), else None."""
    if getattr(node, "op", None) != "call_function" or node.target is not operator.getitem:
        return None
    base, index = node.args[0], node.args[1]
    index = index if isinstance(index, tuple) else (index,)
    dim = next((k for k, item in enumerate(index) if item != slice(None)), len(index))
    if dim != len(index) - 1 or not isinstance(index[-1], int) or isinstance(index[-1], bool):
        return None
    return base, dim, index


def hoist_sliced_products(gm: Any) -> list[str]:
    """One product over the whole tensor for products by one operand of most of its slices (see module doc).

    A group is the ``linear(x[..., i], W, b)`` calls (or ``x[..., i] @ W``) sharing ``x``, the sliced
    dimension and the other operands; the dimension must not be the contracted (last) one, and the
    group must cover at least half of its length (at least two slices), so that the whole product
    does no more than twice the work. Rewrites in place; returns what was rewritten.
    """
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    groups: dict[tuple, list[tuple[Any, tuple]]] = defaultdict(list)
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SLICED_PRODUCTS or node.kwargs:
            continue
        sliced = _slice_of(node.args[0])
        if sliced is None:
            continue
        base, dim, index = sliced
        value = getattr(base, "meta", {}).get("example_value")
        if value is None or dim >= value.dim() - 1:
            continue
        key = (_SLICED_PRODUCTS[node.target], base, dim, *node.args[1:])
        groups[key].append((node, index))
    done: list[str] = []
    for (name, base, dim, *others), members in groups.items():
        length = base.meta["example_value"].shape[dim]
        if len(members) < 2 or 2 * len(members) < length:
            continue
        members.sort(key=lambda m: order[m[0]])
        target = torch._C._nn.linear if name == "linear" else torch.matmul
        with gm.graph.inserting_before(members[0][0]):
            whole = gm.graph.call_function(target, (base, *others))
        for node, index in members:
            with gm.graph.inserting_before(node):
                part = gm.graph.call_function(operator.getitem, (whole, index))
            node.replace_all_uses_with(part)
            sliced = node.args[0]
            gm.graph.erase_node(node)
            if not sliced.users:  # the slice fed only this product (only such nodes are removed)
                gm.graph.erase_node(sliced)
        done.append(f"{len(members)} {name} calls on slices of one tensor -> one {name} over the whole tensor")
    if done:
        gm.recompile()
    return done


def flash_eligible(gm: Any) -> int:
    """How many attention calls of a Dynamo graph the fused kernel can take.

    The calls: ``scaled_dot_product_attention`` and ``nn.MultiheadAttention``'s ``multi_head_attention_forward``.
    """
    from .flash_attention import sdpa_node_eligible

    nodes = (n for n in gm.graph.nodes if n.op == "call_function")
    return sum(sdpa_node_eligible(n, _static_arg) is None for n in nodes)


def _sample_of_2_31(*values: Any) -> bool:
    """Whether one sample of a convolution's input or output has 2**31 elements or more.

    The kernel's per-sample strides are then Python ints of 2**31 or more, which Inductor's codegen of a
    Triton kernel node cannot take (it fails in ``signature_of``); such a convolution stays where it was.
    """
    return any(isinstance(v, torch.Tensor) and v.dim() > 1 and math.prod(v.shape[1:]) >= 2**31 for v in values)


def conv_kernel_forms(gm: Any, precision: str, fuse: bool = True) -> list[str]:
    """Every convolution of a Dynamo graph (forward or transposed, 1-D to 3-D) onto our kernel (``engine/conv.py``).

    In place; returns what was rewritten. A string padding becomes numbers (:func:`_numeric_padding`; an uneven
    ``"same"`` one more at the end); a call whose input is not a floating tensor, or one of whose samples has 2**31
    elements (:func:`_sample_of_2_31`), is left alone.
    ``precision``: the kernel's products for fp32 inputs. ``fuse``: the element-wise steps that follow a
    convolution, with numbers, per-channel tensors or values computed before them as operands and the convolution's
    shape and dtype (:func:`epilogue_step`; a chain, or a graph whose values are read more than once,
    :func:`_epilogue_dag`, as long as only its last value is read outside it), are computed in the kernel before its
    store (the graph loses those nodes); then a step over the output channels (:func:`_channel_step`: min, max, sum,
    mean, logsumexp, softmax) and the steps after it, and a pooling whose window is its stride
    (:func:`_window_pool`) and the steps after it, in either order; then a mean over every spatial dimension
    (:func:`_spatial_mean`), reduced in the kernel, which then stores only that mean; or, in its place, a
    normalization with batch, group or instance statistics (:func:`_normalization`), whose sums the kernel adds up
    as it stores (``conv.normalized`` then normalizes, in PyTorch ops the compiler fuses with what follows).
    """
    import json

    from .conv import conv_nd, conv_transpose_nd, normalized

    done = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (torch.conv1d, torch.conv2d, torch.conv3d, *_TRANSPOSED):
            continue
        value = node.args[0].meta.get("example_value") if hasattr(node.args[0], "meta") else None
        if value is None or not value.is_floating_point() or _sample_of_2_31(value, node.meta.get("example_value")):
            continue
        if not _numeric_padding(node):  # last: it changes the node in place
            continue
        transposed = node.target in _TRANSPOSED
        name = getattr(node.target, "__name__", "conv")
        node.target = conv_transpose_nd if transposed else conv_nd
        node.kwargs = {**node.kwargs, "precision": precision}
        steps, vectors, chain = _epilogue_chain(node) if fuse else ([], [], [node])
        across = _take_channel_step(node, steps, vectors, chain, transposed) if fuse else None
        squeeze = across is not None and not across[2]
        pool = _window_pool(chain[-1], node, transposed) if fuse and not squeeze else None
        if pool is not None:  # the pooling, then the steps after it, on the pooled output
            steps.append(pool[0])
            chain.append(pool[1])
            _epilogue_chain(pool[1], steps, vectors, chain)
            if across is None:  # a step over the channels may come after the pooling too
                across = _take_channel_step(node, steps, vectors, chain, transposed)
                squeeze = across is not None and not across[2]
        reduced = across is not None and across[0][1] != "softmax"
        norm = _normalization(chain[-1], node, transposed) if fuse and not reduced and not squeeze else None
        keepdim = _spatial_mean(chain[-1]) if fuse and not reduced and norm is None else None
        shape = _weight_shape(node)
        stencil = shape is not None and _stencil(shape, transposed)
        what = f"{name} -> our {'depthwise stencil' if stencil else 'implicit-GEMM'} Triton kernel ({precision})"
        if steps or keepdim is not None or norm is not None:
            extra: dict[str, Any] = {"epilogue": json.dumps(steps), "vectors": vectors} if steps else {}
            if keepdim is not None:  # the mean is reduced in the kernel: the convolution's output is never stored
                chain.append(next(iter(chain[-1].users)))
                extra |= {"reduce": "mean", "keepdim": keepdim}
            stored = chain[-1]
            if norm is not None:
                chain.append(norm[1])
            last = chain[-1]
            if steps:
                extra["vectors"] = _vector_nodes(gm, vectors, last)
            with gm.graph.inserting_before(last):
                if norm is not None:  # the output and its sums; then the normalization, in PyTorch ops
                    pair = gm.graph.call_function(node.target, node.args, {**node.kwargs, **extra, "stats": True})
                    fused = gm.graph.call_function(operator.getitem, (pair, 0))
                    sums = gm.graph.call_function(operator.getitem, (pair, 1))
                    normed = gm.graph.call_function(normalized, (fused, sums), norm[0])
                    fused.meta = dict(stored.meta)
                    normed.meta = dict(last.meta)
                else:
                    fused = gm.graph.call_function(node.target, node.args, {**node.kwargs, **extra})
                    fused.meta = dict(last.meta)
            result = normed if norm is not None else fused
            if squeeze:  # the kernel keeps the reduced channel dimension; the graph's result did not
                value = last.meta.get("example_value")
                fused.meta["example_value"] = value.unsqueeze(1) if isinstance(value, torch.Tensor) else value
                with gm.graph.inserting_before(last):
                    result = gm.graph.call_method("squeeze", (fused, 1))
                result.meta = dict(last.meta)
            last.replace_all_uses_with(result)
            for old in reversed(chain):
                gm.graph.erase_node(old)
            if steps:
                names = (
                    f"{s[1]}_pool{len(s[2])}d {'x'.join(map(str, s[2]))}" if s[0] == "pool"
                    else f"{s[1]} over the channels" if s[0] == "channels"
                    else "batch_norm (eval)" if s[0] == "affine" else s[0]
                    for s in steps if s[0] not in ("save", "load")
                )  # fmt: skip
                what += f", with {' / '.join(names)} fused before its store"
            if keepdim is not None:
                what += ", its spatial mean reduced in the kernel (the output is never stored)"
            if norm is not None:
                what += f", {norm[2]}'s statistics summed in the kernel as it stores"
        done.append(what)
    if done:
        gm.recompile()
    return done


_UNARY_STEPS = {
    torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh",
    F.tanh: "tanh", F.silu: "silu", F.hardswish: "hardswish", F.mish: "mish", F.hardsigmoid: "hardsigmoid",
    F.selu: "selu", torch.selu: "selu", F.logsigmoid: "logsigmoid", F.softsign: "softsign", torch.exp: "exp",
    torch.log: "log", torch.sqrt: "sqrt", torch.abs: "abs", torch.neg: "neg", operator.neg: "neg",
    torch.square: "square",
}  # fmt: skip
_POWERS = {2: "square", 3: "cube", 0.5: "sqrt"}  # x ** p as one step
_BINARY_STEPS = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub",
    operator.mul: "mul", torch.mul: "mul", operator.truediv: "div", torch.div: "div",
    torch.minimum: "minimum", torch.maximum: "maximum", torch.min: "minimum", torch.max: "maximum",
    torch.multiply: "mul", torch.subtract: "sub", torch.divide: "div", torch.true_divide: "div",
}  # fmt: skip
_METHOD_STEPS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "add": "add", "sub": "sub", "mul": "mul",
                 "div": "div", "clamp": "clamp", "minimum": "minimum", "maximum": "maximum", "exp": "exp",
                 "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg", "square": "square",
                 "pow": "pow", "multiply": "mul", "subtract": "sub", "divide": "div", "true_divide": "div"}  # fmt: skip


def _per_channel(value: Any, out: Any) -> bool:
    """``value`` broadcasts over ``out`` (N, C, *space) with at most one value per channel."""
    if not isinstance(value, torch.Tensor) or value.dim() > out.dim():
        return False
    shape = [1] * (out.dim() - value.dim()) + list(value.shape)
    return all(s == 1 for i, s in enumerate(shape) if i != 1) and shape[1] in (1, out.shape[1])


def epilogue_step(
    user: Any, cur: Any, out: Any, n_vectors: int, inside: Container[Any] = ()
) -> tuple[list[Any], Any] | None:
    """The kernel's step for FX node ``user`` applied to ``cur`` (and its per-channel operand node), or None.

    ``out``: the convolution's output (example value). Steps: see ``engine/conv.py: epilogue_lines``.
    ``inside``: nodes whose values the kernel holds (the fused steps so far): a binary step's operand
    among them is returned as that node itself, in place of a number or ``"E<i>"``.
    """
    args, kwargs = list(user.args), dict(user.kwargs)
    if user.op == "call_method":
        op = _METHOD_STEPS.get(user.target)
        if op is None or not args or args[0] is not cur:
            return None
        target_kind, rest = op, args[1:]
    elif user.op == "call_function" and user.target in _UNARY_STEPS:
        inplace = args[1] if len(args) == 2 else kwargs.get("inplace", False)  # nn.Hardswish passes it by position
        if not args or args[0] is not cur or inplace is not False or len(args) > 2 or set(kwargs) - {"inplace"}:
            return None
        return [_UNARY_STEPS[user.target]], None
    elif user.op == "call_function" and user.target is F.gelu:
        approximate = args[1] if len(args) == 2 else kwargs.get("approximate", "none")
        ok = args and args[0] is cur and len(args) <= 2 and approximate in ("none", "tanh")
        return ([{"none": "gelu", "tanh": "gelu_tanh"}[approximate]], None) if ok else None
    elif user.op == "call_function" and user.target is F.relu6:
        ok = args and args[0] is cur and len(args) == 1 and not kwargs.get("inplace")
        return (["clamp", 0.0, 6.0], None) if ok else None
    elif user.op == "call_function" and user.target in (F.elu, F.celu, F.softplus):
        params = ["input", "beta", "threshold"] if user.target is F.softplus else ["input", "alpha", "inplace"]
        given = _bound(user, params)
        if given is None or given.get("input") is not cur or given.get("inplace"):
            return None
        if user.target is F.softplus:
            beta, threshold = given.get("beta", 1.0), given.get("threshold", 20.0)
            ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (beta, threshold)) and beta
            return (["softplus", float(beta), float(threshold)], None) if ok else None
        alpha = given.get("alpha", 1.0)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or (user.target is F.celu and not alpha):
            return None
        return ["elu" if user.target is F.elu else "celu", float(alpha)], None
    elif user.op == "call_function" and user.target is F.batch_norm:  # eval mode: a per-channel affine map
        return _batch_norm_affine(user, cur, n_vectors)
    elif user.op == "call_function" and user.target in (torch.pow, operator.pow):
        ok = len(args) == 2 and args[0] is cur and not kwargs and args[1] in _POWERS and not isinstance(args[1], bool)
        return ([_POWERS[args[1]]], None) if ok else None
    elif user.op == "call_function" and user.target is F.leaky_relu:
        slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
        ok = args and args[0] is cur and isinstance(slope, (int, float)) and not kwargs.get("inplace")
        return (["leaky_relu", float(slope)], None) if ok else None
    elif user.op == "call_function" and user.target in (F.hardtanh, torch.clamp):
        if not args or args[0] is not cur or kwargs.get("inplace"):
            return None
        target_kind, rest = ("hardtanh" if user.target is F.hardtanh else "clamp"), args[1:]
    elif user.op == "call_function" and user.target in _BINARY_STEPS:
        target_kind, rest = _BINARY_STEPS[user.target], args
    else:
        return None
    if target_kind in ("clamp", "hardtanh"):
        default = (-1.0, 1.0) if target_kind == "hardtanh" else (None, None)
        names = ("min_val", "max_val") if target_kind == "hardtanh" else ("min", "max")
        lo = rest[0] if rest else kwargs.get(names[0], default[0])
        hi = rest[1] if len(rest) > 1 else kwargs.get(names[1], default[1])
        if not all(v is None or isinstance(v, (int, float)) for v in (lo, hi)):
            return None
        return ["clamp", lo, hi], None
    if target_kind == "pow":  # x.pow(p)
        ok = len(rest) == 1 and not kwargs and rest[0] in _POWERS and not isinstance(rest[0], bool)
        return ([_POWERS[rest[0]]], None) if ok else None
    if target_kind in _UNARY_STEPS.values():
        return ([target_kind], None) if not rest and not kwargs else None
    # a binary step: cur and one operand (a number, or a per-channel tensor node), no alpha / rounding mode
    if kwargs or len(args) != 2 or (args[0] is not cur and args[1] is not cur):
        return None
    if args[0] is cur and args[1] is cur:
        return ([target_kind, cur], None) if cur in inside else None
    other, first = (args[1], True) if args[0] is cur else (args[0], False)
    symmetric = ("add", "mul", "minimum", "maximum")
    op = target_kind if first or target_kind in symmetric else {"sub": "rsub", "div": "rdiv"}[target_kind]
    if user.target in (torch.min, torch.max) and not hasattr(other, "meta"):
        return None  # torch.min(x, 1): a dimension, not an operand
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return [op, float(other)], None
    if hasattr(other, "meta") and other in inside:  # a value the kernel already holds
        return [op, other], None
    value = other.meta.get("example_value") if hasattr(other, "meta") else None
    if _per_channel(value, out):
        return [op, f"E{n_vectors}"], other
    return None


def _bound(user: Any, names: list[str]) -> dict[str, Any] | None:
    """``user``'s arguments by parameter name (``names``, in order), or None when they do not fit them."""
    args, kwargs = user.args, user.kwargs
    if len(args) > len(names) or set(kwargs) - set(names):
        return None
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _batch_norm_affine(user: Any, cur: Any, n_vectors: int) -> tuple[list[Any], Any] | None:
    """An eval-mode ``batch_norm`` of ``cur`` as ``["affine", "E<i>", "E<i+1>"]`` (``acc * scale + shift``).

    Its two vectors are a recipe, ``("batch_norm_affine", running_mean, running_var, weight, bias, eps)``:
    :func:`_vector_nodes` adds the nodes that compute them (``conv.batch_norm_affine``) once the fusion
    is decided, so looking at a node changes nothing.
    """
    given = _bound(user, _NORMS[F.batch_norm])
    if given is None:
        return None
    eps, running = given.get("eps", 1e-5), [given.get("running_mean"), given.get("running_var")]
    params = [given.get("weight"), given.get("bias")]
    if given.get("input") is not cur or given.get("training", False) is not False or not isinstance(eps, (int, float)):
        return None
    if not all(isinstance(v, torch.fx.Node) for v in running) or not all(
        v is None or isinstance(v, torch.fx.Node) for v in params
    ):
        return None
    recipe = ("batch_norm_affine", *running, *params, float(eps))
    return ["affine", f"E{n_vectors}", f"E{n_vectors + 1}"], [(recipe, 0), (recipe, 1)]


def _vector_nodes(gm: Any, vectors: list[Any], before: Any) -> list[Any]:
    """``vectors`` as graph nodes: a recipe (:func:`_batch_norm_affine`) becomes the nodes that compute it."""
    from .conv import batch_norm_affine

    made: dict[Any, Any] = {}
    out = []
    for vector in vectors:
        if isinstance(vector, tuple):
            recipe, index = vector
            if recipe not in made:
                with gm.graph.inserting_before(before):
                    made[recipe] = gm.graph.call_function(batch_norm_affine, recipe[1:])
            with gm.graph.inserting_before(before):
                vector = gm.graph.call_function(operator.getitem, (made[recipe], index))
        out.append(vector)
    return out


def _dim_list(dim: Any) -> list[Any] | None:
    """A reduction's ``dim`` argument (one int, or a list or tuple of them) as a list; None otherwise."""
    if isinstance(dim, int) and not isinstance(dim, bool):
        return [dim]
    return list(dim) if isinstance(dim, (list, tuple)) else None


_MEAN_POOLS = (F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)


def _spatial_mean(node: Any) -> bool | None:
    """``keepdim`` when ``node``'s only user is its mean over every spatial dimension, else None.

    Taken: ``torch.mean`` / ``Tensor.mean`` over exactly the dimensions after the channels (no
    ``dtype``), and adaptive average poolings to one position per dimension.
    """
    out = node.meta.get("example_value")
    if len(node.users) != 1 or not isinstance(out, torch.Tensor) or out.dim() < 3:
        return None
    user = next(iter(node.users))
    args, kwargs = list(user.args), dict(user.kwargs)
    if not args or args[0] is not node:
        return None
    if user.op == "call_function" and user.target in _MEAN_POOLS:
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        sizes = [size] if isinstance(size, int) else list(size) if isinstance(size, (list, tuple)) else []
        return True if sizes and all(v == 1 for v in sizes) else None
    is_mean = (user.op == "call_function" and user.target is torch.mean) or (
        user.op == "call_method" and user.target == "mean"
    )
    if not is_mean or kwargs.get("dtype") is not None or len(args) > 3:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dims = _dim_list(dim)
    if dims is None or not all(isinstance(d, int) for d in dims) or not isinstance(keepdim, bool):
        return None
    spatial = {d % out.dim() for d in dims}
    return keepdim if spatial == set(range(2, out.dim())) and len(dims) == len(spatial) else None


_MAX_POOLS: dict[Any, int] = {F.max_pool1d: 1, F.max_pool2d: 2, F.max_pool3d: 3}
_AVG_POOLS: dict[Any, int] = {F.avg_pool1d: 1, F.avg_pool2d: 2, F.avg_pool3d: 3}


def _window_pool(node: Any, conv_node: Any, transposed: bool) -> tuple[list[Any], Any] | None:
    """The kernel's pooling step for ``node``'s only user and that user, when the kernel can fuse it, else None.

    Taken: max and average poolings whose stride is their window, without padding, dilation, ``ceil_mode``,
    indices or a divisor override, where :func:`.conv.pool_fusable` allows the window (a power of two,
    not across a strided transposed convolution's phases, not after a depthwise stencil).
    """
    from .conv import pool_fusable

    out = node.meta.get("example_value")
    if len(node.users) != 1 or not isinstance(out, torch.Tensor) or out.dim() < 3:
        return None
    user = next(iter(node.users))
    kind = "max" if user.target in _MAX_POOLS else "avg" if user.target in _AVG_POOLS else None
    dims = out.dim() - 2
    if user.op != "call_function" or kind is None or {**_MAX_POOLS, **_AVG_POOLS}[user.target] != dims:
        return None
    names = ["input", "kernel_size", "stride", "padding"]
    names += ["dilation", "ceil_mode", "return_indices"] if kind == "max" else ["ceil_mode", "count_include_pad",
                                                                                 "divisor_override"]  # fmt: skip
    given = _bound(user, names)
    if given is None or not user.args or user.args[0] is not node:
        return None
    try:
        window = [int(v) for v in _per_dim_static(given.get("kernel_size"), dims)]
        stride = given.get("stride")
        stride = window if stride is None or stride == [] or stride == () else _per_dim_static(stride, dims)
        plain = [_per_dim_static(given.get("padding", 0), dims), _per_dim_static(given.get("dilation", 1), dims)]
    except (TypeError, ValueError):
        return None
    if list(stride) != window or plain != [[0] * dims, [1] * dims] or given.get("ceil_mode", False) is not False:
        return None
    if given.get("return_indices", False) is not False or given.get("divisor_override") is not None:
        return None
    shape, conv_stride = _weight_shape(conv_node), _static_arg(conv_node, 3, "stride", 1)
    if shape is None or not isinstance(conv_stride, (int, list, tuple)):
        return None
    try:
        conv_stride = _per_dim_static(conv_stride, dims)
    except (TypeError, ValueError):
        return None
    value = user.meta.get("example_value")
    pooled = [*out.shape[:2], *(o // k for o, k in zip(out.shape[2:], window, strict=True))]
    if not isinstance(value, torch.Tensor) or list(value.shape) != pooled or value.dtype != out.dtype:
        return None
    if pool_fusable(window, list(out.shape[2:]), transposed, conv_stride, 0 if transposed else shape[1]):
        return None
    return ["pool", kind, window], user


_CHANNEL_FUNCTIONS = {
    torch.amin: "min", torch.amax: "max", torch.sum: "sum", torch.mean: "mean", torch.logsumexp: "logsumexp",
    torch.softmax: "softmax", F.softmax: "softmax", torch.min: "min", torch.max: "max",
}  # fmt: skip
_CHANNEL_METHODS = {"amin": "min", "amax": "max", "sum": "sum", "mean": "mean", "logsumexp": "logsumexp",
                    "softmax": "softmax", "min": "min", "max": "max"}  # fmt: skip


def _channel_step(node: Any, conv_node: Any, transposed: bool) -> tuple[list[Any], list[Any], bool] | None:
    """``node``'s only user as the kernel's step over the channels, the nodes it replaces, and keepdim; or None.

    Taken, over dimension 1 only, without ``dtype``: ``amin`` / ``amax`` / ``sum`` / ``mean`` /
    ``logsumexp``, ``min`` / ``max`` with a dimension when only their values are used, and ``softmax``;
    the convolution of one group, with at most :data:`.conv.MAX_CHANNELS` output channels, and not of one
    input channel (forward: the depthwise stencil, which stores its output whole).
    """
    from .conv import MAX_CHANNELS

    out, shape = node.meta.get("example_value"), _weight_shape(conv_node)
    if len(node.users) != 1 or not isinstance(out, torch.Tensor) or out.dim() < 3 or out.shape[1] > MAX_CHANNELS:
        return None
    if shape is None or _stencil(shape, transposed):
        return None
    groups = _static_arg(conv_node, 6, "groups", 1)
    user = next(iter(node.users))
    args, kwargs = list(user.args), dict(user.kwargs)
    if user.op == "call_function":
        op = _CHANNEL_FUNCTIONS.get(user.target)
    elif user.op == "call_method":
        op = _CHANNEL_METHODS.get(user.target)
    else:
        op = None
    if op is None or groups != 1 or not args or args[0] is not node or kwargs.get("dtype") is not None:
        return None
    dims = _dim_list(args[1] if len(args) > 1 else kwargs.get("dim")) or []
    if len(dims) != 1 or not isinstance(dims[0], int) or dims[0] % out.dim() != 1:
        return None
    if op == "softmax":
        extra = set(kwargs) - {"dim", "_stacklevel", "dtype"}
        if len(args) > 2 and not (len(args) == 3 and user.target is F.softmax and args[2] is None) or extra:
            return None
        return ["channels", "softmax"], [user], True
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if len(args) > 3 or set(kwargs) - {"dim", "keepdim"} or not isinstance(keepdim, bool):
        return None
    nodes = [user]
    if op in ("min", "max") and (
        user.target in (torch.min, torch.max) or (user.op == "call_method" and user.target in ("min", "max"))
    ):  # (values, indices): only the values may be used
        if len(user.users) != 1:
            return None
        values = next(iter(user.users))
        index = values.args[1] if values.op == "call_function" and len(values.args) == 2 else None
        taken = (values.target is operator.getitem and index == 0) or (values.target is getattr and index == "values")
        if not taken or values.args[0] is not user:
            return None
        nodes.append(values)
    value = nodes[-1].meta.get("example_value")
    want = [out.shape[0], *([1] if keepdim else []), *out.shape[2:]]
    if not isinstance(value, torch.Tensor) or list(value.shape) != want or value.dtype != out.dtype:
        return None
    return ["channels", op], nodes, keepdim


def _take_channel_step(
    conv_node: Any, steps: list[Any], vectors: list[Any], chain: list[Any], transposed: bool
) -> tuple[list[Any], list[Any], bool] | None:
    """:func:`_channel_step` after ``chain``'s last node, taken into ``steps`` / ``chain`` in place.

    Where the channel dimension stays, the element-wise steps after it are taken too. Returns what
    :func:`_channel_step` found, or None.
    """
    across = _channel_step(chain[-1], conv_node, transposed)
    if across is not None:
        steps.append(across[0])
        chain.extend(across[1])
        if across[2]:
            _epilogue_chain(chain[-1], steps, vectors, chain)
    return across


_NORMS = {
    F.batch_norm: ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"],
    F.group_norm: ["input", "num_groups", "weight", "bias", "eps"],
    F.instance_norm: ["input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"],
}


def _normalization(node: Any, conv_node: Any, transposed: bool) -> tuple[dict[str, Any], Any, str] | None:
    """``node``'s only user as a normalization whose statistics the kernel can sum, or None.

    Returns ``conv.normalized``'s keyword arguments, the node, and its name. Taken: ``batch_norm`` in
    training mode (batch statistics; its running statistics updated with a numeric ``momentum``),
    ``group_norm``, and ``instance_norm`` with the input's statistics and no running ones; per-channel
    weight and bias or none; not after the depthwise stencil.
    """
    out = node.meta.get("example_value")
    if len(node.users) != 1 or not isinstance(out, torch.Tensor) or out.dim() < 3:
        return None
    user = next(iter(node.users))
    names = _NORMS.get(user.target) if user.op == "call_function" else None
    given = _bound(user, names) if names is not None and user.args else None
    if given is None:
        return None
    value, shape = user.meta.get("example_value"), _weight_shape(conv_node)
    if given["input"] is not node or not isinstance(value, torch.Tensor) or value.shape != out.shape or shape is None:
        return None
    if value.dtype != out.dtype or _stencil(shape, transposed):
        return None
    eps = given.get("eps", 1e-5)
    params = {k: given.get(k) for k in ("weight", "bias")}
    if not isinstance(eps, (int, float)) or not all(v is None or isinstance(v, torch.fx.Node) for v in params.values()):
        return None
    label = getattr(user.target, "__name__", "norm")
    if user.target is F.group_norm:
        groups = given.get("num_groups")
        if not isinstance(groups, int) or groups < 1 or out.shape[1] % groups:
            return None
        return {"kind": "group", "num_groups": groups, "eps": float(eps), **params}, user, label
    momentum = given.get("momentum", 0.1)
    running = {k: given.get(k) for k in ("running_mean", "running_var")}
    if user.target is F.instance_norm:
        if given.get("use_input_stats", True) is not True or any(v is not None for v in running.values()):
            return None
        return {"kind": "instance", "eps": float(eps), **params}, user, label
    if given.get("training", False) is not True or not isinstance(momentum, (int, float)):
        return None
    if any(v is not None and not isinstance(v, torch.fx.Node) for v in running.values()):
        return None
    return {"kind": "batch", "eps": float(eps), "momentum": float(momentum), **params, **running}, user, label


def _per_dim_static(value: Any, dims: int) -> list[int]:
    """A pooling or convolution argument (one int, or one per dimension) as ``dims`` ints; TypeError / ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * dims
    values = list(value)
    if len(values) == 1:
        values = values * dims
    if len(values) != dims or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{value!r}: not {dims} ints")
    return values


_IDENTITY_METHODS = ("clone", "detach", "contiguous")  # the same values: no step


def _epilogue_dag(start: Any, out: Any, n_vectors: int, reg0: int) -> tuple[list[Any], list[Any], list[Any]] | None:
    """The element-wise steps after ``start``, a chain or a graph whose values are read more than once, or None.

    Every node after ``start`` whose tensor operands are ``start``, nodes already taken, per-channel
    vectors or numbers, and whose value has ``start``'s shape and dtype, is taken (``clone`` / ``detach``
    as the value itself). Taken when exactly one of them (the last) is read outside the set. The steps
    then keep values in registers: ``["save", k]`` (``r<k> = acc``), ``["load", k]`` (``acc = r<k>``), and
    ``"R<k>"`` as a binary step's operand (e.g. ``x * sigmoid(x)``, ``x + x * bias``, a residual add of
    the convolution's output). Returns the steps, the vectors' nodes, and the nodes taken, in order.
    """
    nodes = list(start.graph.nodes)
    value_of = {start: start}  # a taken node -> the node whose value it is (clone / detach: its operand's)
    taken: list[tuple[Any, Any, list[Any] | None]] = []  # (node, the operand held in acc, step)
    vectors: list[Any] = []
    position = {n: i for i, n in enumerate(nodes)}
    for user in nodes[position[start] + 1 :]:
        operands = [a for a in user.all_input_nodes if a in value_of]
        value = user.meta.get("example_value")
        if user.op not in ("call_function", "call_method") or not operands:
            continue
        if not isinstance(value, torch.Tensor) or value.shape != out.shape or value.dtype != out.dtype:
            continue
        if user.op == "call_method" and user.target in _IDENTITY_METHODS and len(user.args) == 1 and not user.kwargs:
            value_of[user] = value_of[user.args[0]]
            taken.append((user, None, None))
            continue
        for cur in sorted(set(operands), key=position.__getitem__, reverse=True):  # the latest is likely in acc
            got = epilogue_step(user, cur, out, n_vectors + len(vectors), inside=value_of)
            if got is not None:
                break
        if got is None:
            continue
        step, vector = got
        if vector is not None:
            vectors.extend(vector if isinstance(vector, list) else [vector])
        step = [value_of.get(a, a) if isinstance(a, torch.fx.Node) else a for a in step]
        value_of[user] = user
        taken.append((user, value_of[cur], step))
    members = [start, *(n for n, _, _ in taken)]
    inset = set(members)
    escapes = [n for n in members if any(u not in inset for u in n.users)]
    if not taken or escapes != [members[-1]] or members[-1] is start:
        return None  # values read outside the set: the caller's chain takes what it can
    if any(not n.users for n in members[:-1]):
        return None
    computed = [(n, cur, step) for n, cur, step in taken if step is not None]
    needs: set[Any] = set()
    held = start
    for n, cur, step in computed:  # values acc will not hold when they are read: kept in registers
        if cur is not held:
            needs.add(cur)
        needs.update(a for a in step[1:] if isinstance(a, torch.fx.Node))
        held = n
    sink = value_of[members[-1]]
    if sink is not held:
        needs.add(sink)
    reg = {n: reg0 + i for i, n in enumerate(sorted(needs, key=position.__getitem__))}
    steps: list[Any] = [["save", reg[start]]] if start in reg else []
    held = start
    for n, cur, step in computed:
        if cur is not held:
            steps.append(["load", reg[cur]])
        steps.append([step[0], *(f"R{reg[a]}" if isinstance(a, torch.fx.Node) else a for a in step[1:])])
        if n in reg:
            steps.append(["save", reg[n]])
        held = n
    if sink is not held:
        steps.append(["load", reg[sink]])
    return steps, vectors, members[1:]


def _epilogue_chain(
    node: Any, steps: list[list[Any]] | None = None, vectors: list[Any] | None = None, chain: list[Any] | None = None
) -> tuple[list[list[Any]], list[Any], list[Any]]:
    """The steps after ``node`` (a convolution, or its fused step) the kernel can take, operands, nodes.

    Returned: the steps, their operand nodes and the chain of nodes, appended to ``steps``, ``vectors``
    and ``chain`` when given.
    """
    out = node.meta.get("example_value")
    steps = [] if steps is None else steps
    vectors = [] if vectors is None else vectors
    chain = [node] if chain is None else chain
    if not isinstance(out, torch.Tensor):
        return steps, vectors, chain
    registers = [step[1] for step in steps if step[0] == "save"]
    dag = _epilogue_dag(node, out, len(vectors), max(registers, default=-1) + 1)
    if dag is not None:
        steps.extend(dag[0])
        vectors.extend(dag[1])
        chain.extend(dag[2])
        return steps, vectors, chain
    while len(chain[-1].users) == 1:
        user = next(iter(chain[-1].users))
        step = epilogue_step(user, chain[-1], out, len(vectors))
        value = user.meta.get("example_value")
        if step is None or not isinstance(value, torch.Tensor) or value.shape != out.shape or value.dtype != out.dtype:
            break
        steps.append(step[0])
        if step[1] is not None:
            vectors.extend(step[1] if isinstance(step[1], list) else [step[1]])
        chain.append(user)
    return steps, vectors, chain


def triton_forms(gm: Any, as_gemm: bool = False, split: bool = False, flash: bool = False) -> list[str]:
    """Rewrite the ops of a Dynamo FX graph module in place into forms Inductor makes Triton kernels of.

    Returns what was rewritten. A ``conv2d`` / ``conv3d`` is rewritten when it is grouped with a
    short reduction (static weight shape), its dilation is (statically) above 1, or, with ``as_gemm``,
    it is a ``conv2d`` of (statically) one group; ``as_gemm`` turns every rewritten 2-D convolution of
    one group into im2col + GEMM. Adaptive average poolings are always decomposed. ``split``: every
    GEMM call (and every im2col GEMM) as a 3xTF32 split GEMM (:func:`matmul_3xtf32`). Products of
    slices are hoisted first (:func:`hoist_sliced_products`). ``flash``: every attention call
    :func:`flash_eligible` counts as one fused Triton kernel (``engine/flash_attention.py``), before ``split``.
    """
    from .flash_attention import (
        ENCODER_LAYER,
        FUSED,
        encoder_layer,
        encoder_layer_fused,
        encoder_node_eligible,
        sdpa_node_eligible,
    )

    done = hoist_sliced_products(gm)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target, what, direct = node.target, "", 0
        if target in (torch.conv2d, torch.conv3d, torch.conv1d):
            direct = _direct_products(node)
            what = _conv_form(node, as_gemm, direct)
            if what:
                node.target = conv_for_template
        elif target in _TRANSPOSED:
            node.target = conv_transpose_as_conv
            what = f"conv_transpose{_TRANSPOSED[target]}d -> stride-1 convolution of the zero-stuffed input"
        elif target in _AVG_POOL_FORMS and (pooled := _avg_pool_form(node)):
            node.target = _AVG_POOL_FORMS[target]
            done.append(pooled)
            continue
        elif target is F.adaptive_avg_pool2d or target is torch.adaptive_avg_pool1d:
            two_d = target is F.adaptive_avg_pool2d
            node.target = adaptive_avg_pool_decomposed if two_d else adaptive_avg_pool1d_decomposed
            done.append(f"adaptive_avg_pool{2 if two_d else 1}d -> window means / masked sums")
            continue
        elif target is ENCODER_LAYER and not encoder_node_eligible(node, _static_arg):
            fused = flash and sdpa_node_eligible(node, _static_arg) is None
            node.target = encoder_layer_fused if fused else encoder_layer
            done.append("transformer encoder layer (fast path) -> its ops" + (", attention fused" if fused else ""))
            continue
        elif flash and target in FUSED and not sdpa_node_eligible(node, _static_arg):
            name, node.target = FUSED[target]
            done.append(f"{name} -> fused Triton flash kernel")
            continue
        elif split and target in _SPLIT_GEMMS:
            node.target = _SPLIT_GEMMS[target]
            done.append(f"{getattr(target, '__name__', 'matmul')} -> 3xTF32 split GEMM")
            continue
        elif split and target is torch._C._nn.scaled_dot_product_attention and not _static_arg(node, 4, "dropout_p", 0):
            node.target = sdpa_3xtf32  # an attention's products would otherwise be decomposed below the FX graph
            done.append("scaled_dot_product_attention -> softmax of 3xTF32 split GEMMs")
            continue
        elif target in _SPLIT_K_GEMMS and (split_k := _split_k_form(node)):
            node.target, node.args, split_what = split_k
            done.append(split_what)
            continue
        if what:
            if as_gemm and not direct:
                node.kwargs = {**node.kwargs, "as_gemm": True, **({"split": True} if split else {})}
                what += "" if "GEMM" in what else " (then im2col + GEMM if one group)"
                what += " (3xTF32 split)" if split else ""
            done.append(what)
    if done:
        gm.recompile()
    return done
