"""The dot_precision transform: fp32 tl.dot calls off tensor cores, rewritten to tf32x3 / tf32."""

import ast
import json

import pytest

from kernelskill.engine.precision import precision_variants, tf32_rounded, with_precision
from kernelskill.engine.transforms import applicable
from kernelskill.nodes.feature_extractor import extract_features
from kernelskill.runner.dot_precision import PRECISIONS, ROUNDED, TF32, count_exact_dots, dot_precisions
from kernelskill.runner.sandbox import run_review
from kernelskill.runner.static_check import embedded_kernel_trees
from kernelskill.skills_kb.policy import decide

from conftest import FIXTURES

GEMM = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    rk = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        mm_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK=32)
        return c
"""


def inductor(name: str) -> str:
    return json.loads((FIXTURES / "inductor" / f"{name}.json").read_text())["code"]


def dot_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "tl.dot(" in line]


def test_inductor_template_dot_is_found_through_its_constexpr():
    src = inductor("01_linear_gelu_scale_triton")
    assert "ALLOW_TF32 : tl.constexpr = False" in src
    assert count_exact_dots(src) == 1
    out = with_precision(src, "tf32x3")
    assert dot_lines(out) == ['acc += tl.dot(a, b, out_dtype=ACC_TYPE, input_precision="tf32x3")']
    ast.parse(out)
    assert len(embedded_kernel_trees(ast.parse(out))) == len(
        embedded_kernel_trees(ast.parse(src))
    )  # kernel strings parse
    assert count_exact_dots(out) == 0 and applicable("dot_precision", out) is not None


@pytest.mark.parametrize("name", ["01_linear_gelu_scale_default", "26_layer_norm_default"])
def test_no_dot_no_transform(name):
    src = inductor(name)
    assert precision_variants(src) == []
    assert "no fp32 tl.dot" in applicable("dot_precision", src)


@pytest.mark.parametrize(
    "call, exact",
    [
        ('tl.dot(a, b, input_precision="ieee")', True),
        ("tl.dot(a, b, acc, input_precision='IEEE')", True),
        ("tl.dot(a, b, allow_tf32=False)", True),
        ("tl.dot(a, b)", False),  # default: tf32 already
        ("tl.dot(a, b, allow_tf32=True)", False),
        ('tl.dot(a, b, input_precision="tf32x3")', False),
        ('tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), input_precision="ieee")', False),  # half data
    ],
)
def test_which_dots_count_as_exact_fp32(call, exact):
    src = GEMM.replace('tl.dot(a, b, input_precision="ieee")', call)
    assert bool(count_exact_dots(src)) is exact


def test_variants_one_per_precision_and_other_arguments_kept():
    src = GEMM.replace(
        'tl.dot(a, b, input_precision="ieee")', "tl.dot(a, b, acc, allow_tf32=False, out_dtype=tl.float32)"
    )
    variants = precision_variants(src)
    assert [note for _, note in variants] == [f"dot_precision: 1 fp32 tl.dot call(s) set to {p}" for p in PRECISIONS]
    rounded = f"{tf32_rounded('a')}, {tf32_rounded('b')}"
    assert [dot_lines(v) for v, _ in variants] == [
        [f'acc += tl.dot(a, b, acc, out_dtype=tl.float32, input_precision="{p}")'] for p in ("tf32x3", "tf32")
    ] + [[f'acc += tl.dot({rounded}, acc, out_dtype=tl.float32, input_precision="tf32")']]
    assert [dot_precisions(v) for v, _ in variants] == [{"tf32x3"}, {"tf32"}, {ROUNDED}]


def test_tf32_rounding_matches_round_to_nearest_ties_away(tmp_path):
    """The rounding expression, run by Triton's interpreter, against a NumPy model of cvt.rna.tf32.f32."""
    import importlib.util

    import numpy as np
    import torch

    finfo = np.finfo(np.float32)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, finfo.max, -finfo.max, finfo.tiny, finfo.tiny / 8, 1.0, -1.0]
    ties = np.array([0x3F801000, 0xBF801000, 0x3F802000, 0x3F800FFF], dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([special, ties, rng.standard_normal(1024 - len(special) - len(ties)) * 1e3]).astype(np.float32)
    bits = x.view(np.uint32)
    want = np.where((bits & 0x7F800000) == 0x7F800000, bits, (bits + 0x1000) & 0xFFFFE000).view(np.float32)
    assert want.view(np.uint32)[len(special)] == 0x3F802000  # a tie rounds away from zero
    assert np.isinf(want[5]) and want.view(np.uint32)[len(special) + 3] == 0x3F800000  # max -> inf; below a tie: down

    path = tmp_path / "round_kernel.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def round_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
        "    i = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + i)\n"
        f"    tl.store(y_ptr + i, {tf32_rounded('x')})\n"
    )
    spec = importlib.util.spec_from_file_location("round_kernel", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    xt, yt = torch.from_numpy(x), torch.empty(1024, dtype=torch.float32)
    module.round_kernel[(1,)](xt, yt, BLOCK=1024)
    got, nan = yt.numpy().view(np.uint32), np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want.view(np.uint32)[~nan])
    assert np.isnan(yt.numpy()[nan]).all()


def test_feature_and_policy_send_an_exact_fp32_gemm_to_dot_precision():
    features = extract_features(inductor("01_linear_gelu_scale_triton"))
    assert features["dot_fp32_exact"] is True
    decision = decide(features, {"flop_pct": 20.0})
    assert decision.rule == "fp32-dot-off-tensor-cores" and decision.allowed[0] == "dot-input-precision"
    assert extract_features(with_precision(GEMM, "tf32x3"))["dot_fp32_exact"] is False
    assert decide(features, {"flop_pct": 80.0}).rule != "fp32-dot-off-tensor-cores"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rewritten_gemm_passes_review_and_compiles_for_sm90(tmp_path, precision):
    task = FIXTURES / "tasks" / "small_matmul.py"
    before = run_review(task, GEMM, tmp_path, "ieee", device="cpu")
    assert before["status"] == "correct", before.get("error_digest")
    if precision == ROUNDED:
        # The interpreter multiplies the rounded operands exactly (it ignores input_precision): randn inputs
        # come out TF32-wrong, as on a GPU; inputs with few mantissa bits (integers) are unchanged by rounding.
        wrong = run_review(
            task, with_precision(GEMM, precision), tmp_path, "rounded-randn", device="cpu", precision="tf32"
        )
        assert wrong["status"] == "wrong_output" and "exceed" in wrong["error_digest"]
        task = tmp_path / "integer_matmul.py"
        task.write_text(
            (FIXTURES / "tasks" / "small_matmul.py")
            .read_text()
            .replace("torch.randn(M, K)", "torch.randint(-8, 8, (M, K)) * 1.0")
            .replace("torch.randn(K, N)", "torch.randint(-8, 8, (K, N)) * 1.0")
        )
    policy = "tf32" if precision in TF32 else "fp32"  # single-pass TF32 products need the tf32 policy on a GEMM
    r = run_review(task, with_precision(GEMM, precision), tmp_path, precision, device="cpu", precision=policy)
    assert r["status"] == "correct", r.get("error_digest")
    assert r["compile_check"]["kernels"] == 1 and r["compile_check"]["errors"] == []


def test_autotune_recapture_keeps_the_parents_dot_precision(tmp_path, monkeypatch):
    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SeedOutcome
    from kernelskill.graph.context import Context
    from kernelskill.runner.dot_precision import applied_precision

    seed = '"""kernelskill compiler seed for t: TorchInductor\'s kernels (variant \'triton\')"""\n' + inductor(
        "01_linear_gelu_scale_triton"
    )
    fresh = seed.replace("(variant 'triton')", "(variant 'triton_autotune')")
    fresh_tf32 = fresh.replace("ALLOW_TF32 : tl.constexpr = False", "ALLOW_TF32 : tl.constexpr = True")
    asked = []
    failing = []
    kept_at: list = []

    def capture(
        ctx,
        task_path,
        variant,
        workdir,
        tf32=False,
        reserve_s=0.0,
        conv_gemm=False,
        split_gemm=False,
        flash=False,
        precision=None,
    ):
        asked.append((variant, tf32))
        kept_at.append(precision)
        if tf32 and failing:
            return SeedOutcome(variant, error="boom")
        source = fresh_tf32 if tf32 else fresh
        if precision:  # as the capture child does, before its self-check
            source = with_precision(source, precision, among=("ieee", "tf32"))
        return SeedOutcome(variant, source=source)

    monkeypatch.setattr(transforms, "capture_variant", capture)
    for precision in PRECISIONS:
        parent = with_precision(seed, precision)
        assert applied_precision(parent) == precision and applied_precision(seed) is None
        asked.clear()
        kept_at.clear()
        [new], [note], problem = transforms.apply("autotune_sweep", parent, Context(), "task.py", tmp_path)
        assert asked == [("triton_autotune", True)] and problem == ""  # autotuned for tensor-core products
        assert kept_at == [precision]
        operands = f"{tf32_rounded('a')}, {tf32_rounded('b')}" if precision == ROUNDED else "a, b"
        name = "tf32" if precision == ROUNDED else precision
        assert dot_lines(new) == [f'acc += tl.dot({operands}, out_dtype=ACC_TYPE, input_precision="{name}")']
        assert applied_precision(new) == precision
        assert note.endswith(f"dots kept at {precision}")
    failing.append(True)  # the TF32 capture fails: the plain one is rewritten instead
    asked.clear()
    [new], _, _ = transforms.apply("autotune_sweep", with_precision(seed, "tf32x3"), Context(), "task.py", tmp_path)
    assert asked == [("triton_autotune", True), ("triton_autotune", False)] and applied_precision(new) == "tf32x3"
    asked.clear()
    [plain], _, _ = transforms.apply("autotune_sweep", seed, Context(), "task.py", tmp_path)
    assert asked == [("triton_autotune", False)] and applied_precision(plain) is None and count_exact_dots(plain)


def test_with_precision_only_touches_the_precisions_asked_for():
    tf32_src = GEMM.replace('input_precision="ieee"', "allow_tf32=True")
    assert with_precision(tf32_src, "tf32x3") == tf32_src  # default: only ieee dots
    assert dot_lines(with_precision(tf32_src, "tf32x3", among=("ieee", "tf32"))) == [
        'acc += tl.dot(a, b, input_precision="tf32x3")'
    ]


@pytest.mark.parametrize(
    "call, precisions, labelled",
    [
        ('tl.dot(a, b, input_precision="ieee")', {"ieee"}, False),
        ('tl.dot(a, b, input_precision="tf32x3")', {"tf32x3"}, False),
        ('tl.dot(a, b, input_precision="tf32")', {"tf32"}, True),
        ("tl.dot(a, b, allow_tf32=True)", {"tf32"}, True),
        ("tl.dot(a, b)", {"default"}, False),  # TF32 only if the data is fp32: the review decides
        ("tl.dot(a.to(tl.float16), b.to(tl.float16))", set(), False),  # 16-bit operands: not a TF32 question
    ],
)
def test_tf32_dots_are_labelled_by_the_static_check(call, precisions, labelled):
    from kernelskill.runner.dot_precision import dot_precisions
    from kernelskill.runner.static_check import check_source

    src = GEMM.replace('tl.dot(a, b, input_precision="ieee")', call)
    assert dot_precisions(src) == precisions
    report = check_source(src)
    assert ("tf32_dot" in report.labels) is labelled
    assert any("TF32" in w for w in report.warnings) is labelled
    assert report.default_precision_dots is (precisions == {"default"})


def test_review_labels_a_default_precision_dot_on_fp32_data(tmp_path):
    task = FIXTURES / "tasks" / "small_matmul.py"
    default_dot = GEMM.replace(', input_precision="ieee"', "")
    r = run_review(task, default_dot, tmp_path, "default_dot", device="cpu", precision="tf32")
    assert r["status"] == "correct", r.get("error_digest")
    assert "tf32_dot" in r["labels"] and any("TF32" in w for w in r["warnings"])
    exact = run_review(task, GEMM, tmp_path, "ieee_dot", device="cpu")
    assert "tf32_dot" not in exact["labels"]
