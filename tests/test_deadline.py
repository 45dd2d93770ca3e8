"""The launch deadline (KERNELSKILL_DEADLINE): capped child timeouts, an early clean stop, the eval's env."""

import os
import sys
import time
from pathlib import Path

import pytest

from kernelskill.evals.runner import SubprocessLauncher, TaskJob
from kernelskill.evals.suite import TaskSpec
from kernelskill.graph import deadline
from kernelskill.graph.routing import decide_after_review


def test_without_a_deadline_nothing_changes(monkeypatch):
    monkeypatch.delenv(deadline.ENV, raising=False)
    assert deadline.left() is None
    assert deadline.timeout(600.0, 60.0) == 600.0
    assert deadline.stop_reason(None) == ""


def test_a_garbled_deadline_is_ignored(monkeypatch):
    monkeypatch.setenv(deadline.ENV, "soon")
    assert deadline.left() is None and deadline.timeout(300.0, 60.0) == 300.0


def test_child_timeouts_are_capped_by_the_time_left(monkeypatch):
    monkeypatch.setenv(deadline.ENV, str(time.time() + 200))
    assert 195 < deadline.left() <= 200
    assert 135 < deadline.timeout(600.0, 60.0) <= 140  # a capture leaves time for the seeds' reviews
    assert deadline.timeout(30.0, 60.0) == 30.0  # a shorter limit of its own stays
    monkeypatch.setenv(deadline.ENV, str(time.time() + 5))
    assert deadline.timeout(600.0, 60.0) == deadline.MIN_TIMEOUT_S  # never below the floor


def test_for_launch_leaves_a_grace_period_before_the_hard_limit():
    now = 1000.0
    assert float(deadline.for_launch(300.0, now)) == pytest.approx(now + 300 - 20)
    assert float(deadline.for_launch(50.0, now)) == pytest.approx(now + 45)


def _state(time_left):
    return {
        "review": {"status": "correct"},
        "budget": {"max_rounds": 5, "max_repairs": 2},
        "round": 1,
        "best": {"candidate": {"id": "r0"}, "review": {"status": "correct"}},
        "time_left_s": time_left,
    }


def test_router_ends_the_run_when_a_round_would_overrun_the_deadline():
    assert decide_after_review(_state(None))[0] == "feature_extractor"
    assert decide_after_review(_state(deadline.ROUND_RESERVE_S + 1))[0] == "feature_extractor"
    nxt, why = decide_after_review(_state(12.0))
    assert nxt == "__end__" and "time limit of this launch near (12 s left" in why
    failing = {**_state(-3.0), "review": {"status": "wrong_output"}}
    failing.pop("best")
    nxt, why = decide_after_review(failing)  # no repair chain started past the deadline either
    assert nxt == "__end__" and "(0 s left" in why


def test_eval_launch_gets_its_deadline(tmp_path):
    code = f"import os; print('deadline', os.environ.get({deadline.ENV!r}))"
    job = TaskJob(TaskSpec(1, Path("t.py")), tmp_path / "run", [sys.executable, "-c", code], dict(os.environ), 100.0)
    t0 = time.time()
    result = SubprocessLauncher()(job)
    assert result.returncode == 0
    got = float(job.log_path.read_text().split("deadline ")[1].split()[0])
    assert t0 + 80 <= got <= time.time() + 90  # 100 s limit, 10 s grace


def test_capture_limit_is_the_seed_timeout_capped_by_the_deadline(monkeypatch, tmp_path):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context
    from kernelskill.runner.sandbox import ChildFailure

    limits = []

    def fake_run_child(module, req, workdir, name, timeout_s, **kw):
        limits.append(timeout_s)
        return ChildFailure("timeout", f"evaluation exceeded {timeout_s:g} s", "", timeout_s)

    monkeypatch.setattr(compiler, "run_child", fake_run_child)
    ctx = Context(seed_timeout_s=600.0)
    monkeypatch.delenv(deadline.ENV, raising=False)
    compiler.capture_variant(ctx, "t.py", "triton", tmp_path)
    monkeypatch.setenv(deadline.ENV, str(time.time() + 250))
    out = compiler.capture_variant(ctx, "t.py", "triton", tmp_path)
    assert limits[0] == 600.0 and 185 < limits[1] <= 190
    assert not out.ok and "timed out" in out.error
