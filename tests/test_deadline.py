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


def test_a_cancelled_child_is_killed_and_says_so(tmp_path):
    import threading

    from kernelskill.runner.sandbox import ChildFailure, run_child

    (tmp_path / "sleeper_child.py").write_text("import time\ntime.sleep(60)\n")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.perf_counter()
    out = run_child("sleeper_child", {}, tmp_path, "sleep", 60.0, cancel=stop)
    assert isinstance(out, ChildFailure) and out.status == "cancelled"
    assert "stopped by its caller" in out.digest and time.perf_counter() - t0 < 10


def _seed_run_child(first_result, log):
    """A ``run_child`` stand-in: the default capture answers at once, the triton one runs until cancelled."""
    from kernelskill.runner.sandbox import ChildFailure, ChildResult

    def fake(module, req, workdir, name, timeout_s, cancel=None, **kw):
        if req["variant"] == "default":
            return ChildResult(first_result, 30.0)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < min(timeout_s, 20.0):
            if cancel is not None and cancel.is_set():
                log.append(time.perf_counter() - t0)
                return ChildFailure("cancelled", "stopped by its caller", "", time.perf_counter() - t0)
            time.sleep(0.05)
        return ChildFailure("timeout", "evaluation exceeded", "", timeout_s)

    return fake


def _conv_task(tmp_path):
    task = tmp_path / "conv_task.py"
    task.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(3, 8, 3)\n    def forward(self, x):\n        return self.conv(x)\n"
    )
    return str(task)


def test_the_triton_capture_stops_when_the_default_seed_needs_the_time_left(monkeypatch, tmp_path):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context

    stopped: list[float] = []
    library_seed = {"ok": True, "source": "class ModelNew: ...", "capture": {"heavy_extern_calls": ["convolution"]}}
    monkeypatch.setattr(compiler, "run_child", _seed_run_child(library_seed, stopped))
    # 93 s left: the default seed took 30 s, its review is given 60 s more, so the triton capture has ~3 s
    monkeypatch.setenv(deadline.ENV, str(time.time() + 93))
    outcomes = compiler.compiler_seeds(Context(seed_timeout_s=600.0), _conv_task(tmp_path), tmp_path / "seeds")
    assert [o.variant for o in outcomes] == ["default", "triton"] and outcomes[0].ok
    assert stopped and 1.0 < stopped[0] < 8.0
    assert "capture stopped after" in outcomes[1].error and "needs the time left for its review" in outcomes[1].error


def test_the_triton_capture_stops_at_once_when_the_default_seed_does_not_need_it(monkeypatch, tmp_path):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context

    stopped: list[float] = []
    triton_seed = {"ok": True, "source": "async_compile.triton('k', '')\nclass ModelNew: ...", "capture": {}}
    monkeypatch.setattr(compiler, "run_child", _seed_run_child(triton_seed, stopped))
    monkeypatch.delenv(deadline.ENV, raising=False)
    outcomes = compiler.compiler_seeds(Context(seed_timeout_s=600.0), _conv_task(tmp_path), tmp_path / "seeds")
    assert [o.variant for o in outcomes] == ["default"] and stopped and stopped[0] < 2.0


def test_without_a_deadline_the_triton_capture_runs_its_course(monkeypatch, tmp_path):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context

    stopped: list[float] = []
    library_seed = {"ok": True, "source": "class ModelNew: ...", "capture": {"heavy_extern_calls": ["convolution"]}}
    monkeypatch.setattr(compiler, "run_child", _seed_run_child(library_seed, stopped))
    monkeypatch.delenv(deadline.ENV, raising=False)
    outcomes = compiler.compiler_seeds(Context(seed_timeout_s=1.0), _conv_task(tmp_path), tmp_path / "seeds")
    assert not stopped and "timed out" in outcomes[1].error


def _probed(reference_gib: float, memory_gib: float | None) -> dict:
    device = {"name": "NVIDIA H200", "memory_gib": memory_gib} if memory_gib else {"name": "cpu (triton interpreter)"}
    return {"status": "correct", "metrics": {"reference_bytes": reference_gib * 2**30}, "probe": {"device": device}}


def test_baselines_are_timed_beside_the_captures_only_on_a_gpu_with_room(monkeypatch, tmp_path):
    from kernelskill.graph.context import Context
    from kernelskill.nodes import generator

    calls: list[tuple] = []
    monkeypatch.setattr(generator, "prime_baselines", lambda *a: calls.append(a))
    monkeypatch.setenv(deadline.ENV, str(time.time() + 500))
    ctx = Context(run_dir=str(tmp_path), precision="tf32", review_timeout_s=300.0)
    task = {"name": "t", "path": str(tmp_path / "t.py"), "source": ""}
    thread = generator._start_baselines(ctx, task, _probed(2.0, 139.8))
    assert thread is not None
    thread.join()
    path, workdir, limit, device, seed, precision = calls[0]
    assert path == task["path"] and workdir.name == "baselines" and precision == "tf32"
    assert 300 - 1 <= limit <= 300  # the review limit: 500 s left minus the reserve is more
    assert generator._start_baselines(ctx, task, _probed(20.0, 139.8)) is None  # the captures need the memory
    assert generator._start_baselines(ctx, task, _probed(0.1, None)) is None  # the interpreter: nothing to time
    assert generator._start_baselines(ctx, task, {**_probed(0.1, 139.8), "status": "timeout"}) is None
    assert len(calls) == 1
