"""The reviewer on a real GPU (marked gpu: skipped without CUDA; run with `make test-gpu`)."""

import statistics
from pathlib import Path

import pytest
from test_adversarial import assert_expected, expectation

from kernelskill.runner.sandbox import run_review

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).parent / "fixtures"
TASKS = Path(__file__).parent.parent / "evals" / "tasks"
GELU_TASK = TASKS / "level1" / "14_gelu.py"
GELU = FIXTURES / "solutions" / "14_gelu.py"
ADVERSARIAL = sorted((FIXTURES / "adversarial").glob("*.py"))


def review(task, source, tmp_path, name, **kw):
    return run_review(task, source, tmp_path, name, device="cuda", **kw)


def test_correct_kernel_timed_and_profiled(tmp_path):
    r = review(GELU_TASK, GELU.read_text(), tmp_path, "gelu")
    assert r["status"] == "correct", r.get("error_digest")
    assert r["timing_kind"] == "cuda_events" and r["speedup_vs_eager"] > 0
    assert r["timing"]["candidate"]["n"] >= 20
    m = r["metrics"]
    assert 0 < m["sol_pct"] <= 125 and m["launch_count"] == 1
    assert m["host_pct"] == pytest.approx(100 * r["timing"]["candidate"]["host_ms"] / r["runtime_ms"])
    assert m["registers_per_thread"] > 0 and m["spill_bytes"] == 0
    assert r["custom_kernel"] is True and "implausible_speedup" not in r["labels"]


@pytest.mark.parametrize("path", ADVERSARIAL, ids=[p.stem for p in ADVERSARIAL])
def test_adversarial_rejected_on_gpu(path, tmp_path):
    task, status, needle = expectation(path, gpu=True)  # its gpu-expect line where a GPU review differs
    assert_expected(review(task, path.read_text(), tmp_path, path.stem, timeout_s=180), status, needle)


def test_an_answer_kept_from_the_third_call_with_given_values_is_rejected_on_gpu(tmp_path):
    """The timings of record call it many times on one set of values: it looks that answer up, and the calls on
    the record's values written again show it."""
    source = (FIXTURES / "candidates" / "kept_from_third_call.py").read_text()
    r = review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "kept_third", timeout_s=180)
    assert r["status"] == "rejected" and "timed calls' values" in r["error_digest"], (r["status"], r["error_digest"])


def test_illegal_memory_access_is_contained(tmp_path):
    bad = review(
        FIXTURES / "tasks" / "scale_relu.py", (FIXTURES / "gpu" / "illegal_access.py").read_text(), tmp_path, "ima"
    )
    assert bad["status"] in ("runtime_error", "crashed"), bad
    assert "illegal memory access" in (bad["error_digest"] + bad.get("error_detail", "")).lower()
    good = review(GELU_TASK, GELU.read_text(), tmp_path, "after_ima")
    assert good["status"] == "correct", good.get("error_digest")


def test_timing_spread_under_three_percent(tmp_path):
    """Five reviews in five processes, each timing eager itself (no baseline cache): the speedup spreads under
    3 %; the absolute runtime, which also follows the GPU's state from one process to the next, under 10 %."""
    medians, speedups = [], []
    for i in range(5):
        r = review(GELU_TASK, GELU.read_text(), tmp_path, f"spread{i}", baseline_cache=False)
        assert r["status"] == "correct"
        medians.append(r["runtime_ms"])
        speedups.append(r["speedup_vs_eager"])
        t = r["timing"]
        print(
            f"review {i}: "
            + ", ".join(
                f"{k} {t[k]['median_ms']:.4f} ms (host {t[k].get('host_ms')}, flush {t[k].get('flush_ms')})"
                for k in ("candidate", "eager")
            )
        )

    def spread(xs: list[float]) -> float:
        return (max(xs) - min(xs)) / statistics.median(xs)

    assert spread(speedups) < 0.03, speedups
    assert spread(medians) < 0.10, medians


TF32_CONV = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


def relu(x):
    out = torch.empty_like(x)
    _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def tf32(x):  # round to TF32's 10-bit mantissa, to nearest, as cuDNN's TF32 convolutions do
    b = x.contiguous().view(torch.int32)
    return ((b + 0xFFF + ((b >> 13) & 1)) & -0x2000).view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)

    def forward(self, x):
        w, b = self.conv.weight, self.conv.bias
        exact = F.conv2d(x.double(), w.double(), b.double()).float()
        rounded = F.conv2d(tf32(x).double(), tf32(w).double(), b.double()).float()
        return relu((exact + SCALE * (rounded - exact)).contiguous())
"""


def test_tf32_convolution_is_judged_by_the_references_tf32_error(tmp_path):
    """A convolution with TF32 operands passes under fp32 (PyTorch's default lets cuDNN compute it so, even where
    cuDNN ran the reference's exact), and 4x that error, twice what the rule allows, fails."""
    task = FIXTURES / "tasks" / "conv_few_channels.py"
    ok = review(task, TF32_CONV.replace("SCALE", "1.0"), tmp_path, "tf32", baseline_cache=False)
    assert ok["status"] == "correct", ok.get("error_digest")
    off = review(task, TF32_CONV.replace("SCALE", "4.0"), tmp_path, "tf32x4", baseline_cache=False)
    assert off["status"] == "wrong_output", off.get("error_digest")


def test_baselines_primed_beside_the_captures_are_the_first_reviews(tmp_path, monkeypatch):
    """A ``baselines`` request times eager and torch.compile into the cache; the review after it reads them there."""
    from kernelskill.runner.sandbox import prime_baselines

    monkeypatch.setenv("KERNELSKILL_CACHE_DIR", str(tmp_path / "cache"))
    primed = prime_baselines(GELU_TASK, tmp_path / "baselines", 300.0, "cuda")
    assert primed["status"] == "correct" and primed["baselines"] == {"cached": False}, primed.get("error_digest")
    assert "baselines" in primed["phases"]
    again = prime_baselines(GELU_TASK, tmp_path / "baselines", 300.0, "cuda")
    assert again["baselines"] == {"cached": True} and "reference" not in again["phases"]
    r = review(GELU_TASK, GELU.read_text(), tmp_path, "after_priming")
    assert r["status"] == "correct" and "baselines_cached" in r["phases"] and "baselines" not in r["phases"]
    assert r["eager_ms"] > 0 and r["compile_ms"] > 0
