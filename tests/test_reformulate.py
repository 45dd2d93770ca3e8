"""Forms of convolutions and poolings that Inductor makes Triton kernels of (engine/reformulate.py)."""

import itertools
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernelskill.engine.reformulate import (
    DIRECT_MAX_TERMS,
    adaptive_avg_pool1d_decomposed,
    adaptive_avg_pool_decomposed,
    addmm_3xtf32,
    avg_pool2d_decomposed,
    avg_pool3d_decomposed,
    conv_for_template,
    conv_transpose_as_conv,
    hoist_sliced_products,
    linear_3xtf32,
    matmul_3xtf32,
    sdpa_3xtf32,
    split_k_splits,
    split_tf32,
    triton_forms,
)

TRANSPOSED = {1: torch.conv_transpose1d, 2: torch.conv_transpose2d, 3: torch.conv_transpose3d}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_transposed_convolution_equals_pytorch(n):
    g = torch.Generator().manual_seed(n)
    size = {1: 9, 2: 6, 3: 4}[n]
    cases = itertools.product([1, 2, 3], [0, 1, 3], [0, 1], [1, 2], [True, False], [2, 3], [1, 2])
    checked = 0
    for stride, pad, out_pad, groups, bias, k, dil in cases:
        # PyTorch's own constraints
        if out_pad >= max(stride, dil) or (size - 1) * stride - 2 * pad + dil * (k - 1) + 1 + out_pad < 1:
            continue
        x = torch.randn(2, 4, *([size] * n), generator=g, dtype=torch.float64)
        w = torch.randn(4, 6 // groups, *([k] * n), generator=g, dtype=torch.float64)
        b = torch.randn(6, generator=g, dtype=torch.float64) if bias else None
        want = TRANSPOSED[n](x, w, b, stride, pad, out_pad, groups, dil)
        got = conv_transpose_as_conv(x, w, b, stride, pad, out_pad, groups, dil)
        assert got.shape == want.shape, (stride, pad, out_pad, groups, k, dil)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        checked += 1
    assert checked > 150


def test_mixed_per_dimension_arguments():
    x = torch.randn(1, 3, 5, 7, dtype=torch.float64)
    w = torch.randn(3, 2, 3, 2, dtype=torch.float64)
    want = torch.conv_transpose2d(x, w, None, (2, 3), (1, 0), (1, 2), 1, (2, 1))
    torch.testing.assert_close(conv_transpose_as_conv(x, w, None, (2, 3), (1, 0), (1, 2), 1, (2, 1)), want)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 2, 1), (2, 3, (3, 2, 1), 2), (1, 1, 1, 4)])
def test_dilated_convolution_as_a_dense_kernel(n, stride, padding, dilation, groups):
    x = torch.randn(2, 8, *([9] * n), dtype=torch.float64)
    w = torch.randn(4, 8 // groups, *([3] * n), dtype=torch.float64)
    d = dilation[:n] if isinstance(dilation, tuple) else dilation
    conv = torch.conv2d if n == 2 else torch.conv3d
    want = conv(x, w, None, stride, padding, d, groups)
    torch.testing.assert_close(conv_for_template(x, w, None, stride, padding, d, groups), want)


@pytest.mark.parametrize(
    "stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 3, 1, 2), (3, 1, 2, 4), (1, "same", 1, 1)]
)
def test_conv1d_as_a_conv2d_equals_pytorch(stride, padding, dilation, groups):
    x = torch.randn(2, 8, 20, dtype=torch.float64)
    w = torch.randn(4, 8 // groups, 5, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)
    want = torch.conv1d(x, w, b, stride, padding, dilation, groups)
    torch.testing.assert_close(conv_for_template(x, w, b, stride, padding, dilation, groups), want)


class _Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 6, 3, padding=1)
        self.t1 = nn.ConvTranspose1d(6, 4, 3, stride=2)
        self.t2 = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.c2 = nn.Conv2d(6, 6, 3)
        self.c3 = nn.Conv2d(6, 6, 3, padding=2, dilation=2)

    def forward(self, x, y):
        a = self.t1(torch.relu(self.c1(x)))
        b = self.c3(self.c2(self.t2(y)))
        return a.sum(-1), torch.nn.functional.conv_transpose2d(y, self.t2.weight, stride=2), b


STUFFED = "stride-1 convolution of the zero-stuffed input"
FORMS = {
    False: sorted(
        ["conv1d -> conv2d", "dilated conv2d -> dense kernel with zeros between taps", f"conv_transpose1d -> {STUFFED}"]
        + [f"conv_transpose2d -> {STUFFED}"] * 2
    ),
    True: sorted(
        [
            "conv1d -> conv2d (then im2col + GEMM if one group)",
            "dilated conv2d -> dense kernel with zeros between taps; conv2d -> im2col + GEMM",
            "conv2d -> im2col + GEMM",  # an ordinary conv2d: rewritten only for the GEMM form
            f"conv_transpose1d -> {STUFFED} (then im2col + GEMM if one group)",
        ]
        + [f"conv_transpose2d -> {STUFFED} (then im2col + GEMM if one group)"] * 2
    ),
}


@pytest.mark.parametrize("as_gemm", [False, True])
def test_triton_forms_rewrite_a_dynamo_graph(as_gemm):
    torch.manual_seed(0)
    model = _Convs().double().eval()
    x, y = torch.randn(2, 4, 10, dtype=torch.float64), torch.randn(2, 4, 5, 5, dtype=torch.float64)
    seen: list[list[str]] = []

    def backend(gm, example_inputs):
        seen.append(triton_forms(gm, as_gemm))
        targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
        assert not targets & {torch.conv1d, torch.conv_transpose1d, torch.conv_transpose2d}
        assert (torch.conv2d in targets) is not as_gemm  # an ordinary conv2d is left as it is without as_gemm
        return gm.forward

    torch._dynamo.reset()
    got = torch.compile(model, backend=backend, fullgraph=True)(x, y)
    assert seen and sorted(seen[0]) == FORMS[as_gemm]
    for g, w in zip(got, model(x, y), strict=True):
        torch.testing.assert_close(g, w)


def _rewrite_only(fn, inputs: tuple, **forms) -> list[list[str]]:
    """:func:`triton_forms`'s report (with ``forms``) on each Dynamo graph of ``fn``, run as rewritten, no Inductor."""
    seen: list[list[str]] = []

    def backend(gm, example_inputs):
        seen.append(triton_forms(gm, **forms))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*inputs)
    return seen


def _inductor_on(model: nn.Module, inputs: tuple, rewrite, check=lambda targets: None) -> list[str]:
    """Compile ``model`` with ``rewrite`` applied to its Dynamo graph, then Inductor (on the CPU).

    aot_autograd traces through the replacement functions and Inductor lowers what they produce; the
    outputs must match eager's. ``check`` sees the graph's call targets after the rewrite. Returns
    the rewrite's report, sorted.
    """
    from torch._inductor.compile_fx import compile_fx

    seen: list[list[str]] = []

    def backend(gm, example_inputs):
        seen.append(rewrite(gm))
        check([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend=backend, fullgraph=True)(*inputs)
        want = model(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert seen
    return sorted(seen[0])


@pytest.mark.parametrize("as_gemm", [False, True])
def test_inductor_compiles_the_rewritten_graph_on_the_cpu(as_gemm):
    torch.manual_seed(0)
    inputs = (torch.randn(2, 4, 10), torch.randn(2, 4, 5, 5))
    assert _inductor_on(_Convs().eval(), inputs, lambda gm: triton_forms(gm, as_gemm)) == FORMS[as_gemm]


@pytest.mark.parametrize(
    "shape,k,stride,padding,dilation",
    [
        ((2, 3, 9, 9), 3, 1, 1, 1),
        ((2, 4, 11, 7), (3, 2), (2, 1), (1, 0), 1),
        ((1, 2, 12, 12), 3, 2, 2, 2),
        ((2, 5, 6, 6), 1, 1, 0, 1),
        ((2, 3, 16, 16), 7, 2, 3, 1),
    ],
)
def test_im2col_gemm_equals_conv2d(shape, k, stride, padding, dilation):
    ks = k if isinstance(k, tuple) else (k, k)
    x = torch.randn(*shape, dtype=torch.float64)
    w = torch.randn(6, shape[1], *ks, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    want = torch.conv2d(x, w, b, stride, padding, dilation)
    got = conv_for_template(x, w, b, stride, padding, dilation, 1, as_gemm=True)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)


def test_gemm_forms_of_one_dimensional_transposed_and_grouped_convolutions():
    x1, w1 = torch.randn(2, 4, 15, dtype=torch.float64), torch.randn(5, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(
        conv_for_template(x1, w1, None, 2, 1, 1, 1, as_gemm=True), torch.conv1d(x1, w1, None, 2, 1)
    )
    x, wt = torch.randn(2, 4, 5, 5, dtype=torch.float64), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    want = torch.conv_transpose2d(x, wt, None, 2, 1, 1)
    torch.testing.assert_close(conv_transpose_as_conv(x, wt, None, 2, 1, 1, as_gemm=True), want)
    wg = torch.randn(6, 2, 3, 3, dtype=torch.float64)  # two groups stay a convolution
    torch.testing.assert_close(
        conv_for_template(x, wg, None, 1, 1, 1, 2, as_gemm=True), torch.conv2d(x, wg, None, 1, 1, 1, 2)
    )


@pytest.mark.parametrize("n", [1, 2, 3])
def test_grouped_convolutions_with_short_reductions_as_sums_of_shifted_inputs(n):
    """Depthwise, channel multipliers and a few channels per group; every stride / padding / dilation."""
    g = torch.Generator().manual_seed(n)
    size, conv, checked = (7 if n < 3 else 5), {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}[n], 0
    for (groups, per_out, per_in), k, stride, pad, dil in itertools.product(
        [(4, 1, 1), (4, 2, 1), (2, 1, 2), (2, 3, 2)], [1, 3], [1, 2], [0, 1, 2], [1, 2]
    ):
        if size + 2 * pad - dil * (k - 1) < 1:
            continue
        x = torch.randn(2, groups * per_in, *([size] * n), generator=g, dtype=torch.float64)
        w = torch.randn(groups * per_out, per_in, *([k] * n), generator=g, dtype=torch.float64)
        b = torch.randn(groups * per_out, generator=g, dtype=torch.float64)
        want = conv(x, w, b, stride, pad, dil, groups)
        torch.testing.assert_close(conv_for_template(x, w, b, stride, pad, dil, groups), want)
        checked += 1
    assert checked > 80


def test_adaptive_average_pooling_in_reducible_ops_equals_pytorch():
    x = torch.randn(2, 3, 50, 50, dtype=torch.float64)
    for size in [7, 5, 1, 50, (3, None), (25, 10), (64, 3)]:  # uneven, even, global, identity, kept, mixed, upsampling
        torch.testing.assert_close(adaptive_avg_pool_decomposed(x, size), F.adaptive_avg_pool2d(x, size))
    torch.testing.assert_close(adaptive_avg_pool_decomposed(x[0], 7), F.adaptive_avg_pool2d(x[0], 7))  # no batch
    x1 = torch.randn(2, 3, 17, dtype=torch.float64)
    for size in [4, 17, 1, (5,)]:
        torch.testing.assert_close(adaptive_avg_pool1d_decomposed(x1, size), torch.adaptive_avg_pool1d(x1, size))


def test_average_pooling_as_a_sum_of_strided_slices_equals_pytorch():
    x = torch.randn(2, 3, 9, 10, 11, dtype=torch.float64)
    cases = [  # window, stride, padding, count_include_pad, divisor_override
        (3, 2, 1, True, None), ((3, 2, 4), (1, 2, 3), (1, 0, 2), False, None), (3, None, 0, True, None),
        (5, 2, 2, False, None), ((2, 3, 3), 1, (1, 1, 0), True, 7), ([3], [2], [1], False, None),
    ]  # fmt: skip
    def last_two(v):  # the 2-D pooling's arguments
        return v[1:] if isinstance(v, tuple) else v

    for k, st, p, include, div in cases:
        want = F.avg_pool3d(x, k, st, p, False, include, div)
        torch.testing.assert_close(avg_pool3d_decomposed(x, k, st, p, False, include, div), want)
        unbatched = avg_pool3d_decomposed(x[0], k, st, p, count_include_pad=include, divisor_override=div)
        torch.testing.assert_close(unbatched, want[0])
        args = (last_two(k), last_two(st), last_two(p), False, include, div)
        torch.testing.assert_close(avg_pool2d_decomposed(x[:, :, 0], *args), F.avg_pool2d(x[:, :, 0], *args))
    with pytest.raises(ValueError):
        avg_pool3d_decomposed(x, 3, 2, 1, True)


class _Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.overlapping = nn.AvgPool3d(3, 2, 1)  # 27 positions, overlapping windows: ATen's, rewritten
        self.large = nn.AvgPool2d(7, 3, 3, count_include_pad=False)  # 49 positions: likewise
        self.tiling = nn.AvgPool3d(3)  # 27 positions, stride = window: Inductor's reduction, left
        self.small = nn.AvgPool3d(2, 1)  # 8 positions: left
        self.ceil = nn.AvgPool3d(3, 2, 1, ceil_mode=True)  # ceil_mode: left

    def forward(self, x):
        return self.overlapping(x), self.large(x[:, :, 0]), self.tiling(x), self.small(x), self.ceil(x)


def test_triton_forms_rewrite_the_average_poolings_inductor_leaves_to_aten():
    torch.manual_seed(0)

    def check(targets):
        assert targets.count(F.avg_pool3d) == 3 and F.avg_pool2d not in targets

    assert _inductor_on(_Pools().eval(), (torch.randn(2, 3, 9, 10, 11),), triton_forms, check) == [
        "avg_pool2d -> sum of strided slices (49 a window)",
        "avg_pool3d -> sum of strided slices (27 a window)",
    ]


class _Grouped(nn.Module):
    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(8, 8, 7, padding=3, groups=8)  # 49 products per output
        self.grouped = nn.Conv2d(8, 16, 3, padding=1, groups=2)  # 4 x 9 = 36
        self.long = nn.Conv2d(16, 16, 3, padding=1, groups=2)  # 8 x 9 = 72: left as is
        self.pool, self.pool1 = nn.AdaptiveAvgPool2d(5), nn.AdaptiveAvgPool1d(3)

    def forward(self, x):
        y = self.long(self.grouped(self.depthwise(x)))
        return self.pool(y), self.pool1(y.flatten(2))


def test_triton_forms_rewrite_short_grouped_convolutions_and_adaptive_pools():
    torch.manual_seed(0)
    assert 8 * 9 > DIRECT_MAX_TERMS

    def check(targets):
        assert targets.count(torch.conv2d) == 1 and F.adaptive_avg_pool2d not in targets

    assert _inductor_on(_Grouped().eval(), (torch.randn(2, 8, 17, 17),), triton_forms, check) == [
        "adaptive_avg_pool1d -> window means / masked sums",
        "adaptive_avg_pool2d -> window means / masked sums",
        "grouped conv2d -> sum of shifted inputs (36 products per output)",
        "grouped conv2d -> sum of shifted inputs (49 products per output)",
    ]


def _truncated(t: torch.Tensor) -> torch.Tensor:
    """What a TF32 tensor-core product sees of an fp32 operand (Triton feeds it unrounded)."""
    return (t.view(torch.int32) & -0x2000).view(torch.float32)


def test_tf32_split_is_exact_and_its_gemm_is_near_fp32():
    finfo = torch.finfo(torch.float32)
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), finfo.max, -finfo.max, 0.0, -0.0, 1e-40])
    x = torch.cat([torch.randn(4096) * 100, special])
    hi, lo = split_tf32(x)
    finite = torch.isfinite(x)
    assert torch.equal(hi[finite] + lo[finite], x[finite])  # max float truncates rather than overflowing
    assert ((hi[finite].view(torch.int32) & 0x1FFF) == 0).all()  # 10 mantissa bits: TF32 takes it unchanged
    assert torch.isinf(hi[-8:-6]).all() and torch.isnan(hi[-6]) and (lo[-8:-5] == 0).all()  # kept, lo 0
    tie = torch.tensor([0x3F801000], dtype=torch.int32).view(torch.float32)
    assert split_tf32(tie)[0].view(torch.int32).item() == 0x3F802000  # ties round away from zero

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 4096, generator=g), torch.randn(4096, 48, generator=g)
    exact = a.double() @ b.double()
    (a_hi, a_lo), (b_hi, b_lo) = split_tf32(a), split_tf32(b)
    # the three products a TF32 GEMM over the split operands makes (low parts truncated again), summed exactly
    three = a_lo.double() @ _truncated(b_hi).double() + a_hi.double() @ _truncated(b_lo).double()
    three += a_hi.double() @ b_hi.double()
    three_err = (three - exact).abs().max().item()
    one_err = (_truncated(a).double() @ _truncated(b).double() - exact).abs().max().item()
    fp32_err = ((a @ b).double() - exact).abs().max().item()
    assert three_err < fp32_err < one_err / 100, (three_err, fp32_err, one_err)
    torch.testing.assert_close(matmul_3xtf32(a, b).double(), exact, rtol=0, atol=4 * fp32_err)


def test_split_gemm_forms_equal_pytorch():
    g = torch.Generator().manual_seed(1)
    a, b, w = (torch.randn(*s, generator=g) for s in [(3, 17, 40), (40, 9), (9, 40)])
    bias = torch.randn(9, generator=g)
    torch.testing.assert_close(matmul_3xtf32(a, b), a @ b, rtol=1e-5, atol=1e-5)  # batched x matrix
    torch.testing.assert_close(linear_3xtf32(a, w, bias), F.linear(a, w, bias), rtol=1e-5, atol=1e-5)
    m = a[0]
    want = torch.addmm(bias, m, b, beta=0.5, alpha=2.0)
    torch.testing.assert_close(addmm_3xtf32(bias, m, b, beta=0.5, alpha=2.0), want, rtol=1e-5, atol=1e-5)
    v = torch.randn(40, generator=g)
    assert torch.equal(matmul_3xtf32(m, v), m @ v)  # vectors and other dtypes: plain matmul
    assert torch.equal(matmul_3xtf32(m.double(), b.double()), m.double() @ b.double())
    x, k = torch.randn(2, 3, 9, 9, generator=g), torch.randn(5, 3, 3, 3, generator=g)
    got = conv_for_template(x, k, None, 2, 1, 1, 1, as_gemm=True, split=True)
    torch.testing.assert_close(got, torch.conv2d(x, k, None, 2, 1), rtol=1e-5, atol=1e-5)


class _Gemms(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 12)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, y, img):
        h = self.fc(x) @ y
        a = F.scaled_dot_product_attention(h[None], h[None], x[None, :, :12], is_causal=True)[0]
        return torch.bmm(h[None], torch.matmul(y.t(), y)[None])[0], torch.addmm(x[:, :12], h, y.t()), self.conv(img), a


def test_triton_forms_split_every_gemm_and_the_im2col_ones():
    torch.manual_seed(0)
    inputs = (torch.randn(8, 16), torch.randn(12, 12), torch.randn(2, 3, 6, 6))

    def check(targets):
        assert not set(targets) & {torch.matmul, torch.bmm, torch.addmm, torch._C._nn.linear, torch.conv2d}

    forms = _inductor_on(_Gemms().eval(), inputs, lambda gm: triton_forms(gm, as_gemm=True, split=True), check)
    assert forms == [
        "addmm -> 3xTF32 split GEMM",
        "bmm -> 3xTF32 split GEMM",
        "conv2d -> im2col + GEMM (3xTF32 split)",
        "linear -> 3xTF32 split GEMM",
        "matmul -> 3xTF32 split GEMM",
        "matmul -> 3xTF32 split GEMM",
        "scaled_dot_product_attention -> softmax of 3xTF32 split GEMMs",
    ]


def test_attention_in_split_gemms_equals_pytorch():
    g = torch.Generator().manual_seed(0)
    checked = 0
    for causal, mask, gqa, scale, (n, s) in itertools.product(
        [False, True], [None, "bool", "float"], [False, True], [None, 0.3], [(5, 5), (4, 7)]
    ):
        if causal and mask:
            continue  # PyTorch takes one or the other
        q = torch.randn(2, 4, n, 8, generator=g, dtype=torch.float64)
        k, v = (torch.randn(2, 2 if gqa else 4, s, d, generator=g, dtype=torch.float64) for d in (8, 6))
        m = None
        if mask == "bool":
            m = torch.rand(n, s, generator=g) > 0.3
            m[:, 0] = True  # no fully masked row
        elif mask == "float":
            m = torch.randn(2, 1, n, s, generator=g, dtype=torch.float64)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, scale=scale, enable_gqa=gqa)
        torch.testing.assert_close(sdpa_3xtf32(q, k, v, m, 0.0, causal, scale, gqa), want)
        m32 = m.float() if mask == "float" else m
        got32 = sdpa_3xtf32(q.float(), k.float(), v.float(), m32, 0.0, causal, scale, gqa)
        torch.testing.assert_close(got32.double(), want, rtol=1e-5, atol=1e-5)  # the split products, near fp32
        checked += 1
    assert checked == 32

    q = torch.randn(1, 2, 4, 8)  # attention that may drop out is left to PyTorch
    dropout = _rewrite_only(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5), (q,), split=True)
    assert dropout == [[]]


class _Unrolled(nn.Module):
    """An LSTM-like loop: one input projection per step of x[:, t], a recurrent one, and a too-sparse use."""

    def __init__(self):
        super().__init__()
        self.x2h, self.h2h = nn.Linear(6, 8), nn.Linear(8, 8, bias=False)
        self.w = nn.Parameter(torch.randn(6, 8))

    def forward(self, x, h):
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.x2h(x[:, t]) + self.h2h(h) + x[:, t] @ self.w)
            outs.append(h)
        y = torch.stack(outs, 1)
        return y, self.x2h(y[:, 0, :6]), x[0] @ self.w  # one slice of 2 along dim 0: left as is


def test_products_of_slices_are_hoisted_into_one_product():
    torch.manual_seed(0)

    def check(targets):
        assert targets.count(torch._C._nn.linear) == 1 + 4 + 1  # the hoisted one, 4 recurrent, the unrelated one
        assert targets.count(torch.matmul) == 1  # the hoisted x @ w (the x[0] @ w one stays operator.matmul)

    forms = _inductor_on(_Unrolled().eval(), (torch.randn(3, 4, 6), torch.randn(3, 8)), hoist_sliced_products, check)
    assert forms == [
        "4 linear calls on slices of one tensor -> one linear over the whole tensor",
        "4 matmul calls on slices of one tensor -> one matmul over the whole tensor",
    ]


def test_split_k_is_chosen_for_few_output_tiles_and_a_long_reduction():
    assert split_k_splits(256, 256, 524288) == 64  # 4 tiles of 128 x 128: 256 programs
    assert split_k_splits(8, 8, 8192) == 8  # every split keeps 1024 of the reduction
    assert split_k_splits(256, 256, 6144) == 4  # 1536 each (8 would leave 768)
    assert split_k_splits(256, 256, 4100) == 4  # a power of two that divides k (8 does not)
    assert split_k_splits(1024, 1024, 524288) == 1  # 64 tiles fill the GPU already
    assert split_k_splits(256, 256, 2048) == 1  # a short reduction
    assert split_k_splits(4096, 64, 16384) == 1  # a reduction below 8x the longer output side
    assert split_k_splits(256, 256, 4097) == 1  # odd: no power of two divides it


class _LongReductions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8192, 8)
        self.short = nn.Linear(64, 8)

    def forward(self, a, b, c):
        return a @ b, torch.matmul(a, b), self.fc(a), self.short(c), c @ c.t()


def test_gemms_with_a_long_reduction_become_split_k_products():
    torch.manual_seed(0)
    kinds = []

    def check(targets):
        kinds.extend(getattr(t, "__name__", str(t)) for t in targets)
        assert targets.count(torch._C._nn.linear) == 1  # the short linear stays
        assert operator.matmul in targets  # and the square c @ c.t()

    a, b, c = torch.randn(8, 8192), torch.randn(8192, 8), torch.randn(64, 64)
    forms = _inductor_on(_LongReductions().eval(), (a, b, c), triton_forms, check)
    assert forms == sorted(
        ["GEMM (8 x 8192) by (8192 x 8) -> 8 split-K partial products (one bmm) and their sum"] * 3
    )
    assert kinds.count("matmul_split_k") == 2 and kinds.count("linear_split_k") == 1


def test_half_precision_gemms_keep_one_product():
    a, b, c = torch.randn(8, 8192).half(), torch.randn(8192, 8).half(), torch.randn(64, 64).half()
    seen = _rewrite_only(_LongReductions().half(), (a, b, c))
    assert seen == [[]]  # partial sums rounded to half precision would lose accuracy
