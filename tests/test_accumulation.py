"""The compensated_dot repair: Kahan-summed tl.dot loops (text rewrite, numerics in the interpreter)."""

import ast
import importlib.util
import sys

import pytest
import torch
from test_precision import GEMM, inductor

from kernelskill.engine.accumulation import compensable, compensated
from kernelskill.engine.precision import with_precision
from kernelskill.runner.static_check import embedded_kernel_trees

KERNEL = """import triton
import triton.language as tl


@triton.jit
def row_dots(a_ptr, b_ptr, out_ptr, K, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, 16)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((16, 16), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * 16 + rm[None, :])
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(out_ptr + rm[:, None] * 16 + rm[None, :], acc)
"""


def test_inductor_gemm_template_gets_a_compensation_tile():
    src = inductor("01_linear_gelu_scale_triton")
    out, n = compensated(src)
    assert n == 1 and compensable(src) == 1
    assert "acc_kc = tl.zeros_like(acc)" in out and "acc = acc_kt" in out
    kernels = embedded_kernel_trees(ast.parse(out))  # the kernel strings still parse
    assert len(kernels) == len(embedded_kernel_trees(ast.parse(src)))
    init = out.index("acc_kc = tl.zeros_like(acc)")
    assert out.index("acc = tl.zeros(") < init < out.index("for k_idx in")  # before the K loop
    assert compensated(out) == (out, 0)  # applied once


def test_tf32_products_and_lone_dots_are_left_alone():
    src = inductor("01_linear_gelu_scale_triton")
    assert compensated(with_precision(src, "tf32")) == (with_precision(src, "tf32"), 0)
    assert compensable(with_precision(src, "tf32x3")) == 1  # near-fp32 products: the sum is the error
    lone = "acc = tl.zeros((16, 16), dtype=tl.float32)\nacc += tl.dot(a, b, input_precision='ieee')\n"
    assert compensable(lone) == 0  # no loop: nothing to carry between blocks
    multi_line_init = GEMM.replace(
        "acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)", "acc = tl.zeros(\n        (BLOCK, BLOCK), dtype=tl.float32)"
    )
    assert compensable(GEMM) == 1 and compensable(multi_line_init) == 0
    line = 'acc += tl.dot(a, b, input_precision="ieee")'
    commented = GEMM.replace(line, line + "  # (K block)")
    assert 'acc_kp = tl.dot(a, b, input_precision="ieee") - acc_kc  #' in compensated(commented)[0]
    scaled = GEMM.replace(line, line + " * 0.5")
    split = GEMM.replace(line, 'acc += tl.dot(a, b,\n                      input_precision="ieee")')
    assert compensable(scaled) == 0 and compensable(split) == 0


def _load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_compensated_loop_is_much_closer_to_float64(tmp_path):
    """512 K blocks of positive products: the plain running sum drifts, the compensated one does not."""
    plain = _load(tmp_path, "acc_plain", KERNEL)
    comp = _load(tmp_path, "acc_comp", compensated(KERNEL)[0])
    k = 8192
    torch.manual_seed(0)
    a, b = torch.rand(16, k), torch.rand(k, 16)
    exact = a.double() @ b.double()
    errors = []
    for mod in (plain, comp):
        out = torch.empty(16, 16)
        mod.row_dots[(1,)](a, b, out, k, BLOCK_K=16)
        errors.append((out.double() - exact).abs().max().item())
    assert errors[1] < errors[0] / 5, errors
    assert errors[1] < 1e-3 * exact.abs().max().item() * 1e-3, errors


@pytest.mark.parametrize("name", ["01_linear_gelu_scale_default", "26_layer_norm_default"])
def test_no_dot_nothing_to_compensate(name):
    assert compensable(inductor(name)) == 0


def _state(attempts, candidates, current):
    return {
        "engine": "offline",
        "round": 0,
        "repairs": 0,
        "budget": {"max_rounds": 2, "max_repairs": 1},
        "candidates": candidates,
        "attempts": attempts,
        "current": current,
        "review": {"status": attempts[0]["status"], "error_digest": "x"},
    }


def _cand(cid, source, origin="compiler", parent=None):
    return {"id": cid, "source": source, "origin": origin, "parent_id": parent, "round": 0, "note": ""}


def _attempt(cid, status):
    return {"candidate_id": cid, "round": 0, "status": status, "error_digest": ""}


def test_offline_repair_compensates_the_triton_seed_behind_a_rejected_library_seed():
    from kernelskill.graph.routing import decide_after_review
    from kernelskill.nodes.diagnoser import offline_repair, offline_repairable

    library, triton_seed = _cand("r0-compiler-0", "# cuBLAS"), _cand("r0-compiler-1", GEMM)
    state = _state(
        [_attempt("r0-compiler-0", "rejected"), _attempt("r0-compiler-1", "wrong_output")],
        [library, triton_seed],
        library,
    )
    assert offline_repairable(state)
    out = offline_repair(state)
    new = out["current"]
    assert new["origin"] == "diagnoser" and new["parent_id"] == "r0-compiler-1" and out["repairs"] == 1
    assert new["source"] == compensated(GEMM)[0] and "compensated_dot" in new["note"]
    assert "accumulation" in new["verdict"]["root_cause"]
    # the router goes there only when a repair applies, and the repaired seed is not repaired again
    assert decide_after_review({**state, "repairable": True})[0] == "diagnoser"
    nxt, why = decide_after_review({**state, "repairable": False})
    assert nxt == "__end__" and "after 0 repair(s)" in why
    after = {
        **state,
        "candidates": [library, triton_seed, new],
        "current": new,
        "attempts": [*state["attempts"], _attempt(new["id"], "wrong_output")],
        "repairs": 1,
    }
    assert not offline_repairable(after)


def test_offline_repair_has_nothing_for_other_failures():
    from kernelskill.nodes.diagnoser import offline_repair, offline_repairable

    tf32 = _cand("r0-compiler-0", with_precision(GEMM, "tf32"))
    crashed = _cand("r0-compiler-1", GEMM)
    state = _state(
        [_attempt("r0-compiler-0", "wrong_output"), _attempt("r0-compiler-1", "crashed")], [tf32, crashed], tf32
    )
    assert not offline_repairable(state)  # TF32 error is in the inputs; a crash is no accumulation error
    out = offline_repair(state)
    assert out["current"]["source"] == "" and "no deterministic repair for wrong_output" in out["current"]["note"]


def test_a_seed_missing_the_tolerance_is_compensated_where_it_is_checked(tmp_path, monkeypatch):
    """The capture child sets the asked precision before its self-check; a seed whose check fails gets the
    compensated_dot repair there, and is kept when the repaired form passes (else the failure stands)."""
    from kernelskill.engine import inductor_seed as seed

    task = tmp_path / "t.py"
    task.write_text("x = 1\n")
    checked: list[str] = []
    monkeypatch.setattr(seed, "capture", lambda *a, **k: {"code": "", "variant": "triton"})
    monkeypatch.setattr(seed, "emit_candidate", lambda text, cap: KERNEL)

    def check(path, source, seed=42, precision="fp32"):
        assert precision == "fp32"  # the run's policy, not the seed's product precision (tf32x3 below)
        checked.append(source)
        return None if "acc_kc" in source else "3/256 elements exceed atol=0.0001 rtol=0.0001"

    monkeypatch.setattr(seed, "self_check", check)
    req = {"task_path": str(task), "variant": "triton", "precision": "tf32x3"}
    out = seed._capture_and_check(req, str(task), "triton", 42)
    assert out["ok"] and out["capture"]["compensated"] == 1 and "acc_kc" in out["source"]
    assert out["capture"]["plain_self_check"].startswith("3/256 elements exceed")
    assert 'input_precision="tf32x3"' in checked[0] and "acc_kc" not in checked[0]  # precision set, then checked
    monkeypatch.setattr(seed, "self_check", lambda path, source, seed=42, precision="fp32": "shape (4,) vs (4, 1)")
    out = seed._capture_and_check({**req, "precision": None}, str(task), "triton", 42)
    assert not out["ok"] and out["error"] == "self-check failed: shape (4,) vs (4, 1)"
