"""feature_extractor: deterministic static features of a candidate's source (AST, no model)."""

from __future__ import annotations

import ast
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.engine.inductor_seed import ATTENTION_MARK, FLASH_MARK
from kernelskill.engine.transforms import applicable
from kernelskill.graph.context import Context
from kernelskill.graph.memory import recall
from kernelskill.graph.search import select_parent
from kernelskill.graph.state import State
from kernelskill.runner.dot_precision import count_exact_dots
from kernelskill.runner.result import NOT_CUSTOM_LABELS
from kernelskill.runner.static_check import dotted_name as _dotted
from kernelskill.runner.static_check import embedded_kernel_trees

_REDUCTIONS = {"sum", "max", "min", "reduce", "argmax", "argmin", "xor_sum", "cumsum", "cumprod"}
_TRANSCENDENTAL = {"exp", "exp2", "log", "log2", "sin", "cos", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow"}
_TORCH_COMPUTE = {
    "matmul", "mm", "bmm", "addmm", "conv1d", "conv2d", "conv3d", "conv_transpose2d", "linear",
    "relu", "gelu", "silu", "softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm",
    "sum", "mean", "max", "min", "exp", "log", "tanh", "sigmoid", "einsum", "baddbmm", "sqrt",
    "scaled_dot_product_attention", "avg_pool2d", "max_pool2d", "cross_entropy", "mse_loss",
}  # fmt: skip


def _is_kernel(fn: ast.FunctionDef) -> bool:
    return any("jit" in _dotted(d) for d in fn.decorator_list)


def _block_literals(tree: ast.AST) -> list[int]:
    """Integer literals bound to BLOCK-like names (assignments, keywords, defaults, configs)."""
    sizes: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and "BLOCK" in node.arg.upper():
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                sizes.append(node.value.value)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and "BLOCK" in t.id.upper() and isinstance(node.value.value, int):
                    sizes.append(node.value.value)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=False):
                if (
                    isinstance(k, ast.Constant)
                    and isinstance(k.value, str)
                    and "BLOCK" in k.value.upper()
                    and isinstance(v, ast.Constant)
                    and isinstance(v.value, int)
                ):
                    sizes.append(v.value)
    return sizes


def _is_dot(call: str) -> bool:
    return call == "tl.dot" or call.endswith(".dot")


def extract_features(source: str) -> dict[str, Any]:
    """Static features of a candidate module (see ``skills_kb.schema.FEATURES``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return {"parse_error": f"SyntaxError: {e.msg} (line {e.lineno})"}
    trees = [tree, *embedded_kernel_trees(tree)]  # TorchInductor modules hold their kernels as strings
    kernels = [n for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef) and _is_kernel(n)]
    kernel_names = {k.name for k in kernels}
    calls_per_kernel: list[list[str]] = []
    has_loops = False
    constexpr_params = 0
    for k in kernels:
        calls = [_dotted(c.func) for c in ast.walk(k) if isinstance(c, ast.Call)]
        calls_per_kernel.append(calls)
        has_loops |= any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(k))
        constexpr_params += sum("constexpr" in ast.unparse(a.annotation) for a in k.args.args if a.annotation)
    all_calls = [c for calls in calls_per_kernel for c in calls]
    tails = [c.rsplit(".", 1)[-1] for c in all_calls]
    loads = [calls.count("tl.load") for calls in calls_per_kernel]
    mask_kw = any(
        isinstance(c, ast.Call)
        and _dotted(c.func) in ("tl.load", "tl.store")
        and any(kw.arg == "mask" for kw in c.keywords)
        for k in kernels
        for c in ast.walk(k)
    )
    launch_sites = sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Subscript) and _dotted(n.func.value) in kernel_names)
            or (isinstance(n.func, ast.Attribute) and n.func.attr == "run" and _dotted(n.func.value) in kernel_names)
        )
    )
    forward_torch_ops = 0
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ModelNew"):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"):
            for c in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                name = _dotted(c.func)
                root, _, tail = name.rpartition(".")
                if tail in _TORCH_COMPUTE and (root.startswith(("torch", "F", "nn")) or root.startswith("self.")):
                    forward_torch_ops += 1
                elif isinstance(c.func, ast.Attribute) and tail in {
                    "matmul",
                    "mm",
                    "bmm",
                    "sum",
                    "mean",
                    "exp",
                    "softmax",
                }:
                    forward_torch_ops += 1
            forward_torch_ops += sum(
                1 for b in ast.walk(fn) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.MatMult)
            )
    blocks = _block_literals(tree)
    uses_dot = any(map(_is_dot, all_calls))
    conv_dot = any(
        "conv" in k.name.lower() and any(map(_is_dot, calls))
        for k, calls in zip(kernels, calls_per_kernel, strict=True)
    )
    has_reduction = any(c.startswith("tl.") and c.rsplit(".", 1)[-1] in _REDUCTIONS for c in all_calls)
    return {
        "num_kernels": len(kernels) + source.count("__global__"),
        "num_launch_sites": launch_sites,
        "uses_dot": uses_dot,
        "dot_fp32_exact": uses_dot and bool(count_exact_dots(source)),
        "has_reduction": has_reduction,
        "has_loops": has_loops,
        "is_pointwise": bool(kernels) and not uses_dot and not has_reduction,
        "uses_atomics": any(t.startswith("atomic_") for t in tails),
        "has_masks": mask_kw,
        "uses_autotune": "triton.autotune" in source or "@autotune" in source,
        "uses_transcendentals": any(t in _TRANSCENDENTAL for t in tails),
        "num_loads": sum(loads),
        "num_stores": all_calls.count("tl.store"),
        "max_loads_per_kernel": max(loads, default=0),
        "max_block_size": max(blocks, default=0),
        "num_constexpr_params": constexpr_params,
        "torch_ops_in_forward": forward_torch_ops,
        "uses_cuda_source": "load_inline" in source,
        "conv_dot_kernel": conv_dot,
        "attention_unfused": ATTENTION_MARK in source[:2000] and FLASH_MARK not in source[:2000],
        "conv_not_own_kernel": applicable("conv_kernel", source) is None,
    }


def feature_extractor(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: choose this round's parent (``graph/search.py``: best-first, sometimes another) and read its features.

    Without short-term memory the pool of parents is not read: the parent is the best.
    """
    ctx = runtime.context or Context()
    parent, why = select_parent(recall(state, ctx))
    features = extract_features(parent["candidate"]["source"])
    # what the review found, beside what the source shows: the main work is not the candidate's own
    features["main_work_not_own"] = bool(NOT_CUSTOM_LABELS & set(parent["review"].get("labels") or []))
    features["own_kernels_needed"] = features["main_work_not_own"] and ctx.kernels == "custom"
    return {"parent": parent, "search_note": why, "features": features}
