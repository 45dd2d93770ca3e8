"""The reviewer rejects bad candidates with a typed failure and never dies with them."""

import pytest

from kernelskill.runner.sandbox import run_review


def review(task_path, source, tmp_path, name, **kw):
    return run_review(task_path, source, tmp_path, name, device="cpu", **kw)


def test_accepts_correct(task_path, candidate, tmp_path):
    r = review(task_path, candidate("good"), tmp_path, "good")
    assert r["status"] == "correct", r.get("error_digest")
    assert r["correct"] and r["timing_kind"] == "interpreter"
    assert r["speedup_vs_eager"] is None  # interpreter timings never become speedups
    assert r["compile_check"]["kernels"] == 1 and r["compile_check"]["errors"] == []


@pytest.mark.parametrize(
    "name, status, needle",
    [
        ("syntax_error", "compile_error", "SyntaxError"),
        ("small_dot", "compile_error", "sm_90 compile"),
        ("no_model_new", "compile_error", "ModelNew"),
        ("wrong", "wrong_output", "exceed"),
        ("raises", "runtime_error", "boom from the candidate"),
        ("segfault", "crashed", "SIGSEGV"),
    ],
)
def test_rejects(task_path, candidate, tmp_path, name, status, needle):
    r = review(task_path, candidate(name), tmp_path, name)
    assert r["status"] == status, r
    assert needle in r["error_digest"], r["error_digest"]
    assert not r["correct"]


def test_hang_times_out_and_next_review_runs(task_path, candidate, tmp_path):
    r = review(task_path, candidate("hang"), tmp_path, "hang", timeout_s=15)
    assert r["status"] == "timeout"
    after = review(task_path, candidate("good"), tmp_path, "good_after")
    assert after["status"] == "correct"


def test_wrong_output_names_trial_and_element(task_path, candidate, tmp_path):
    r = review(task_path, candidate("wrong"), tmp_path, "wrong")
    assert r["error_digest"].startswith("trial 0")
    assert "worst at" in r["error_digest"] and "expected" in r["error_digest"]


def test_no_api_keys_in_candidate_env(task_path, candidate, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-should-not-leak")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "nope")
    r = review(task_path, candidate("no_secrets"), tmp_path, "secrets")
    assert r["status"] == "correct", r.get("error_digest")


def test_invalid_task(candidate, tmp_path):
    from conftest import FIXTURES

    r = review(FIXTURES / "tasks" / "broken_task.py", candidate("good"), tmp_path, "x")
    assert r["status"] == "invalid_task"
    assert "get_inputs" in r["error_digest"]


def test_spare_worker_serves_the_next_review_once(task_path, candidate, tmp_path, monkeypatch):
    from kernelskill.runner import sandbox

    monkeypatch.setenv("KERNELSKILL_SPARE_WORKER", "1")
    review(task_path, candidate("good"), tmp_path, "first")
    (spare,) = sandbox.SPARES.waiting.values()  # started while the first review ran
    assert spare.poll() is None
    second = review(task_path, candidate("good"), tmp_path, "second")
    assert second["status"] == "correct", second.get("error_digest")
    assert spare.wait(timeout=5) == 0  # it served the second review and exited
    (nxt,) = sandbox.SPARES.waiting.values()
    assert nxt.pid != spare.pid
    crashed = review(task_path, candidate("segfault"), tmp_path, "crash_in_spare")
    assert crashed["status"] == "crashed" and "SIGSEGV" in crashed["error_digest"]
    sandbox.SPARES.close()
    assert nxt.wait(timeout=5) is not None and not sandbox.SPARES.waiting


def test_spare_exits_when_its_parent_goes_away():
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelskill.runner.worker", "--spare"], stdin=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    proc.stdin.close()  # what a dead parent looks like from the spare
    assert proc.wait(timeout=60) == 0
