"""Token and cost accounting per role and per run."""

import pytest

from kernelskill.graph.context import Context
from kernelskill.report import build_report, render_markdown, token_totals
from kernelskill.runs import Run

CALLS = [
    {"role": "generator", "model": "m", "input_tokens": 1000, "output_tokens": 500},
    {"role": "diagnoser", "model": "m", "input_tokens": 2000, "output_tokens": 300},
    {"role": "optimizer", "model": "m", "input_tokens": 3000, "output_tokens": 700},
    {"role": "optimizer", "model": "m", "input_tokens": 4000, "output_tokens": 900},
]


def test_totals_add_up_with_prices():
    t = token_totals({"tokens": CALLS}, price_in=2.0, price_out=8.0)
    assert t["optimizer"]["calls"] == 2 and t["optimizer"]["input_tokens"] == 7000
    assert t["total"]["input_tokens"] == 10000 and t["total"]["output_tokens"] == 2400
    assert t["optimizer"]["cost_usd"] == pytest.approx(7000 * 2e-6 + 1600 * 8e-6)
    roles = [r for r in t if r != "total"]
    assert sum(t[r]["cost_usd"] for r in roles) == pytest.approx(t["total"]["cost_usd"])
    assert sum(t[r]["input_tokens"] for r in roles) == t["total"]["input_tokens"]
    assert t["total"]["cost_usd"] == pytest.approx(10000 * 2e-6 + 2400 * 8e-6)


def test_cost_unknown_without_prices_and_in_report(tmp_path):
    assert token_totals({"tokens": CALLS})["total"]["cost_usd"] is None
    ctx = Context(model="m", price_in_per_mtok=2.0, price_out_per_mtok=8.0)
    report = build_report(Run("t", tmp_path, "task.py", ctx), {"tokens": CALLS, "stop_reason": "done"})
    assert report["tokens"]["total"]["cost_usd"] == pytest.approx(0.0392)
    md = render_markdown(report)
    assert "| total | 4 | 10000 | 2400 | $0.0392 |" in md
    unpriced = render_markdown(build_report(Run("t", tmp_path, "task.py", Context(model="m")), {"tokens": CALLS}))
    assert "cost unknown" in unpriced


def test_the_timing_line_follows_the_best_reviews_timing(tmp_path):
    """A GPU-timed best states its runtime and speedups; only an interpreter-timed one is called that."""
    run = Run("t", tmp_path, "task.py", Context())

    def md(review):
        best = {"candidate": {"id": "c"}, "review": review}
        return render_markdown(build_report(run, {"best": best, "stop_reason": "done"}))

    gpu = md({"timing_kind": "cuda_events", "runtime_ms": 2.0, "eager_ms": 3.0, "speedup_vs_eager": 1.5})
    assert "speedup vs eager 1.500x" in gpu and "CPU-interpreter" not in gpu
    labelled = md({"timing_kind": "cuda_events", "runtime_ms": 2.0, "labels": ["library_main_work"]})
    assert "labels of the best: library_main_work" in labelled and "CPU-interpreter" not in labelled
    interp = md({"timing_kind": "interpreter", "runtime_ms": 200.0})
    assert "CPU-interpreter timings" in interp and "speedup vs eager" not in interp
    failed = md({"timing_kind": "cuda_events", "runtime_ms": 2.0, "eager_ms": 3.0, "speedup_vs_eager": 1.5,
                 "timing": {"compile": None, "compile_error": "BackendCompilerFailed: boom"}})  # fmt: skip
    assert "no torch.compile baseline (BackendCompilerFailed: boom)" in failed and "vs torch.compile 1" not in failed
    sw = {"torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0"}
    on = md({"timing_kind": "cuda_events", "runtime_ms": 2.0, "device": "cuda:0 (NVIDIA H200)", "software": sw})
    assert "- best: `c` on cuda:0 (NVIDIA H200); torch 2.11.0+cu130, Triton 3.6.0\n" in on
