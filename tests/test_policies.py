"""The precision policy (fp32 | tf32) and the kernel-origin policy (any | custom): configuration, the
reviewer's verdict, the offline dot_precision variants, which candidate is best, and the summaries."""

import json

import pytest
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.engine.precision import precision_variants
from kernelskill.graph.context import Context
from kernelskill.nodes.reviewer import is_better
from kernelskill.runner.sandbox import run_review
from kernelskill.runner.static_check import tf32_allowed

from conftest import FIXTURES

runner = CliRunner()

MATMUL_TASK = FIXTURES / "tasks" / "small_matmul.py"

# A tiled fp32 GEMM whose tl.dot carries no precision: Triton's default for fp32 tiles is TF32.
DEFAULT_DOT = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, bPRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, device=a.device, dtype=a.dtype)
        matmul_kernel[(M // 32, N // 32)](a, b, c, M, N, K, BM=32, BN=32, BK=32)
        return c
"""

CONV_REFERENCE = """
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
    def forward(self, x):
        return self.conv(x).relu()
"""


def test_policies_are_validated_with_the_allowed_values(tmp_path):
    assert Context().policy() == {"precision": "fp32", "kernels": "any"}
    out = runner.invoke(app, ["optimize", str(MATMUL_TASK), "--precision", "fp8", "--device", "cpu"])
    assert out.exit_code == 2 and "precision must be one of fp32, tf32" in out.output
    out = runner.invoke(app, ["eval", "--kernels", "mine", "--device", "cpu", "--out", str(tmp_path / "e")])
    assert out.exit_code == 2 and "kernels must be one of any, custom" in out.output


def test_the_environment_and_the_toml_file_set_the_policies(tmp_path, monkeypatch):
    from kernelskill.graph.context import load_context

    monkeypatch.setenv("KERNELSKILL_PRECISION", "tf32")
    assert load_context(tmp_path / "none.toml").precision == "tf32"
    toml = tmp_path / "kernelskill.toml"
    toml.write_text('kernels = "custom"\n')
    assert load_context(toml).kernels == "custom"


def test_tf32_is_allowed_under_fp32_only_where_the_reference_multiplies_in_tf32():
    gemm = MATMUL_TASK.read_text()
    assert tf32_allowed("tf32", gemm)
    assert not tf32_allowed("fp32", gemm)  # PyTorch's matmuls are fp32 by default
    assert tf32_allowed("fp32", CONV_REFERENCE)  # cuDNN convolutions run TF32 by default
    assert not tf32_allowed(
        "fp32",
        CONV_REFERENCE.replace(".relu()", "").replace("self.conv(x)", "self.fc(self.conv(x))")
        + "\nimport torch\nfc = nn.Linear(8, 8)\n",
    )


@pytest.mark.parametrize("precision, status", [("fp32", "rejected"), ("tf32", "correct")])
def test_a_default_precision_dot_under_each_policy(tmp_path, precision, status):
    source = DEFAULT_DOT.replace("PRECISION", "")
    r = run_review(MATMUL_TASK, source, tmp_path, f"dot_{precision}", device="cpu", precision=precision)
    assert r["status"] == status, r.get("error_digest")
    assert "tf32_dot" in r["labels"]
    if status == "rejected":
        assert "precision fp32" in r["error_digest"] and "tf32x3" in r["error_digest"]


# Right only when the process it runs in allows TF32 matmuls: it shows which numerics the reviewer gives it.
FLAG_READER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * s, mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = a @ b
        y = torch.empty_like(c)
        s = 1.0 if torch.backends.cuda.matmul.allow_tf32 else 2.0
        scale_kernel[(triton.cdiv(c.numel(), 1024),)](c, y, s, c.numel(), BLOCK=1024)
        return y
"""


@pytest.mark.parametrize("precision, status", [("fp32", "wrong_output"), ("tf32", "correct")])
def test_the_candidate_runs_under_the_policys_numerics(tmp_path, precision, status):
    # Under tf32 eager and torch.compile are timed with TF32 matmuls allowed; a candidate's cuBLAS calls
    # (torch.matmul, a compiled program's extern mm) must get the same flag, which it may not set itself.
    r = run_review(MATMUL_TASK, FLAG_READER, tmp_path, f"flag_{precision}", device="cpu", precision=precision)
    assert r["status"] == status, r.get("error_digest")


def test_fp32_accurate_dots_pass_under_fp32(tmp_path):
    for precision in ("ieee", "tf32x3"):
        source = DEFAULT_DOT.replace("PRECISION", f', input_precision="{precision}"')
        r = run_review(MATMUL_TASK, source, tmp_path, f"dot_{precision}", device="cpu", precision="fp32")
        assert r["status"] == "correct", r.get("error_digest")
        assert "tf32_dot" not in r["labels"]


def test_dot_precision_proposes_single_pass_tf32_only_where_the_policy_allows_it():
    source = DEFAULT_DOT.replace("PRECISION", ', input_precision="ieee"')
    everything = [note for _, note in precision_variants(source, tf32=True)]
    fp32_only = [note for _, note in precision_variants(source, tf32=False)]
    assert [n.rsplit(" ", 1)[1] for n in everything] == ["tf32x3", "tf32", "tf32r"]
    assert [n.rsplit(" ", 1)[1] for n in fp32_only] == ["tf32x3"]


def test_the_offline_transform_follows_the_policy(tmp_path):
    from kernelskill.engine.transforms import apply

    source = DEFAULT_DOT.replace("PRECISION", ', input_precision="ieee"')
    for precision, n in (("fp32", 1), ("tf32", 3)):
        sources, notes, _ = apply("dot_precision", source, Context(precision=precision), str(MATMUL_TASK), tmp_path)
        assert len(sources) == n, notes


def _review(runtime_ms, custom, timed=True):
    return {
        "runtime_ms": runtime_ms,
        "custom_kernel": custom,
        "timing_kind": "cuda_events" if timed else "interpreter",
    }


def test_which_candidate_is_best_under_each_kernel_policy():
    library_fast, custom_slow = _review(1.0, False), _review(2.0, True)
    assert is_better(custom_slow, library_fast, "custom")  # own kernels first
    assert not is_better(custom_slow, library_fast, "any")  # the fastest correct one
    assert is_better(library_fast, custom_slow, "any")
    # no GPU timings to compare (CPU interpreter): the custom kernel is the answer under either policy
    assert is_better(_review(2.0, True, False), _review(1.0, False, False), "any")


def _eval_dir(path, precision, kernels, rows):
    from kernelskill.evals.suite import REPORT

    tasks = []
    for name, review in rows:
        run = path / "runs" / f"L1-{name}"
        run.mkdir(parents=True)
        (run / REPORT).write_text(json.dumps({"best_review": review, "trajectory": [], "stop_reason": "done"}))
        task = path / f"{name}.py"
        task.write_text("")
        tasks.append({"level": 1, "path": str(task)})
    meta = {"context": {**Context(precision=precision, kernels=kernels).to_dict()}, "tasks": tasks, "levels": [1]}
    (path / "eval.json").write_text(json.dumps(meta))
    return path


def _timed(speedup, custom, labels=()):
    return {
        "correct": True,
        "custom_kernel": custom,
        "labels": list(labels),
        "timing_kind": "cuda_events",
        "runtime_ms": 1.0,
        "speedup_vs_eager": speedup,
        "speedup_vs_compile": speedup / 2,
        "speedup_vs_compile_tf32": speedup / 4,
    }


def test_summaries_state_the_policies_and_score_by_them(tmp_path):
    from kernelskill.evals.report import build_summary, summary_markdown

    rows = [("a", _timed(2.0, True)), ("b", _timed(8.0, False, ["library_main_work"]))]
    any_ = build_summary(_eval_dir(tmp_path / "any", "fp32", "any", rows))
    custom = build_summary(_eval_dir(tmp_path / "custom", "fp32", "custom", rows))
    assert any_["policy"] == {"precision": "fp32", "kernels": "any"}
    assert any_["overall"]["success"] == custom["overall"]["success"] == 1  # custom-kernel successes
    assert any_["overall"]["correct"] == 2
    assert any_["overall"]["speedup_vs_eager"]["n"] == 2 and custom["overall"]["speedup_vs_eager"]["n"] == 1
    assert custom["overall"]["speedup_vs_compile_tf32"]["arith_mean"] == 0.5
    text = summary_markdown(any_)
    assert "policies: precision fp32" in text and "kernels any" in text
    assert "vs torch.compile with TF32 matmuls (context)" in text


def test_compare_refuses_runs_made_under_different_policies(tmp_path):
    rows = [("a", _timed(2.0, True))]
    a = _eval_dir(tmp_path / "a", "fp32", "any", rows)
    b = _eval_dir(tmp_path / "b", "tf32", "any", rows)
    out = runner.invoke(app, ["eval", "compare", str(a), str(b)])
    assert out.exit_code == 2 and "different policies" in out.output
    same = _eval_dir(tmp_path / "c", "fp32", "any", rows)
    out = runner.invoke(app, ["eval", "compare", str(a), str(same)])
    assert out.exit_code == 0 and "Both under: kernels any, precision fp32" in out.output


def test_an_eval_dir_is_not_resumed_under_other_policies(tmp_path):
    from test_evals import FakeLauncher, make_task, quiet

    from kernelskill.evals.runner import run_eval

    tasks = tmp_path / "tasks"
    make_task(tasks, "a")
    out = tmp_path / "eval"
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=FakeLauncher())
    with pytest.raises(ValueError, match="precision was fp32, now tf32"):
        run_eval([1], tasks, 0, "", out, Context(scripted="s.json", precision="tf32"), quiet(), launch=FakeLauncher())
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=FakeLauncher())  # same: resumes


def test_the_prompts_say_which_numerics_the_candidate_runs_under():
    from kernelskill.nodes.model.target import precision_text

    gemm = MATMUL_TASK.read_text()
    assert "TF32 matmuls already allowed" in precision_text("tf32", gemm)
    assert "rejected" in precision_text("fp32", gemm) and "already allowed" not in precision_text("fp32", gemm)
    assert "already allowed" not in precision_text("fp32", CONV_REFERENCE)  # TF32 permitted, flags at defaults


def test_runs_under_several_policies_side_by_side_each_against_its_own_baselines(tmp_path):
    any_ = _eval_dir(tmp_path / "any", "fp32", "any", [("a", _timed(2.0, True)), ("b", _timed(8.0, False))])
    custom = _eval_dir(tmp_path / "custom", "fp32", "custom", [("a", _timed(1.0, True)), ("b", _timed(4.0, False))])
    tf32 = _eval_dir(tmp_path / "tf32", "tf32", "any", [("b", _timed(3.0, False))])
    table = tmp_path / "policies.md"
    out = runner.invoke(app, ["eval", "policies", str(any_), str(custom), str(tf32), "--out", str(table)])
    assert out.exit_code == 0, out.output
    text = table.read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| L1-")}
    assert rows["L1-a"].endswith("| 2.000 / 1.000 / 0.500 (own kernels) | 1.000 / 0.500 / 0.250 (own kernels) | - |")
    assert "| not scored (library) | 3.000 / 1.500 (library) |" in rows["L1-b"]  # custom scores own kernels only
    runs = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| `")}
    assert "| 2 of 2 | 1 | 2 |" in runs["fp32 + any"]
    # the first run's figures over the tasks each other run scored: custom scored a; tf32 scored b
    assert runs["fp32 + custom"].endswith("| 1.000 / 1.000 (n=1) |")
    assert runs["tf32 + any"].endswith("| 4.000 / 4.000 (n=1) |")
    assert "| - |" in runs["tf32 + any"]  # no TF32 context column under tf32
    out = runner.invoke(app, ["eval", "policies", str(tmp_path / "nothing")])
    assert out.exit_code == 2 and "not an eval directory" in out.output
