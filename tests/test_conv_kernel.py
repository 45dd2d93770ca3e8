"""The convolution kernel family (``engine/conv.py``) on the CPU: Triton's interpreter against PyTorch in float64.

Every form: 1-D / 2-D / 3-D, strided, dilated, grouped, depthwise, transposed (phase decomposition),
asymmetric kernels and padding, channels-last inputs, a fused bias + ReLU epilogue, fp16 inputs, and
the TF32 operand rounding. The sm_90 compile of the kernel runs without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from trace_util import aot_traced_code

from kernelskill.engine.conv import conv, from_module, output_size, pack_weight

FORWARD = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

# (dims, in channels, out channels, kernel, stride, padding, dilation, groups, spatial size)
CASES = {
    "1d": (1, 5, 7, (3,), 1, 1, 1, 1, (11,)),
    "1d-strided-dilated": (1, 4, 6, (3,), 2, 2, 2, 1, (13,)),
    "2d": (2, 3, 8, (3, 3), 1, 1, 1, 1, (7, 6)),
    "2d-strided": (2, 6, 5, (3, 3), 2, 0, 1, 1, (9, 8)),
    "2d-dilated": (2, 4, 4, (3, 3), 1, 2, 2, 1, (8, 8)),
    "2d-asymmetric": (2, 3, 5, (2, 5), (2, 1), (1, 2), 1, 1, (7, 9)),
    "2d-grouped": (2, 8, 12, (3, 3), 1, 1, 1, 4, (6, 6)),
    "2d-depthwise": (2, 6, 6, (3, 3), 1, 1, 1, 6, (6, 7)),
    "2d-depthwise-multiplier": (2, 3, 6, (3, 3), 1, 1, 1, 3, (6, 7)),  # two output channels per input channel
    "3d": (3, 3, 4, (2, 3, 3), (1, 2, 1), (0, 1, 1), 1, 1, (4, 6, 5)),
    "2d-many-channels": (2, 40, 20, (1, 1), 1, 0, 1, 1, (5, 5)),
}


def _inputs(case, transposed, seed=0):
    dims, cin, cout, k, s, p, d, g, space = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, cin, *space, generator=gen)
    shape = (cin, cout // g, *k) if transposed else (cout, cin // g, *k)
    w = torch.randn(*shape, generator=gen) / (cin * len(k)) ** 0.5
    b = torch.randn(cout, generator=gen)
    return x, w, b


# Few channels a group: the default (DIRECT), and, asked for, the flattened (tap, channel) reduction and one tap a step
FEW_CHANNEL_FORMS = {"default": None, "flat-k": {"DIRECT": False, "FLAT_K": True}, "one-tap": {"DIRECT": False}}


FORMS = [(name, "default") for name in sorted(CASES)] + [
    (name, form)
    for name, case in sorted(CASES.items())
    if 1 < case[1] // case[7] < 16
    for form in ("flat-k", "one-tap")
]


@pytest.mark.parametrize(("name", "form"), FORMS)
def test_forward_equals_pytorch(name, form):
    dims, _, _, _, s, p, d, g, _ = CASES[name]
    x, w, b = _inputs(CASES[name], transposed=False)
    want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
    got = conv(x, w, b, s, p, d, g, config=FEW_CHANNEL_FORMS[form])
    assert got.shape == want.shape and got.dtype == torch.float32 and got.is_contiguous()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


TRANSPOSED_CASES = {
    "1d-stride2": (1, 4, 6, (4,), 2, 1, 1, 1, (7,), 1),
    "2d-stride2": (2, 5, 3, (3, 3), 2, 1, 1, 1, (5, 6), 1),
    "2d-stride3-dilated": (2, 4, 4, (3, 2), (3, 2), (1, 0), (2, 1), 1, (4, 5), (2, 1)),
    "2d-grouped": (2, 6, 4, (4, 4), 2, 1, 1, 2, (4, 4), 0),
    "3d-stride2": (3, 3, 5, (3, 3, 3), 2, 1, 1, 1, (3, 4, 3), 1),
    "2d-stride1": (2, 3, 4, (3, 3), 1, 0, 1, 1, (5, 5), 0),
}


# A transposed convolution's forms: the phase decomposition (the default), and the gather form (GATHER: the
# output in order, every tap masked where it does not reach), also with fp32 rank-1 updates (DIRECT)
TRANSPOSED_FORMS = {"phases": None, "gather": {"GATHER": True}, "gather-direct": {"GATHER": True, "DIRECT": True}}


@pytest.mark.parametrize("form", sorted(TRANSPOSED_FORMS))
@pytest.mark.parametrize("name", sorted(TRANSPOSED_CASES))
def test_transposed_equals_pytorch(name, form):
    *case, out_pad = TRANSPOSED_CASES[name]
    dims, _, _, _, s, p, d, g, _ = case
    x, w, b = _inputs(case, transposed=True)
    want = TRANSPOSED[dims](x.double(), w.double(), b.double(), s, p, out_pad, g, d)
    got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=out_pad, config=TRANSPOSED_FORMS[form])
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_the_gather_form_fuses_an_epilogue_and_sums_statistics():
    """The gather form's rows are the output's positions in order (stored whole): the fused element-wise steps,
    the per-channel sums a normalization reads, a spatial mean and a step over the channels see every position
    once."""
    *case, out_pad = TRANSPOSED_CASES["2d-stride3-dilated"]
    dims, _, _, _, s, p, d, g, _ = case
    x, w, b = _inputs(case, transposed=True, seed=5)
    plain = TRANSPOSED[dims](x.double(), w.double(), b.double(), s, p, out_pad, g, d)
    ref = torch.relu(plain) * 0.5
    got, sums = conv(x, w, b, s, p, d, g, transposed=True, output_padding=out_pad, activation="relu",
                     epilogue=[["mul", 0.5]], config={"GATHER": True}, stats=True)  # fmt: skip
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums[0].double(), ref.sum(dim=(2, 3)), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sums[1].double(), (ref * ref).sum(dim=(2, 3)), rtol=1e-4, atol=1e-4)
    kw = dict(transposed=True, output_padding=out_pad, config={"GATHER": True})
    mean = conv(x, w, b, s, p, d, g, reduce="mean", **kw)  # a spatial mean, the output never stored
    torch.testing.assert_close(mean.double(), plain.mean(dim=(2, 3)), rtol=1e-5, atol=1e-5)
    low = conv(x, w, b, s, p, d, g, epilogue=[["channels", "min"]], **kw)  # a step over the output channels
    torch.testing.assert_close(low.double(), plain.amin(1, keepdim=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["1d-strided-dilated", "2d", "2d-asymmetric", "2d-grouped", "3d"])
def test_the_direct_form_is_exact_fp32_whatever_the_precision(name):
    dims, _, _, _, s, p, d, g, _ = CASES[name]
    x, w, b = _inputs(CASES[name], transposed=False, seed=10)
    want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
    got = conv(x, w, b, s, p, d, g, precision="tf32r", config={"DIRECT": True})
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)  # no TF32 rounding anywhere
    *case, out_pad = TRANSPOSED_CASES["2d-stride3-dilated"]
    dims, _, _, _, s, p, d, g, _ = case
    x, w, b = _inputs(case, transposed=True, seed=11)
    want = TRANSPOSED[dims](x.double(), w.double(), b.double(), s, p, out_pad, g, d)
    got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=out_pad, config={"DIRECT": True})
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


# (dims, in channels, out channels, kernel, stride, padding, dilation, groups, spatial size, transposed, config)
TMA_CASES = {
    "2d": (2, 20, 19, (3, 3), 1, 1, 1, 1, (6, 5), False, {}),  # 20 channels: slices of 16, the last masked
    "2d-grouped": (2, 24, 10, (3, 3), 2, 1, 1, 2, (7, 6), False, {}),
    "3d-asymmetric": (3, 8, 5, (2, 1, 3), 1, (1, 0, 1), 1, 1, (3, 4, 5), False, {}),
    "2d-transposed": (2, 8, 6, (4, 4), 2, 1, 1, 1, (4, 5), True, {}),
    "2d-transposed-phases-inner": (2, 8, 6, (3, 3), 2, 1, 1, 1, (4, 5), True, {"PHASE_INNER": True}),
    "1d-transposed-gather": (1, 12, 7, (5,), 3, 2, 1, 1, (6,), True, {"GATHER": True}),
}


@pytest.mark.parametrize("name", sorted(TMA_CASES))
def test_the_weight_read_through_a_tensor_descriptor_gives_the_same_output(name):
    """``TMA_B``: the weight's tiles through a tensor descriptor, whose zeros beyond the out channels (fewer than a
    tile) and the in channels (not a whole slice) stand for the masks."""
    from kernelskill.engine import conv as K

    *case, transposed, config = TMA_CASES[name]
    dims, cin, _, _, s, p, d, g, _ = case
    x, w, b = _inputs(case, transposed=transposed)
    fn = TRANSPOSED[dims] if transposed else FORWARD[dims]
    args = (s, p, 0, g, d) if transposed else (s, p, d, g)
    want = fn(x.double(), w.double(), b.double(), *args)
    cfg = {**config, "TMA_B": True, "DIRECT": False}
    assert K.tma_weight_ok(cin // g, torch.float32, cfg)
    got = conv(x, w, b, s, p, d, g, transposed=transposed, config=cfg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert not K.tma_weight_ok(6, torch.float32, cfg)  # 24 bytes a row: not a multiple of 16
    assert not K.tma_weight_ok(8, torch.float32, {**cfg, "FLAT_K": True})
    assert not K.tma_weight_ok(8, torch.float32, {"TMA_B": False})


def test_fused_bias_and_relu_epilogue_and_a_channels_last_input():
    x, w, b = _inputs(CASES["2d"], transposed=False, seed=3)
    x = x.to(memory_format=torch.channels_last)  # strides, not a copy
    want = F.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1))
    got = conv(x, w, b, padding=1, activation="relu")
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert (got == 0).any() and (got > 0).any()


def test_fp16_inputs_multiply_in_fp16_and_accumulate_in_fp32():
    x, w, b = _inputs(CASES["2d-grouped"], transposed=False, seed=4)
    want = F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4)
    got = conv(x.half(), w.half(), b.half(), padding=1, groups=4, config={"DIRECT": False})  # tl.dot, not DIRECT
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def _to_tf32(t):
    """Each fp32 value rounded to the nearest TF32 value (ties away from zero)."""
    bits = t.contiguous().view(torch.int32).to(torch.int64)
    return ((bits + 0x1000) & 0xFFFFE000).to(torch.int32).view(torch.float32)


def test_tf32_rounding_matches_rounding_the_operands_first():
    """``tf32r`` rounds both operands to TF32 (to nearest) before the products: the same as rounding them outside."""
    x, w, b = _inputs(CASES["2d-strided"], transposed=False, seed=5)
    want = F.conv2d(_to_tf32(x).double(), _to_tf32(w).double(), b.double(), stride=2)
    got = conv(x, w, b, stride=2, precision="tf32r", config={"DIRECT": False})  # DIRECT (the default here) is exact
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    exact = F.conv2d(x.double(), w.double(), b.double(), stride=2)
    assert (got.double() - exact).abs().max() > 1e-6  # the rounding really happened


def test_modules_and_a_packed_weight():
    torch.manual_seed(6)
    for module, x in (
        (torch.nn.Conv3d(2, 3, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)), torch.randn(1, 2, 3, 7, 7)),
        (torch.nn.ConvTranspose1d(3, 2, 5, stride=3, padding=2, output_padding=1), torch.randn(2, 3, 6)),
    ):
        with torch.no_grad():
            torch.testing.assert_close(from_module(module, x), module(x), rtol=1e-5, atol=1e-5)
    w = torch.randn(8, 2, 3, 3)
    packed = pack_weight(w, 2, transposed=False)
    assert packed.shape == (2, 9, 4, 2) and packed.is_contiguous()  # (groups, taps, out, in) per group
    x = torch.randn(1, 4, 5, 5)
    torch.testing.assert_close(conv(x, w, groups=2, padding=1, packed=packed), F.conv2d(x, w, groups=2, padding=1))


def test_sizes_and_refusals():
    assert output_size(7, 3, 2, 1, 1, False) == 4 and output_size(4, 3, 2, 1, 1, True, 1) == 8
    x, w, _ = _inputs(CASES["2d"], transposed=False)
    with pytest.raises(ValueError, match="precision"):
        conv(x, w, precision="fp8")
    with pytest.raises(ValueError, match="activation"):
        conv(x, w, activation="gelu")
    with pytest.raises(ValueError, match="1-D, 2-D or 3-D"):
        conv(x[0], w)
    with pytest.raises(ValueError, match="zero padding"):
        from_module(torch.nn.Conv2d(3, 8, 3, padding="same"), x)


COMPILE = textwrap.dedent(
    """
    import re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kernelskill.engine import conv as K

    def build(kernel, consts, pointers, warps=4, stages=3):
        sig = {n: "constexpr" if n in consts else "*fp32" if n in pointers else "i32" for n in kernel.arg_names}
        return triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})

    ptrs = ("X", "Wp", "Bias", "Out", "E0", "E1", "Stats", "Part")
    for transposed, flat, direct, precision, k in ((False, False, False, "tf32", (1, 3, 3)),
                                                   (True, False, False, "tf32x3", (3, 3, 3)),
                                                   (False, True, False, "ieee", (3, 5, 7)),
                                                   (True, False, True, "ieee", (1, 3, 3))):
        cfg = K.launch_config(3 if flat else 64, 64, k[0] * k[1] * k[2])
        consts = {"KD": k[0], "KH": k[1], "KW": k[2], "TRANSPOSED": transposed, "FLAT_K": flat,
                  "DIRECT": direct, "REDUCE": int(transposed), "HAS_BIAS": True,
                  "ACTIVATION": 1, "PRECISION": precision, "CONTIG_OUT": not transposed,
                  "STATS": 0, "CHANNELS": 0, "CHANNELS_FIRST": 1, "K_EXACT": transposed,
                  "POOL": 0, "PKD": 1, "PKH": 1, "PKW": 1,
                  "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"],
                  "EPI_SPLIT": 1 if flat else 2, "SPLIT_K": 1, "PART": 0, "PHASE_INNER": transposed,
                  "GATHER": direct, "TMA_B": False, "WARP_SPEC": False}
        compiled = build(K.ks_conv_fwd, consts, ptrs, cfg["num_warps"], cfg["num_stages"])
        print("OK", transposed, flat, direct, compiled.metadata.shared)

    unary = [[op] for op in K.UNARY] + [["elu", 0.5], ["celu", 2.0], ["softplus", 2.0, 5.0], ["leaky_relu", 0.1]]
    steps = [["add", "E0"], *unary, ["affine", "E1", "E0"], ["clamp", 0.0, 1.0]]
    kernel = K.epilogue_kernel(steps, 2)  # a generated epilogue kernel
    consts.update(TRANSPOSED=False, FLAT_K=False, DIRECT=False, REDUCE=0, PRECISION="tf32", PHASE_INNER=False,
                  GATHER=False)
    build(kernel, consts, ptrs)
    build(kernel, {**consts, "EPI_SPLIT": 4, "STATS": 1}, ptrs)  # in four column slices
    print("OK epilogue")
    steps = [["save", 0], ["sigmoid"], ["mul", "R0"], ["pool", "max", [2, 2]], ["save", 1], ["mish"], ["add", "R1"]]
    kernel = K.epilogue_kernel(steps, 0)  # x * sigmoid(x), max pooling, then y + mish(y): values kept in registers
    build(kernel, {**consts, "POOL": 1, "PKH": 2, "PKW": 2, "CONTIG_OUT": False, "EPI_SPLIT": 4}, ptrs)
    mean = build(K.ks_conv_fwd, {**consts, "POOL": 2, "PKD": 2, "PKH": 2, "PKW": 2, "REDUCE": 1, "CONTIG_OUT": False},
                 ptrs)  # fmt: skip
    print("OK pooled")
    consts["EPI_SPLIT"] = 1  # a channel step takes the whole tile
    kernel = K.epilogue_kernel([["channels", "min"], ["tanh"], ["pool", "avg", [2, 2]], ["mul", 2.0]], 0)
    build(kernel, {**consts, "CHANNELS": 1, "POOL": 2, "PKH": 2, "PKW": 2, "CONTIG_OUT": False}, ptrs)
    for op in (5, 6):  # logsumexp, softmax
        build(K.ks_conv_fwd, {**consts, "CHANNELS": op, "REDUCE": 0}, ptrs)
    kernel = K.epilogue_kernel([["pool", "max", [2, 2]], ["tanh"], ["channels", "logsumexp"], ["relu"]], 0)
    build(kernel, {**consts, "CHANNELS": 5, "CHANNELS_FIRST": 0, "POOL": 1, "PKH": 2, "PKW": 2, "REDUCE": 0,
                   "CONTIG_OUT": False}, ptrs)  # fmt: skip
    print("OK channels")
    stats = build(K.ks_conv_fwd, {**consts, "STATS": 1, "POOL": 1, "PKH": 2, "PKW": 2, "CONTIG_OUT": False}, ptrs)
    print("OK statistics")
    print("atomics", *sorted({a for c in (mean, stats) for a in re.findall(r"\\batom\\.[a-z0-9._]+", c.asm["ptx"])}))
    build(K.ks_conv_fwd, {**consts, "CHANNELS": 0, "SPLIT_K": 8, "PART": 1}, ptrs)  # split-K: the ranges
    kernel = K.epilogue_kernel([["mish"], ["add", "E0"]], 1)
    build(kernel, {**consts, "CHANNELS": 0, "STATS": 1, "SPLIT_K": 8, "PART": 2}, ptrs)  # the sums, finished
    print("OK split-K")
    dw = {"KD": 1, "KH": 3, "KW": 7, "HAS_BIAS": True, "ACTIVATION": 0, "BLOCK": 512}
    build(K.epilogue_kernel([["save", 0], ["mul", "E0"], ["add", "R0"]], 1, K.ks_conv_depthwise), dw, ptrs)
    print("OK depthwise")
    build(K.ks_to_channels_last, {"ROUND_TF32": True, "BLOCK_C": 32, "BLOCK_S": 64}, ("X", "Out"))
    print("OK layout")
    build(K.ks_conv_fwd, {**consts, "CHANNELS": 0, "TMA_B": True}, ptrs)  # the weight through a tensor descriptor
    build(K.ks_conv_fwd, {**consts, "CHANNELS": 0, "TRANSPOSED": True, "PHASE_INNER": True, "K_EXACT": False,
                          "TMA_B": True}, ptrs)  # fmt: skip
    print("OK tensor descriptor")
    """
)


def test_the_kernel_compiles_for_hopper():
    """The interpreter does not compile; Triton's own compiler for sm_90 does, without a GPU. The spatial mean's and
    the statistics' atomic adds are relaxed: Triton's default (acquire-release) fences each one (in sm_90 SASS a
    ``MEMBAR.ALL.GPU`` before it, waiting for the tile's stores, and an L1 invalidation after)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, timeout=300, env=env)
    assert out.stdout.count("OK") == 12, out.stdout[-2000:] + out.stderr[-3000:]
    assert "atomics atom.global.gpu.relaxed.add.f32\n" in out.stdout, out.stdout[-2000:]


def _all_close(got, want, tol, equal_nan=False):
    """Each output of the rewritten graph matches the model's: shape and values."""
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, equal_nan=equal_nan)


def _rewritten(model, *inputs, twin=None, codes=None):
    """``conv_kernel_forms(gm, "ieee")`` on ``model``'s Dynamo graph: (what it rewrote, the call targets after,
    the rewritten graph's output, the model's own, or ``twin``'s: a copy for a model with state). ``codes``:
    a list the rewritten graphs' code is appended to."""
    from kernelskill.engine.reformulate import conv_kernel_forms

    seen, targets = [], []

    def backend(gm, example_inputs):
        seen.append(conv_kernel_forms(gm, "ieee"))
        targets.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        if codes is not None:
            codes.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend=backend, fullgraph=True)(*inputs)
        want = (twin or model)(*inputs)
    return seen, targets, got, want


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
        self.c = torch.nn.Conv1d(4, 4, 4, groups=2, padding="same")  # uneven "same": one more at the end

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return self.c(y.flatten(2)) * 2.0


def test_a_graphs_convolutions_are_rewritten_onto_the_kernel():
    from kernelskill.engine.conv import conv_nd, conv_transpose_nd

    torch.manual_seed(7)
    seen, targets, got, want = _rewritten(_Net().eval(), torch.randn(2, 3, 6, 6))
    assert conv_nd in targets and conv_transpose_nd in targets and torch.conv1d not in targets
    assert seen == [
        [
            "conv2d -> our implicit-GEMM Triton kernel (ieee), with relu fused before its store",
            "conv_transpose2d -> our implicit-GEMM Triton kernel (ieee)",
            "conv1d -> our implicit-GEMM Triton kernel (ieee), with mul fused before its store",
        ]
    ]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _Padded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding="same")
        self.b = torch.nn.Conv2d(8, 8, (3, 5), padding="same", dilation=(1, 2))
        self.c = torch.nn.Conv2d(8, 8, 2, padding="valid")
        self.d = torch.nn.Conv2d(8, 4, 2, padding="same")  # one more at the end than at the start
        self.e = torch.nn.Conv2d(4, 4, 2, padding="same", groups=4)  # the depthwise stencil, likewise

    def forward(self, x):
        return self.e(self.d(self.c(self.b(self.a(x)))))


def test_a_string_padding_becomes_numbers():
    """``"same"`` and ``"valid"`` run on our kernel with the padding as numbers and match PyTorch; where a
    dimension's ``"same"`` total is odd, PyTorch pads one more at the end, and so does our kernel (``pad_end``)."""
    torch.manual_seed(3)
    codes: list[str] = []
    seen, targets, got, want = _rewritten(_Padded().eval(), torch.randn(2, 3, 9, 11), codes=codes)
    stencil = "conv2d -> our depthwise stencil Triton kernel (ieee)"
    assert seen == [["conv2d -> our implicit-GEMM Triton kernel (ieee)"] * 4 + [stencil]]
    assert torch.conv2d not in targets and codes[0].count("pad_end = (1, 1)") == 2
    assert got.shape == want.shape == (2, 4, 8, 10)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_padding_at_the_end_only_on_every_path():
    """``pad_end`` (an uneven ``"same"``): a 3-D convolution summing its statistics, and a depthwise one whose
    spatial mean is taken after the stencil, match PyTorch's ``"same"``."""
    from kernelskill.engine.conv import conv_nd

    torch.manual_seed(4)
    x, w = torch.randn(2, 3, 6, 7, 5), torch.randn(4, 3, 2, 3, 4)
    want = F.conv3d(x, w, padding="same")
    got, sums = conv_nd(x, w, None, 1, (0, 1, 1), 1, 1, "ieee", pad_end=(1, 0, 1), stats=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums[0], want.sum(dim=(2, 3, 4)), rtol=1e-4, atol=1e-4)
    x, w = torch.randn(2, 4, 9, 10), torch.randn(4, 1, 2, 2)
    mean = conv_nd(x, w, None, 1, 0, 1, 4, "ieee", reduce="mean", pad_end=1)
    torch.testing.assert_close(mean, F.conv2d(x, w, padding="same", groups=4).mean(dim=(2, 3)), rtol=1e-5, atol=1e-5)


def test_the_op_traces_into_a_triton_kernel_node():
    """aot_autograd (Inductor's front end) sees our kernel as a user-defined Triton kernel, not a convolution."""
    code, output = aot_traced_code(
        """
        from kernelskill.engine.reformulate import conv_kernel_forms
        model = torch.nn.Sequential(torch.nn.Conv2d(16, 8, 3, padding=1), torch.nn.ReLU()).eval()
        """,
        'conv_kernel_forms(gm, "tf32r")',
        "torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 16, 8, 8))",
    )
    assert "triton_kernel_wrapper" in code, output
    assert "'ROUND_TF32': True" in code and "'PRECISION': 'tf32'" in code
    assert "convolution" not in code


def test_a_channel_padded_configuration_traces_with_its_padding():
    """A tuned ``PAD_C`` configuration under Inductor's front end: the weight's zero padding is graph ops, the
    padded channels-last copy and the convolution two kernel nodes (on a GPU, tuning picks it while tracing)."""
    code, output = aot_traced_code(
        """
        from kernelskill.engine import conv as K
        from kernelskill.engine.reformulate import conv_kernel_forms
        base = K.launch_config
        K.launch_config = lambda *a: {**base(*a), "PAD_C": 16, "FLAT_K": False, "DIRECT": False, "BLOCK_K": 16}
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Mish()).eval()
        """,
        'conv_kernel_forms(gm, "tf32r")',
        "torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 3, 8, 8))",
    )
    assert "slice_scatter" in code and code.count("triton_kernel_wrapper") >= 2, output  # zeros, the weight copied in
    assert "'K_EXACT': True" in code and "'FLAT_K': False" in code


def test_a_split_k_configuration_traces_into_two_kernel_nodes():
    """Split-K under Inductor's front end: the ranges of the reduction and the finishing pass are two kernel
    nodes, in that order."""
    code, output = aot_traced_code(
        """
        from kernelskill.engine import conv as K
        from kernelskill.engine.reformulate import conv_kernel_forms
        base = K.launch_config
        K.launch_config = lambda *a: {**base(*a), "SPLIT_K": 4}
        model = torch.nn.Sequential(torch.nn.Conv2d(32, 8, 3, padding=1), torch.nn.Mish()).eval()
        """,
        'conv_kernel_forms(gm, "tf32r")',
        "torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 32, 8, 8))",
    )
    assert code.count("triton_kernel_wrapper") >= 2, output
    first, second = code.index("'PART': 1"), code.index("'PART': 2")
    assert first < second and "'SPLIT_K': 4" in code


def test_torch_compile_traces_a_direct_call_of_the_kernel():
    """Dynamo reaches ``conv_nd`` in a fresh process: the op is registered at import, not under the trace."""
    code, output = aot_traced_code(
        """
        from kernelskill.engine.conv import conv_nd
        x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
        """,
        "pass",
        'torch.compile(lambda a, b: torch.relu(conv_nd(a, b, None, 1, 1, 1, 1, "ieee")), backend=backend, '
        "fullgraph=True)(x, w)",
    )
    assert "triton_kernel_wrapper" in code and "relu" in code, output


def test_the_conv_kernel_transform_recaptures_a_seed_with_a_convolution(tmp_path, monkeypatch):
    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SEED_MARK, SeedOutcome
    from kernelskill.engine.inductor_seed import CONV_KERNEL_MARK
    from kernelskill.graph.context import Context

    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    seed = head + "extern_kernels.convolution(x)"
    assert transforms.applicable("conv_kernel", seed) is None
    assert "no convolution" in transforms.applicable("conv_kernel", seed.replace("convolution(", "mm("))
    calls = []

    def capture(ctx, task_path, variant, workdir, *args, conv_kernel=None, **kwargs):
        calls.append(conv_kernel)
        head = f"\"\"\"{SEED_MARK} for t: TorchInductor's kernels (variant '{variant}'), "
        head += f"{CONV_KERNEL_MARK} ({conv_kernel})"
        return SeedOutcome(variant, source=head + ', captured"""\n', capture={}, wall_s=1.0)

    monkeypatch.setattr(transforms, "capture_variant", capture)
    task = tmp_path / "t.py"
    task.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.conv2d(x, x)\n"
    )
    sources, notes, problem = transforms.apply("conv_kernel", seed, Context(), str(task), tmp_path)
    # conv-only products: cuDNN's TF32, and near-fp32 products for the shapes where cuDNN keeps fp32
    assert not problem and calls == ["tf32r", "tf32x3"] and len(sources) == 2 and "conv_kernel" in notes[0]
    assert "already in our kernel" in transforms.applicable("conv_kernel", sources[0])
    task.write_text(task.read_text().replace("return torch.conv2d(x, x)", "return torch.mm(torch.conv2d(x, x), x)"))
    transforms.apply("conv_kernel", seed, Context(), str(task), tmp_path)
    # a GEMM beside it stays fp32 in the seed; the convolutions may still use cuDNN's TF32 (per product)
    assert calls[-2:] == ["tf32r", "tf32x3"]
    transforms.apply("autotune_sweep", sources[0], Context(), str(task), tmp_path)
    assert calls[-1] == "tf32r"  # a later recapture keeps the form and its precision


def test_under_kernels_custom_a_seed_with_a_cublas_gemm_is_recaptured_with_tritons_gemms(tmp_path, monkeypatch):
    """A network's classifier left to cuBLAS beside our convolutions keeps the candidate a library's under
    ``kernels = custom``: there the recapture asks for Triton's GEMM templates (variant ``triton``). Under
    ``kernels = any``, or without a cuBLAS GEMM, the seed's own variant stays."""
    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SEED_MARK, SeedOutcome
    from kernelskill.graph.context import Context

    variants = []

    def capture(ctx, task_path, variant, workdir, *args, conv_kernel=None, **kwargs):
        variants.append(variant)
        return SeedOutcome(variant, source=f'"""{SEED_MARK} {conv_kernel}"""\n', capture={}, wall_s=0.1)

    monkeypatch.setattr(transforms, "capture_variant", capture)
    task = tmp_path / "t.py"
    task.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    conv_only = head + "buf0 = extern_kernels.convolution(x, w)\n"
    with_fc = conv_only + "extern_kernels.addmm(b, buf1, reinterpret_tensor(w2, (8, 4), (1, 8), 0), out=buf2)\n"
    assert transforms.library_gemms(with_fc) == ["addmm"] and transforms.library_gemms(conv_only) == []
    for seed, kernels, want in (
        (with_fc, "custom", "triton"),
        (with_fc, "any", "default"),
        (conv_only, "custom", "default"),
        (with_fc.replace("'default'", "'triton'"), "custom", "triton"),
    ):
        variants.clear()
        sources, _, problem = transforms.apply("conv_kernel", seed, Context(kernels=kernels), str(task), tmp_path)
        assert not problem and len(sources) == 2 and variants == [want, want], (kernels, variants)


def test_a_compiler_seed_with_no_kernel_of_its_own_is_repaired_onto_our_conv_kernel(tmp_path, monkeypatch):
    """A bare convolution's seed is one cuDNN call: the static check rejects it (no custom kernel). Offline, its
    repair is the conv_kernel recapture (both forms: the first in review, the other reviewed beside it); the same
    rejection of a seed without a convolution, or of the reference fallback, has no repair."""
    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SEED_MARK, SeedOutcome
    from kernelskill.graph.context import Context
    from kernelskill.graph.routing import decide_after_review
    from kernelskill.nodes.diagnoser import offline_repair, offline_repairable
    from kernelskill.runner.static_check import NO_KERNEL

    def capture(ctx, task_path, variant, workdir, *args, conv_kernel=None, **kwargs):
        return SeedOutcome(variant, source=f'"""{SEED_MARK} {conv_kernel}"""\n', capture={}, wall_s=0.1)

    monkeypatch.setattr(transforms, "capture_variant", capture)
    task = tmp_path / "t.py"
    task.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.conv2d(x, x)\n"
    )
    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    conv_seed = {"id": "r0-compiler-0", "source": head + "extern_kernels.convolution(x)", "origin": "compiler"}
    gemm_seed = {"id": "r0-compiler-1", "source": head + "extern_kernels.mm(x, x)", "origin": "compiler"}
    for c in (conv_seed, gemm_seed):
        c.update(parent_id=None, round=0, note="")
    rejected = {"round": 0, "status": "rejected", "error_digest": f"static check: {NO_KERNEL}"}
    state = {
        "engine": "offline",
        "round": 0,
        "repairs": 0,
        "budget": {"max_rounds": 1, "max_repairs": 1},
        "task": {"path": str(task)},
        "candidates": [conv_seed, gemm_seed],
        "attempts": [{**rejected, "candidate_id": "r0-compiler-0"}, {**rejected, "candidate_id": "r0-compiler-1"}],
        "current": conv_seed,
        "review": {"status": "rejected", "error_digest": rejected["error_digest"]},
    }
    assert offline_repairable(state) and decide_after_review({**state, "repairable": True})[0] == "diagnoser"
    out = offline_repair(state, Context(run_dir=str(tmp_path)))
    first, *rest = out["candidates"]
    assert out["current"] is first and out["pending_seeds"] == rest and len(rest) == 1 and out["repairs"] == 1
    assert ["tf32r" in first["source"], "tf32x3" in rest[0]["source"]] == [True, True]
    assert all(c["origin"] == "diagnoser" and c["parent_id"] == "r0-compiler-0" for c in out["candidates"])
    assert "conv_kernel" in first["note"] and "library call" in first["verdict"]["root_cause"]
    assert not offline_repairable({**state, "candidates": [*state["candidates"], *out["candidates"]]})  # once
    # no convolution to move, or the reference's own ops: nothing to repair
    assert not offline_repairable({**state, "candidates": [gemm_seed], "current": gemm_seed})
    reference = {**conv_seed, "origin": "reference"}
    assert not offline_repairable({**state, "candidates": [reference], "current": reference})


def test_the_two_conv_kernel_captures_run_side_by_side_on_a_shared_gpu_only(tmp_path, monkeypatch):
    """On a shared GPU (an eval) every timing takes its turn alone, so the two captures compile at once; on a GPU
    of its own they run one after the other, so that neither's tuning is timed beside the other's work."""
    import threading
    import time

    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SEED_MARK, SeedOutcome
    from kernelskill.graph.context import Context
    from kernelskill.runner import gpu_share

    spans, lock = [], threading.Lock()

    def capture(ctx, task_path, variant, workdir, *args, conv_kernel=None, **kwargs):
        t0 = time.perf_counter()
        time.sleep(0.3 if conv_kernel == "tf32r" else 0.1)  # the first one ends last
        with lock:
            spans.append((conv_kernel, t0, time.perf_counter()))
        return SeedOutcome(variant, source=f'"""{SEED_MARK} {conv_kernel}"""\n', capture={}, wall_s=0.3)

    monkeypatch.setattr(transforms, "capture_variant", capture)
    task = tmp_path / "t.py"
    forward = "    def forward(self, x):\n        return torch.conv2d(x, x)\n"
    task.write_text("import torch\nclass Model(torch.nn.Module):\n" + forward)
    seed = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    seed += "extern_kernels.convolution(x)"
    for shared in (False, True):
        spans.clear()
        if shared:
            monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
        sources, _, problem = transforms.apply("conv_kernel", seed, Context(), str(task), tmp_path)
        assert not problem and ["tf32r" in sources[0], "tf32x3" in sources[1]] == [True, True]  # in their order
        (_, a0, a1), (_, b0, b1) = sorted(spans)
        assert (max(a0, b0) < min(a1, b1)) is shared, spans  # overlapping only on a shared GPU


def test_an_epilogue_of_element_wise_steps_runs_in_the_kernels_store():
    torch.manual_seed(8)
    x, w, b = _inputs(CASES["2d-grouped"], transposed=False, seed=8)
    scale, shift = torch.randn(12, 1, 1), torch.randn(1)
    steps = [["mul", "E0"], ["add", 0.5], ["rsub", "E1"], ["clamp", -1.0, 1.5], ["mish"], ["div", 2.0], ["gelu"]]
    got = conv(x, w, b, padding=1, groups=4, epilogue=steps, vectors=[scale, shift])
    y = F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4)
    y = (shift.double() - (y * scale.double() + 0.5)).clamp(-1.0, 1.5)
    want = F.gelu(F.mish(y) / 2.0)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    for op in ("relu", "sigmoid", "tanh", "silu", "hardswish"):
        ref = getattr(F, op)(F.conv2d(x.double(), w.double(), padding=1, groups=4))
        torch.testing.assert_close(conv(x, w, padding=1, groups=4, epilogue=[[op]]).double(), ref, rtol=1e-5, atol=1e-5)
    x_nan = x.clone()
    x_nan[0, :, 2, 3] = float("nan")  # NaN stays NaN through relu, clamp, minimum and maximum, as in PyTorch
    got = conv(x_nan, w, padding=1, groups=4, epilogue=[["relu"], ["clamp", -1.0, 0.5], ["minimum", 0.4],
                                                        ["maximum", "E0"]], vectors=[shift])  # fmt: skip
    y = F.conv2d(x_nan.double(), w.double(), padding=1, groups=4)
    want = torch.maximum(torch.relu(y).clamp(-1.0, 0.5).clamp(max=0.4), shift.double())
    assert got.isnan().sum() == want.isnan().sum() > 0
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)
    leaky = conv(x, w, padding=1, groups=4, epilogue=[["leaky_relu", 0.1]]).double()
    ref = F.leaky_relu(F.conv2d(x.double(), w.double(), padding=1, groups=4), 0.1)
    torch.testing.assert_close(leaky, ref, rtol=1e-5, atol=1e-5)


class _Tail(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 6, 3, padding=1)
        self.scale = torch.nn.Parameter(torch.randn(6, 1, 1, 1))
        self.full = torch.nn.Parameter(torch.randn(6, 4, 5, 5))  # not per channel: ends the chain

    def forward(self, x):
        y = torch.tanh(2.0 - (self.conv(x) + self.scale) * 2.0)
        y = F.gelu(torch.clamp(y, min=-0.5, max=0.5)) / 3.0
        c = self.conv(x)
        return y * self.full, c.relu() + c  # an output read twice: kept in a register


def test_an_element_wise_tail_is_fused_into_the_kernel():
    from kernelskill.engine.conv import conv_nd

    torch.manual_seed(9)
    seen, targets, got, want = _rewritten(_Tail().eval(), torch.randn(2, 3, 4, 5, 5))
    assert torch.tanh not in targets and F.gelu not in targets and targets.count(conv_nd) == 2
    assert seen == [
        [
            "conv3d -> our implicit-GEMM Triton kernel (ieee), with add / mul / rsub / tanh / clamp / gelu / div "
            "fused before its store",
            "conv3d -> our implicit-GEMM Triton kernel (ieee), with relu / add fused before its store",
        ]
    ]
    _all_close(got, want, 1e-5)


@pytest.mark.gpu
def test_every_form_on_the_gpu(monkeypatch):
    """The compiled kernels (not the interpreter): every forward and transposed case, ieee products against fp64,
    one fused epilogue, fused poolings and steps over the channels, split-K, fp16 inputs, and larger convolutions
    in tf32r against fp64 of the TF32-rounded operands. Each in its default configuration: the tuning (tested in
    test_conv_tune.py) would compile a dozen candidates per shape."""
    from kernelskill.engine import conv_tune

    monkeypatch.setenv(conv_tune.ENV, "0")
    dev = "cuda"
    for name, case in CASES.items():
        dims, _, _, _, s, p, d, g, _ = case
        x, w, b = (t.to(dev) for t in _inputs(case, transposed=False))
        want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
        torch.testing.assert_close(conv(x, w, b, s, p, d, g).double(), want, rtol=1e-5, atol=1e-5, msg=name)
    forms = {**TRANSPOSED_FORMS, "phases-inner": {"PHASE_INNER": True}}  # every form, compiled
    for name, (*case, out_pad) in TRANSPOSED_CASES.items():
        dims, _, _, _, s, p, d, g, _ = case
        x, w, b = (t.to(dev) for t in _inputs(case, transposed=True))
        want = TRANSPOSED[dims](x.double(), w.double(), b.double(), s, p, out_pad, g, d)
        for form, config in forms.items():
            got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=out_pad, config=config)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=f"{name} {form}")
    for name in ("2d-many-channels", "2d-grouped", "3d"):  # split-K: partial tiles summed, then finished
        dims, _, _, _, s, p, d, g, _ = CASES[name]
        x, w, b = (t.to(dev) for t in _inputs(CASES[name], transposed=False, seed=13))
        want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
        got = conv(x, w, b, s, p, d, g, epilogue=[["tanh"]], config={"SPLIT_K": 3, "BLOCK_K": 16, "DIRECT": False})
        torch.testing.assert_close(got.double(), torch.tanh(want), rtol=1e-5, atol=1e-5, msg=name)
    for name in ("2d", "2d-grouped", "3d", "1d-strided-dilated"):  # the direct form: exact fp32
        dims, _, _, _, s, p, d, g, _ = CASES[name]
        x, w, b = (t.to(dev) for t in _inputs(CASES[name], transposed=False, seed=12))
        want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
        got = conv(x, w, b, s, p, d, g, precision="tf32r", config={"DIRECT": True})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=name)
    for config in ({}, {"DIRECT": True}):  # an uneven "same": one more position at the end (pad_end)
        x, w = torch.randn(2, 3, 9, 10, device=dev), torch.randn(5, 3, 2, 4, device=dev)
        want = F.conv2d(x.double(), w.double(), padding="same")
        got = conv(x, w, None, 1, (0, 1), 1, 1, False, (1, 1), config=config or None)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=f"pad_end {config}")
    x, w, b = (t.to(dev) for t in _inputs(CASES["2d-grouped"], transposed=False, seed=8))
    steps = [["add", 0.5], ["mish"], ["clamp", -1.0, 1.5]]
    want = F.mish(F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4) + 0.5).clamp(-1.0, 1.5)
    torch.testing.assert_close(conv(x, w, b, padding=1, groups=4, epilogue=steps).double(), want, rtol=1e-5, atol=1e-5)
    for name in sorted(POOLED):  # a fused pooling, and steps after it
        case_name, transposed, kind, window, config = POOLED[name]
        dims, _, _, _, s, p, d, g, _ = case = CASES[case_name]
        s, d = (1, 1) if transposed else (s, d)
        xp, wp, bp = (t.to(dev) for t in _inputs(case, transposed, seed=21))
        got = conv(xp, wp, bp, s, p, d, g, transposed, epilogue=[["pool", kind, window], ["mish"]], config=config)
        fn = TRANSPOSED[dims] if transposed else FORWARD[dims]
        y = fn(xp.double(), wp.double(), bp.double(), *((s, p, 0, g, d) if transposed else (s, p, d, g)))
        torch.testing.assert_close(got.double(), F.mish(POOL_FN[kind, dims](y, window)), rtol=1e-5, atol=1e-5, msg=name)
    xc, wc, bc = (t.to(dev) for t in _inputs(CASES["2d-strided"], transposed=False, seed=23))
    for op, ref in CHANNEL_REF.items():  # a step over the output channels
        got = conv(xc, wc, bc, stride=2, epilogue=[["channels", op], ["tanh"]])
        want = torch.tanh(ref(F.conv2d(xc.double(), wc.double(), bc.double(), stride=2)))
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=op)
    got, sums = conv(xc, wc, bc, stride=2, epilogue=[["relu"]], stats=True)  # a normalization's sums
    want = torch.relu(F.conv2d(xc.double(), wc.double(), bc.double(), stride=2))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    moments = torch.stack([want.sum((2, 3)), (want * want).sum((2, 3))])
    torch.testing.assert_close(sums.double(), moments, rtol=1e-5, atol=1e-4)
    got = conv(x, w, b, padding=1, groups=4, epilogue=[["minimum", "E0"]], vectors=[torch.tensor(0.25)])
    want = torch.minimum(F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4), torch.tensor(0.25))
    torch.testing.assert_close(got.double(), want.to(got.device), rtol=1e-5, atol=1e-5)  # a 0-d operand left on the CPU
    got = conv(x.half(), w.half(), b.half(), padding=1, groups=4, config={"DIRECT": False})  # tl.dot, not DIRECT
    assert got.dtype == torch.float16
    want = F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)
    gen = torch.Generator(device=dev).manual_seed(1)
    for transposed, groups in ((False, 1), (True, 1), (False, 64)):  # a depthwise one: exact fp32 products
        x = torch.randn(16, 64, 56, 56, device=dev, generator=gen)
        w = torch.randn(64, 64 // groups, 3, 3, device=dev, generator=gen) / 24.0
        fn = F.conv_transpose2d if transposed else F.conv2d
        stride = 2 if transposed else 1
        got = conv(x, w, stride=stride, padding=1, groups=groups, transposed=transposed, precision="tf32r")
        rounded = groups == 1  # cuDNN's TF32: both operands rounded to nearest, then products accumulated in fp32
        want = fn(_to_tf32(x).double() if rounded else x.double(), _to_tf32(w).double() if rounded else w.double(),
                  stride=stride, padding=1, groups=groups)  # fmt: skip
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_a_spatial_mean_is_reduced_in_the_kernel():
    torch.manual_seed(13)
    x, w, b = _inputs(CASES["2d-grouped"], transposed=False, seed=13)
    got = conv(x, w, b, padding=1, groups=4, epilogue=[["gelu"]], reduce="mean")
    want = F.gelu(F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=4)).mean((2, 3))
    assert got.shape == (2, 12)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    *case, out_pad = TRANSPOSED_CASES["3d-stride2"]  # tiles span several samples: one add per sample
    dims, _, _, _, s, p, d, g, _ = case
    x, w, b = _inputs(case, transposed=True, seed=14)
    got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=out_pad, reduce="mean")
    want = F.conv_transpose3d(x.double(), w.double(), b.double(), s, p, out_pad, g, d).mean((2, 3, 4))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    x, w, b = _inputs(CASES["2d-depthwise"], transposed=False, seed=15)  # the stencil: reduced after it
    got = conv(x, w, b, padding=1, groups=6, reduce="mean")
    want = F.conv2d(x.double(), w.double(), b.double(), padding=1, groups=6).mean((2, 3))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reduce"):
        conv(x, w, reduce="max")


class _Means(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)
        self.c = torch.nn.Conv1d(3, 5, 3)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)

    def forward(self, x, v, u):
        first = self.pool(F.gelu(self.a(x)))  # (N, 8, 1, 1)
        second = (self.b(v) * 2.0).mean([2, 3, -1], keepdim=True)
        third = self.c(u).mean(-1)  # (N, 5)
        partial = self.a(x).mean(2)  # not every spatial dimension: stored, then reduced by PyTorch
        return first, second, third, partial


def test_a_mean_over_space_after_the_tail_is_fused_into_the_kernel():
    torch.manual_seed(16)
    model = _Means().eval()
    inputs = (torch.randn(2, 3, 6, 5), torch.randn(2, 3, 3, 4, 3), torch.randn(2, 3, 9))
    seen, _, got, want = _rewritten(model, *inputs)
    reduced = [w for w in seen[0] if "spatial mean reduced in the kernel" in w]
    assert len(seen[0]) == 4 and len(reduced) == 3, seen
    assert "gelu fused before its store" in reduced[0] and "mul fused" in reduced[1]
    _all_close(got, want, 1e-5)


POOL_FN = {("max", 1): F.max_pool1d, ("max", 2): F.max_pool2d, ("max", 3): F.max_pool3d,
           ("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d, ("avg", 3): F.avg_pool3d}  # fmt: skip

# (case, transposed, pooling, window, launch configuration or None for launch_config's)
POOLED = {
    "2d-max": ("2d", False, "max", [2, 2], None),  # 3 input channels: the flattened (tap, channel) reduction
    "2d-avg-asymmetric": ("2d-asymmetric", False, "avg", [1, 4], None),
    "2d-grouped-one-tap-per-step": ("2d-grouped", False, "max", [2, 2], {"FLAT_K": False, "BLOCK_K": 16}),
    "2d-direct": ("2d-strided", False, "avg", [2, 2], {"DIRECT": True}),
    "1d-dilated": ("1d-strided-dilated", False, "max", [2], None),
    "3d-max": ("3d", False, "max", [1, 2, 2], {"BLOCK_M": 16}),  # tiles span several samples
    "2d-many-channels": ("2d-many-channels", False, "avg", [2, 2], None),  # channel slices of 16
    "2d-transposed-stride-1": ("2d", True, "max", [2, 2], None),
}


@pytest.mark.parametrize("name", sorted(POOLED))
def test_a_pooling_is_reduced_in_the_kernels_store(name):
    """The pooling (window = stride) after an epilogue, and steps after it: only the pooled tile is stored."""
    case_name, transposed, kind, window, config = POOLED[name]
    dims, _, _, _, s, p, d, g, _ = case = CASES[case_name]
    if transposed:
        s, d = 1, 1
    x, w, b = _inputs(case, transposed, seed=21)
    steps = [["sub", 0.25], ["tanh"], ["pool", kind, window], ["mul", "E0"], ["mish"]]
    scale = torch.randn(w.shape[1] * g if transposed else w.shape[0], 1)
    got = conv(x, w, b, s, p, d, g, transposed, epilogue=steps, vectors=[scale], config=config)
    fn = TRANSPOSED[dims] if transposed else FORWARD[dims]
    args = (s, p, 0, g, d) if transposed else (s, p, d, g)
    y = torch.tanh(fn(x.double(), w.double(), b.double(), *args) - 0.25)
    want = F.mish(POOL_FN[kind, dims](y, window) * scale.double().reshape(-1, *[1] * dims))
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    mean = conv(x, w, b, s, p, d, g, transposed, epilogue=[["pool", kind, window]], config=config, reduce="mean")
    torch.testing.assert_close(mean.double(), POOL_FN[kind, dims](fn(x.double(), w.double(), b.double(), *args),
                                                                  window).mean(tuple(range(2, 2 + dims))),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


def test_a_pooling_the_kernel_cannot_fuse_is_refused():
    x, w, b = _inputs(CASES["2d"], transposed=False)
    for steps, why in (
        ([["pool", "max", [3, 3]]], "power of two"),
        ([["pool", "max", [2, 2]], ["pool", "max", [2, 2]]], "one pooling step"),
        ([["pool", "min", [2, 2]]], "pooling 'min'"),
        ([["pool", "max", [1, 8]]], "for an output of"),
    ):
        with pytest.raises(ValueError, match=why):
            conv(x, w, b, padding=1, epilogue=steps)
    xt, wt, bt = _inputs(CASES["2d"], transposed=True)
    with pytest.raises(ValueError, match="phases"):
        conv(xt, wt, bt, stride=2, transposed=True, epilogue=[["pool", "avg", [2, 2]]])
    xd, wd, bd = _inputs(CASES["2d-depthwise"], transposed=False)
    with pytest.raises(ValueError, match="depthwise"):
        conv(xd, wd, bd, padding=1, groups=6, epilogue=[["pool", "max", [2, 2]]])


class _Pools(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.ConvTranspose2d(3, 6, 3, padding=1)
        self.c = torch.nn.Conv3d(3, 4, 3)
        self.d = torch.nn.Conv2d(3, 8, 3)
        self.e = torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)
        self.f = torch.nn.Conv2d(4, 4, 3, groups=4)
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, x, v, u):
        a = F.mish(self.pool(F.hardswish(self.a(x) - 0.5)))
        b = F.hardtanh(F.max_pool2d(self.b(x), kernel_size=2, stride=2), -1, 1).mean(dim=(2, 3), keepdim=True)
        c = F.max_pool3d(self.c(v), 2)
        d = F.avg_pool2d(torch.tanh(self.d(x)), 2)
        left = (
            F.avg_pool3d(self.e(v) * 0.5, 2),  # a strided transposed convolution: its phases split the windows
            F.max_pool2d(self.f(u), 2),  # depthwise
            F.max_pool2d(self.a(x), 3),  # a window of 9
            F.max_pool2d(self.d(x), 2, stride=1),  # overlapping windows
            F.max_pool2d(self.d(x), 2, padding=1),
            F.avg_pool2d(self.d(x), 2, ceil_mode=True),
        )
        return a, torch.tanh(b), c, d, *left


def test_a_graphs_pooling_after_the_tail_is_fused_into_the_kernel():
    torch.manual_seed(22)
    model = _Pools().eval()
    inputs = (torch.randn(2, 3, 11, 10), torch.randn(2, 3, 6, 7, 8), torch.randn(2, 4, 9, 9))
    seen, _, got, want = _rewritten(model, *inputs)
    fused = [w.partition("with ")[2] for w in seen[0] if "pool" in w]
    assert fused == [
        "sub / hardswish / max_pool2d 2x2 / mish fused before its store",
        "max_pool2d 2x2 / clamp fused before its store, its spatial mean reduced in the kernel (the output is "
        "never stored)",
        "max_pool3d 2x2x2 fused before its store",
        "tanh / avg_pool2d 2x2 fused before its store",
    ], seen
    assert len(seen[0]) == 10
    _all_close(got, want, 1e-5)


def test_a_fused_pooling_traces_into_the_kernel_node():
    code, output = aot_traced_code(
        """
        from kernelskill.engine.reformulate import conv_kernel_forms
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2)).eval()
        """,
        'conv_kernel_forms(gm, "tf32r")',
        "torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 3, 10, 10))",
    )
    assert "triton_kernel_wrapper" in code and "max_pool" not in code, output
    assert "'POOL': 1" in code and "'PKH': 2" in code and "'PKW': 2" in code, code


CHANNEL_REF = {
    "min": lambda t: t.amin(1, keepdim=True), "max": lambda t: t.amax(1, keepdim=True),
    "sum": lambda t: t.sum(1, keepdim=True), "mean": lambda t: t.mean(1, keepdim=True),
    "logsumexp": lambda t: t.logsumexp(1, keepdim=True), "softmax": lambda t: t.softmax(1),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(CHANNEL_REF))
def test_a_step_over_the_output_channels_runs_in_the_tile(op):
    """Every output channel is in the tile: reduced there (the output keeps one channel) or normalized (softmax),
    with steps before and after it; a strided transposed convolution; a pooling after it, or before it."""
    x, w, b = _inputs(CASES["2d-strided"], transposed=False, seed=23)  # 5 output channels: a masked tile
    steps = [["mul", 2.0], ["channels", op], ["tanh"], ["add", "E0"]]
    shift = torch.randn(5 if op == "softmax" else 1)
    got = conv(x, w, b, stride=2, epilogue=steps, vectors=[shift])
    y = CHANNEL_REF[op](F.conv2d(x.double(), w.double(), b.double(), stride=2) * 2.0)
    want = torch.tanh(y) + shift.double().reshape(-1, 1, 1)
    assert got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    *case, out_pad = TRANSPOSED_CASES["2d-stride2"]
    x, w, b = _inputs(case, transposed=True, seed=24)
    _, _, _, _, s, p, d, g, _ = case
    got = conv(x, w, b, s, p, d, g, True, out_pad, epilogue=[["channels", op]], config={"BLOCK_M": 32})
    want = CHANNEL_REF[op](F.conv_transpose2d(x.double(), w.double(), b.double(), s, p, out_pad, g, d))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    x, w, b = _inputs(CASES["2d"], transposed=False, seed=25)
    got = conv(x, w, b, padding=1, epilogue=[["channels", op], ["pool", "max", [2, 2]]], config={"BLOCK_M": 32})
    want = F.max_pool2d(CHANNEL_REF[op](F.conv2d(x.double(), w.double(), b.double(), padding=1)), 2)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    got = conv(x, w, b, padding=1, epilogue=[["pool", "avg", [2, 2]], ["channels", op], ["sigmoid"]])  # pooled first
    want = torch.sigmoid(CHANNEL_REF[op](F.avg_pool2d(F.conv2d(x.double(), w.double(), b.double(), padding=1), 2)))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_a_channel_step_the_kernel_cannot_fuse_is_refused():
    x, w, b = _inputs(CASES["2d-grouped"], transposed=False)
    with pytest.raises(ValueError, match="one group"):
        conv(x, w, b, padding=1, groups=4, epilogue=[["channels", "min"]])
    x, w, b = _inputs(CASES["2d"], transposed=False)
    with pytest.raises(ValueError, match="channel step 'median'"):
        conv(x, w, b, epilogue=[["channels", "median"]])
    with pytest.raises(ValueError, match="one channel step"):
        conv(x, w, b, epilogue=[["channels", "max"], ["pool", "max", [2, 2]], ["channels", "min"]])
    with pytest.raises(ValueError, match="spatial mean"):
        conv(x, w, b, epilogue=[["channels", "sum"]], reduce="mean")
    big = torch.randn(200, 3, 3, 3)
    with pytest.raises(ValueError, match="at most 128"):
        conv(x, big, epilogue=[["channels", "max"]])


class _AcrossChannels(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.ConvTranspose2d(3, 6, 4, stride=2, padding=1)
        self.c = torch.nn.Conv3d(3, 4, 3)
        self.grouped = torch.nn.Conv2d(4, 8, 3, groups=2)
        self.bias = torch.nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x, v, u):
        fused = (
            torch.relu(torch.logsumexp(F.max_pool3d(self.c(v), 2), dim=1, keepdim=True)),  # pooled, then channels
            F.avg_pool2d(self.a(x), 2).amax(1),
            torch.tanh(torch.tanh(torch.min(self.a(x), dim=1, keepdim=True)[0])),
            torch.min(self.a(x) * 2.0, dim=1)[0],  # the channel dimension dropped: squeezed after the kernel
            torch.sigmoid((torch.softmax(self.b(x), dim=1) + 0.5) * 2.0),
            torch.clamp(torch.logsumexp(self.c(v), dim=1, keepdim=True) - 0.1, min=-1, max=1),
            F.max_pool3d(F.softmax(self.c(v), dim=1), 2),
            self.a(x).amax(1, keepdim=True),
            self.a(x).sum(dim=1),
            self.a(x).mean(1, keepdim=True),
            (torch.min(self.a(x), torch.tensor(0.5)) + self.bias) * 2.0,  # element-wise minimum, a 0-d operand
        )
        left = (self.grouped(u).amin(1), torch.max(self.a(x), 1))  # two groups; the indices are used
        return *fused, left[0], left[1][0], left[1][1]


def test_a_graphs_step_over_the_channels_is_fused_into_the_kernel():
    torch.manual_seed(25)
    model = _AcrossChannels().eval()
    inputs = (torch.randn(2, 3, 11, 10), torch.randn(2, 3, 6, 7, 8), torch.randn(2, 4, 9, 9))
    seen, _, got, want = _rewritten(model, *inputs)
    assert [w.partition("with ")[2].removesuffix(" fused before its store") for w in seen[0]] == [
        "max_pool3d 2x2x2 / logsumexp over the channels / relu",
        "avg_pool2d 2x2 / max over the channels",
        "min over the channels / tanh / tanh",
        "mul / min over the channels",
        "softmax over the channels / add / mul / sigmoid",
        "logsumexp over the channels / sub / clamp",
        "softmax over the channels / max_pool3d 2x2x2",
        "max over the channels",
        "sum over the channels",
        "mean over the channels",
        "minimum / add / mul",
        "",
        "",
    ], seen
    _all_close(got, want, 1e-5)


class _OneInputChannel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(1, 8, 3, padding=1)  # one input channel: the depthwise stencil

    def forward(self, x):
        return torch.max(torch.relu(self.a(x)), dim=1, keepdim=True)[0]


def test_a_channel_step_after_a_convolution_of_one_input_channel_stays_in_pytorch():
    """Its convolution runs the depthwise stencil, which fuses element-wise steps only (fusing the step failed
    the trace: "a channel step needs one group of at most 128 output channels")."""
    torch.manual_seed(27)
    seen, _, got, want = _rewritten(_OneInputChannel().eval(), torch.randn(2, 1, 9, 7))
    assert seen == [["conv2d -> our depthwise stencil Triton kernel (ieee), with relu fused before its store"]], seen
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _ReadTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.d = torch.nn.Conv2d(4, 4, 3, groups=4, padding=1)  # depthwise: the stencil kernel
        self.bias = torch.nn.Parameter(torch.randn(4, 1, 1, 1))

    def forward(self, x, v, u):
        y = self.b(v)
        kept = y.clone().detach()
        y = ((y + self.bias) + kept) * kept + kept  # residual adds of the convolution's output
        z = torch.relu(self.a(x))
        z = z * torch.clamp((z + 3) / 6, 0, 1)  # HardSwish written out
        q = self.a(x)
        q = torch.sigmoid(q) * torch.tanh(q) - q * q  # two branches, then a square
        s = torch.logsumexp(self.a(x), dim=1, keepdim=True)
        s = torch.clamp(s * torch.sigmoid(s + 3) / 6 - 0.5, -1, 1)  # after a step over the channels
        m = self.a(x)
        m = F.max_pool2d(m * torch.sigmoid(m), 2)
        m = m + m.tanh()  # after a pooling
        w = self.d(u)
        w = w * torch.sigmoid(w)
        p = self.a(x) * 2.0
        return y, z, q, s, m, w, p + 1.0, torch.tanh(p)  # p is read outside: only the chain before it is fused


def test_steps_that_read_a_value_twice_keep_it_in_a_register():
    torch.manual_seed(26)
    model = _ReadTwice().eval()
    inputs = (torch.randn(2, 3, 11, 10), torch.randn(2, 3, 4, 5, 3), torch.randn(2, 4, 7, 6))
    codes = []
    seen, _, got, want = _rewritten(model, *inputs, codes=codes)
    assert [w.partition("with ")[2].removesuffix(" fused before its store") for w in seen[0]] == [
        "add / add / mul / add",
        "relu / add / div / clamp / mul",
        "sigmoid / tanh / mul / mul / rsub",
        "logsumexp over the channels / add / sigmoid / mul / div / sub / clamp",
        "sigmoid / mul / max_pool2d 2x2 / tanh / add",
        "sigmoid / mul",
        "mul",
    ], seen
    assert """'[["save", 0], ["add", "E0"], ["add", "R0"], ["mul", "R0"], ["add", "R0"]]'""" in codes[0]
    assert "torch.sigmoid" not in codes[0] and "clone" not in codes[0]
    _all_close(got, want, 1e-5)


class _Activations(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.modules_ = torch.nn.ModuleList(
            [torch.nn.Hardswish(), torch.nn.ELU(0.7), torch.nn.Softplus(beta=2.0, threshold=5.0), torch.nn.SELU(),
             torch.nn.Hardsigmoid(), torch.nn.ReLU6(), torch.nn.LogSigmoid(), torch.nn.Softsign(),
             torch.nn.GELU(approximate="tanh"), torch.nn.CELU(0.5)]
        )  # fmt: skip

    def forward(self, x):
        out = [m(self.conv(x)) for m in self.modules_]
        c = self.conv
        out += [F.softplus(c(x)), torch.exp(c(x)), c(x).abs(), -c(x), torch.pow(c(x), 2), c(x) ** 3, torch.square(c(x))]
        out += [torch.sqrt(c(x).abs() + 1.0), torch.log(c(x).abs() + 1.0), c(x).exp().pow(2)]
        return (*out, torch.pow(c(x), 1.7))  # another power: left to PyTorch


def test_activation_modules_and_functions_are_fused_into_the_kernel():
    torch.manual_seed(27)
    seen, _, got, want = _rewritten(_Activations().eval(), torch.randn(2, 3, 11, 10))
    assert [w.partition("with ")[2].removesuffix(" fused before its store") for w in seen[0]] == [
        "hardswish", "elu", "softplus", "selu", "hardsigmoid", "clamp", "logsigmoid", "softsign", "gelu_tanh", "celu",
        "softplus", "exp", "abs", "neg", "square", "cube", "square", "abs / add / sqrt", "abs / add / log",
        "exp / square", "",
    ], seen  # fmt: skip
    _all_close(got, want, 1e-5, equal_nan=True)


@pytest.mark.parametrize("name", ["2d", "2d-grouped", "3d", "1d-strided-dilated"])
def test_the_kernel_sums_a_normalizations_statistics_as_it_stores(name):
    """Per (sample, channel): the sum and the sum of squares of the stored output (tiles of 16 rows: a sample's
    rows padded to whole tiles; the pooled tiles span samples)."""
    from kernelskill.engine.conv import normalized

    dims, _, cout, _, s, p, d, g, _ = CASES[name]
    x, w, b = _inputs(CASES[name], transposed=False, seed=28)
    got, sums = conv(x, w, b, s, p, d, g, epilogue=[["tanh"]], stats=True, config={"BLOCK_M": 16})
    want = torch.tanh(FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g))
    space = tuple(range(2, 2 + dims))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.double(), torch.stack([want.sum(space), (want * want).sum(space)]), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    weight, bias = torch.randn(cout), torch.randn(cout)
    mean, var = torch.zeros(cout), torch.ones(cout)
    ref_mean, ref_var = mean.clone(), var.clone()
    out = normalized(got, sums, "batch", weight=weight, bias=bias, running_mean=mean, running_var=var, momentum=0.2)
    ref = F.batch_norm(want.float(), ref_mean, ref_var, weight, bias, True, 0.2, 1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close((mean, var), (ref_mean, ref_var))
    ref = F.group_norm(want.float(), 2, weight, bias)
    torch.testing.assert_close(normalized(got, sums, "group", 2, weight, bias), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(normalized(got, sums, "instance"), F.instance_norm(want.float()), rtol=1e-4, atol=1e-4)
    pooled, sums = conv(x, w, b, s, p, d, g, epilogue=[["pool", "max", [1] * (dims - 1) + [2]]], stats=True)
    torch.testing.assert_close(sums[1].double(), (pooled.double() ** 2).sum(space), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="statistics"):
        conv(x, w, b, s, p, d, g, reduce="mean", stats=True)


@pytest.mark.parametrize("pad", ["1", "0"])
def test_rows_padded_per_sample_or_not_store_the_same_output(pad, monkeypatch):
    """42 positions per sample in tiles of 16: padded (every tile one sample's consecutive positions, padding rows
    masked) or, with ``KERNELSKILL_CONV_PAD_ROWS=0``, flat over the batch (tiles spanning samples)."""
    monkeypatch.setenv("KERNELSKILL_CONV_PAD_ROWS", pad)
    x, w, b = _inputs(CASES["2d"], transposed=False, seed=31)
    want = F.conv2d(x.double(), w.double(), b.double(), padding=1)
    for steps in ([["relu"]], [["channels", "softmax"], ["mul", 2.0]]):
        got, sums = conv(x, w, b, padding=1, epilogue=steps, stats=True, config={"BLOCK_M": 16})
        ref = torch.relu(want) if steps[0][0] == "relu" else torch.softmax(want, dim=1) * 2.0
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sums.double(), torch.stack([ref.sum((2, 3)), (ref * ref).sum((2, 3))]), rtol=1e-5,
                                   atol=1e-5)  # fmt: skip


class _Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.b = torch.nn.Conv3d(3, 8, 3)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.c = torch.nn.ConvTranspose3d(3, 6, 3, stride=2, padding=1)
        self.inorm = torch.nn.InstanceNorm3d(6)
        self.d = torch.nn.Conv2d(3, 8, 3)
        self.bn2 = torch.nn.BatchNorm2d(8, affine=False)
        self.dw = torch.nn.Conv2d(3, 3, 3, groups=3)  # depthwise: the stencil stores without sums
        self.bn3 = torch.nn.BatchNorm2d(3)

    def forward(self, x, v):
        a = self.bn(self.a(x)) * 2.0
        b = self.gn(F.hardswish(self.b(v))).mean(dim=(2, 3, 4))
        c = self.inorm(self.c(v)) / 2.0
        d = self.bn2(F.max_pool2d(torch.relu(self.d(x)), 2))
        return a, b, c, d, self.bn3(self.dw(x))


def test_a_graphs_normalization_takes_its_statistics_from_the_kernel():
    import copy

    torch.manual_seed(29)
    model = _Norms()  # training mode: batch statistics, running statistics updated
    twin = copy.deepcopy(model)
    inputs = (torch.randn(2, 3, 11, 10), torch.randn(2, 3, 5, 6, 7))
    seen, _, got, want = _rewritten(model, *inputs, twin=twin)
    assert [w.partition("(ieee)")[2] for w in seen[0]] == [
        ", batch_norm's statistics summed in the kernel as it stores",
        ", with hardswish fused before its store, group_norm's statistics summed in the kernel as it stores",
        ", instance_norm's statistics summed in the kernel as it stores",
        ", with relu / max_pool2d 2x2 fused before its store, batch_norm's statistics summed in the kernel as it "
        "stores",
        "",
    ], seen
    _all_close(got, want, 1e-4)
    for (name, mine), (_, theirs) in zip(model.named_buffers(), twin.named_buffers(), strict=True):
        torch.testing.assert_close(mine, theirs, msg=name)


class _EvalNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.b = torch.nn.Conv2d(3, 8, 3)
        self.bn2 = torch.nn.BatchNorm2d(8, affine=False)
        for bn in (self.bn, self.bn2):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.b(x)
        return torch.relu(self.bn(self.a(x))), self.bn2(torch.multiply(torch.tanh(F.softplus(y)), y))


def test_an_eval_mode_batch_norm_is_a_per_channel_step_and_a_training_one_takes_the_kernels_sums():
    import copy

    torch.manual_seed(30)
    model, x = _EvalNorm(), torch.randn(2, 3, 11, 10)
    for mode, fused in (
        ("eval", ["with softplus / tanh / mul / batch_norm (eval) fused before its store",
                  "with batch_norm (eval) / relu fused before its store"]),
        ("train", ["with softplus / tanh / mul fused before its store, batch_norm's statistics summed in the kernel "
                   "as it stores",
                   "batch_norm's statistics summed in the kernel as it stores"]),
    ):  # fmt: skip
        getattr(model, mode)()
        twin = copy.deepcopy(model)
        seen, _, got, want = _rewritten(model, x, twin=twin)
        assert [w.partition("(ieee), ")[2] for w in seen[0]] == fused, seen
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        for (name, mine), (_, theirs) in zip(model.named_buffers(), twin.named_buffers(), strict=True):
            torch.testing.assert_close(mine, theirs, msg=name)


def test_a_normalization_with_the_kernels_sums_traces_into_the_kernel_node():
    code, output = aot_traced_code(
        """
        from kernelskill.engine.reformulate import conv_kernel_forms
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Tanh())
        """,
        'conv_kernel_forms(gm, "tf32r")',
        "torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 3, 10, 10))",
    )
    assert "triton_kernel_wrapper" in code and "'STATS': 1" in code, output
    assert "batch_norm" not in code and "rsqrt" in code, code


def test_a_channels_last_input_is_rounded_in_place_of_a_layout_pass():
    from kernelskill.engine.conv import channels_last

    x = torch.randn(2, 5, 1, 4, 3).to(memory_format=torch.channels_last_3d)
    assert channels_last(x, False) is x  # already channels-last: no pass at all
    got = channels_last(x, True)
    assert got.stride() == x.stride()
    torch.testing.assert_close(got, _to_tf32(x.permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3), rtol=0, atol=0)
    torch.testing.assert_close(channels_last(x.contiguous(), True), got, rtol=0, atol=0)  # the kernel's rounding


def test_the_activations_match_pytorch_far_from_zero_too():
    """Each transcendental epilogue step against PyTorch's own over -60..60 (overflow, underflow, tiny
    results), through a 1x1 convolution that passes the values through exactly."""
    vals = torch.linspace(-60.0, 60.0, 2401, dtype=torch.float64).float()
    vals = torch.cat([vals, torch.tensor([float("inf"), float("-inf"), float("nan")])])
    x = vals.reshape(1, 1, 1, -1)
    w = torch.ones(1, 1, 1, 1)
    fns = {"mish": F.mish, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu, "gelu": F.gelu,
           "logsigmoid": F.logsigmoid, "softsign": F.softsign}  # fmt: skip
    for op, fn in fns.items():
        got = conv(x, w, epilogue=[[op]], config={"DIRECT": True})
        want = fn(x.double())
        torch.testing.assert_close(
            got.double(), want, rtol=2e-6, atol=1e-6, equal_nan=True, msg=lambda m, op=op: f"{op}: {m}"
        )


def test_channels_padded_to_whole_slices_are_zeros_and_change_no_output():
    """``PAD_C``: the channels-last copy gets zero channels up to the padded count (from either layout), and
    the convolution over the padded input and weight is the convolution, forward and transposed."""
    from kernelskill.engine.conv import channels_last

    x = torch.randn(2, 3, 1, 5, 4)
    for src in (x, x.to(memory_format=torch.channels_last_3d)):
        got = channels_last(src, False, 16)
        assert got.shape == (2, 16, 1, 5, 4) and got.stride(1) == 1
        torch.testing.assert_close(got[:, :3], x, rtol=0, atol=0)
        assert not got[:, 3:].any()
    x2 = torch.randn(2, 3, 9, 8, dtype=torch.float64).float()
    w = torch.randn(6, 3, 3, 3) / 5
    b = torch.randn(6)
    cfg = {"PAD_C": 16, "FLAT_K": False, "BLOCK_K": 16, "BLOCK_M": 16}
    want = F.conv2d(x2.double(), w.double(), b.double(), 1, 1)
    got = conv(x2, w, b, 1, 1, config=cfg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    wt = torch.randn(3, 5, 3, 3) / 5  # transposed, stride 2: the padded channels are the reduction's too
    want = F.conv_transpose2d(x2.double(), wt.double(), None, 2, 1, 1)
    got = conv(x2, wt, None, 2, 1, transposed=True, output_padding=1, config=cfg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    # one input and one output channel: the packed weight is (1, taps, 1, 1), whose F.pad was channels-last
    x1, w1 = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 2)
    want = F.conv_transpose2d(x1.double(), w1.double(), None, (3, 1), (2, 0))
    got = conv(x1, w1, None, (3, 1), (2, 0), transposed=True, config={**cfg, "DIRECT": False})
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_a_convolution_outside_our_kernel_goes_to_it_before_the_dot_precision_dense_or_not():
    """The policy sends a compiler seed's convolution in Inductor's template (fp32 dots included) to our kernel
    first, above the ridge point and below it: a strided transposed convolution's template (over a dilated input,
    few FLOPs per byte) went to the dot precision's single-pass TF32 before and stayed slower than our kernel.
    The card itself must apply there too (it asked for dense math). One already in our kernel is left to the
    other rules."""
    from kernelskill.engine.compiler import SEED_MARK
    from kernelskill.engine.inductor_seed import CONV_KERNEL_MARK
    from kernelskill.nodes.feature_extractor import extract_features
    from kernelskill.skills_kb.policy import decide

    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'triton\'), captured"""\n'
    template = head + (
        "@triton.jit\ndef triton_tem_fused_convolution_0(x, w, y):\n"
        "    acc += tl.dot(a, b, allow_tf32=False)\n\n"
        "def call(args):\n    triton_tem_fused_convolution_0.run(x, w, y)\n"
    )
    features = extract_features(template)
    assert features["conv_not_own_kernel"] is True and features["dot_fp32_exact"] is True
    for intensity in (150.0, 2.0):
        d = decide(features, {"arithmetic_intensity": intensity, "runtime_ms": 2.0, "dram_throughput_pct": 30.0})
        assert (d.rule, d.prefer[0]) == ("conv-outside-own-kernel", ["implicit-gemm-conv"]), intensity
    both = {**features, "attention_unfused": True}  # unfused attention beside a convolution: attention first
    assert decide(both, {"arithmetic_intensity": 150.0}).rule == "attention-unfused"
    ours = template.replace("captured", f"{CONV_KERNEL_MARK} (tf32x3), captured")
    assert extract_features(ours)["conv_not_own_kernel"] is False
    assert decide(extract_features(ours), {"arithmetic_intensity": 150.0}).rule == "fp32-dot-off-tensor-cores"
    # no convolution outside our kernel and few FLOPs per byte: the card does not apply
    sparse = decide(extract_features(ours), {"arithmetic_intensity": 2.0, "dram_throughput_pct": 80.0})
    assert "implicit-gemm-conv" not in sparse.allowed and "conv_or_dense_math" in sparse.excluded["implicit-gemm-conv"]


def test_a_convolution_that_is_the_main_work_goes_to_our_kernel_dense_or_not():
    """A seed whose review labels its main work a library's (cuDNN's convolution) is no custom-kernel answer
    until our kernel takes the convolution: the rule fires below the ridge point too, and our card is the one
    it prefers there (the card asked for dense math, so the rule's preference was dropped and the
    launch-configuration sweep came first). The feature comes from the parent's review, beside its source's."""
    from kernelskill.engine.compiler import SEED_MARK
    from kernelskill.nodes.feature_extractor import feature_extractor
    from kernelskill.skills_kb.policy import decide

    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    seed = head + "@triton.jit\ndef triton_poi_fused_add_0(x):\n    tl.store(x, tl.load(x) + 1)\n\n"
    seed += "def call(args):\n    buf0 = extern_kernels.convolution(x, w)\n    triton_poi_fused_add_0.run(buf0)\n"
    parent = {"candidate": {"id": "r0-compiler-0", "source": seed}, "review": {"labels": ["library_main_work"]}}
    runtime = type("Runtime", (), {"context": None})()
    features = feature_extractor({"best": parent, "round": 0}, runtime)["features"]
    assert features["conv_not_own_kernel"] is True and features["main_work_not_own"] is True
    sparse = {"arithmetic_intensity": 5.0, "runtime_ms": 2.0, "dram_throughput_pct": 30.0}
    for feats in (features, {**features, "main_work_not_own": False}):
        d = decide(feats, sparse)
        assert (d.rule, d.prefer[0]) == ("conv-outside-own-kernel", ["implicit-gemm-conv"])


@pytest.mark.parametrize("split", [1, 2, 4])
def test_a_tile_finished_in_column_slices_stores_the_same(split):
    """``EPI_SPLIT``: the epilogue, the store, the statistics, a pooling and a spatial mean on each column slice
    of the tile in turn (64 output channels in one 64-wide tile: slices of 64, 32 and 16 channels)."""
    from kernelskill.engine.conv import epilogue_split

    gen = torch.Generator().manual_seed(41)
    x = torch.randn(2, 5, 6, 8, generator=gen)
    w = torch.randn(64, 5, 3, 3, generator=gen) / 45**0.5
    b, scale = torch.randn(64, generator=gen), torch.randn(64, 1, 1, generator=gen)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "EPI_SPLIT": split}
    steps = [["mul", "E0"], ["mish"], ["mish"], ["sub", 0.25]]
    y = F.conv2d(x.double(), w.double(), b.double(), padding=1) * scale.double()
    want = F.mish(F.mish(y)) - 0.25
    got, sums = conv(x, w, b, padding=1, epilogue=steps, vectors=[scale], stats=True, config=cfg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.double(), torch.stack([want.sum((2, 3)), (want * want).sum((2, 3))]), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    pooled = conv(x, w, b, padding=1, epilogue=[*steps, ["pool", "avg", [2, 2]], ["relu"]], vectors=[scale], config=cfg)
    torch.testing.assert_close(pooled.double(), F.avg_pool2d(want, 2).relu(), rtol=1e-5, atol=1e-5)
    mean = conv(x, w, b, padding=1, epilogue=steps, vectors=[scale], reduce="mean", config=cfg)
    torch.testing.assert_close(mean.double(), want.mean((2, 3)), rtol=1e-5, atol=1e-5)
    wt = torch.randn(5, 64, 3, 3, generator=gen) / 45**0.5  # transposed, stride 2: four phases
    yt = F.conv_transpose2d(x.double(), wt.double(), b.double(), stride=2, padding=1, output_padding=1)
    got = conv(x, wt, b, 2, 1, transposed=True, output_padding=1, epilogue=[["tanh"]], config=cfg)
    torch.testing.assert_close(got.double(), torch.tanh(yt), rtol=1e-5, atol=1e-5)
    assert epilogue_split({"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4}) == 8  # 128 values a thread: 8 x 16
    assert epilogue_split({"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8}) == 8
    assert epilogue_split({"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4}) == 4  # 64 a thread
    assert epilogue_split({"BLOCK_M": 128, "BLOCK_N": 16, "num_warps": 4}) == 1  # 16 a thread: whole
    assert epilogue_split({"BLOCK_M": 256, "BLOCK_N": 32, "num_warps": 4}) == 2  # slices stay 16 channels wide


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_sums_the_reductions_ranges_then_finishes_the_tile(split):
    """``SPLIT_K``: the reduction's steps in ``split`` ranges (more ranges than steps leaves some empty), partial
    tiles summed before the epilogue, so every fused step sees the whole sum: a stored output with statistics,
    a pooling and a channel step, a spatial mean, a transposed convolution of four phases, the rank-1 form of
    few channels and grouped channel slices."""
    gen = torch.Generator().manual_seed(43)
    x = torch.randn(2, 40, 6, 8, generator=gen)  # 40 channels: slices of 16, the last one masked
    w = torch.randn(24, 40, 3, 3, generator=gen) / 360**0.5
    b, scale = torch.randn(24, generator=gen), torch.randn(24, 1, 1, generator=gen)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT_K": split}
    steps = [["mul", "E0"], ["mish"]]
    want = F.mish(F.conv2d(x.double(), w.double(), b.double(), padding=1) * scale.double())
    got, sums = conv(x, w, b, padding=1, epilogue=steps, vectors=[scale], stats=True, config=cfg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums.double(), torch.stack([want.sum((2, 3)), (want * want).sum((2, 3))]), rtol=1e-5,
                               atol=1e-4)  # fmt: skip
    pooled = conv(x, w, b, padding=1, epilogue=[*steps, ["channels", "max"], ["pool", "max", [2, 2]]],
                  vectors=[scale], config=cfg)  # fmt: skip
    torch.testing.assert_close(pooled.double(), F.max_pool2d(want.amax(1, keepdim=True), 2), rtol=1e-5, atol=1e-5)
    mean = conv(x, w, b, padding=1, epilogue=steps, vectors=[scale], reduce="mean", config=cfg)
    torch.testing.assert_close(mean.double(), want.mean((2, 3)), rtol=1e-5, atol=1e-5)
    wt = torch.randn(40, 24, 3, 3, generator=gen) / 360**0.5
    yt = F.conv_transpose2d(x.double(), wt.double(), b.double(), stride=2, padding=1, output_padding=1)
    got = conv(x, wt, b, 2, 1, transposed=True, output_padding=1, epilogue=[["tanh"]], config=cfg)
    torch.testing.assert_close(got.double(), torch.tanh(yt), rtol=1e-5, atol=1e-5)
    for case, config in (("2d", {"DIRECT": True}), ("2d-grouped", {"BLOCK_K": 16})):
        dims, _, _, _, s, p, d, g, _ = CASES[case]
        xs, ws, bs = _inputs(CASES[case], transposed=False, seed=44)
        want = FORWARD[dims](xs.double(), ws.double(), bs.double(), s, p, d, g)
        got = conv(xs, ws, bs, s, p, d, g, config={**config, "SPLIT_K": split})
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=case)


def test_split_k_is_timed_where_the_grid_leaves_multiprocessors_idle():
    from kernelskill.engine import conv_tune
    from kernelskill.engine.conv import grid_work, launch_config

    assert conv_tune.split_counts(16, 144) == [8, 16]  # 16 tiles of 144 steps on 132 multiprocessors
    assert conv_tune.split_counts(100, 9) == [2]  # two ranges fill the GPU
    assert conv_tune.split_counts(16, 7) == []  # too short a reduction to split
    assert conv_tune.split_counts(132, 1000) == []  # the grid already fills the GPU
    assert conv_tune.split_counts(4, 40) == [4, 8]  # each range keeps at least four steps
    # 512 channels, 7 x 7 positions, batch 10: ResNet's last stage
    base = launch_config(512, 512, 9)
    work = grid_work(10 * 7 * 7, 512, 1, 1, 9, 512, base)
    assert work == (16, 144)
    split = [c for c in conv_tune.candidates(base, 512, False, 1, None, work) if "SPLIT_K" in c]
    # on 64-position tiles (32 of them), whose finishing pass keeps a partial tile beside the sum in registers
    assert [(c["SPLIT_K"], c["BLOCK_M"]) for c in split] == [(4, 64), (8, 64)]
    big = grid_work(64 * 56 * 56, 512, 1, 1, 9, 512, base)
    assert not any("SPLIT_K" in c for c in conv_tune.candidates(base, 512, False, 1, None, big))


def test_no_integer_argument_of_a_launch_needs_64_bits_where_the_output_does():
    """A 1x1 convolution with 2**31 outputs (16 x 128 x 1024 x 1024): each integer launch argument fits in
    32 bits. Inductor's codegen of a kernel node fails on a Python int of 2**31 or more (``has_hint`` of an
    int); the unused split-K extents were that large until they became zeros without split-K."""
    from kernelskill.evals.bench_conv import _launches_recorded

    x = torch.empty(16, 64, 1024, 1024, device="meta")
    weight = torch.empty(128, 64, 1, 1, device="meta")
    with _launches_recorded() as launches:
        out = conv(x, weight, torch.empty(128, device="meta"), precision="tf32r")
    assert out.shape == (16, 128, 1024, 1024) and out.numel() >= 2**31
    ints = {name: v for _, values, _, _ in launches for name, v in values.items() if type(v) is int}
    assert ints and max(ints.values()) < 2**31, {k: v for k, v in ints.items() if v >= 2**31}
    assert {"PART_ROWS", "PART_COLS", "PART_STRIDE"} <= set(ints)


@pytest.mark.gpu
def test_inductor_compiles_a_convolution_with_2_31_outputs_on_the_gpu(monkeypatch):
    """The 1x1 convolution of 64 to 128 channels over 16 x 1024 x 1024 positions (2**31 outputs, 8 GiB),
    rewritten onto our kernel and compiled by Inductor: it compiles and matches eager cuDNN in TF32."""
    from torch._inductor.compile_fx import compile_fx

    from kernelskill.engine import conv_tune
    from kernelskill.engine.reformulate import conv_kernel_forms

    monkeypatch.setenv(conv_tune.ENV, "0")
    torch.manual_seed(0)
    model = torch.nn.Conv2d(64, 128, 1).cuda().eval()
    x = torch.rand(16, 64, 1024, 1024, device="cuda")
    seen = []

    def backend(gm, example_inputs):
        seen.extend(conv_kernel_forms(gm, "tf32r"))
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend=backend)(x)
        torch.cuda.synchronize()
        assert seen and got.numel() == 2**31
        err = (got - model(x)).abs().max().item()
    torch._dynamo.reset()
    assert err < 1e-2, err  # TF32 products (both sides) over 64 channels of values in [0, 1)
