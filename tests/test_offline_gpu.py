"""The compiler seed and the deterministic skills on a real GPU (marked gpu; run with `make test-gpu`).

Needs only torch + triton (no model, no LangGraph): capture -> emit -> review, as the offline
engine's generator and optimizer do.
"""

from pathlib import Path

import pytest

from kernelskill.engine.compiler import capture_variant, compiler_seeds
from kernelskill.engine.transforms import cuda_graph_wrap
from kernelskill.graph.context import Context
from kernelskill.runner.sandbox import run_review

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).parent.parent / "evals" / "tasks"


def test_compiler_seed_of_a_norm_is_a_correct_custom_kernel(tmp_path):
    task = TASKS / "level1" / "26_layer_norm.py"
    seeds = compiler_seeds(Context(), str(task), tmp_path / "seeds")
    assert [s.variant for s in seeds] == ["default"] and seeds[0].ok, seeds[0].error
    r = run_review(task, seeds[0].source, tmp_path, "seed", device="cuda")
    assert r["status"] == "correct", r.get("error_digest")
    assert r["custom_kernel"] and r["metrics"]["launch_count"] >= 1 and r["kernels"]  # resources read from Inductor
    graphed = run_review(task, cuda_graph_wrap(seeds[0].source), tmp_path, "graphed", device="cuda")
    assert graphed["status"] == "correct", graphed.get("error_digest")


def test_gemm_task_gets_a_library_seed_and_a_triton_template_seed(tmp_path):
    task = TASKS / "level2" / "01_linear_gelu_scale.py"
    seeds = compiler_seeds(Context(), str(task), tmp_path / "seeds")
    assert [s.variant for s in seeds] == ["default", "triton"] and all(s.ok for s in seeds)
    cublas = run_review(task, seeds[0].source, tmp_path, "cublas", device="cuda")
    template = run_review(task, seeds[1].source, tmp_path, "template", device="cuda")
    assert cublas["status"] == template["status"] == "correct"
    assert "library_main_work" in cublas["labels"] and not cublas["custom_kernel"]
    assert template["custom_kernel"] and "library_main_work" not in template["labels"]


def test_tuned_recapture_is_correct(tmp_path):
    task = TASKS / "level1" / "24_softmax.py"
    tuned = capture_variant(Context(), str(task), "autotune", tmp_path)
    assert tuned.ok, tuned.error
    assert run_review(task, tuned.source, tmp_path, "tuned", device="cuda")["status"] == "correct"


def test_dot_precision_and_its_tf32_recapture_on_a_linear_layer(tmp_path):
    """tf32x3 of the Triton template stays correct at fp32 tolerance; a TF32-allowed recapture keeps tf32x3."""
    from kernelskill.engine.precision import precision_variants
    from kernelskill.engine.transforms import apply
    from kernelskill.runner.dot_precision import applied_precision

    task = TASKS / "level2" / "03_linear_layernorm_residual.py"
    template = capture_variant(Context(), str(task), "triton", tmp_path)
    assert template.ok, template.error
    variants = dict((note.rsplit(" ", 1)[-1], src) for src, note in precision_variants(template.source))
    assert set(variants) == {"tf32x3", "tf32", "tf32r"}
    r = run_review(task, variants["tf32x3"], tmp_path, "tf32x3", device="cuda")
    assert r["status"] == "correct", r.get("error_digest")
    [tuned], [note], problem = apply("autotune_sweep", variants["tf32x3"], Context(), str(task), tmp_path)
    assert not problem and "dots kept at tf32x3" in note and applied_precision(tuned) == "tf32x3"
    assert "TF32 matmuls" in tuned[:600]
    assert run_review(task, tuned, tmp_path, "tuned", device="cuda")["status"] == "correct"


def test_split_operand_recapture_of_fp32_gemms(tmp_path):
    """dot_precision's recapture (``split_gemm`` on) of a Triton-template seed with its GEMMs over 3xTF32
    split operands: correct at the fp32 tolerance on an MLP, all custom; its time against the
    tf32x3 rewrite goes to the log. (On an H200, on level1/01's 4096^3 product it missed the tolerance,
    0.002 off at |y| ~ 64, and the knob went off by default; this test then moved to level3/01.)"""
    from kernelskill.engine.inductor_seed import SPLIT_GEMM_MARK
    from kernelskill.engine.transforms import apply

    name = "level3/01_mlp.py"
    task = TASKS / name
    template = capture_variant(Context(), str(task), "triton", tmp_path)
    assert template.ok, template.error
    # its GEMM is a single-pass TF32 dot, which precision fp32 rejects whatever the operands: tried under tf32
    ctx = Context(split_gemm=True, precision="tf32")
    sources, notes, problem = apply("dot_precision", template.source, ctx, str(task), tmp_path)
    assert not problem and len(sources) == 4, notes  # tf32x3, tf32, tf32r, then the split-operand recapture
    split = sources[3]
    assert SPLIT_GEMM_MARK in split[:2000] and "3xTF32 split GEMM" in notes[3], notes[3]
    times = {}
    for label, src in (("tf32x3", sources[0]), ("split", split)):
        r = run_review(task, src, tmp_path, label, device="cuda", precision="tf32")
        assert r["status"] == "correct" and r["custom_kernel"], (label, r.get("error_digest"))
        times[label] = r["runtime_ms"]
    print(f"{name}: tf32x3 {times['tf32x3']:.3f} ms, split operands {times['split']:.3f} ms")


def test_compensated_repair_of_a_long_mat_vec(tmp_path):
    """On an H200, Inductor's Triton GEMV (16384-long rows) was 6e-4 from float64 where the reference was
    3e-5: the plain capture fails its self-check, and the capture child keeps the seed with the
    compensated_dot repair (Kahan over the K blocks), which the reviewer accepts."""
    task = TASKS / "level1" / "05_matrix_vector_multiply.py"
    seeds = compiler_seeds(Context(), str(task), tmp_path / "seeds")
    triton_seed = next(s for s in seeds if s.variant == "triton")
    assert triton_seed.ok, triton_seed.error
    assert triton_seed.capture.get("compensated", 0) >= 1, "the plain seed passed: this test no longer exercises it"
    assert "exceed" in triton_seed.capture["plain_self_check"] and "compensated_dot" in triton_seed.note()
    kahan = run_review(task, triton_seed.source, tmp_path, "kahan", device="cuda")
    assert kahan["status"] == "correct", kahan.get("error_digest")
    # timed like any success; on an H200: 1.14 ms, 0.23x eager's cuBLAS GEMV. Inductor's template runs
    # M / 128 blocks
    assert kahan["custom_kernel"] and kahan["timing_kind"] == "cuda_events" and kahan["runtime_ms"] > 0


def test_transposed_convolution_gets_a_triton_template_seed(tmp_path):
    """cuDNN keeps a transposed convolution in the default seed; the triton variant rewrites it into a
    stride-1 convolution of the zero-stuffed input, which Inductor's conv template takes."""
    _triton_seed_does_the_main_work(TASKS / "level1" / "48_conv_transpose2d.py", "conv_transpose2d", tmp_path)


def _triton_seed_does_the_main_work(task: Path, form: str, tmp_path: Path) -> dict:
    """The task's default seed leaves its main work to a library; its triton seed, rewritten (``form`` among
    its reformulations), has none left there, and the reviewer calls it correct and custom. Returns the review."""
    seeds = {s.variant: s for s in compiler_seeds(Context(), str(task), tmp_path / "seeds")}
    assert seeds["default"].capture["heavy_extern_calls"], "the library no longer keeps it: the test lost its point"
    triton_seed = seeds["triton"]
    assert triton_seed.ok, triton_seed.error
    assert form in " ".join(triton_seed.capture["reformulated"])
    assert not triton_seed.capture["heavy_extern_calls"], triton_seed.capture["extern_calls"]
    r = run_review(task, triton_seed.source, tmp_path, "triton", device="cuda")
    assert r["status"] == "correct" and r["custom_kernel"], r.get("error_digest")
    return r


def test_a_long_reduction_gemm_gets_a_split_k_triton_seed(tmp_path):
    """Inductor splits a 256 x 256 GEMM over K = 524288 itself (decompose_k) and hands the batched GEMM to
    cuBLAS; the triton variant rewrites it into split-K form first, so its template does the products."""
    r = _triton_seed_does_the_main_work(TASKS / "level1" / "09_matmul_large_k.py", "split-K", tmp_path)
    assert r["timing_kind"] == "cuda_events" and r["runtime_ms"] > 0


def test_a_bare_convolutions_seed_is_repaired_onto_our_conv_kernel(tmp_path):
    """A convolution alone (no bias, no tail) is one cuDNN call in the default seed: rejected, no custom kernel.
    The offline repair recaptures it with the convolution on our kernel, which the reviewer accepts as custom.

    A 1-D one: Inductor gives a 2-D convolution of few channels a channels-last layout, whose conversion is a
    Triton kernel of the seed's own, so that seed is not rejected for want of one.
    """
    from kernelskill.nodes.diagnoser import offline_repair
    from kernelskill.runner.static_check import NO_KERNEL

    task = tmp_path / "bare_conv.py"
    task.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.Conv1d(32, 64, 3, padding=1, bias=False)\n\n"
        "    def forward(self, x):\n        return self.conv(x)\n\n\ndef get_inputs():\n"
        "    return [torch.randn(8, 32, 4096)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    [default] = [s for s in compiler_seeds(Context(), str(task), tmp_path / "seeds") if s.variant == "default"]
    assert default.ok, default.error
    r = run_review(task, default.source, tmp_path, "seed", device="cuda")
    assert r["status"] == "rejected" and NO_KERNEL in r["error_digest"], (
        "the seed has a kernel: the test lost its point"
    )
    seed = {"id": "r0-compiler-0", "source": default.source, "origin": "compiler", "parent_id": None, "round": 0}
    state = {
        "engine": "offline",
        "task": {"path": str(task)},
        "candidates": [{**seed, "note": ""}],
        "attempts": [{"candidate_id": seed["id"], "round": 0, "status": "rejected", "error_digest": r["error_digest"]}],
        "current": seed,
        "review": r,
    }
    out = offline_repair(state, Context(run_dir=str(tmp_path)))
    assert out["current"]["source"], out["current"]["note"]
    fixed = run_review(task, out["current"]["source"], tmp_path, "repaired", device="cuda")
    assert fixed["status"] == "correct" and fixed["custom_kernel"], fixed.get("error_digest")


@pytest.mark.parametrize(
    "task_file,form",
    [
        ("level1/46_depthwise_conv2d.py", "grouped conv2d -> sum of shifted inputs"),
        ("level1/42_adaptive_avg_pool2d.py", "adaptive_avg_pool2d -> window means / masked sums"),
    ],
)
def test_library_only_ops_get_a_fused_triton_seed(tmp_path, task_file, form):
    """A depthwise convolution (cuDNN in the default seed, one group at a time in the conv template) and
    an adaptive pooling with windows over 5x5 (an ATen fallback) become Inductor's own fused kernels."""
    task = TASKS / task_file
    seeds = {s.variant: s for s in compiler_seeds(Context(), str(task), tmp_path / "seeds")}
    assert seeds["default"].needs_custom_variant, "the default seed has its own kernels now: the test lost its point"
    triton_seed = seeds["triton"]
    assert triton_seed.ok, triton_seed.error
    assert any(f.startswith(form) for f in triton_seed.capture["reformulated"]), triton_seed.capture["reformulated"]
    assert not triton_seed.capture["extern_calls"], triton_seed.capture["extern_calls"]
    r = run_review(task, triton_seed.source, tmp_path, "triton", device="cuda")
    assert r["status"] == "correct" and r["custom_kernel"], r.get("error_digest")
    assert r["timing_kind"] == "cuda_events"


def test_conv_gemm_recapture_of_a_resnet_block(tmp_path):
    """The conv_gemm skill: the Triton-template seed's convolutions recaptured as im2col + GEMM."""
    from kernelskill.engine.transforms import CONV_TEMPLATE, applicable, apply

    task = TASKS / "level3" / "03_resnet_basic_block.py"
    seeds = {s.variant: s for s in compiler_seeds(Context(), str(task), tmp_path / "seeds")}
    base = seeds["triton"].source
    assert base and CONV_TEMPLATE.search(base) and applicable("conv_gemm", base) is None
    [new], [note], problem = apply("conv_gemm", base, Context(), str(task), tmp_path)
    assert not problem and "im2col + GEMM" in note and not CONV_TEMPLATE.search(new)
    r = run_review(task, new, tmp_path, "gemm", device="cuda")
    assert r["status"] == "correct" and r["custom_kernel"], r.get("error_digest")


def test_unrolled_lstm_gets_a_triton_template_seed(tmp_path):
    """On an H200, the LSTM's `triton` capture never finished (an autotune per step's x[:, t] @ W, 18-30 s
    each from the 7th on). With the input projections hoisted into one GEMM it should, within its limit."""
    task = TASKS / "level3" / "07_lstm_unrolled.py"
    template = capture_variant(Context(), str(task), "triton", tmp_path)
    assert template.ok, template.error
    assert "16 linear calls on slices of one tensor" in " ".join(template.capture["reformulated"])
    print(f"LSTM triton capture: {template.wall_s:.0f} s")
    r = run_review(task, template.source, tmp_path, "triton", device="cuda")
    assert r["status"] == "correct" and r["custom_kernel"], r.get("error_digest")


@pytest.mark.parametrize("task_file", ["level1/57_causal_attention.py", "level3/04_mha_residual_layernorm.py"])
def test_flash_attention_recapture_fuses_attention(tmp_path, task_file):
    """The flash_attention skill: the Triton-template seed (attention's math path, the score matrix through
    memory) recaptured with each attention as one fused Triton kernel. Every candidate it proposes is
    reviewed; the fused ones must be correct custom kernels at least in exact fp32 or tf32x3, and the
    times of all go to the log (on an H200: the math path's seed 8.17 ms on L1 57, torch.compile 3.37; with the
    fused kernel: passed, and with the swept launch configuration the fused tf32x3 candidate took 3.40 ms in the
    eval)."""
    from kernelskill.engine.inductor_seed import FLASH_MARK
    from kernelskill.engine.transforms import applicable, apply

    task = TASKS / task_file
    template = capture_variant(Context(), str(task), "triton", tmp_path)
    assert template.ok, template.error
    assert applicable("flash_attention", template.source) is None, template.source[:600]
    sources, notes, problem = apply("flash_attention", template.source, Context(), str(task), tmp_path)
    assert not problem and FLASH_MARK in sources[0][:2000], notes
    times, fused_ok = {}, 0
    for i, (src, note) in enumerate(zip(sources, notes, strict=True)):
        r = run_review(task, src, tmp_path, f"flash{i}", device="cuda")
        times[note[-60:]] = (r["status"], r.get("runtime_ms"))
        fused = FLASH_MARK in src[:2000]
        fused_ok += fused and r["status"] == "correct" and r["custom_kernel"] and "ks_flash_attention_fwd" in src
    for note, (status, ms) in times.items():
        print(f"{task_file}: {status} {ms if ms is None else round(ms, 3)} ms  ...{note}")
    assert fused_ok >= 1, times
