"""Convolutions in our own Triton kernels: implicit GEMM, 1-D / 2-D / 3-D, forward and transposed; depthwise.

:func:`ks_conv_fwd` computes every form but depthwise. 1-D and 2-D inputs are views with unit depth
(and height), so there is no copy. The output tile is ``BLOCK_M`` output positions (batch and space
flattened) by ``BLOCK_N`` output channels of one group. The reduction is one loop over (kernel tap,
``BLOCK_K`` slice of the group's input channels), each step one ``tl.dot``, so Triton pipelines its
loads. The im2col matrix is never written: each slice is gathered from the input as it is needed,
with out-of-bounds taps masked (padding, dilation, stride). Both operands are read along the
reduction, as the tensor cores take fp32 / TF32 operands: the input channels-last
(:func:`channels_last`, one pass per call unless it already is) and the weight re-laid once to
``(groups, taps, out-channels of a group, in-channels of a group)`` by :func:`pack_weight`. The output
is stored in PyTorch's contiguous layout, coalesced along positions: for a forward convolution each
sample's positions are padded to a multiple of ``BLOCK_M`` rows, so a tile holds consecutive positions of
one sample whatever the output's size (``KERNELSKILL_CONV_PAD_ROWS=0``: only where the size is already a
multiple, the former rule, for comparison; on an H200 the padded rows made whole level-2 tasks with
outputs of 126 x 126 or 254 x 254 positions up to 2.5x faster). Groups of fewer than 16 input
channels (forward) default to exact fp32 rank-1 updates, one (tap, channel) at a time, with no layout
pass (``DIRECT``); asked for, they reduce over the flattened (tap, channel) index instead (``FLAT_K``).

Transposed convolutions use the phase (sub-pixel) decomposition, not a dense convolution over a
zero-upsampled input. Output positions congruent modulo the stride (one *phase*) see the same
subset of taps, an arithmetic progression in each dimension. Each program handles one phase and
walks only those taps, so no product is spent on an inserted zero. A phase's outputs are ``S`` apart
in a row, so its stores fill parts of sectors; the gather form (``GATHER``, a tuning candidate) has no
phases: its rows are the output's positions in order, each gathering every tap, masked where the tap
does not reach it (no input is read there, but the products are spent), and its stores are whole.

A depthwise convolution (one input channel per group) has no channel reduction to put on tensor cores:
:func:`ks_conv_depthwise` computes it as a stencil of fp32 multiply-adds over NC(D)HW planes.

The epilogue adds the bias, then runs in registers whatever element-wise steps followed the
convolution in the task's graph (numbers and per-channel tensors as operands, activations, clamps:
:func:`epilogue_lines`), before the single store of the output tile. Then, in this order, each optional
(:func:`split_epilogue`): a step over the output channels (a reduction to one channel, or a softmax),
when one tile holds them all; a max or average pooling whose window is its stride (a power of two of
positions: the tile's rows are ordered window by window, so a window is reduced in registers); and a mean
over every spatial position; each with the element-wise steps after it. Only the result is stored: a
pooled output is 4-8 times smaller than the convolution's. With ``stats``, the kernel also adds up the
stored values' sums and sums of squares per (sample, channel), so a batch, group or instance norm that
follows (:func:`normalized`) needs no pass of its own over the output for its statistics. Each distinct
epilogue is its own generated kernel (:func:`epilogue_kernel`). All of this runs on column slices of the
tile in turn (:func:`epilogue_split`), so that its registers fit beside the accumulator's.

Numerics: fp32 inputs multiply in ``precision``: ``ieee`` (exact fp32), ``tf32x3`` (3xTF32, near fp32),
``tf32`` (one TF32 product), or ``tf32r``, which is ``tf32`` with both operands first rounded to the
nearest TF32 value, as cuDNN's TF32 convolutions do (the precision policy decides which is allowed);
the rounding is done once per operand (in the layout pass and when packing the weight), not per tile.
fp16 / bf16 inputs multiply in their own type. Depthwise products are fp32 whatever the precision.
Accumulation is always fp32. ``python -m kernelskill.evals.bench_conv`` measures the kernels against
cuDNN and ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from . import conv_tune

PRECISIONS = ("ieee", "tf32x3", "tf32", "tf32r")
ACTIVATIONS = {None: 0, "relu": 1}  # fused after the bias, in registers


@triton.jit
def _round_tf32(x):
    """``x`` (fp32) rounded to the nearest TF32 value, ties away from zero; infinities and NaNs kept."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where((bits & 0x7F800000) == 0x7F800000, x, rounded)


@triton.jit
def _first_tap(p, P, S, Dil, K: tl.constexpr):
    """The first tap ``k < K`` that reaches output phase ``p`` of a transposed convolution (K when none does)."""
    first = K
    for k in tl.static_range(K):
        first = tl.where(((p + P - k * Dil) % S == 0) & (first == K), k, first)
    return first


@triton.jit
def _split_index(i, W, H, D):
    """A flat index over (sample, depth, height, width), ``W`` fastest, as ``(w, h, d, sample)``."""
    return i % W, (i // W) % H, (i // (W * H)) % D, i // (W * H * D)


@triton.jit
def _add_per_sample(Dst, stride_n, col, col_ok, vals, n, row0, row_last, per_sample, N, scale):
    """Per sample in the tile: its rows' column sums of ``vals``, times ``scale``, added atomically into ``Dst``.

    Rows ``row0..row_last``, row ``i`` of sample ``n[i]``; a sample's sums go to ``Dst + sample * stride_n + col``.
    Relaxed adds: the sums are read by a later launch, so they need no ordering. Triton's default, acquire-release,
    fences each add (sm_90 SASS: ``MEMBAR.ALL.GPU``, which waits for this program's earlier stores, the tile's,
    before it, and an L1 invalidation after it); relaxed, each is one fire-and-forget ``REDG``.
    """
    for smp in range(row0 // per_sample, tl.minimum(row_last // per_sample, N - 1) + 1):
        part = tl.sum(tl.where((n == smp)[:, None], vals, 0.0), axis=0) * scale
        tl.atomic_add(Dst + smp * stride_n + col, part, mask=col_ok, sem="relaxed")


@triton.jit
def _over_channels(acc, chan, chan_ok, OC, CHANNELS: tl.constexpr):
    """A tile's step over its output channels (all of them): ``(acc, chan, chan_ok)`` after it.

    ``CHANNELS`` (:data:`CHANNEL_OPS`): 1 min, 2 max, 3 sum, 4 mean, 5 logsumexp (one column left: channel 0
    of the output), 6 softmax (the shape kept). Padded columns (``chan_ok`` false) are left out.
    """
    if CHANNELS == 6:
        top = tl.max(tl.where(chan_ok, acc, float("-inf")), axis=1)
        e = tl.where(chan_ok, tl.exp(acc - top[:, None]), 0.0)
        out, out_chan, out_ok = e / tl.sum(e, axis=1)[:, None], chan, chan_ok
    else:
        if CHANNELS == 1:
            red = tl.min(tl.where(chan_ok, acc, float("inf")), axis=1)
        elif CHANNELS == 2:
            red = tl.max(tl.where(chan_ok, acc, float("-inf")), axis=1)
        elif CHANNELS == 5:
            top = tl.max(tl.where(chan_ok, acc, float("-inf")), axis=1)
            red = top + tl.log(tl.sum(tl.where(chan_ok, tl.exp(acc - top[:, None]), 0.0), axis=1))
        else:
            red = tl.sum(tl.where(chan_ok, acc, 0.0), axis=1)
            if CHANNELS == 4:
                red = red / OC
        out_chan = tl.zeros((1, 1), dtype=tl.int32)
        out, out_ok = red[:, None], out_chan == 0
    return out, out_chan, out_ok


@triton.jit
def ks_conv_fwd(
    X, Wp, Bias, Out,
    N, C, D, H, W,  # input batch, channels of a group, spatial size
    OD, OH, OW, OC,  # output spatial size, output channels of a group
    QD, QH, QW,  # output positions per phase (= OD, OH, OW for a forward convolution)
    sxn, sxc, sxd, sxh, sxw,
    son, soc, sod, soh, sow,
    SD, SH, SW, PD, PH, PW, DD, DH, DW,  # stride, padding, dilation
    TD, TH, TW,  # transposed: step between the taps that reach one phase (S / gcd(S, Dil))
    INV_COUNT,  # REDUCE: 1 / output positions per sample
    Stats, SC,  # STATS: (2, N, SC) fp32 sums, zeroed; SC: output channels
    Part, PART_ROWS, PART_COLS, PART_STRIDE,  # SPLIT_K: (SPLIT_K, groups x phases, rows, columns) fp32 partial tiles
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    TRANSPOSED: tl.constexpr, FLAT_K: tl.constexpr, DIRECT: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr, PRECISION: tl.constexpr, CONTIG_OUT: tl.constexpr, REDUCE: tl.constexpr,
    STATS: tl.constexpr, CHANNELS: tl.constexpr, CHANNELS_FIRST: tl.constexpr, K_EXACT: tl.constexpr,
    POOL: tl.constexpr, PKD: tl.constexpr, PKH: tl.constexpr, PKW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EPI_SPLIT: tl.constexpr,
    SPLIT_K: tl.constexpr, PART: tl.constexpr, PHASE_INNER: tl.constexpr, GATHER: tl.constexpr,
    TMA_B: tl.constexpr = False, WARP_SPEC: tl.constexpr = False,
):  # fmt: skip
    """One (output positions x output channels) tile of one group and, when transposed, one phase.

    ``acc[position, channel] = sum_k input[position, k] * weight[channel, k]``. Both operands are read
    along ``k``, their contiguous side (the input channels-last, the weight packed by
    :func:`pack_weight`), as the tensor cores take them. ``k`` runs over (tap, channel slice) in one loop,
    which Triton pipelines; with ``FLAT_K`` (few channels per group) over the flattened (tap, channel)
    index. With ``DIRECT`` (few channels per group, any input layout) each step is one (tap, channel): a
    rank-1 update of the tile in fp32 multiply-adds, the input read along positions. ``CONTIG_OUT``:
    a forward convolution into a contiguous output: the rows are each sample's positions, padded to a
    multiple of ``BLOCK_M`` (a tile never spans two samples; the padding rows are masked), so every tile
    stores consecutive positions of one sample, coalesced along positions. ``REDUCE`` (1): the tile is
    not stored; its mean over each sample's positions is added into ``Out`` (fp32, (N, channels),
    zeroed), one atomic add per (sample in the tile, channel). ``CHANNELS`` (:data:`CHANNEL_OPS`): a
    reduction over the output channels (min, max, sum, mean, logsumexp; the tile then has one column) or
    their softmax (:func:`_over_channels`), after the epilogue, with one group whose channels all fit in
    one tile (``BLOCK_N``); before the pooling, or after it (``CHANNELS_FIRST`` 0).
    ``K_EXACT``: a group's channels are a multiple of ``BLOCK_K`` (no mask along ``k``; with channels-last
    strides that are multiples of 16, the operand loads are 16-byte vectors).
    ``STATS`` (1): the stored values' sums and sums of squares per (sample, channel) are also added into
    ``Stats`` (a normalization's statistics, without reading the output back). ``EPI_SPLIT``: the tile is
    finished (:func:`_finish`) in that many column slices, one after the other (:func:`epilogue_split`).
    ``POOL`` (1 max, 2 average): a pooling whose
    window (``PKD x PKH x PKW``, a power of two) is its stride, no padding, after the epilogue. The tile's
    rows are then (pooled position, offset in its window), each window's rows adjacent, so the window is
    reduced in registers and only the pooled tile is stored (``Out`` and its strides are the pooled
    output's; ``REDUCE`` then means over the pooled positions). Not with a transposed convolution of more
    than one phase (:func:`pool_fusable`).
    ``SPLIT_K`` (split-K, for grids of fewer tiles than the GPU has multiprocessors): ``PART`` 1, the
    reduction's steps are split in ``SPLIT_K`` contiguous ranges, one a program (grid axis 2), each
    tile's partial sums stored whole into ``Part``; ``PART`` 2, a tile is the sum of its ``SPLIT_K``
    partial tiles, then finished as usual (so every fused step sees the whole sum). ``PART`` 0: one pass.
    ``PHASE_INNER`` (transposed, several phases): grid axis 0 is (tile, phase) with the phase fastest and
    axis 1 the group, so the phases of one tile run side by side. Their stores interleave in the same
    output rows (a phase's positions are ``S`` apart), and a sector they share is then completed in L2
    while it is there; phase after phase over the whole output, each sector would be written partly,
    again and again. Otherwise axis 0 is the tile and axis 1 (group, phase).
    ``GATHER`` (transposed): no phases; the rows are the output's positions in order, as in a forward
    convolution (stored whole, coalesced, ``CONTIG_OUT`` too), and each of them gathers every tap, masked
    where the tap does not reach it (``(o + P - k * Dil) % S != 0``): ``S`` times the products a phase
    computes per dimension, for stores that fill whole sectors.
    ``TMA_B`` (Hopper): the weight's tiles are read through a tensor descriptor (the tensor memory
    accelerator: one copy a tile, out-of-range rows and channels filled with zeros) instead of per-thread
    masked loads; a tap's (out channel, in channel) block is a box of the (tap, out channel, in channel)
    weight of the group. Not with ``FLAT_K`` or ``DIRECT``; the row of in channels must be a multiple of
    16 bytes (:func:`tma_weight_ok`). ``WARP_SPEC``: the main loop over (tap, channel slice) warp-specialized
    (``tl.range(..., warp_specialize=True)``: producer warps load, consumer warps multiply).
    """
    pid = tl.program_id(0)
    pid_gp = tl.program_id(1)
    phases = SD * SH * SW if TRANSPOSED and not GATHER else 1
    if PHASE_INNER:
        pid_gp = pid_gp * phases + pid % phases
        pid = pid // phases
    n_tiles = tl.cdiv(OC, BLOCK_N)
    pid_n = pid % n_tiles  # consecutive programs share one tile of positions
    pid_m = pid // n_tiles
    g = pid_gp // phases
    phase = pid_gp % phases
    phase_d = phase // (SH * SW)
    phase_h = (phase // SW) % SH
    phase_w = phase % SW

    pos = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    per_sample = tl.cdiv(QD * QH * QW, BLOCK_M) * BLOCK_M if CONTIG_OUT else QD * QH * QW  # rows of one sample
    if POOL != 0:  # row = (pooled position, offset in its window): a window's rows are adjacent
        j = pos % (PKD * PKH * PKW)
        rw, rh, rd, n = _split_index(pos // (PKD * PKH * PKW), QW // PKW, QH // PKH, QD // PKD)
        qw = rw * PKW + j % PKW
        qh = rh * PKH + (j // PKW) % PKH
        qd = rd * PKD + j // (PKW * PKH)
    elif CONTIG_OUT:  # row = (sample, position padded to a multiple of BLOCK_M)
        n = pos // per_sample
        qw, qh, qd, _ = _split_index(pos % per_sample, QW, QH, QD)
        qd = tl.where(pos % per_sample < QD * QH * QW, qd, QD)  # a padding row: out of range, masked below
    else:
        qw, qh, qd, n = _split_index(pos, QW, QH, QD)
    if TRANSPOSED and not GATHER:
        od = phase_d + SD * qd
        oh = phase_h + SH * qh
        ow = phase_w + SW * qw
    else:
        od, oh, ow = qd, qh, qw
    pos_ok = (n < N) & (od < OD) & (oh < OH) & (ow < OW)
    oc = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    oc_ok = oc < OC
    ks = tl.arange(0, BLOCK_K)
    x_pos = X + n.to(tl.int64) * sxn + (g * C).to(tl.int64) * sxc
    w_group = Wp + g.to(tl.int64) * (KD * KH * KW * OC * C)
    w_rows = w_group + oc[:, None] * C  # packed weight: (group, tap, out channel, in channel)
    if TMA_B:
        w_desc = tl.make_tensor_descriptor(
            w_group, shape=[KD * KH * KW, OC, C], strides=[OC * C, C, 1], block_shape=[1, BLOCK_N, BLOCK_K]
        )

    if TRANSPOSED and not GATHER:  # the taps reaching this phase: k0, k0 + T, ... in each dimension
        k0d = _first_tap(phase_d, PD, SD, DD, KD)
        k0h = _first_tap(phase_h, PH, SH, DH, KH)
        k0w = _first_tap(phase_w, PW, SW, DW, KW)
        nkd = (KD - k0d + TD - 1) // TD
        nkh = (KH - k0h + TH - 1) // TH
        nkw = (KW - k0w + TW - 1) // TW
    else:
        k0d, k0h, k0w = 0, 0, 0
        nkd, nkh, nkw = KD, KH, KW

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    part_at = Part + pid_gp.to(tl.int64) * PART_ROWS * PART_COLS  # this group's (and phase's) partial tiles
    part_off = pos[:, None] * PART_COLS + oc[None, :]  # 32-bit offsets: half the registers of pointers
    if PART == 2:  # the partial tiles of the SPLIT_K ranges of the reduction, added up
        for _ in range(SPLIT_K):
            acc += tl.load(part_at + part_off)
            part_at += PART_STRIDE
    elif FLAT_K:  # k = tap * C + channel, sliced across taps
        d0 = od * SD - PD  # a row's first input position; tap k reads d0 + kd * DD, ...
        h0 = oh * SH - PH
        w0 = ow * SW - PW
        x_rows = x_pos + (d0 * sxd + h0 * sxh + w0 * sxw)  # per row; the offset of each k is added per element
        for k0 in range(0, KD * KH * KW * C, BLOCK_K):
            k = k0 + ks
            k_ok = k < KD * KH * KW * C
            c = k % C
            tap = k // C
            dk = (tap // (KH * KW)) * DD
            hk = ((tap // KW) % KH) * DH
            wk = (tap % KW) * DW
            idd = d0[:, None] + dk[None, :]
            ih = h0[:, None] + hk[None, :]
            iw = w0[:, None] + wk[None, :]
            ok = pos_ok[:, None] & k_ok[None, :] & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            k_off = c.to(tl.int64) * sxc + dk * sxd + hk * sxh + wk * sxw  # per k: one add per element below
            a = tl.load(x_rows[:, None] + k_off[None, :], mask=ok, other=0.0)
            b = tl.load(
                w_group + oc[:, None] * C + (tap * OC * C + c)[None, :], mask=oc_ok[:, None] & k_ok[None, :], other=0.0
            )
            acc += tl.dot(a, tl.trans(b), input_precision=PRECISION)
    else:
        c_slices = C if DIRECT else tl.cdiv(C, BLOCK_K)
        it_lo = 0
        it_hi = nkd * nkh * nkw * c_slices
        if PART == 1:  # this program's range of the reduction's steps
            chunk = tl.cdiv(it_hi, SPLIT_K)
            it_lo = tl.program_id(2) * chunk
            it_hi = tl.minimum(it_hi, it_lo + chunk)
        for it in tl.range(it_lo, it_hi, warp_specialize=WARP_SPEC):
            t = it // c_slices
            c0 = (it % c_slices) * BLOCK_K
            jd = t // (nkh * nkw)
            jh = (t // nkw) % nkh
            jw = t % nkw
            if TRANSPOSED and GATHER:  # output o = i * S - P + k * Dil: tap k reaches o where S divides o + P - k * Dil
                kd, kh, kw = jd, jh, jw
                rd = od + PD - kd * DD
                rh = oh + PH - kh * DH
                rw = ow + PW - kw * DW
                idd = rd // SD
                ih = rh // SH
                iw = rw // SW
                reach = (rd >= 0) & (rh >= 0) & (rw >= 0) & (rd % SD == 0) & (rh % SH == 0) & (rw % SW == 0)
            elif TRANSPOSED:  # i = q + (phase + P - k * Dil) / S, exactly
                kd = k0d + jd * TD
                kh = k0h + jh * TH
                kw = k0w + jw * TW
                idd = qd + (phase_d + PD - kd * DD) // SD
                ih = qh + (phase_h + PH - kh * DH) // SH
                iw = qw + (phase_w + PW - kw * DW) // SW
            else:
                kd, kh, kw = jd, jh, jw
                idd = od * SD - PD + kd * DD
                ih = oh * SH - PH + kh * DH
                iw = ow * SW - PW + kw * DW
            in_ok = pos_ok & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            if TRANSPOSED and GATHER:
                in_ok = in_ok & reach
            tap = (kd * KH + kh) * KW + kw
            if DIRECT:  # c0 is one channel
                c = it % c_slices
                a1 = tl.load(x_pos + c.to(tl.int64) * sxc + idd * sxd + ih * sxh + iw * sxw, mask=in_ok, other=0.0)
                b1 = tl.load(w_group + (tap * OC + oc) * C + c, mask=oc_ok, other=0.0)
                acc += a1.to(tl.float32)[:, None] * b1.to(tl.float32)[None, :]
            else:
                a_at = x_pos[:, None] + (idd * sxd + ih * sxh + iw * sxw)[:, None]
                a_at += (c0 + ks)[None, :].to(tl.int64) * sxc
                b_at = w_rows + tap * (OC * C) + (c0 + ks)[None, :]
                if TMA_B:  # zeros beyond the out channels and the in channels, as the masks below give
                    b = w_desc.load([tap, pid_n * BLOCK_N, c0]).reshape(BLOCK_N, BLOCK_K)
                    if K_EXACT:
                        a = tl.load(a_at, mask=in_ok[:, None], other=0.0)
                    else:
                        a = tl.load(a_at, mask=in_ok[:, None] & ((c0 + ks) < C)[None, :], other=0.0)
                elif K_EXACT:  # every channel slice is whole: masks constant along k, so the loads are vectors
                    a = tl.load(a_at, mask=in_ok[:, None], other=0.0)
                    b = tl.load(b_at, mask=oc_ok[:, None], other=0.0)
                else:
                    k_ok = (c0 + ks) < C
                    a = tl.load(a_at, mask=in_ok[:, None] & k_ok[None, :], other=0.0)
                    b = tl.load(b_at, mask=oc_ok[:, None] & k_ok[None, :], other=0.0)
                acc += tl.dot(a, tl.trans(b), input_precision=PRECISION)

    if PART == 1:
        tl.store(part_at + tl.program_id(2).to(tl.int64) * PART_STRIDE + part_off, acc)
    else:
        _finish(
            acc, oc, g, pid_m, n, od, oh, ow, pos_ok, Bias, Out, Stats,
            N, OC, QD, QH, QW, son, soc, sod, soh, sow, INV_COUNT, SC, per_sample,
            HAS_BIAS, ACTIVATION, CONTIG_OUT, REDUCE, STATS, CHANNELS, CHANNELS_FIRST, POOL, PKD, PKH, PKW, BLOCK_M,
            EPI_SPLIT,
        )  # fmt: skip


@triton.jit
def _finish(
    acc, oc, g, pid_m, n, od, oh, ow, pos_ok, Bias, Out, Stats,
    N, OC, QD, QH, QW, son, soc, sod, soh, sow, INV_COUNT, SC, per_sample,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, CONTIG_OUT: tl.constexpr, REDUCE: tl.constexpr,
    STATS: tl.constexpr, CHANNELS: tl.constexpr, CHANNELS_FIRST: tl.constexpr,
    POOL: tl.constexpr, PKD: tl.constexpr, PKH: tl.constexpr, PKW: tl.constexpr, BLOCK_M: tl.constexpr,
    SPLIT: tl.constexpr,
):  # fmt: skip
    """The epilogue of :func:`ks_conv_fwd`'s tile ``acc`` (output channels ``oc`` of group ``g``), then its store.

    The bias, the activation, the generated element-wise steps (:func:`epilogue_kernel` writes them here),
    the channel step, the pooling, then the store, the spatial mean or the statistics (see the kernel).
    ``SPLIT`` (1, 2, 4, ...; 1 with a channel step): on that many column slices of the tile in turn, so the
    epilogue's temporaries and the store's addresses live for one slice at a time (:func:`epilogue_split`).
    """
    if SPLIT > 1:  # columns [0, half) and [half, 2 * half), each finished in SPLIT // 2 slices
        half: tl.constexpr = acc.shape[1] // 2
        left, right = tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, half)), (0, 2, 1)))
        oc_left, oc_right = tl.split(tl.permute(tl.reshape(oc, (2, half)), (1, 0)))
        _finish(
            left, oc_left, g, pid_m, n, od, oh, ow, pos_ok, Bias, Out, Stats,
            N, OC, QD, QH, QW, son, soc, sod, soh, sow, INV_COUNT, SC, per_sample,
            HAS_BIAS, ACTIVATION, CONTIG_OUT, REDUCE, STATS, CHANNELS, CHANNELS_FIRST, POOL, PKD, PKH, PKW, BLOCK_M,
            SPLIT // 2,
        )  # fmt: skip
        _finish(
            right, oc_right, g, pid_m, n, od, oh, ow, pos_ok, Bias, Out, Stats,
            N, OC, QD, QH, QW, son, soc, sod, soh, sow, INV_COUNT, SC, per_sample,
            HAS_BIAS, ACTIVATION, CONTIG_OUT, REDUCE, STATS, CHANNELS, CHANNELS_FIRST, POOL, PKD, PKH, PKW, BLOCK_M,
            SPLIT // 2,
        )  # fmt: skip
        return
    oc_ok = oc < OC
    chan = (g * OC + oc)[None, :]  # the epilogue's per-channel operands are indexed by it
    chan_ok = oc_ok[None, :]
    if HAS_BIAS:
        acc += tl.load(Bias + chan, mask=chan_ok, other=0.0).to(tl.float32)
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    if CHANNELS * CHANNELS_FIRST != 0:  # over the output channels, all of them in this tile
        acc, chan, chan_ok = _over_channels(acc, chan, chan_ok, OC, CHANNELS)
        # (steps after the channel step)
    if POOL != 0:  # each window's rows reduced in registers: the tile becomes pooled positions x channels
        win = tl.reshape(acc, (BLOCK_M // (PKD * PKH * PKW), PKD * PKH * PKW, acc.shape[1]))
        if POOL == 1:
            acc = tl.max(win, axis=1)
        else:
            acc = tl.sum(win, axis=1) * (1.0 / (PKD * PKH * PKW))
        row0 = pid_m * (BLOCK_M // (PKD * PKH * PKW))
        row_last = row0 + BLOCK_M // (PKD * PKH * PKW) - 1
        pooled = row0 + tl.arange(0, BLOCK_M // (PKD * PKH * PKW))
        ow, oh, od, n = _split_index(pooled, QW // PKW, QH // PKH, QD // PKD)
        per_sample = (QD // PKD) * (QH // PKH) * (QW // PKW)
        pos_ok = n < N
        # (steps after the pooling)
    else:
        row0 = pid_m * BLOCK_M
        row_last = row0 + BLOCK_M - 1
    if CHANNELS * (1 - CHANNELS_FIRST) != 0:  # after the pooling, on the pooled tile
        acc, chan, chan_ok = _over_channels(acc, chan, chan_ok, OC, CHANNELS)
        # (steps after the channel step)
    if REDUCE == 1:  # the mean over each sample's positions: partial sums of this tile, one add per sample
        kept = tl.where(pos_ok[:, None] & chan_ok, acc, 0.0)
        _add_per_sample(Out, son, (g * OC + oc) * soc, oc_ok, kept, n, row0, row_last, per_sample, N, INV_COUNT)
    else:
        if CONTIG_OUT:  # within a tile, one sample and consecutive positions
            n0 = (pid_m * BLOCK_M) // per_sample
            first = pid_m * BLOCK_M - n0 * per_sample
            spatial = tl.max_contiguous(tl.multiple_of(first + tl.arange(0, BLOCK_M), BLOCK_M), BLOCK_M)
            out_rows = n0.to(tl.int64) * son + spatial
        else:
            out_rows = n.to(tl.int64) * son + od.to(tl.int64) * sod + oh.to(tl.int64) * soh + ow.to(tl.int64) * sow
        out = Out + out_rows[:, None] + chan.to(tl.int64) * soc
        tl.store(out, acc.to(Out.dtype.element_ty), mask=pos_ok[:, None] & chan_ok)
        if STATS == 1:  # per (sample, channel): the sum and the sum of squares of what was stored
            kept = tl.where(pos_ok[:, None] & chan_ok, acc, 0.0)
            _add_per_sample(Stats, SC, g * OC + oc, oc_ok, kept, n, row0, row_last, per_sample, N, 1.0)
            _add_per_sample(Stats + N * SC, SC, g * OC + oc, oc_ok, kept * kept, n, row0, row_last, per_sample, N, 1.0)


@triton.jit
def ks_to_channels_last(
    X, Out, C, CP, S, sxn, sxc, son, ROUND_TF32: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr
):
    """``X`` (N, C, S) with S contiguous into ``Out`` (N, S, CP) with its channels contiguous, ``CP >= C``.

    The channels from ``C`` to ``CP`` are zeros (a convolution over them adds nothing). With
    ``ROUND_TF32``, each value is rounded to the nearest TF32 value: the ``tf32r`` products' operand
    rounding, done once here instead of in every tile.
    """
    n = tl.program_id(2)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ss = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    at = X + n.to(tl.int64) * sxn + cs[:, None].to(tl.int64) * sxc + ss[None, :]
    tile = tl.load(at, mask=(cs[:, None] < C) & (ss[None, :] < S), other=0.0)
    if ROUND_TF32:
        tile = _round_tf32(tile)
    out = Out + n.to(tl.int64) * son + ss[None, :].to(tl.int64) * CP + cs[:, None]
    tl.store(out, tile, mask=(cs[:, None] < CP) & (ss[None, :] < S))


@triton.jit
def ks_conv_depthwise(
    X, Wp, Bias, Out,
    N, C, D, H, W,  # C: input channels (one per group)
    OD, OH, OW, OC,  # OC: output channels of a group (the depth multiplier)
    sxn, sxc, sxd, sxh, sxw,
    son, soc, sod, soh, sow,
    SD, SH, SW, PD, PH, PW, DD, DH, DW,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """A depthwise convolution (one input channel per group), ``BLOCK`` output positions of one plane per program.

    A plane is one (sample, output channel). The products are fp32 multiply-adds: the convolution is
    memory-bound, with no tensor-core tile to fill.
    """
    plane = tl.program_id(1)
    n = plane // (C * OC)
    oc_all = plane % (C * OC)
    cin = oc_all // OC
    pos = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ow = pos % OW
    oh = (pos // OW) % OH
    od = pos // (OW * OH)
    pos_ok = od < OD
    x_plane = X + n.to(tl.int64) * sxn + cin.to(tl.int64) * sxc
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for kd in tl.static_range(KD):
        idd = od * SD - PD + kd * DD
        for kh in tl.static_range(KH):
            ih = oh * SH - PH + kh * DH
            for kw in tl.static_range(KW):
                iw = ow * SW - PW + kw * DW
                ok = pos_ok & (idd >= 0) & (idd < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                x = tl.load(x_plane + idd * sxd + ih * sxh + iw * sxw, mask=ok, other=0.0).to(tl.float32)
                tap = (kd * KH + kh) * KW + kw  # packed weight: (group = input channel, tap, multiplier, 1)
                acc += x * tl.load(Wp + (cin * (KD * KH * KW) + tap) * OC + oc_all % OC).to(tl.float32)
    chan = oc_all + tl.zeros((BLOCK,), dtype=tl.int32)  # noqa: F841 - the epilogue's per-channel operands' index
    chan_ok = pos_ok  # noqa: F841
    if HAS_BIAS:
        acc += tl.load(Bias + oc_all).to(tl.float32)
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    out = Out + n.to(tl.int64) * son + oc_all.to(tl.int64) * soc + od * sod + oh * soh + ow * sow
    tl.store(out, acc.to(Out.dtype.element_ty), mask=pos_ok)


def per_dim(value: int | Sequence[int], dims: int) -> list[int]:
    """A convolution parameter (one number, or one per spatial dimension) as ``dims`` numbers."""
    vals = [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]
    if len(vals) != dims:
        raise ValueError(f"expected {dims} values, got {vals}")
    return vals


def _triple(value: int | Sequence[int], dims: int, fill: int) -> tuple[int, int, int]:
    """A per-dimension parameter of a ``dims``-D convolution as (depth, height, width)."""
    return tuple([fill] * (3 - dims) + per_dim(value, dims))  # type: ignore[return-value]


def pack_weight(weight: torch.Tensor, groups: int, transposed: bool, round_tf32: bool = False) -> torch.Tensor:
    """The weight as ``(groups, taps, out-channels of a group, in-channels of a group)``, contiguous.

    ``weight`` is PyTorch's: ``(out, in / groups, *kernel)`` for a convolution, ``(in, out / groups,
    *kernel)`` for a transposed one. ``round_tf32``: each value rounded to the nearest TF32 value (the
    ``tf32r`` products), once here instead of in every tile. Done once per weight, not per tile.
    """
    dims = weight.dim() - 2
    w = weight.reshape(*weight.shape[:2], *([1] * (3 - dims)), *weight.shape[2:])  # (a, b, kd, kh, kw)
    a, b, kd, kh, kw = w.shape
    if transposed:  # (groups * in_g, out_g, k...) -> (groups, k..., out_g, in_g)
        w = w.reshape(groups, a // groups, b, kd, kh, kw).permute(0, 3, 4, 5, 2, 1)
    else:  # (groups * out_g, in_g, k...) -> (groups, k..., out_g, in_g)
        w = w.reshape(groups, a // groups, b, kd, kh, kw).permute(0, 3, 4, 5, 1, 2)
    w = w.reshape(groups, kd * kh * kw, w.shape[-2], w.shape[-1]).contiguous()
    return rounded_tf32(w) if round_tf32 else w


def rounded_tf32(t: torch.Tensor) -> torch.Tensor:
    """A contiguous fp32 ``t`` with each value rounded to the nearest TF32 value; other dtypes as they are.

    :func:`_round_tf32`'s rounding, in PyTorch: for tensors rounded once outside the kernels.
    """
    if t.dtype != torch.float32:
        return t
    bits = t.view(torch.int32)
    finite = (bits & 0x7F800000) != 0x7F800000
    return torch.where(finite, ((bits + 0x1000) & -0x2000).view(torch.float32), t)


def output_size(size: int, k: int, stride: int, pad: int, dil: int, transposed: bool, output_padding: int = 0) -> int:
    """PyTorch's output extent of one spatial dimension.

    ``output_padding`` of a forward convolution: padding at the end only, beside ``pad`` at both ends (an
    uneven ``"same"`` padding pads one more at the end).
    """
    if transposed:
        return (size - 1) * stride - 2 * pad + dil * (k - 1) + output_padding + 1
    return (size + 2 * pad + output_padding - dil * (k - 1) - 1) // stride + 1


POOLS = {"max": 1, "avg": 2}  # the kernel's POOL
MAX_WINDOW = 16  # positions of a fused pooling window (a power of two)
CHANNEL_OPS = {"min": 1, "max": 2, "sum": 3, "mean": 4, "logsumexp": 5, "softmax": 6}  # the kernel's CHANNELS
MAX_CHANNELS = 128  # output channels of a fused channel reduction (one tile holds them all)


def split_epilogue(steps: list[list[Any]] | None) -> dict[str, Any]:
    """An epilogue's parts: ``before``, then a channel step and a pooling in either order, each with its steps.

    ``before``: element-wise steps; ``channels``: ``["channels", op]`` (:data:`CHANNEL_OPS`) or None, and
    ``after_channels`` its steps; ``pool``: ``["pool", "max" | "avg", window]`` (``window``: one size per
    spatial dimension, each its stride) or None, and ``after_pool``; ``channels_first``: which came first.
    """
    parts: dict[str, Any] = {"before": [], "channels": None, "after_channels": [], "pool": None, "after_pool": [],
                             "channels_first": True}  # fmt: skip
    current = "before"
    for step in steps or []:
        if step[0] in ("channels", "pool"):
            kind = step[0]
            if parts[kind] is not None:
                raise ValueError("at most one channel step and one pooling step")
            parts[kind] = step
            parts["channels_first"] = parts["channels_first"] and not (kind == "channels" and parts["pool"])
            current = f"after_{kind}"
        else:
            parts[current].append(step)
    return parts


def pool_fusable(window: Sequence[int], out_space: Sequence[int], transposed: bool, stride: Sequence[int],
                 in_per_group: int) -> str | None:  # fmt: skip
    """Why a pooling of ``window`` (its stride, no padding) cannot be fused into the kernel's store, or None.

    ``out_space``: the convolution's output extent per spatial dimension.
    """
    size = math.prod(window)
    if any(k < 1 for k in window) or size & (size - 1) or size > MAX_WINDOW:
        return f"window {list(window)}: fused only when its size is a power of two up to {MAX_WINDOW}"
    if len(window) != len(out_space) or any(o < k for o, k in zip(out_space, window, strict=True)):
        return f"window {list(window)} for an output of {list(out_space)}"
    if transposed and any(v != 1 for v in stride):
        return "a strided transposed convolution's phases split every window"
    if in_per_group == 1 and not transposed:
        return "the depthwise stencil stores its output whole"
    return None


def launch_config(in_per_group: int, out_per_group: int, taps: int = 1, transposed: bool = False) -> dict[str, Any]:
    """Tile sizes, warps and stages for :func:`ks_conv_fwd` (``tl.dot`` needs every tile side to be at least 16).

    ``BLOCK_M`` output positions by ``BLOCK_N`` output channels; the reduction in ``BLOCK_K`` slices of a
    group's input channels. A forward convolution with fewer than 16 input channels a group defaults to
    ``DIRECT`` (exact fp32 rank-1 updates, the input as it is laid out): timed on an H200 over nine such
    convolutions (3 and 8 channels, 2-D and 3-D, ``tf32r`` and ``tf32x3`` products), it took 1.0-2.8x the
    fastest candidate's time, and the reduction over the flattened tap x channel index (``FLAT_K``, the
    former default) 1.9-3.9x. ``BLOCK_K`` is still set for ``FLAT_K`` (an explicit configuration) and for
    the one-tap-per-step candidates.
    """
    few = in_per_group < 16
    block_n = max(16, min(128, triton.next_power_of_2(out_per_group)))
    if few:
        block_k = max(16, min(32, triton.next_power_of_2(in_per_group * taps)))
    else:
        block_k = 32 if in_per_group % 32 == 0 else 16
    return {
        "BLOCK_M": 128,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "FLAT_K": False,
        "DIRECT": few and not transposed,
        "num_warps": 4,
        "num_stages": 3,
    }


def grid_work(
    positions: int, out_per_group: int, groups: int, phases: int, taps: int, in_per_group: int, cfg: dict[str, Any]
) -> tuple[int, int]:
    """About how many programs :func:`ks_conv_fwd` runs with ``cfg`` and how many main-loop steps each takes.

    ``positions``: output positions (per phase, when transposed) over the batch; ``taps``: the kernel's
    (a transposed convolution's spread over its ``phases``). What the tuning's split-K rule reads
    (:func:`.conv_tune.split_counts`).
    """
    tiles = triton.cdiv(positions, cfg["BLOCK_M"]) * triton.cdiv(out_per_group, cfg["BLOCK_N"]) * groups * phases
    per_step = 1 if cfg.get("DIRECT") else cfg["BLOCK_K"]
    return tiles, max(1, taps // phases) * triton.cdiv(in_per_group, per_step)


def epilogue_split(cfg: dict[str, Any]) -> int:
    """In how many column slices :func:`ks_conv_fwd` finishes a tile of launch configuration ``cfg`` (``EPI_SPLIT``).

    A thread holds ``BLOCK_M * BLOCK_N / (32 * num_warps)`` accumulator values. Finished whole, the
    epilogue's temporaries and the store's addresses for all of them are live at once: compiled for sm_90
    (``bench_conv --static``), two Mish steps on a 128 x 128 tile over four warps spill kilobytes per thread
    to local memory, and so do the stores of transposed convolutions (their output rows are not
    consecutive, so every value has its own address) from 64 values a thread. So the tile is finished in
    slices of at most 16 values a thread, each at least 16 channels wide.
    """
    per_thread = cfg["BLOCK_M"] * cfg["BLOCK_N"] // (32 * cfg["num_warps"])
    split = 1
    while per_thread // split > 16 and cfg["BLOCK_N"] // (2 * split) >= 16:
        split *= 2
    return split


_COMPILE_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("kernelskill_conv_compile_only", default=False)


@contextlib.contextmanager
def compile_only() -> Iterator[None]:
    """Within it, this module's kernel launches compile and do not run (:func:`launcher`).

    Each launch compiles the specialization its arguments make (Triton's ``warmup``), so the arguments
    may be meta tensors of the real ones' shapes, strides and dtypes; the outputs are never written.
    Inside Triton's ``AsyncCompileMode`` the compiles go to its executor and run together
    (:func:`.conv_tune.compile_together`).
    """
    token = _COMPILE_ONLY.set(True)
    try:
        yield
    finally:
        _COMPILE_ONLY.reset(token)


LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # launch arguments that are a triton.Config's


def launcher(kernel: Any, grid: tuple[int, ...]) -> Any:
    """Launch ``kernel`` over ``grid`` (``torch.library.wrap_triton(kernel)[grid]``); in :func:`compile_only`: compile.

    ``wrap_triton``: eager, a plain launch; under torch.compile, a kernel node of the graph.
    """
    if _COMPILE_ONLY.get():
        return functools.partial(_compile, kernel, grid)
    from torch.library import wrap_triton

    return wrap_triton(kernel)[grid]


def _compile(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """Compile ``kernel`` (Triton's ``warmup``) for the launch ``wrap_triton(kernel)[grid](*args, **kwargs)``.

    ``wrap_triton`` hands a launch given any of :data:`LAUNCH_OPTIONS` to a ``triton.autotune`` of one
    ``triton.Config`` made of them, which fills in the others' defaults (``num_stages=3``, ``num_ctas=1``).
    Triton's cache key includes every option passed: the compile gets the same ones, or the real launch would
    compile its kernel again.
    """
    given = {name: kwargs.pop(name) for name in LAUNCH_OPTIONS if name in kwargs}
    if given:
        kwargs.update(triton.Config({}, **given).all_kwargs())
    return kernel.warmup(*args, grid=grid, **kwargs)


def tma_weight_ok(in_per_group: int, dtype: torch.dtype, cfg: dict[str, Any]) -> bool:
    """Whether :func:`ks_conv_fwd` may read the weight through a tensor descriptor (``TMA_B``) with ``cfg``.

    A descriptor's strides but the last must be multiples of 16 bytes (so must the base: the packed weight
    is a whole allocation, each group a whole number of rows), and it is made in the kernel, which needs
    Triton's allocator for its scratch: set here for eager launches; a launch in a graph torch.compile
    builds does not run it, so there the weight is read as usual.
    """
    if not cfg.get("TMA_B") or cfg.get("FLAT_K") or cfg.get("DIRECT") or torch.compiler.is_compiling():
        return False
    if not hasattr(tl, "make_tensor_descriptor"):
        return False
    return in_per_group * dtype.itemsize % 16 == 0


def _scratch_allocator(device: torch.device) -> None:
    """Triton's allocator for a kernel's global scratch (an in-kernel tensor descriptor's): bytes on ``device``."""

    def alloc(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


def channels_last(x5: torch.Tensor, round_tf32: bool, channels: int = 0) -> torch.Tensor:
    """``x5`` (N, C, D, H, W) with channels-last strides (a view of an (N, D, H, W, C) tensor).

    ``channels`` (more than C): the copy has that many channels, the ones after C zeros, so that a
    channel-padded convolution (``PAD_C``) reads whole 16-channel slices. Already channels-last and not
    padded: ``x5`` itself, or one rounding pass over it (:func:`rounded_tf32`) when ``round_tf32``.
    Otherwise one pass of :func:`ks_to_channels_last`, rounding each value to TF32 on the way when
    ``round_tf32``.
    """
    n, c, d, h, w = x5.shape
    cp = max(c, channels)
    if cp == c and x5.stride(1) == 1 and x5.permute(0, 2, 3, 4, 1).is_contiguous():
        return rounded_tf32(x5.permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3) if round_tf32 else x5
    src = x5.contiguous().view(n, c, d * h * w)
    out = torch.empty((n, d, h, w, cp), dtype=x5.dtype, device=x5.device)
    grid = (triton.cdiv(d * h * w, 64), triton.cdiv(cp, 32), n)
    launcher(ks_to_channels_last, grid)(
        src, out, c, cp, d * h * w, src.stride(0), src.stride(1), out.stride(0),
        ROUND_TF32=round_tf32, BLOCK_C=32, BLOCK_S=64, num_warps=4,
    )  # fmt: skip
    return out.permute(0, 4, 1, 2, 3)


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
    config: dict[str, int] | None = None,
    reduce: str | None = None,
    stats: bool = False,
) -> Any:
    """``F.conv{1,2,3}d`` / ``F.conv_transpose{1,2,3}d`` (then ``activation``) through our kernels.

    ``x`` is ``(batch, channels, *space)`` with 1 to 3 spatial dimensions and ``weight`` PyTorch's
    layout (see :func:`pack_weight`; pass ``packed``, made with ``round_tf32=precision == "tf32r"``, to
    reuse a packed weight). ``padding`` is numbers, not ``"same"`` (a forward convolution's ``output_padding``:
    padding at the end only, :func:`output_size`). The output is contiguous in
    PyTorch's layout. ``epilogue``: element-wise steps after the bias (:func:`epilogue_lines`), whose
    per-channel operands ``"E<i>"`` are ``vectors[i]``. A depthwise convolution (one input channel per
    group) runs :func:`ks_conv_depthwise`, every other one :func:`ks_conv_fwd` (``config``: its launch
    parameters instead of :func:`launch_config`'s; ``{"DIRECT": True}``: fp32 rank-1 updates over the
    input as it is laid out, exact whatever ``precision``, for groups of few input channels; ``{"PAD_C": c}``
    with one group: its channels zero-padded to ``c`` in the channels-last copy and the weight; without it,
    on a GPU, the fastest of a few configurations for this convolution: :mod:`.conv_tune`).
    ``reduce="mean"``: the result's mean over all spatial positions, ``(batch, channels)``, reduced in
    the kernel (the convolution's output is never stored). ``epilogue`` may hold one ``["channels", op]``
    step (:data:`CHANNEL_OPS`; one group of at most :data:`MAX_CHANNELS` output channels; a reduction keeps
    one channel) and, after it, one ``["pool", "max" | "avg", window]`` step (:func:`pool_fusable`); the
    output then has the pooled shape. ``stats``: returns ``(output, sums)``, ``sums[0]`` / ``sums[1]`` the
    output's sum / sum of squares per (sample, channel), fp32 ``(2, batch, channels)``, added up by the
    kernel as it stores (a normalization's statistics); not with ``reduce``, a channel reduction or a
    depthwise convolution.
    """
    if reduce not in (None, "mean"):
        raise ValueError(f"reduce {reduce!r}: None or 'mean'")
    # an operand made in the forward (``torch.tensor(0.5)``) lives on the CPU: the kernel reads it on x's device
    vectors = [v if v.device == x.device else v.to(x.device) for v in vectors]
    parts = split_epilogue(epilogue)
    pool, channels = parts["pool"], parts["channels"]
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
    fp32 = x.dtype == torch.float32
    depthwise = c_g == 1 and not transposed
    pk = (1, 1, 1)
    if pool is not None:
        if pool[1] not in POOLS:
            raise ValueError(f"pooling {pool[1]!r}: one of {', '.join(POOLS)}")
        why = pool_fusable(per_dim(pool[2], dims), space[3 - dims :], transposed, s[3 - dims :], c_g)
        if why:
            raise ValueError(f"pooling not fused: {why}")
        pk = _triple(pool[2], dims, 1)
    pooled = [space[i] // pk[i] for i in range(3)]
    out_c = out_g * groups
    if channels is not None:
        if channels[1] not in CHANNEL_OPS:
            raise ValueError(f"channel step {channels[1]!r}: one of {', '.join(CHANNEL_OPS)}")
        if groups != 1 or out_g > MAX_CHANNELS or depthwise:
            raise ValueError(f"a channel step needs one group of at most {MAX_CHANNELS} output channels")
        if reduce and channels[1] != "softmax":
            raise ValueError("a channel reduction and a spatial mean are not fused together")
        out_c = out_c if channels[1] == "softmax" else 1
    if stats and (reduce or depthwise or (channels is not None and channels[1] != "softmax")):
        raise ValueError("statistics are summed only beside a stored output of the implicit-GEMM kernel")
    if reduce and depthwise:  # the stencil kernel stores its output: reduced after it
        full = conv(x, weight, bias, stride, padding, dilation, groups, False, output_padding, precision, activation,
                    packed, epilogue, vectors, config)  # fmt: skip
        return full.float().mean(dim=tuple(range(2, full.dim()))).to(x.dtype)
    if reduce:  # (N, channels) fp32 sums, added into by every tile
        out5 = torch.zeros((n, out_c, 1, 1, 1), dtype=torch.float32, device=x.device)
    else:
        out5 = torch.empty((n, out_c, *pooled), dtype=x.dtype, device=x.device)
    sums = torch.zeros((2, n, out_c), dtype=torch.float32, device=x.device) if stats else out5
    k_taps = k[0] * k[1] * k[2]
    cfg = {**launch_config(c_g, out_g, k_taps, transposed), **(config or {})}
    q = [triton.cdiv(space[i], s[i]) if transposed else space[i] for i in range(3)]  # positions per phase
    phases = s[0] * s[1] * s[2] if transposed else 1
    if config is None and not depthwise and conv_tune.enabled(x):  # the fastest of a few, per shape (conv_tune)
        geometry: tuple[Any, ...] = (stride, padding, dilation, groups, transposed, output_padding, activation)
        geometry += ("stats",) if stats else ()  # timed with the statistics it sums: they change the fastest

        def run(tuned: dict[str, Any], a: tuple[Any, ...]) -> Any:
            rx, rw, rb, rv = a
            return conv(rx, rw, rb, stride, padding, dilation, groups, transposed, output_padding, precision,
                        activation, None, epilogue, rv, tuned, reduce, stats)  # fmt: skip

        work = grid_work(n * math.prod(q), out_g, groups, phases, k_taps, c_g, cfg)
        cfg = conv_tune.tuned(
            x, weight, bias, vectors, geometry, precision, epilogue, reduce, cfg, c_g, run, work=work, phases=phases
        )
    if channels is not None:  # every output channel in one tile
        cfg["BLOCK_N"] = max(cfg["BLOCK_N"], triton.next_power_of_2(out_g))
    gather = bool(cfg.get("GATHER")) and transposed  # one pass over the output in order, every tap masked
    if gather:
        phases, q = 1, list(space)
    direct = bool(cfg.get("DIRECT")) and not depthwise
    # PAD_C: one group's channels, zero-padded to this many in the channels-last copy and the packed weight
    c_k = max(c_g, int(cfg.get("PAD_C") or 0)) if groups == 1 and not depthwise and not direct else c_g
    cfg["FLAT_K"] = bool(cfg["FLAT_K"]) and not transposed and not direct and c_k == c_g
    rnd = fp32 and precision == "tf32r" and not depthwise and not direct
    wp = packed if packed is not None else pack_weight(weight, groups, transposed, round_tf32=rnd)
    if c_k > c_g:  # zeros after each row's channels; not F.pad, whose output of a (G, taps, 1, 1) weight
        padded = wp.new_zeros((*wp.shape[:-1], c_k))  # is channels-last, where the kernel reads it contiguous
        padded[..., :c_g] = wp
        wp = padded
    if not depthwise and not direct:
        x5 = channels_last(x5, rnd, c_k)
    tma = not depthwise and tma_weight_ok(c_k, wp.dtype, {**cfg, "DIRECT": direct})
    if tma:
        _scratch_allocator(x.device)
    base = ks_conv_depthwise if depthwise else ks_conv_fwd
    elementwise = [step for step in epilogue or [] if step[0] not in ("pool", "channels")]
    kernel = epilogue_kernel(epilogue or [], len(vectors), base) if elementwise else base
    flat = [a for v in vectors for a in (v.reshape(-1).contiguous(), v.numel())] if epilogue else []
    common = (x5.stride(), out5.stride(), (*s, *p, *d))
    if depthwise:  # fp32 multiply-adds: exact, whatever the precision policy
        block = 256 if space[2] < 256 else 512
        grid = (triton.cdiv(space[0] * space[1] * space[2], block), n * c * out_g)
        launcher(kernel, grid)(
            x5, wp, bias if bias is not None else wp, out5, *flat,
            n, c, *x5.shape[2:], *space, out_g, *common[0], *common[1], *common[2],
            KD=k[0], KH=k[1], KW=k[2], HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation], BLOCK=block,
            num_warps=4,
        )  # fmt: skip
        return out5.reshape(n, out_g * groups, *space[3 - dims :])
    steps = [s[i] // math.gcd(s[i], d[i]) for i in range(3)]
    contig = (gather or not transposed) and not reduce and pool is None
    if contig and os.environ.get("KERNELSKILL_CONV_PAD_ROWS", "1") == "0":  # the former rule, for comparison
        contig = math.prod(space) % cfg["BLOCK_M"] == 0
    if contig:  # each sample's positions padded to a multiple of BLOCK_M
        rows = n * triton.cdiv(math.prod(space), cfg["BLOCK_M"]) * cfg["BLOCK_M"]
    else:
        rows = n * q[0] * q[1] * q[2] if pool is None else n * math.prod(pooled) * math.prod(pk)
    tiles_m, tiles_n = triton.cdiv(rows, cfg["BLOCK_M"]), triton.cdiv(out_g, cfg["BLOCK_N"])
    phase_inner = bool(cfg.get("PHASE_INNER")) and phases > 1
    split = 1 if cfg["FLAT_K"] else max(1, int(cfg.get("SPLIT_K") or 1))
    if tiles_m * cfg["BLOCK_M"] * tiles_n * cfg["BLOCK_N"] >= 2**31:  # the kernel's 32-bit offsets in one partial
        split = 1
    part_shape = (split, groups * phases, tiles_m * cfg["BLOCK_M"], tiles_n * cfg["BLOCK_N"])
    part = torch.empty(part_shape, dtype=torch.float32, device=x.device) if split > 1 else out5
    # Without split-K the partial tiles' extents are unused: zeros, since Inductor's codegen of a kernel
    # node fails on a Python int argument of 2**31 or more (a 1x1 convolution with 2**31 outputs did)
    part_dims = (*part_shape[2:], math.prod(part_shape[1:])) if split > 1 else (0, 0, 0)
    args = [
        x5, wp, bias if bias is not None else wp, out5,
        n, c_k, *x5.shape[2:],
        *space, out_g,
        *q,
        *common[0], *common[1], *common[2],
        *steps,
        1.0 / math.prod(pooled),
        sums, out_c,
        part, *part_dims,
    ]  # fmt: skip
    constexprs = dict(
        KD=k[0], KH=k[1], KW=k[2],
        TRANSPOSED=transposed, FLAT_K=cfg["FLAT_K"], DIRECT=direct, HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATIONS[activation],
        PRECISION=("tf32" if precision == "tf32r" else precision) if fp32 else "ieee", CONTIG_OUT=contig,
        REDUCE=1 if reduce else 0, STATS=1 if stats else 0, CHANNELS=CHANNEL_OPS[channels[1]] if channels else 0,
        CHANNELS_FIRST=int(parts["channels_first"]),
        K_EXACT=not cfg["FLAT_K"] and not direct and c_k % cfg["BLOCK_K"] == 0,
        POOL=POOLS[pool[1]] if pool else 0, PKD=pk[0], PKH=pk[1], PKW=pk[2],
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        EPI_SPLIT=1 if channels is not None else int(cfg.get("EPI_SPLIT") or epilogue_split(cfg)),
        SPLIT_K=split, PART=0, PHASE_INNER=phase_inner, GATHER=gather, TMA_B=tma,
        WARP_SPEC=bool(cfg.get("WARP_SPEC")),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    grid = (tiles_m * tiles_n * phases, groups) if phase_inner else (tiles_m * tiles_n, groups * phases)
    if split > 1:  # the reduction's ranges in the plain kernel (nothing is fused into a partial tile), then the sums
        plain = dict(HAS_BIAS=False, ACTIVATION=0, REDUCE=0, STATS=0, CHANNELS=0, CHANNELS_FIRST=0, EPI_SPLIT=1)
        launcher(ks_conv_fwd, (*grid, split))(*args, **{**constexprs, **plain, "PART": 1})
        constexprs["PART"] = 2
    launcher(kernel, grid)(*args[:4], *flat, *args[4:], **constexprs)
    if reduce:
        return out5.reshape(n, out_c).to(x.dtype)
    out = out5.reshape(n, out_c, *pooled[3 - dims :])
    return (out, sums) if stats else out


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
    reduce: str,
    stats: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    import json

    steps = json.loads(epilogue) if epilogue else None
    args = (x, weight, bias, stride, padding, dilation, groups, transposed, output_padding, precision)
    if stats:
        out, sums = conv(*args, epilogue=steps, vectors=vectors, stats=True)
        return out, sums
    return conv(*args, epilogue=steps, vectors=vectors, reduce=reduce or None), x.new_empty(0)


def conv_op() -> Any:
    """``torch.ops.kernelskill.conv`` (registered when this module is imported, once per process).

    Returns ``(output, sums)``: :func:`conv`'s result and, with ``stats``, its statistics (else empty).

    A ``torch.library.triton_op``: Inductor traces through it, so a compiler seed captured with it
    carries :func:`ks_conv_fwd`'s source like Inductor's own kernels, and stays standalone. It is
    registered at import because TorchDynamo cannot trace the registration itself: a
    ``torch.compile`` whose first call reaches :func:`conv_nd` would otherwise fail.
    """
    global _OP
    if _OP is None:
        ns = torch.ops.kernelskill
        _OP = ns.conv if hasattr(ns, "conv") else torch.library.triton_op(OP_NAME, _conv_op_body, mutates_args=())
    return _OP


conv_op()


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
    reduce: str = "",
    keepdim: bool = False,
    stats: bool = False,
    pad_end: Any = 0,
) -> Any:
    """``torch.conv{1,2,3}d``'s signature through our kernel (what a rewritten graph node calls).

    ``epilogue``: JSON of the element-wise steps fused after it (:func:`epilogue_lines`), ``vectors`` their
    per-channel operands. ``reduce="mean"``: then the mean over every spatial dimension (``keepdim`` as
    ``torch.mean``'s), reduced in the kernel. ``stats``: returns ``(output, sums)`` (:func:`conv`'s).
    ``pad_end``: padding at the end only, beside ``padding`` (an uneven ``"same"``).
    """
    dims = input.dim() - 2
    s, p, d, e = (per_dim(v, dims) for v in (stride, padding, dilation, pad_end))
    out, sums = conv_op()(
        input, weight, bias, s, p, d, int(groups), False, e, precision, epilogue, list(vectors), reduce, stats
    )
    return (out, sums) if stats else _kept(out, dims, reduce, keepdim)


def _kept(out: torch.Tensor, dims: int, reduce: str, keepdim: bool) -> torch.Tensor:
    """A reduced ``(N, C)`` result with its ``dims`` spatial dimensions kept as ones when ``keepdim``."""
    return out.reshape(*out.shape[:2], *([1] * dims)) if reduce and keepdim else out


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
    reduce: str = "",
    keepdim: bool = False,
    stats: bool = False,
) -> Any:
    """``torch.conv_transpose{1,2,3}d``'s signature through our kernel (phase decomposition), as :func:`conv_nd`."""
    dims = input.dim() - 2
    s, p, op, d = (per_dim(v, dims) for v in (stride, padding, output_padding, dilation))
    out, sums = conv_op()(
        input, weight, bias, s, p, d, int(groups), True, op, precision, epilogue, list(vectors), reduce, stats
    )
    return (out, sums) if stats else _kept(out, dims, reduce, keepdim)


def batch_norm_affine(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """An eval-mode batch norm as ``x * scale + shift`` per channel: ``(scale, shift)``."""
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return scale, shift


def normalized(
    y: torch.Tensor,
    sums: torch.Tensor,
    kind: str,
    num_groups: int = 1,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    momentum: float = 0.1,
) -> torch.Tensor:
    """``y`` normalized with the statistics its convolution summed (:func:`conv`'s ``stats``).

    ``kind``: ``"batch"`` (training-mode batch norm: per channel over the batch and space; the running
    statistics, when given, are updated as ``F.batch_norm`` does), ``"group"`` (``num_groups`` groups of
    channels per sample) or ``"instance"`` (per sample and channel). Variance from the sums of squares,
    in fp32; then ``weight`` and ``bias`` per channel. Element-wise in PyTorch: the compiler fuses it
    with what follows.
    """
    n, c = y.shape[:2]
    space = y[0, 0].numel()
    if kind == "batch":  # sums: (2, N, C), the sums and the sums of squares
        sums, count = sums.sum(1, keepdim=True), n * space
    elif kind == "group":
        per_group = c // num_groups
        sums = sums.reshape(2, n, num_groups, per_group).sum(-1).repeat_interleave(per_group, dim=2)
        count = space * per_group
    elif kind == "instance":
        count = space
    else:
        raise ValueError(f"normalization {kind!r}: batch, group or instance")
    s1, s2 = sums[0], sums[1]
    mean = s1 / count
    var = (s2 / count - mean * mean).clamp_min(0.0)
    if kind == "batch" and running_mean is not None and running_var is not None:
        with torch.no_grad():
            running_mean.mul_(1.0 - momentum).add_(mean[0].to(running_mean.dtype), alpha=momentum)
            unbiased = var[0] * (count / max(count - 1, 1))
            running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    shape = (*mean.shape, *([1] * (y.dim() - 2)))
    out = (y.float() - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)
    per_channel = (c, *([1] * (y.dim() - 2)))
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out.to(y.dtype)


# ---------------------------------------------------------------- epilogues fused from the graph

# one element-wise step after the convolution: (what it computes from ``acc`` and operand ``v``)
UNARY = {
    "relu": "tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)",
    "sigmoid": "tl.sigmoid(acc)",
    "tanh": "2.0 * tl.sigmoid(2.0 * acc) - 1.0",
    "gelu": "0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))",
    "silu": "acc * tl.sigmoid(acc)",
    "hardswish": "acc * tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0",
    # tanh(log(1 + e^x)) = n / (n + 2), n = e^x (e^x + 2): one exponential, no logarithm (1 above x = 20)
    "mish": "acc * tl.where(acc > 20.0, 1.0, (tl.exp(acc) * (tl.exp(acc) + 2.0))"
    " / (tl.exp(acc) * (tl.exp(acc) + 2.0) + 2.0))",
    "gelu_tanh": "0.5 * acc * (1.0 + 2.0 * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)) - 1.0)",
    "hardsigmoid": "tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0",
    "selu": "1.0507009873554805 * tl.where(acc > 0.0, acc, 1.6732632423543772 * (tl.exp(acc) - 1.0))",
    "logsigmoid": "tl.minimum(acc, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(acc)))",
    "softsign": "acc / (1.0 + tl.abs(acc))",
    "exp": "tl.exp(acc)",
    "log": "tl.log(acc)",
    "sqrt": "tl.sqrt(acc)",
    "abs": "tl.abs(acc)",
    "neg": "-acc",
    "square": "acc * acc",
    "cube": "acc * acc * acc",
}
BINARY = {"add": "acc + {v}", "sub": "acc - {v}", "rsub": "{v} - acc", "mul": "acc * {v}", "div": "acc / {v}",
          "rdiv": "{v} / acc", "minimum": "tl.minimum(acc, {v}, propagate_nan=tl.PropagateNan.ALL)",
          "maximum": "tl.maximum(acc, {v}, propagate_nan=tl.PropagateNan.ALL)"}  # fmt: skip


def epilogue_lines(steps: list[list[Any]]) -> list[str]:
    """Kernel lines for ``steps``: ``[op]``, ``[op, scalar]``, ``[op, "E<i>"]`` (a per-channel vector) or a clamp.

    ``["clamp", lo, hi]`` (either may be None), ``["leaky_relu", slope]``, ``["elu", alpha]``, ``["celu",
    alpha]`` and ``["softplus", beta, threshold]`` take numbers. A value read
    again later: ``["save", k]`` keeps ``acc`` as ``r<k>``, ``["load", k]`` makes ``r<k>`` ``acc`` again,
    and ``"R<k>"`` is a binary step's operand (``x * sigmoid(x)``: save 0, sigmoid, mul R0).
    """
    lines = []
    for step in steps:
        op, args = step[0], step[1:]
        if op == "save":  # a value read again later (the steps form a graph, not a chain)
            lines.append(f"r{int(args[0])} = acc")
        elif op == "load":
            lines.append(f"acc = r{int(args[0])}")
        elif op in UNARY:
            lines.append(f"acc = {UNARY[op]}")
        elif op == "leaky_relu":
            lines.append(f"acc = tl.where(acc >= 0.0, acc, acc * {float(args[0])!r})")
        elif op == "affine":  # acc * scale + shift, both per channel (an eval-mode batch norm)
            scale, shift = (_vector_line(a, lines) for a in args)
            lines.append(f"acc = acc * {scale} + {shift}")
        elif op in ("elu", "celu"):  # alpha * (exp(x) - 1) below zero (celu: exp(x / alpha))
            alpha = float(args[0])
            inner = "acc" if op == "elu" else f"acc / {alpha!r}"
            lines.append(f"acc = tl.where(acc > 0.0, acc, {alpha!r} * (tl.exp({inner}) - 1.0))")
        elif op == "softplus":  # log(1 + exp(beta * x)) / beta, x itself above threshold / beta
            beta, threshold = float(args[0]), float(args[1])
            lines.append(
                f"acc = tl.where(acc * {beta!r} > {threshold!r}, acc, tl.log(1.0 + tl.exp(acc * {beta!r})) / {beta!r})"
            )
        elif op == "clamp":
            lo, hi = args
            if lo is not None:  # NaN stays NaN, as in PyTorch
                lines.append(f"acc = tl.maximum(acc, {float(lo)!r}, propagate_nan=tl.PropagateNan.ALL)")
            if hi is not None:
                lines.append(f"acc = tl.minimum(acc, {float(hi)!r}, propagate_nan=tl.PropagateNan.ALL)")
        elif op in BINARY:
            (operand,) = args
            if isinstance(operand, str) and operand.startswith("R"):  # a value kept by a "save" step
                v = f"r{int(operand[1:])}"
            elif isinstance(operand, str):  # E<i>: one value per output channel (or one for all)
                v = _vector_line(operand, lines)
            else:
                v = repr(float(operand))
            lines.append(f"acc = {BINARY[op].format(v=v)}")
        else:
            raise ValueError(f"no epilogue step {op!r}")
    return lines


def _vector_line(operand: str, lines: list[str]) -> str:
    """Appends the load of per-channel operand ``"E<i>"`` (indexed by the kernel's ``chan``) to ``lines``; its name."""
    v = f"v{operand[1:]}"
    lines.append(f"{v} = tl.load({operand} + (chan % {operand}_n), mask=chan_ok, other=0.0).to(tl.float32)")
    return v


_EPILOGUE_KERNELS: dict[str, Any] = {}
# copied into each generated kernel's module
KERNEL_HELPERS = (_round_tf32, _first_tap, _split_index, _add_per_sample, _over_channels, _finish)


def epilogue_kernel(steps: list[list[Any]], n_vectors: int, base: Any = None) -> Any:
    """``base`` with ``steps`` applied to the tile after the bias, as its own ``@triton.jit`` kernel.

    ``base``: :func:`ks_conv_fwd` (the default) or :func:`ks_conv_depthwise`. The source is generated
    once per distinct (kernel, epilogue) and imported from a file (Triton and Inductor read a kernel's
    source); per-channel operands are the extra pointer arguments ``E0``, ``E1``, ... with their lengths
    ``E0_n``, ..., indexed by the kernel's ``chan`` (global output channel).
    """
    import hashlib
    import importlib.util
    import inspect
    import json
    import tempfile
    from pathlib import Path

    base = base if base is not None else ks_conv_fwd
    base_name = base.fn.__name__
    spec = json.dumps([base_name, steps, n_vectors])
    key = hashlib.sha256(spec.encode()).hexdigest()[:16]
    if key in _EPILOGUE_KERNELS:
        return _EPILOGUE_KERNELS[key]

    def undecorated(fn: Any) -> str:
        return "".join(line for line in inspect.getsource(fn).splitlines(keepends=True) if not line.startswith("@"))

    src = undecorated(base.fn)
    name = f"{base_name}_ep_{key}"
    src = src.replace(f"def {base_name}(", f"def {name}(", 1)
    extra = "".join(f"E{i}, E{i}_n, " for i in range(n_vectors))
    src = src.replace("    X, Wp, Bias, Out,\n", f"    X, Wp, Bias, Out, {extra}\n", 1)
    parts = split_epilogue(steps)
    if (parts["pool"] or parts["channels"]) and base is not ks_conv_fwd:
        raise ValueError(f"a pooling or channel step is fused only into {ks_conv_fwd.fn.__name__}")
    helpers = {h.fn.__name__: undecorated(h.fn) for h in KERNEL_HELPERS}
    if base is ks_conv_fwd:  # the steps go into its tile's epilogue (_finish), the operands passed down to it
        passed = ("Bias, Out, Stats,", f"Bias, Out, Stats, {extra}")  # _finish's parameters and every call of it
        src = src.replace(*passed)
        helpers["_finish"] = _with_steps(helpers["_finish"].replace(*passed), parts)
    else:
        src = _with_steps(src, parts)
    helpers_src = "".join(f"@triton.jit\n{text}\n\n" for text in helpers.values())
    text = f"import triton\nimport triton.language as tl\n\n\n{helpers_src}@triton.jit\n{src}"
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


def _with_steps(src: str, parts: dict[str, Any]) -> str:
    """``src`` (a kernel or :func:`_finish`) with the element-wise steps of ``parts`` written in.

    ``parts``: :func:`split_epilogue`'s. The steps go after the bias, and in the branches after the channel
    step and after the pooling.
    """
    marker = "    if ACTIVATION == 1:\n"
    body = "".join(f"    {line}\n" for line in epilogue_lines(parts["before"]))
    src = src.replace(marker, body + marker, 1)
    for part, marker in (("after_channels", "# (steps after the channel step)"),
                         ("after_pool", "# (steps after the pooling)")):  # fmt: skip
        if parts[part]:  # in that step's branch, on its tile (both places of the channel step)
            lines = "".join(f"        {line}\n" for line in epilogue_lines(parts[part]))
            src = src.replace(f"        {marker}\n", lines)
    return src
