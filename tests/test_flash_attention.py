"""The fused attention kernel (``engine/flash_attention.py``) and its rewrite of Dynamo graphs, on the CPU.

The kernel runs in Triton's interpreter against PyTorch's attention in float64; the rewrite is
checked on Dynamo graphs; the tracing of the op into a Triton-kernel node (what Inductor compiles)
is checked in a child process without the interpreter, where kernels are real ``JITFunction``\\ s.
The capture and timing of the fused seed on a GPU are in ``tests/test_offline_gpu.py``.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from trace_util import aot_traced_code

from kernelskill.engine.flash_attention import eligible, flash_sdpa, launch_config
from kernelskill.engine.reformulate import flash_eligible, triton_forms

CASES = list(itertools.product([False, True], [(5, 5), (70, 70), (33, 90), (90, 33)], [False, True]))


@pytest.mark.parametrize("causal, lengths, gqa", CASES)
def test_fused_kernel_equals_pytorch(causal, lengths, gqa):
    g = torch.Generator().manual_seed(len(CASES) * causal + lengths[0] + gqa)
    (m, n), d, dv = lengths, (16 if gqa else 64), (32 if causal else 16)
    q = torch.randn(2, 4, m, d, generator=g)
    k, v = (torch.randn(2, 2 if gqa else 4, n, e, generator=g) for e in (d, dv))
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=gqa)
    got = flash_sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_fused_kernel_takes_strided_three_dimensional_inputs_and_a_scale():
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(3, 37, 4, 32, generator=g)  # (which, length, heads, dim): heads as a strided view
    q, k, v = (t.transpose(0, 1) for t in qkv.unbind(0))
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.3)
    torch.testing.assert_close(flash_sdpa(q, k, v, scale=0.3).double(), want, rtol=1e-5, atol=1e-5)
    want3 = F.scaled_dot_product_attention(q[0].double(), k[0].double(), v[0].double(), is_causal=True)
    got3 = flash_sdpa(q[0].unsqueeze(0), k[0].unsqueeze(0), v[0].unsqueeze(0), is_causal=True)[0]
    torch.testing.assert_close(got3.double(), want3, rtol=1e-5, atol=1e-5)


def test_only_calls_the_kernel_computes_exactly_are_eligible():
    q = torch.randn(2, 4, 8, 16)
    assert eligible(q, q, q, None, 0.0, False) is None
    assert eligible(q, q, q, torch.ones(8, 8, dtype=torch.bool), 0.0, False) == "has an attn_mask"
    assert eligible(q, q, q, None, 0.1, False) == "may drop out"
    odd = torch.randn(2, 4, 8, 48)
    assert "head sizes 48" in eligible(odd, odd, odd, None, 0.0, False)
    assert "dtypes" in eligible(q.double(), q.double(), q.double(), None, 0.0, False)
    kv = torch.randn(2, 2, 8, 16)
    assert eligible(q, kv, kv, None, 0.0, True) is None  # grouped query attention
    assert "broadcast" in eligible(q, kv, kv, None, 0.0, False)
    assert "not 3-D or 4-D" in eligible(q[0, 0], q[0, 0], q[0, 0], None, 0.0, False)
    wide, narrow = launch_config(128, 128), launch_config(64, 64)
    assert wide["BLOCK_M"] * 128 <= narrow["BLOCK_M"] * 64  # wide heads: no larger fp32 accumulator tile
    for cfg in (wide, narrow):  # tl.dot takes power-of-two tiles of at least 16
        assert all(cfg[b] >= 16 and cfg[b] & (cfg[b] - 1) == 0 for b in ("BLOCK_M", "BLOCK_N")), cfg


class _TwoAttentions(torch.nn.Module):
    def forward(self, q, k, v, mask):
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # left to PyTorch
        return fused + masked


def test_triton_forms_fuse_the_eligible_attention_calls():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 24, 16, generator=g) for _ in range(3))
    mask = torch.rand(24, 24, generator=g) > 0.3
    mask[:, 0] = True
    seen = []

    def backend(gm, example_inputs):
        seen.append((flash_eligible(gm), triton_forms(gm), triton_forms(gm, flash=True)))
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        seen.append(targets.count(torch._C._nn.scaled_dot_product_attention))
        return gm.forward

    torch._dynamo.reset()
    got = torch.compile(_TwoAttentions(), backend=backend, fullgraph=True)(q, k, v, mask)
    assert seen == [(1, [], ["scaled_dot_product_attention -> fused Triton flash kernel"]), 1]
    torch.testing.assert_close(got, _TwoAttentions()(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_the_fused_op_traces_into_a_triton_kernel_node():
    """aot_autograd (Inductor's front end) sees one user-defined Triton kernel, not attention's math."""
    code, output = aot_traced_code(
        """
        import torch.nn.functional as F
        from kernelskill.engine.reformulate import triton_forms
        q = torch.randn(2, 4, 40, 16)
        """,
        "triton_forms(gm, flash=True)",
        "torch.compile(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True) * 2, "
        "backend=backend, fullgraph=True)(q)",
    )
    assert "triton_kernel_wrapper" in code, output
    assert "'CAUSAL': True" in code and "'HEAD_DIM': 16" in code
    assert "softmax" not in code and "bmm" not in code


@pytest.mark.parametrize(
    "self_attention, bias, separate", [(True, True, False), (False, False, False), (False, True, True)]
)
def test_fused_multihead_attention_equals_pytorch(self_attention, bias, separate):
    from kernelskill.engine.flash_attention import flash_mha, mha_eligible

    torch.manual_seed(3)
    kdim = None if not separate else 24
    mha = torch.nn.MultiheadAttention(64, 4, bias=bias, kdim=kdim, vdim=kdim).eval()
    x = torch.randn(9, 2, 64)  # (L, N, E), as the module passes it on
    kv = x if self_attention else torch.randn(13, 2, kdim or 64)
    args = (
        x, kv, kv, 64, 4, mha.in_proj_weight, mha.in_proj_bias, None, None, False, 0.0,
        mha.out_proj.weight, mha.out_proj.bias,
    )  # fmt: skip
    extra = {"training": False, "need_weights": False, "use_separate_proj_weight": separate}
    if separate:
        extra.update(q_proj_weight=mha.q_proj_weight, k_proj_weight=mha.k_proj_weight, v_proj_weight=mha.v_proj_weight)
    want, _ = F.multi_head_attention_forward(*args, **extra)
    got, weights = flash_mha(*args, **extra)
    assert weights is None
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    bound = {"query": x, "key": kv, "value": kv, "num_heads": 4, **extra}
    assert mha_eligible(bound) is None
    assert mha_eligible({**bound, "need_weights": True}) == "returns the attention weights"
    assert mha_eligible({**bound, "attn_mask": torch.ones(9, 9)}) == "has attn_mask"
    assert "head size 8" in mha_eligible({**bound, "num_heads": 8})


@pytest.mark.parametrize("cross", [False, True])
def test_modules_with_multihead_attention_are_fused_in_their_graph(cross):
    """Self-attention of a batch-first module and cross-attention of a sequence-first one. (In eval mode
    under no_grad, nn.TransformerEncoderLayer takes PyTorch's fused fast path instead, one op the rewrite
    leaves alone.)"""
    torch.manual_seed(4)
    x, memory = torch.randn(2, 11, 64), torch.randn(7, 2, 64)
    if cross:
        module = torch.nn.MultiheadAttention(64, 2, bias=False).eval()

        def call(x):
            return module(x.transpose(0, 1), memory, memory, need_weights=False)[0]
    else:
        module = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()

        def call(x):
            return module(x, x, x, need_weights=False)[0]

    seen = []

    def backend(gm, example_inputs):
        seen.append((flash_eligible(gm), triton_forms(gm, flash=True)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(call, backend=backend, fullgraph=True)(x)
        want = call(x)
    assert seen == [(1, ["multi_head_attention_forward -> fused Triton flash kernel"])], seen
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
@pytest.mark.parametrize("flash", [False, True])
def test_transformer_encoder_fast_path_is_written_out(norm_first, activation, flash):
    """In eval mode under no_grad each nn.TransformerEncoderLayer is one fast-path op Inductor leaves to
    PyTorch; the template variants write it out as its ops (attention fused with ``flash``)."""
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, dim_feedforward=96, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 13, 64)
    seen = []

    def backend(gm, example_inputs):
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        seen.append((targets.count(torch._transformer_encoder_layer_fwd), flash_eligible(gm)))
        seen.append(triton_forms(gm, flash=flash))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(encoder, backend=backend, fullgraph=True)(x)
        want = encoder(x)
    form = "transformer encoder layer (fast path) -> its ops" + (", attention fused" if flash else "")
    assert seen == [(2, 2), [form, form]], seen
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_nodes_the_checks_do_not_understand_are_left_alone():
    """A capture analyses every graph: an odd node must give a reason, never an exception."""
    from types import SimpleNamespace

    from kernelskill.engine.flash_attention import encoder_node_eligible, sdpa_node_eligible
    from kernelskill.engine.reformulate import _static_arg

    for target in (torch._transformer_encoder_layer_fwd, F.multi_head_attention_forward):
        odd = SimpleNamespace(target=target, args=(), kwargs={})
        assert sdpa_node_eligible(odd, _static_arg).startswith(("not understood", "arguments not understood"))
    assert encoder_node_eligible(SimpleNamespace(args=()), _static_arg).startswith("not understood")


COMPILE = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kernelskill.engine.flash_attention import ks_flash_attention_fwd as kernel, launch_config

    # sm_scale as fp64 too: Inductor types a Python float argument of a user-defined kernel so
    for d, causal, scale in ((128, True, "fp32"), (64, False, "fp64")):
        cfg = launch_config(d, d)
        consts = {"HEAD_DIM": d, "V_DIM": d, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"], "CAUSAL": causal}
        sig = {n: "constexpr" if n in consts else "*fp32" if n in ("Q", "K", "V", "Out") else
               scale if n == "sm_scale" else "i32" for n in kernel.arg_names}
        options = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        print("OK", d, compiled.metadata.shared)
    """
)


def test_the_fused_kernel_compiles_for_hopper():
    """The interpreter does not compile; Triton's own compiler for sm_90 does, without a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, timeout=300, env=env)
    assert out.stdout.count("OK") == 2, out.stdout[-2000:] + out.stderr[-3000:]
