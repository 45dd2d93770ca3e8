"""A fused attention kernel that Inductor can take into a compiler seed (the ``flash_attention`` skill).

Inductor lowers ``scaled_dot_product_attention`` either to a library call (PyTorch's fused
memory-efficient or flash kernels: "main work not custom") or, in the Triton-template variant, to its
math decomposition: one GEMM for the scores, a softmax and a second GEMM, with the whole score matrix
written to memory and read back (8 x 16 x 2048^2 fp32 scores are 2.1 GB per pass). The recapture of the
``flash_attention`` skill rewrites each such call in the Dynamo graph (:func:`flash_sdpa`) into
``torch.ops.kernelskill.flash_attention``, a ``torch.library.triton_op`` whose body launches
:func:`ks_flash_attention_fwd` through ``wrap_triton``. Inductor traces through the op and copies the
kernel's source into its output module like its own kernels, so the captured seed stays standalone.

The kernel streams key / value blocks past a block of query rows and keeps the running row maximum and
denominator of the online softmax (card ``online-softmax``), so scores never leave registers. Its products
are exact fp32 (``input_precision="ieee"``); the skill also proposes the three ``dot_precision`` variants of
them (``tf32x3``, ``tf32``, ``tf32r``). A causal mask is PyTorch's (query ``i`` sees keys ``j <= i``, aligned to
the top left), and the key blocks past the diagonal are skipped.

``nn.MultiheadAttention`` reaches the Dynamo graph as one ``multi_head_attention_forward`` call; when it
returns no weights and has no masks (:func:`mha_eligible`), :func:`flash_mha` replaces it with the same
projections around the fused kernel.

``nn.TransformerEncoderLayer`` in eval mode without gradients is one fast-path op
(``torch._transformer_encoder_layer_fwd``) that Inductor leaves to PyTorch; :func:`encoder_layer` writes
it out as the layer's ops for every template capture, with the attention fused in the skill's recapture.

Taken: no ``attn_mask``, no dropout, 3-D or 4-D query / key / value with head dimensions in
:data:`HEAD_DIMS`, the same floating dtype, and the key / value heads dividing the query heads when
``enable_gqa`` (otherwise equal batch and head sizes). Anything else is left to the other forms.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

HEAD_DIMS = (16, 32, 64, 128)  # tl.arange needs a power of two, tl.dot at least 16
DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # loaded, then computed in fp32
OP_NAME = "kernelskill::flash_attention"
_SDPA = torch._C._nn.scaled_dot_product_attention


@triton.jit
def ks_flash_attention_fwd(
    Q,
    K,
    V,
    Out,
    sm_scale,
    stride_qz,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kz,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vz,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_oz,
    stride_oh,
    stride_om,
    stride_od,
    H,
    KV_GROUP,
    M_CTX,
    N_CTX,
    HEAD_DIM: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """Out[z, h, rows] = softmax(Q K^T * sm_scale [causal]) V for one block of BLOCK_M query rows."""
    pid_m = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = pid_zh // H
    h = pid_zh % H
    hk = h // KV_GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_v = tl.arange(0, V_DIM)
    row_ok = offs_m < M_CTX
    q_ptrs = Q + z * stride_qz + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    k_base = K + z * stride_kz + hk * stride_kh
    v_base = V + z * stride_vz + hk * stride_vh
    # exp(x) = exp2(x * log2(e)); Inductor passes a Python float scale as fp64, and tl.dot takes one dtype
    qk_scale = tl.full([], sm_scale * 1.4426950408889634, tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, V_DIM], tl.float32)
    hi = N_CTX
    if CAUSAL:
        hi = tl.minimum(N_CTX, (pid_m + 1) * BLOCK_M)  # keys past the block's last row are all masked
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < N_CTX
        k = tl.load(
            k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd, mask=col_ok[None, :], other=0.0
        ).to(tl.float32)
        s = tl.dot(q, k, input_precision="ieee") * qk_scale
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing kept yet stays at zero
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + cols[:, None] * stride_vn + offs_v[None, :] * stride_vd, mask=col_ok[:, None], other=0.0
        ).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    o_ptrs = Out + z * stride_oz + h * stride_oh + offs_m[:, None] * stride_om + offs_v[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None])


def launch_config(head_dim: int, v_dim: int) -> dict[str, int]:
    """Tile sizes and warps by head size.

    The configuration nearest the best of every dot precision (ieee / tf32x3 / tf32), measured on an H200 over
    24 configurations on 2 shapes per class (docs/data/flash-sweep-h200.jsonl): within 8 % of each best on average
    for heads over 64, within 3 % for the others.
    """
    if max(head_dim, v_dim) > 64:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3}


def _flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float) -> torch.Tensor:
    """``softmax(q @ k^T * scale [causal]) @ v`` for 4-D ``(batch, heads, length, dim)`` tensors."""
    from torch.library import wrap_triton

    z, h, m, d = q.shape
    n, dv = k.shape[2], v.shape[3]
    out = torch.empty((z, h, m, dv), dtype=q.dtype, device=q.device)
    cfg = launch_config(d, dv)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]), z * h, 1)
    wrap_triton(ks_flash_attention_fwd)[grid](
        q,
        k,
        v,
        out,
        scale,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        h,
        h // k.shape[1],
        m,
        n,
        HEAD_DIM=d,
        V_DIM=dv,
        BLOCK_M=cfg["BLOCK_M"],
        BLOCK_N=cfg["BLOCK_N"],
        CAUSAL=is_causal,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )
    return out


_OP: Any = None


def flash_op() -> Any:
    """``torch.ops.kernelskill.flash_attention`` (registered on first use, once per process)."""
    global _OP
    if _OP is None:
        ns = torch.ops.kernelskill
        if hasattr(ns, "flash_attention"):  # registered by another import of this module
            _OP = ns.flash_attention
        else:
            _OP = torch.library.triton_op(OP_NAME, _flash_attention, mutates_args=())
    return _OP


def flash_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` through the fused kernel (a call :func:`eligible` took)."""
    if attn_mask is not None or dropout_p:
        raise ValueError("flash_sdpa takes no attn_mask and no dropout (the rewrite leaves such calls alone)")
    three = query.dim() == 3
    if three:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    out = flash_op()(query, key, value, bool(is_causal), factor)
    return out.squeeze(0) if three else out


def kernel_takes(dtype: Any, *head_sizes: int) -> str | None:
    """None when the fused kernel takes ``dtype`` (:data:`DTYPES`) and these head sizes (:data:`HEAD_DIMS`)."""
    if any(size not in HEAD_DIMS for size in head_sizes):
        sizes = " / ".join(map(str, head_sizes))
        return f"head size{'s' if len(head_sizes) > 1 else ''} {sizes} not in {HEAD_DIMS}"
    return None if dtype in DTYPES else f"dtype {dtype} not among the kernel's dtypes (fp32 / fp16 / bf16)"


def eligible(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: Any, enable_gqa: Any) -> str | None:
    """None when :func:`flash_sdpa` computes this call exactly as PyTorch does, else why not.

    The arguments are example tensors (fake or real) and the call's static arguments.
    """
    if attn_mask is not None:
        return "has an attn_mask"
    if dropout_p:
        return "may drop out"
    ts = (query, key, value)
    if not all(isinstance(t, torch.Tensor) for t in ts):
        return "query / key / value not all tensors"
    if len({t.dim() for t in ts}) != 1 or query.dim() not in (3, 4):
        return "not 3-D or 4-D alike"
    if len({t.dtype for t in ts}) != 1 or key.shape[-1] != query.shape[-1]:
        return "dtypes or query / key head sizes differ"
    if why := kernel_takes(query.dtype, query.shape[-1], value.shape[-1]):
        return why
    if key.shape[-2] != value.shape[-2] or key.shape[:-2] != value.shape[:-2]:
        return "key and value shapes differ"
    lead_q, lead_k = tuple(query.shape[:-2]), tuple(key.shape[:-2])
    if lead_q != lead_k:
        grouped = (
            enable_gqa
            and lead_q[:-1] == lead_k[:-1]
            and lead_k[-1] > 0
            and lead_q[-1] % lead_k[-1] == 0
            and query.dim() == 4
        )
        if not grouped:
            return "batch / head sizes differ (broadcast)"
    return None


def flash_mha(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: torch.Tensor | None,
    in_proj_bias: torch.Tensor | None,
    bias_k: torch.Tensor | None,
    bias_v: torch.Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor | None,
    training: bool = True,
    key_padding_mask: torch.Tensor | None = None,
    need_weights: bool = True,
    attn_mask: torch.Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: torch.Tensor | None = None,
    k_proj_weight: torch.Tensor | None = None,
    v_proj_weight: torch.Tensor | None = None,
    static_k: torch.Tensor | None = None,
    static_v: torch.Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[torch.Tensor, None]:
    """``F.multi_head_attention_forward`` (``nn.MultiheadAttention``) with its attention fused.

    Only what :func:`mha_eligible` takes: batched ``(L, N, E)`` inputs, no masks, weights not returned, no
    added key / value biases or zero attention, no dropout. The projections stay linear layers.
    """
    length, batch, embed = query.shape
    source, head = key.shape[0], embed // num_heads
    if use_separate_proj_weight:
        assert q_proj_weight is not None and k_proj_weight is not None and v_proj_weight is not None
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        assert in_proj_weight is not None
        wq, wk, wv = in_proj_weight.chunk(3)
    bq, bk, bv = in_proj_bias.chunk(3) if in_proj_bias is not None else (None, None, None)

    def heads(x: torch.Tensor, n: int) -> torch.Tensor:  # (n, N, E) -> (N, H, n, head)
        return x.view(n, batch, num_heads, head).permute(1, 2, 0, 3)

    q = heads(F.linear(query, wq, bq), length)
    k = heads(F.linear(key, wk, bk), source)
    v = heads(F.linear(value, wv, bv), source)
    out = flash_sdpa(q, k, v).permute(2, 0, 1, 3).reshape(length, batch, embed)
    return F.linear(out, out_proj_weight, out_proj_bias), None


def encoder_layer(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_type: int | None = None,
    fused: bool = False,
) -> torch.Tensor:
    """``torch._transformer_encoder_layer_fwd`` written out as the ops of ``nn.TransformerEncoderLayer``.

    In eval mode without gradients the layer calls that one fast-path op, which Inductor leaves to
    PyTorch (a seed with no kernel of its own). Written out (batch-first ``src``, no mask), Inductor
    generates its GEMMs, norms and activations; ``fused``: the attention through :func:`flash_sdpa`.
    """
    if mask is not None:
        raise ValueError("encoder_layer takes no mask (the rewrite leaves such calls alone)")
    batch, length, _ = src.shape
    head = embed_dim // num_heads
    attend = flash_sdpa if fused else F.scaled_dot_product_attention

    def self_attention(x: torch.Tensor) -> torch.Tensor:
        qkv = F.linear(x, qkv_weight, qkv_bias).view(batch, length, 3, num_heads, head).permute(2, 0, 3, 1, 4)
        out = attend(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape(batch, length, embed_dim)
        return F.linear(out, proj_weight, proj_bias)

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    if norm_first:
        x = src + self_attention(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + self_attention(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def encoder_layer_fused(*args: Any, **kwargs: Any) -> torch.Tensor:
    """:func:`encoder_layer` with its attention fused."""
    return encoder_layer(*args, **{**kwargs, "fused": True})


ENCODER_LAYER = torch._transformer_encoder_layer_fwd


def encoder_layer_eligible(src: Any, embed_dim: Any, num_heads: Any, mask: Any, fused: bool = False) -> str | None:
    """None when :func:`encoder_layer` computes this fast-path call (batch-first ``src``, no mask).

    ``fused``: with its attention through the fused kernel (head sizes in :data:`HEAD_DIMS`, :data:`DTYPES`).
    """
    if mask is not None:
        return "has a mask"
    if not isinstance(src, torch.Tensor) or src.dim() != 3 or not src.is_floating_point():
        return "src not a batched floating (N, L, E) tensor"
    if not isinstance(embed_dim, int) or not isinstance(num_heads, int) or num_heads <= 0 or embed_dim % num_heads:
        return "head count unknown or not dividing the embedding"
    return kernel_takes(src.dtype, embed_dim // num_heads) if fused else None


_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)


def mha_eligible(args: dict[str, Any]) -> str | None:
    """None when :func:`flash_mha` computes a ``multi_head_attention_forward`` call with these bound arguments."""
    if args.get("need_weights", True):
        return "returns the attention weights"
    for name in ("key_padding_mask", "attn_mask", "bias_k", "bias_v", "static_k", "static_v"):
        if args.get(name) is not None:
            return f"has {name}"
    if args.get("add_zero_attn") or args.get("is_causal"):
        return "add_zero_attn / is_causal"
    if args.get("dropout_p") and args.get("training", True):
        return "may drop out"
    q, k, v = (args.get(n) for n in ("query", "key", "value"))
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return "query / key / value not all tensors"
    if not q.dim() == k.dim() == v.dim() == 3:
        return "not batched (L, N, E) tensors"
    heads = args.get("num_heads")
    if not isinstance(heads, int) or heads <= 0 or q.shape[-1] % heads:
        return "head count unknown or not dividing the embedding"
    if len({q.dtype, k.dtype, v.dtype}) != 1:
        return "dtypes differ"
    if why := kernel_takes(q.dtype, q.shape[-1] // heads):
        return why
    if k.shape[:2] != v.shape[:2] or k.shape[1] != q.shape[1]:
        return "key / value lengths or batch differ"
    return None


def _example(arg: Any) -> Any:
    """An FX node argument's example value (its fake tensor), or the argument itself when it is a constant."""
    return arg.meta.get("example_value") if hasattr(arg, "meta") else arg


def _never_raises(check: Callable[..., str | None]) -> Callable[..., str | None]:
    """A node check that reports an exception as its reason: a graph it does not understand is left as it is."""

    @functools.wraps(check)
    def safe(*args: Any, **kwargs: Any) -> str | None:
        try:
            return check(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            return f"not understood: {type(e).__name__}: {e}"

    return safe


@_never_raises
def encoder_node_eligible(node: Any, static_arg: Any, fused: bool = False) -> str | None:
    """:func:`encoder_layer_eligible` for an FX node of the encoder layer's fast-path op."""
    dims = static_arg(node, 1, "embed_dim", None), static_arg(node, 2, "num_heads", None)
    return encoder_layer_eligible(_example(node.args[0]), *dims, static_arg(node, 18, "mask", None), fused)


@_never_raises
def sdpa_node_eligible(node: Any, static_arg: Any) -> str | None:
    """:func:`eligible` (or :func:`mha_eligible`) for an FX ``call_function`` node of an attention op.

    The ops: ``scaled_dot_product_attention`` and ``multi_head_attention_forward``.
    """
    if node.target is F.multi_head_attention_forward:
        try:
            bound = _MHA_SIGNATURE.bind(*node.args, **node.kwargs).arguments
        except TypeError as e:
            return f"arguments not understood: {e}"
        return mha_eligible({n: _example(a) for n, a in bound.items()})
    if node.target is ENCODER_LAYER:
        return encoder_node_eligible(node, static_arg, fused=True)
    if node.target is not _SDPA:
        return "not scaled_dot_product_attention"
    vals = [_example(a) for a in node.args[:3]]
    if len(vals) < 3:
        return "query / key / value not positional"
    mask, dropout = static_arg(node, 3, "attn_mask", None), static_arg(node, 4, "dropout_p", 0.0)
    return eligible(vals[0], vals[1], vals[2], mask, dropout, static_arg(node, 7, "enable_gqa", False))


# attention op -> (its name in a rewrite's report, its replacement through the fused kernel)
FUSED = {
    _SDPA: ("scaled_dot_product_attention", flash_sdpa),
    F.multi_head_attention_forward: ("multi_head_attention_forward", flash_mha),
}
