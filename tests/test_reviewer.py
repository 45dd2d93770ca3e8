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
    import torch
    import triton

    assert r["software"] == {"torch": torch.__version__, "cuda": torch.version.cuda or "", "triton": triton.__version__}


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

    def reviewer_spares() -> list:
        return [p for module, (_, p) in sandbox.SPARES.waiting.items() if module == sandbox.REVIEW_MODULE]

    monkeypatch.setenv("KERNELSKILL_SPARE_WORKER", "1")
    review(task_path, candidate("good"), tmp_path, "first")
    (spare,) = reviewer_spares()  # started while the first review ran
    assert spare.poll() is None
    second = review(task_path, candidate("good"), tmp_path, "second")
    assert second["status"] == "correct", second.get("error_digest")
    assert spare.wait(timeout=5) == 0  # it served the second review and exited
    (nxt,) = reviewer_spares()
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


def test_spares_keep_one_process_per_module_and_environment():
    from kernelskill.runner import sandbox

    spares = sandbox._Spares()
    env, capture_module = sandbox.scrubbed_env(), "kernelskill.engine.inductor_seed"
    assert spares.take(sandbox.REVIEW_MODULE, env) is None  # first use: none ready, one started
    _, first = spares.waiting[sandbox.REVIEW_MODULE]
    spares.prestart(sandbox.REVIEW_MODULE, env)  # already one: no second
    assert spares.waiting[sandbox.REVIEW_MODULE][1] is first
    spares.prestart(capture_module, env)
    _, capture = spares.waiting[capture_module]
    spares.prestart(sandbox.REVIEW_MODULE, {**env, "X": "1"})  # another environment replaces it
    assert first.wait(timeout=10) is not None and capture.poll() is None
    got = spares.take(capture_module, env)
    assert got is capture and spares.waiting[capture_module][1] is not got  # handed out, the next one started
    assert got is not None and got.stdin is not None
    got.stdin.close()  # as a parent that goes away: the spare exits on its own
    assert got.wait(timeout=60) == 0
    spares.close()
    assert not spares.waiting


def test_capture_child_serves_one_request_as_a_spare(tmp_path):
    """``inductor_seed --spare`` reads its one request like the worker; without CUDA the capture says so."""
    import json
    import subprocess
    import sys

    req, res, log = tmp_path / "req.json", tmp_path / "res.json", tmp_path / "log.txt"
    req.write_text(json.dumps({"task_path": str(tmp_path / "missing.py"), "variant": "default"}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelskill.engine.inductor_seed", "--spare"], stdin=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps([str(req), str(res), str(log), str(tmp_path)]) + "\n")
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0
    out = json.loads(res.read_text())
    assert out["ok"] is False and out["error"]


@pytest.mark.parametrize("interpret", ["1", ""])
def test_spares_warm_inductor_only_where_compiler_seeds_run(interpret):
    """Without CUDA, or with the Triton interpreter, a spare imports torch and nothing more."""
    import os
    import subprocess
    import sys

    import torch

    code = (
        "import sys; from kernelskill.runner.sandbox import warm_cuda_imports; "
        "warm_cuda_imports(('torch._inductor.select_algorithm',)); "
        "print('torch' in sys.modules, 'torch._inductor.select_algorithm' in sys.modules)"
    )
    env = {**os.environ, "TRITON_INTERPRET": interpret}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    warmed = interpret != "1" and torch.cuda.is_available()
    assert out.stdout.split() == ["True", str(warmed)], out.stderr
