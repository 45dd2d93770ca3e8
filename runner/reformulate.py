"""Equivalent forms of convolutions that Inductor's Triton templates do not cover.

Inductor generates Triton kernels (templates) for 2-D and 3-D convolutions with unit dilation; a 1-D
convolution or a transposed one stays a cuDNN call (``extern_kernels.convolution``), so a compiler seed
of such a task is "correct, main work not custom". Before the Triton-template capture, the Dynamo graph
is rewritten into forms the templates take:

- ``conv1d`` -> ``conv2d`` over a height-1 view (input ``(N, C, 1, L)``, weight ``(O, I, 1, k)``);
- a dilated ``conv2d`` / ``conv3d`` (the templates take unit dilation only) -> the same convolution
  with a zero-stuffed kernel (``d - 1`` zeros between taps: ``d^2`` / ``d^3`` times the multiply-adds);
- ``conv_transposeNd`` -> a stride-1 convolution of the zero-stuffed input: ``s - 1``
  zeros between neighbours along each dimension of stride ``s``, ``k - 1 - p`` zeros (a crop when
  negative) on each side plus ``output_padding`` at the end, and the weight's in/out channels swapped
  per group and its taps flipped. It does ``s^d`` times the multiply-adds of the transposed
  convolution (3/4 of them on zeros for ``s = 2`` in 2-D): the reviewer times it against the cuDNN
  seed and the record says which is faster.

A dilated transposed or 1-D convolution gets both rewrites. With ``as_gemm`` (the ``conv_gemm``
skill's recapture), every 2-D convolution of one group (1-D ones lifted, transposed ones stuffed
first) becomes an explicit im2col gather (one copy kernel of ``kh * kw`` times the input) and one
GEMM, so Inductor's matmul template does the math instead of its convolution template. Each form
is exact up to floating-point summation order (tests compare them with PyTorch on the CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

_CONV = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}
_TRANSPOSED = {torch.conv_transpose1d: 1, torch.conv_transpose2d: 2, torch.conv_transpose3d: 3}
_TRANSPOSED_BY_N = {n: f for f, n in _TRANSPOSED.items()}


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
) -> torch.Tensor:
    """``torch.conv{1,2,3}d`` (same arguments, same result) with unit dilation, in 2-D or 3-D.

    Dilation becomes a zero-stuffed kernel; a 1-D convolution runs as a ``conv2d`` of height 1;
    ``as_gemm``: a 2-D one of one group runs as im2col + GEMM (:func:`im2col_gemm`).
    """
    n = weight.dim() - 2
    if isinstance(padding, str) or input.dim() != n + 2:
        return _CONV[n](input, weight, bias, stride, padding, dilation, groups)
    weight = _dilate(weight, _tuple(dilation, n))
    if n == 1:
        (s,), (p,) = _tuple(stride, 1), _tuple(padding, 1)
        out = conv_for_template(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), 1, groups, as_gemm)
        return out.squeeze(2)
    if as_gemm and n == 2 and groups == 1:
        return im2col_gemm(input, weight, bias, _tuple(stride, 2), _tuple(padding, 2))
    return _CONV[n](input, weight, bias, stride, padding, 1, groups)


def im2col_gemm(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int], padding: Sequence[int]
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
    out = cols @ weight.reshape(o, c * kh * kw).t()
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
    return conv_for_template(x, w, bias, 1, 0, 1, groups, as_gemm)


def _static_arg(node: Any, index: int, name: str, default: Any) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def template_forms(gm: Any, as_gemm: bool = False) -> list[str]:
    """Rewrite the convolutions of a Dynamo FX graph module in place; returns what was rewritten.

    A ``conv2d`` / ``conv3d`` is rewritten only when its dilation is (statically) above 1, or, with
    ``as_gemm``, a ``conv2d`` of (statically) one group. ``as_gemm`` turns every rewritten 2-D
    convolution of one group into im2col + GEMM.
    """
    done: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target, what = node.target, ""
        if target in (torch.conv2d, torch.conv3d):
            dilation = _static_arg(node, 5, "dilation", 1)
            if isinstance(dilation, (int, tuple, list)) and any(int(d) > 1 for d in _tuple(dilation, 1)):
                what = f"dilated {target.__name__} -> dense kernel with zeros between taps"
            if as_gemm and target is torch.conv2d and _static_arg(node, 6, "groups", 1) == 1:
                what = f"{what}; " if what else ""
                what += "conv2d -> im2col + GEMM"
            if what:
                node.target = conv_for_template
        elif target is torch.conv1d:
            node.target, what = conv_for_template, "conv1d -> conv2d"
        elif target in _TRANSPOSED:
            node.target = conv_transpose_as_conv
            what = f"conv_transpose{_TRANSPOSED[target]}d -> stride-1 convolution of the zero-stuffed input"
        if what:
            if as_gemm:
                node.kwargs = {**node.kwargs, "as_gemm": True}
                what += "" if "GEMM" in what else " (then im2col + GEMM if one group)"
            done.append(what)
    if done:
        gm.recompile()
    return done
