"""The eval loop: metric arithmetic, resume, bad task files, timeouts, Ctrl-C, reports, plots, compare, CLI."""

import _thread
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.evals.compare import compare_markdown, compare_summaries
from kernelskill.evals.metrics import NO_GPU_NOTE, round_curve, summarize, task_row
from kernelskill.evals.report import build_summary, rebuild
from kernelskill.evals.runner import SubprocessLauncher, TaskExit, TaskJob, run_eval
from kernelskill.evals.suite import TaskSpec, meta_tasks, parse_levels, select_tasks
from kernelskill.graph.context import Context

from conftest import FIXTURES
from scripts_util import fenced, write_script

cli = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- fake runs


def review(correct=True, kind="cuda_events", speedup=2.0, compile_=None, sol=None, custom=True, labels=()):
    metrics = {"sol_pct": sol} if sol is not None else {}
    return {
        "status": "correct" if correct else "wrong_output",
        "correct": correct,
        "timing_kind": kind if correct else None,
        "runtime_ms": 1.0 if correct else None,
        "eager_ms": speedup if correct else None,
        "speedup_vs_eager": speedup if correct else None,
        "speedup_vs_compile": compile_,
        "metrics": metrics,
        "custom_kernel": custom,
        "labels": list(labels),
    }


def entry(rnd, speedup=None, kind="cuda_events", improved=True, outcome="correct"):
    return {
        "round": rnd,
        "candidate_id": f"c{rnd}",
        "skill_id": None if rnd == 0 else "skill",
        "plan_reason": "",
        "outcome": outcome,
        "repairs": 0,
        "runtime_ms": 1.0,
        "timing_kind": kind,
        "speedup_vs_eager": speedup,
        "error_digest": "",
        "improved": improved,
    }


def report(best_review=None, trajectory=(), tokens=(100, 10)):
    return {
        "thread_id": "x",
        "stop_reason": "round budget spent",
        "best_review": best_review,
        "trajectory": list(trajectory),
        "tokens": {"total": {"calls": 1, "input_tokens": tokens[0], "output_tokens": tokens[1]}},
    }


def make_task(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    shutil.copy(FIXTURES / "tasks" / "scale_relu.py", path)
    return path


def fake_eval(out: Path, tasks: dict, level: int = 2, context=None, prices=None) -> Path:
    """An eval directory whose tasks have the given report dicts (None = not run yet, a str = a record status)."""
    specs = [TaskSpec(level, out / "tasks" / f"{name}.py") for name in tasks]
    for spec, result in zip(specs, tasks.values(), strict=True):
        run_dir = out / "runs" / spec.key
        run_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(result, dict):
            (run_dir / "report.json").write_text(json.dumps(result))
            (run_dir / "eval_task.json").write_text(json.dumps({"status": "finished", "wall_s": 10.0}))
        elif isinstance(result, str):
            (run_dir / "eval_task.json").write_text(json.dumps({"status": result, "wall_s": 5.0, "reason": "why"}))
    meta = {"levels": [level], "tasks": meta_tasks(specs), "context": context or {"device": "cuda", "max_rounds": 3}}
    if prices:
        meta["prices"] = prices
    (out / "eval.json").write_text(json.dumps(meta))
    return out


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def output(console: Console) -> str:
    return console.file.getvalue()  # type: ignore[attr-defined]


class FakeLauncher:
    """Records jobs; writes a report for each (or runs a custom action)."""

    def __init__(self, make_report=None):
        self.jobs: list[TaskJob] = []
        self.make_report = make_report or (lambda job: report(review(kind="interpreter", speedup=None)))

    def __call__(self, job: TaskJob) -> TaskExit:
        self.jobs.append(job)
        job.run_dir.mkdir(parents=True, exist_ok=True)
        rep = self.make_report(job)
        if rep is not None:
            (job.run_dir / "report.json").write_text(json.dumps(rep))
        return TaskExit(0, wall_s=0.01)


# ---------------------------------------------------------------- metrics


def test_metric_arithmetic(tmp_path):
    out = fake_eval(
        tmp_path,
        {
            "a": report(review(speedup=2.5, compile_=1.2, sol=60.0)),
            "b": report(review(speedup=0.8, sol=20.0)),
            "c": report(review(speedup=3.0, custom=False)),  # correct, not a custom kernel
            "d": report(review(speedup=5.0, labels=["torch_main_work"])),  # likewise
            "e": report(review(kind="interpreter", speedup=9.0)),  # interpreter: never a speedup
            "f": report(None),
            "g": "timeout",
        },
        prices={"in": 2.0, "out": 8.0},
    )
    s = build_summary(out)
    m = s["overall"]
    assert [r["status"] for r in s["rows"]] == [
        "success",
        "success",
        "correct_not_custom",
        "correct_not_custom",
        "success",
        "failed",
        "timeout",
    ]
    assert (m["tasks"], m["finished"], m["success"], m["correct"], m["correct_not_custom"]) == (7, 7, 3, 5, 2)
    assert m["success_rate"] == pytest.approx(3 / 7) and m["correctness_rate"] == pytest.approx(5 / 7)
    assert (m["failed"], m["timeout"], m["gpu_timed"]) == (1, 1, 2)
    assert m["fast_0"] == pytest.approx(2 / 7)
    assert m["fast_1"] == pytest.approx(1 / 7)
    assert m["fast_2"] == pytest.approx(1 / 7)
    assert m["speedup_vs_eager"]["arith_mean"] == pytest.approx(1.65)
    assert m["speedup_vs_eager"]["geo_mean"] == pytest.approx(math.sqrt(2.5 * 0.8))
    assert m["speedup_vs_compile"] == {"n": 1, "arith_mean": pytest.approx(1.2), "geo_mean": pytest.approx(1.2)}
    assert m["sol_pct_median"] == pytest.approx(40.0) and m["sol_pct_n"] == 2
    assert (m["input_tokens"], m["output_tokens"]) == (600, 60)
    assert m["cost_usd"] == pytest.approx(600 / 1e6 * 2.0 + 60 / 1e6 * 8.0)
    assert m["wall_s_total"] == pytest.approx(65.0)
    assert s["rows"][4]["speedup_vs_eager"] is None  # interpreter timing dropped at the row
    assert any("PyTorch or a library" in n for n in m["notes"])
    assert s["per_level"]["2"]["fast_1"] == m["fast_1"]


def test_interpreter_timings_are_never_speedups(tmp_path):
    out = fake_eval(tmp_path, {"a": report(review(kind="interpreter", speedup=4.0)), "b": report(None)})
    m = build_summary(out)["overall"]
    assert m["correct"] == 1 and m["success"] == 1
    assert m["fast_0"] is m["fast_1"] is m["fast_2"] is None
    assert m["speedup_vs_eager"] == {"n": 0, "arith_mean": None, "geo_mean": None}
    assert m["sol_pct_median"] is None and m["per_round"] == []
    assert NO_GPU_NOTE in m["notes"]
    assert m["cost_usd"] is None and any("cost unknown" in n for n in m["notes"])


def test_host_bound_tasks_are_marked_and_their_means_given_apart(tmp_path):
    def timed(speedup, compile_, host_fraction):
        r = review(speedup=speedup, compile_=compile_)
        r["timing"] = {
            "candidate": {"median_ms": 1.0, "host_ms": 0.1},
            "eager": {"median_ms": speedup, "host_ms": host_fraction * speedup},
            "compile": {"median_ms": compile_, "host_ms": 0.1},
        }
        return r

    out = fake_eval(
        tmp_path,
        {
            "a": report(timed(2.0, 1.5, 0.2)),  # GPU-bound
            "b": report(timed(4.0, 3.0, 0.95)),  # the eager baseline is host-bound
            "c": report(review(speedup=1.0, compile_=1.0)),  # no host times recorded: not host-bound
        },
    )
    s = build_summary(out)
    m = s["overall"]
    assert [r["host_bound"] for r in s["rows"]] == [False, True, False]
    assert m["host_bound"] == 1
    assert m["speedup_vs_compile"]["n"] == 3
    assert m["speedup_vs_compile_gpu_bound"] == {
        "n": 2,
        "arith_mean": pytest.approx(1.25),
        "geo_mean": pytest.approx(math.sqrt(1.5)),
    }
    assert m["speedup_vs_eager_gpu_bound"]["geo_mean"] == pytest.approx(math.sqrt(2.0))
    assert any(n.startswith("1 timed task(s) are host-bound") for n in m["notes"])
    from kernelskill.evals.report import summary_markdown

    md = summary_markdown(s)
    assert "| timed tasks that are host-bound | 1 |" in md
    assert "cuda_events, host-bound" in md
    clean = build_summary(fake_eval(tmp_path / "clean", {"a": report(timed(2.0, 1.5, 0.2))}))["overall"]
    assert clean["host_bound"] == 0 and not any("host-bound" in n for n in clean["notes"])


def test_the_gpu_holds_of_the_tasks_are_summed_in_the_summary(tmp_path):
    from kernelskill.evals.report import summary_markdown

    out = fake_eval(tmp_path, {"a": report(review()), "b": report(review())})
    assert build_summary(out)["gpu_holds"] == {} and "## GPU sharing" not in summary_markdown(build_summary(out))
    a, b = (out / "runs" / r["key"] / "gpu-holds.txt" for r in build_summary(out)["rows"])
    a.write_text(
        "1796224855.49 1265 shared 1.5 0.0 review\n"
        "1796224894.69 1362 exclusive 0.25 1.0 tuning:InductorBenchmarker.benchmark_gpu\n"
        "1796224895.22 1362 exclusive 0.5 0.5 tuning:do_bench\n"
        "a torn line\n"
    )
    b.write_text("1796224899.00 1400 released 30.0 2.0 compile\n1796224899.50 1400 shared 2.0 0.25 review\n")
    s = build_summary(out)
    assert s["gpu_holds"] == {
        "released compile": {"holds": 1, "held_s": 30.0, "waited_s": 2.0},
        "shared review": {"holds": 2, "held_s": 3.5, "waited_s": 0.2},
        "exclusive tuning": {"holds": 2, "held_s": 0.8, "waited_s": 1.5},
    }
    md = summary_markdown(s)
    assert "## GPU sharing" in md and "| exclusive | tuning | 2 | 0.8 | 1.5 |" in md


def test_round_curve_and_per_round_means():
    traj = [entry(0, 1.0), entry(1, 0.9, improved=False), entry(2, 2.0), entry(3, None, outcome="abandoned")]
    assert round_curve(traj) == [1.0, 1.0, 2.0, 2.0]
    assert round_curve([entry(0, 3.0, kind="interpreter"), entry(1, 1.5)]) == [None, 1.5]
    rows = [
        {"status": "success", "curve": [1.0, 1.0, 2.0, 2.0]},
        {"status": "success", "curve": [None, 4.0]},  # stopped after round 1: carried forward
        {"status": "correct_not_custom", "correct": True, "curve": [8.0, 8.0, 8.0, 8.0]},  # kernels any only
    ]
    rows = [_blank_row() | r for r in rows]
    curve = summarize(rows)["per_round"]
    assert [p["tasks"] for p in curve] == [1, 2, 2, 2]
    assert curve[0]["arith_mean"] == pytest.approx(1.0)
    assert curve[1]["arith_mean"] == pytest.approx(2.5) and curve[1]["geo_mean"] == pytest.approx(2.0)
    assert curve[3]["geo_mean"] == pytest.approx(math.sqrt(8.0))
    anyk = summarize(rows, kernels="any")["per_round"]  # scored like the speedups: every correct task
    assert [p["tasks"] for p in anyk] == [2, 3, 3, 3]
    assert anyk[0]["geo_mean"] == pytest.approx(math.sqrt(8.0)) and anyk[3]["geo_mean"] == pytest.approx(4.0)


def _blank_row():
    return task_row(TaskSpec(1, Path("x.py")), Path("/nonexistent"))


def test_a_task_without_a_torch_compile_baseline_says_why_in_its_row(tmp_path):
    """The reference's torch.compile failed: its error is the row's reason beside the stop reason; a
    report from before the error was kept says that it was not recorded; a row with the baseline has none."""
    failed = review(speedup=2.0) | {"timing": {"compile": None, "compile_error": "BackendCompilerFailed: boom"}}
    out = fake_eval(
        tmp_path, {"a": report(failed), "b": report(review(speedup=2.0)), "c": report(review(compile_=1.1))}
    )
    s = build_summary(out)
    reasons = {r["task"]: r["reason"] for r in s["rows"]}
    assert reasons == {
        "a": "no torch.compile baseline: BackendCompilerFailed: boom",
        "b": "no torch.compile baseline (its error was not recorded)",
        "c": None,
    }
    rebuild(out)
    assert (
        "no torch.compile baseline: BackendCompilerFailed: boom; round budget spent |"
        in (out / "summary.md").read_text()
    )


def test_the_summary_says_which_gpus_and_versions_timed_the_speedups(tmp_path):
    """A resumed eval may have run on two machines: the summary names each GPU with its versions and task count,
    notes that the means mix GPUs, and the task table then says each row's GPU; a comparison with an eval timed
    on other GPUs says so."""

    def on(gpu, speedup, software=None):
        return review(speedup=speedup) | {"device": f"cuda:0 ({gpu})", **({"software": software} if software else {})}

    sw = {"torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0"}
    mixed = fake_eval(
        tmp_path / "mixed",
        {
            "a": report(on("NVIDIA H200", 2.0, sw)),
            "b": report(on("NVIDIA H200", 1.5, sw)),
            "c": report(on("H100", 1.2)),
        },
    )
    s = build_summary(mixed)
    assert {r["task"]: r["gpu"] for r in s["rows"]} == {"a": "NVIDIA H200", "b": "NVIDIA H200", "c": "H100"}
    assert s["overall"]["platforms"] == [
        {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "tasks": 2},
        {"gpu": "H100", "torch": "", "triton": "", "tasks": 1},
    ]
    assert any(n.startswith("the speedups were timed on 2 GPUs (H100, NVIDIA H200)") for n in s["overall"]["notes"])
    rebuild(mixed)
    md = (mixed / "summary.md").read_text()
    assert (
        "- speedups timed on: NVIDIA H200, torch 2.11.0+cu130, Triton 3.6.0 (2 tasks); H100, versions not recorded "
        "(1 task)\n" in md
    )
    assert "| c | 2 | success | cuda_events, H100 |" in md

    one = fake_eval(
        tmp_path / "one", {"a": report(on("NVIDIA H200", 2.0, sw)), "b": report(review(kind="interpreter"))}
    )
    s1 = build_summary(one)
    assert s1["overall"]["platforms"] == [
        {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "tasks": 1}
    ]
    assert not any("GPUs" in n for n in s1["overall"]["notes"])
    rebuild(one)
    assert "| a | 2 | success | cuda_events |" in (one / "summary.md").read_text()  # one GPU: no GPU in the rows
    cmp = compare_summaries(s1, s)
    assert cmp["settings"]["speedups timed on"]["a"] == "NVIDIA H200, torch 2.11.0+cu130, Triton 3.6.0 (1 task)"
    assert "timed on different GPUs" in compare_markdown(cmp)
    assert "timed on different GPUs" not in compare_markdown(compare_summaries(s, s))


def test_pending_tasks_do_not_count(tmp_path):
    out = fake_eval(tmp_path, {"a": report(review(speedup=2.0)), "b": None, "c": "interrupted"})
    s = build_summary(out)
    assert s["partial"] and s["overall"]["finished"] == 1 and s["overall"]["pending"] == 2
    assert s["overall"]["fast_1"] == 1.0


def test_parse_levels_and_selection(tmp_path):
    assert parse_levels("2") == [2] and parse_levels("1, 3,1") == [1, 3]
    with pytest.raises(ValueError):
        parse_levels("0")
    for name in ("10_b", "2_a", "1_c", "_helper"):
        make_task(tmp_path, name)
    assert [s.name for s in select_tasks([2], tmp_path, 0)] == ["1_c", "2_a", "10_b"]  # natural order
    assert [s.key for s in select_tasks([2], tmp_path, 2)] == ["L2-1_c", "L2-2_a"]
    with pytest.raises(ValueError):
        select_tasks([1, 2], tmp_path, 0)


# ---------------------------------------------------------------- the run loop


def test_resume_skips_finished_tasks(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_done")
    make_task(tasks, "02_todo")
    out = tmp_path / "eval"
    done = out / "runs" / "L2-01_done"
    done.mkdir(parents=True)
    (done / "report.json").write_text(json.dumps(report(review(speedup=1.5))))
    launcher = FakeLauncher()
    summary = run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=launcher)
    assert [j.spec.key for j in launcher.jobs] == ["L2-02_todo"]
    cmd = launcher.jobs[0].cmd
    assert cmd[3:5] == ["optimize", str((tasks / "02_todo.py").resolve())] and "--thread-id" in cmd
    assert summary["overall"]["finished"] == 2 and not summary["partial"] and not summary["interrupted"]
    again = FakeLauncher()
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=again)
    assert again.jobs == []
    assert len(json.loads((out / "eval.json").read_text())["launches"]) == 2


def test_a_launch_over_a_subset_keeps_the_folders_earlier_tasks_in_its_summary(tmp_path):
    """A second launch over two of the three tasks (one started over) still summarizes all three; a task the
    first launch listed but never started leaves the list with the launch that drops it."""
    tasks, few = tmp_path / "tasks", tmp_path / "few"
    for name in ("01_a", "02_b", "03_c"):
        make_task(tasks, name)
    for name in ("02_b", "04_d"):
        make_task(few, name)
    out = tmp_path / "eval"
    ctx = Context(scripted="s.json", device="cpu")
    first = FakeLauncher(lambda job: None if job.spec.key == "L2-03_c" else report(review(speedup=1.5)))
    run_eval([2], tasks, 0, "", out, ctx, quiet(), launch=first)
    shutil.rmtree(out / "runs" / "L2-03_c")  # as if the task never started
    again = FakeLauncher(lambda job: report(review(speedup=2.0)))
    summary = run_eval([2], few, 0, "", out, ctx, quiet(), launch=again, rerun="L2-02*")
    assert [j.spec.key for j in again.jobs] == ["L2-02_b", "L2-04_d"]
    assert [r["key"] for r in summary["rows"]] == ["L2-01_a", "L2-02_b", "L2-04_d"]
    assert summary["overall"]["finished"] == 3
    by_key = {r["key"]: r for r in summary["rows"]}
    assert by_key["L2-02_b"]["speedup_vs_eager"] == pytest.approx(2.0)


def test_the_summary_says_which_tasks_ran_under_an_earlier_per_task_limit(tmp_path):
    """Resumed under another --task-timeout, the tasks finished before keep theirs (a record written before
    records carried it gets the folder's earlier one), and the summary's mode line names both."""
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_old")
    make_task(tasks, "02_rerun")
    out = tmp_path / "eval"
    ctx = Context(scripted="s.json", device="cpu")
    launch = FakeLauncher(lambda job: report(review(speedup=1.5)))
    run_eval([2], tasks, 0, "", out, ctx, quiet(), task_timeout_s=200, launch=launch)
    old = out / "runs" / "L2-01_old" / "eval_task.json"
    record = json.loads(old.read_text())
    assert record["timeout_s"] == 200
    old.write_text(json.dumps({k: v for k, v in record.items() if k != "timeout_s"}))  # as written before
    make_task(tasks, "03_new")
    again = FakeLauncher(lambda job: report(review(speedup=1.5)))
    summary = run_eval([2], tasks, 0, "", out, ctx, quiet(), task_timeout_s=300, launch=again, rerun="L2-02*")
    assert sorted(j.spec.key for j in again.jobs) == ["L2-02_rerun", "L2-03_new"]
    assert [r["timeout_s"] for r in summary["rows"]] == [200, 300, 300]
    assert summary["other_limits"] == {"200": 1}
    text = (out / "summary.md").read_text()
    assert "per-task limit 300 s (200 s for 1 task, run by an earlier launch)" in text


def test_a_task_out_of_memory_beside_other_workers_runs_again_alone_at_the_end(tmp_path):
    """Two workers on one GPU: a task whose seed capture ran out of memory (another worker's process held it)
    starts over once the others are done, alone; the first run is kept in superseded/. With one worker a
    GPU, an out-of-memory is the task's own and stands."""
    tasks = tmp_path / "tasks"
    for name in ("01_a", "02_big", "03_c"):
        make_task(tasks, name)
    oom = "compiler seed (default) unavailable: OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB."

    def make_report(job):
        rep = report(review(speedup=1.5))
        if job.spec.key.endswith("02_big") and not (job.run_dir.parent.parent / "superseded").exists():
            rep = {**report(review(speedup=1.0, custom=False)), "seed_notes": [oom], "attempts": []}
        return rep

    out = tmp_path / "eval"
    ctx = Context(scripted="s.json", device="cpu")
    launch = FakeLauncher(make_report)
    summary = run_eval([2], tasks, 0, "0,0", out, ctx, quiet(), launch=launch)
    keys = [j.spec.key for j in launch.jobs]
    assert sorted(keys[:3]) == ["L2-01_a", "L2-02_big", "L2-03_c"] and keys[3:] == ["L2-02_big"]
    assert launch.jobs[3].env.get("CUDA_VISIBLE_DEVICES") == launch.jobs[0].env.get("CUDA_VISIBLE_DEVICES")
    assert "seed_notes" in json.loads((out / "superseded" / "L2-02_big" / "report.json").read_text())
    assert [r["status"] for r in summary["rows"]] == ["success"] * 3
    alone = FakeLauncher(make_report)
    run_eval([2], tasks, 0, "0", tmp_path / "eval-1", ctx, quiet(), launch=alone)
    assert len(alone.jobs) == 3  # one worker on the GPU: nothing ran beside it


KILLED_LAUNCH = """
import os, signal, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_evals import Context, FakeLauncher, quiet, report, review, run_eval


def make_report(job):
    if job.spec.key.endswith("02_killed"):
        os.kill(os.getpid(), signal.SIGKILL)  # no handler runs, nothing after it is written
    time.sleep(0.2)
    return report(review(speedup=1.5))


run_eval([2], Path(sys.argv[2]), 0, "", Path(sys.argv[3]), Context(scripted="s.json", device="cpu"), quiet(),
         launch=FakeLauncher(make_report))
"""


def test_a_launch_killed_without_a_word_still_counts_its_time(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_first")
    make_task(tasks, "02_killed")
    out = tmp_path / "eval"
    here = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", KILLED_LAUNCH, here, str(tasks), str(out)], timeout=300)
    assert done.returncode == -signal.SIGKILL
    (launch,) = json.loads((out / "eval.json").read_text())["launches"]
    assert launch["interrupted"] and launch["elapsed_s"] >= 0.2  # recorded at its start, updated after its task
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=FakeLauncher())
    first, second = json.loads((out / "eval.json").read_text())["launches"]
    assert first == launch and not second["interrupted"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["elapsed_s"] == pytest.approx(first["elapsed_s"] + second["elapsed_s"])


FOLLOWING_TASK = """
import os, subprocess, sys, time
from kernelskill.evals.runner import follow_the_eval
from kernelskill.runner.env import EVAL_PID_ENV
follow_the_eval()
assert EVAL_PID_ENV not in os.environ  # the task's own children are not tasks
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {grandchild.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""

LAUNCHING_EVAL = """
import os, subprocess, sys, time
from kernelskill.runner.env import EVAL_PID_ENV
env = {**os.environ, EVAL_PID_ENV: str(os.getpid())}
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env, start_new_session=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_task_ends_with_its_tree_when_the_eval_is_killed_without_a_word(tmp_path):
    """kill -9 of the eval: its task (in a session of its own) and the task's own children end too."""
    pids_file = tmp_path / "pids"
    evaluator = subprocess.Popen([sys.executable, "-c", LAUNCHING_EVAL, FOLLOWING_TASK, str(pids_file)])
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        task, grandchild = map(int, pids_file.read_text().split())
        assert _alive(task) and _alive(grandchild)
    finally:
        evaluator.kill()
        evaluator.wait()
    deadline = time.monotonic() + 20
    while (_alive(task) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(task) and not _alive(grandchild)


def test_outside_an_eval_a_process_does_not_follow_one(monkeypatch):
    from kernelskill.evals.runner import follow_the_eval
    from kernelskill.runner.env import EVAL_PID_ENV

    monkeypatch.delenv(EVAL_PID_ENV, raising=False)
    before = signal.getsignal(signal.SIGTERM)
    follow_the_eval()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_task_stopped_by_a_busy_device_starts_over_when_the_eval_resumes(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_done")
    make_task(tasks, "02_busy")
    out = tmp_path / "eval"
    for key, error in (
        ("L2-01_done", "the reference raised RuntimeError: x"),
        ("L2-02_busy", "the device is busy, not the task: ..."),
    ):
        (out / "runs" / key).mkdir(parents=True)
        (out / "runs" / key / "report.json").write_text(json.dumps({**report(), "task_error": error}))
    launcher = FakeLauncher()
    console = quiet()
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=launcher)
    assert [j.spec.key for j in launcher.jobs] == ["L2-02_busy"]  # an unusable task stays what it was
    assert (out / "superseded" / "L2-02_busy" / "report.json").exists()
    assert "stopped on a device another process filled: L2-02_busy" in output(console)


def test_unfinished_task_resumes_from_its_checkpoint(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "t")
    out = tmp_path / "eval"
    (out / "runs" / "L1-t").mkdir(parents=True)
    (out / "runs" / "L1-t" / "run.json").write_text("{}")
    launcher = FakeLauncher()
    run_eval([1], tasks, 0, "0,1", out, Context(scripted="s.json"), quiet(), launch=launcher)
    (job,) = launcher.jobs
    assert job.cmd[3:5] == ["resume", "L1-t"] and job.env["CUDA_VISIBLE_DEVICES"] in ("0", "1")


def test_broken_task_is_an_error_and_the_run_goes_on(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "a_good")
    shutil.copy(FIXTURES / "tasks" / "broken_task.py", tasks / "b_broken.py")
    (tasks / "c_syntax.py").write_text("def broken(:\n")
    launcher = FakeLauncher()
    console = quiet()
    summary = run_eval([2], tasks, 0, "", tmp_path / "eval", Context(scripted="s.json"), console, launch=launcher)
    assert [j.spec.name for j in launcher.jobs] == ["a_good"]
    rows = {r["task"]: r for r in summary["rows"]}
    assert rows["a_good"]["status"] == "success"
    assert rows["b_broken"]["status"] == "error" and "get_inputs" in rows["b_broken"]["reason"]
    assert rows["c_syntax"]["status"] == "error" and "SyntaxError" in rows["c_syntax"]["reason"]
    assert summary["overall"]["error"] == 2 and "unusable task file" in output(console)


def test_timeout_is_recorded_and_not_rerun(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "slow")
    out = tmp_path / "eval"

    def timing_out(job):
        return TaskExit(None, timed_out=True, wall_s=job.timeout_s)

    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), task_timeout_s=7, launch=timing_out)
    (row,) = summary["rows"]
    assert row["status"] == "timeout" and "7 s" in row["reason"] and row["wall_s"] == 7
    launcher = FakeLauncher()
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=launcher)
    assert launcher.jobs == []
    retried = FakeLauncher()  # e.g. after raising --task-timeout: resumed from its checkpoint
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=retried, retry_timeouts=True)
    assert [j.spec.key for j in retried.jobs] == ["L1-slow"] and summary["rows"][0]["status"] != "timeout"
    again = FakeLauncher()
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=again, retry_timeouts=True)
    assert again.jobs == []  # it has a report now


def test_unfinished_run_begun_under_other_code_starts_over(tmp_path):
    from kernelskill.runs import code_fingerprint

    tasks = tmp_path / "tasks"
    for name in ("a_old", "b_same", "c_unknown", "d_done"):
        make_task(tasks, name)
    out = tmp_path / "eval"
    runs = out / "runs"
    for key, code in (("L1-a_old", "0123456789abcdef"), ("L1-b_same", code_fingerprint()), ("L1-c_unknown", None)):
        (runs / key).mkdir(parents=True)
        meta = {"thread_id": key, "task_path": str(tasks / "x.py"), "context": {}}
        if code:
            meta["code"] = code
        (runs / key / "run.json").write_text(json.dumps(meta))
    (runs / "L1-d_done").mkdir(parents=True)  # finished under other code: its row stands
    (runs / "L1-d_done" / "run.json").write_text(json.dumps({"code": "fedcba9876543210"}))
    (runs / "L1-d_done" / "report.json").write_text(json.dumps(report(review(kind="interpreter", speedup=None))))
    launcher, console = FakeLauncher(), quiet()
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), console, launch=launcher)
    started = {j.spec.key: j.cmd[3] for j in launcher.jobs}  # "optimize" (fresh) or "resume"
    assert started == {"L1-a_old": "optimize", "L1-b_same": "resume", "L1-c_unknown": "resume"}
    assert (out / "superseded" / "L1-a_old" / "run.json").exists()
    assert "begun under other kernelskill code: L1-a_old" in output(console)
    assert not (out / "superseded" / "L1-d_done").exists()


def test_a_new_run_records_the_code_it_runs(tmp_path):
    from kernelskill.runs import code_fingerprint, new_run, run_code

    run = new_run(FIXTURES / "tasks" / "scale_relu.py", Context(scripted="s.json"), root=tmp_path, thread_id="t")
    assert run_code(run.dir) == code_fingerprint() and len(code_fingerprint()) == 16
    assert run_code(tmp_path / "missing") == ""


def test_the_code_fingerprint_ignores_files_beside_the_package_in_a_checkout(tmp_path, monkeypatch):
    """Imported from a checkout, kernelskill's __path__ also holds the checkout's root: an eval writing its
    summaries there (or a changed doc) is not a change of code, or every resumed task would start over."""
    import kernelskill
    from kernelskill.runs import code_fingerprint

    paths = kernelskill.__spec__.submodule_search_locations  # kernelskill/__init__.py appends to this list
    monkeypatch.setattr(kernelskill.__spec__, "submodule_search_locations", [*paths, str(tmp_path)])
    code_fingerprint.cache_clear()
    before = code_fingerprint()
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "notes.md").write_text("a run's notes")
    code_fingerprint.cache_clear()
    assert code_fingerprint() == before
    code_fingerprint.cache_clear()


def test_rerun_starts_matching_tasks_over_and_keeps_their_previous_runs(tmp_path):
    tasks = tmp_path / "tasks"
    for name in ("a_conv", "b_conv", "c_gemm"):
        make_task(tasks, name)
    out = tmp_path / "eval"
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=FakeLauncher())
    first = (out / "runs" / "L1-b_conv" / "report.json").read_text()
    again, console = FakeLauncher(), quiet()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), console, launch=again, rerun="L1-?_conv, x*")
    assert sorted(j.spec.key for j in again.jobs) == ["L1-a_conv", "L1-b_conv"] and len(summary["rows"]) == 3
    assert (out / "superseded" / "L1-b_conv" / "report.json").read_text() == first
    assert "starting over (2): L1-a_conv, L1-b_conv" in output(console)
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=FakeLauncher(), rerun="L1-a*")
    assert (out / "superseded" / "L1-a_conv.2").is_dir() and (out / "runs" / "L1-a_conv" / "report.json").exists()
    nothing = FakeLauncher()
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=nothing)
    assert nothing.jobs == []  # resuming without --rerun: all finished


def test_subprocess_launcher_kills_the_whole_tree_on_timeout(tmp_path):
    # The task starts a child in its own session (as the reviewer does): the timeout must kill it too.
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print('child', p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    job = TaskJob(TaskSpec(1, Path("t.py")), tmp_path / "run", [sys.executable, "-c", code], dict(os.environ), 1.0)
    t0 = time.monotonic()
    result = SubprocessLauncher()(job)
    assert result.timed_out and time.monotonic() - t0 < 20
    log = job.log_path.read_text()
    child = int(log.split("child ")[1].split()[0])
    assert "exceeded 1 s" in log
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def test_subprocess_launcher_kill_all_stops_running_and_later_tasks(tmp_path):
    launcher = SubprocessLauncher()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    job = TaskJob(TaskSpec(1, Path("t.py")), tmp_path / "run", sleep, dict(os.environ), 60.0)
    results = []
    worker = threading.Thread(target=lambda: results.append(launcher(job)))
    worker.start()
    deadline = time.monotonic() + 10
    while not launcher.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert launcher.kill_all() == 1
    worker.join(10)
    assert results and results[0].returncode == -9 and not results[0].timed_out
    later = launcher(job)
    assert later.returncode is None and "stopped" in later.error


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler for the test: ``interrupt_main()`` does nothing while SIGINT is ignored,
    as it is for a shell's background job (found running the suite under ``nohup ... &``)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class Blocking(FakeLauncher):
    """Task ``a`` finishes; any other runs until :meth:`kill_all` (or ``signal``, sent to this process, first)."""

    def __init__(self, signal_number=None):
        super().__init__()
        self.killed = threading.Event()
        self.signal_number = signal_number

    def __call__(self, job):
        if job.spec.name == "a":
            return super().__call__(job)
        self.jobs.append(job)
        if self.signal_number is not None:
            os.kill(os.getpid(), self.signal_number)
        self.killed.wait(30)
        return TaskExit(-9, wall_s=1.0)

    def kill_all(self):
        self.killed.set()


def test_the_launch_stops_when_its_time_is_spent_and_resumes(tmp_path):
    """--stop-after: at its end the running task is stopped as by Ctrl-C (interrupted, resumable), the tasks
    not started wait for the next launch, and the summary is written."""
    tasks = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        make_task(tasks, name)
    out, console, launcher = tmp_path / "eval", quiet(), Blocking()
    t0 = time.monotonic()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=launcher,
                       stop_after_s=2.0)  # fmt: skip
    assert time.monotonic() - t0 < 20 and launcher.killed.is_set()
    assert summary["interrupted"] and [r["status"] for r in summary["rows"]] == ["success", "pending", "pending"]
    assert json.loads((out / "runs" / "L1-b" / "eval_task.json").read_text())["status"] == "interrupted"
    text = output(console)
    assert "--stop-after" in text and "resume with:" in text
    resumed = FakeLauncher()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=resumed)
    assert [j.spec.name for j in resumed.jobs] == ["b", "c"] and not summary["partial"]


def test_a_run_alone_owed_by_a_stopped_launch_comes_at_the_end_of_the_next(tmp_path):
    """Two workers on one GPU: task a runs out of memory beside b, and the launch's time is spent while b runs,
    before a's run alone. The next launch resumes b and then runs a again alone (its first run kept in
    superseded/); a third launch has nothing left to run."""
    tasks = tmp_path / "tasks"
    for name in ("a", "b"):
        make_task(tasks, name)
    oom = "the reference ran out of memory on cuda:0 while other processes held 57.9 GiB of it: CUDA out of memory"
    out, ctx = tmp_path / "eval", Context(scripted="s.json", device="cpu")
    launcher = Blocking()
    launcher.make_report = lambda job: {**report(None), "attempts": [{"error_digest": oom}]}
    summary = run_eval([1], tasks, 0, "0,0", out, ctx, quiet(), launch=launcher, stop_after_s=2.0)
    assert summary["interrupted"] and [r["status"] for r in summary["rows"]] == ["failed", "pending"]
    record = json.loads((out / "runs" / "L1-a" / "eval_task.json").read_text())
    assert record["gpu_shared"] and not record["alone"]
    resumed, console = FakeLauncher(lambda job: report(review(speedup=1.5))), quiet()
    summary = run_eval([1], tasks, 0, "0,0", out, ctx, console, launch=resumed)
    assert [j.spec.name for j in resumed.jobs] == ["b", "a"]
    assert "they run alone at the end of this one: L1-a" in output(console)
    assert [r["status"] for r in summary["rows"]] == ["success", "success"]
    assert (out / "superseded" / "L1-a" / "report.json").exists()
    assert json.loads((out / "runs" / "L1-a" / "eval_task.json").read_text())["alone"]
    third = FakeLauncher()
    run_eval([1], tasks, 0, "0,0", out, ctx, quiet(), launch=third)
    assert third.jobs == []


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_termination_signal_stops_the_launch_as_ctrl_c_does(tmp_path, name):
    """A job scheduler's SIGTERM (or a closed terminal's SIGHUP) stops the running tasks, which run in sessions
    of their own and would outlive the eval, and writes the partial summary; the handlers are put back."""
    tasks = tmp_path / "tasks"
    for task in ("a", "b"):
        make_task(tasks, task)
    out, console = tmp_path / "eval", quiet()
    number = getattr(signal, name)
    outer = signal.signal(number, signal.SIG_DFL)  # the test runner's may be ignored (a background job's SIGHUP)
    try:
        launcher = Blocking(signal_number=number)
        summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=launcher)
        assert summary["interrupted"] and launcher.killed.is_set()
        assert f"stopped by {name}" in output(console)
        assert json.loads((out / "runs" / "L1-b" / "eval_task.json").read_text())["status"] == "interrupted"
        assert signal.getsignal(number) == signal.SIG_DFL
    finally:
        signal.signal(number, outer)


def test_an_ignored_sighup_stays_ignored_under_nohup(tmp_path):
    """``nohup`` ignores SIGHUP so that an eval outlives its terminal: the launch keeps it ignored."""
    make_task(tmp_path / "tasks", "a")
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        seen = []

        class Looking(FakeLauncher):
            def __call__(self, job):
                seen.append(signal.getsignal(signal.SIGHUP))
                return super().__call__(job)

        run_eval([1], tmp_path / "tasks", 0, "", tmp_path / "eval", Context(scripted="s.json", device="cpu"), quiet(),
                 launch=Looking())  # fmt: skip
        assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_ctrl_c_leaves_a_resumable_run(tmp_path, python_sigint):
    tasks = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        make_task(tasks, name)
    out = tmp_path / "eval"

    class Interrupting(FakeLauncher):
        def __init__(self):
            super().__init__()
            self.killed = threading.Event()

        def __call__(self, job):
            if job.spec.name == "a":
                return super().__call__(job)
            self.jobs.append(job)
            _thread.interrupt_main()  # Ctrl-C while task b runs
            self.killed.wait(10)
            return TaskExit(-9, wall_s=1.0)

        def kill_all(self):
            self.killed.set()

    launcher = Interrupting()
    console = quiet()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=launcher)
    assert summary["interrupted"] and summary["partial"] and launcher.killed.is_set()
    assert [j.spec.name for j in launcher.jobs] == ["a", "b"]
    assert [r["status"] for r in summary["rows"]] == ["success", "pending", "pending"]
    assert json.loads((out / "runs" / "L1-b" / "eval_task.json").read_text())["status"] == "interrupted"
    assert (out / "summary.json").exists() and "PARTIAL" in (out / "summary.md").read_text()
    text = output(console)
    assert "resume with:" in text and f"--out {out}" in text
    resumed = FakeLauncher()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=resumed)
    assert [j.spec.name for j in resumed.jobs] == ["b", "c"] and not summary["partial"]


# ---------------------------------------------------------------- reports, plots, compare, CLI


def _gpu_run(out: Path, speedups: dict) -> Path:
    tasks = {}
    for name, s in speedups.items():
        if s is None:
            tasks[name] = report(None, [entry(0, None, outcome="wrong_output", improved=False)])
        else:
            traj = [entry(0, s / 2), entry(1, s)]
            tasks[name] = report(review(speedup=s, compile_=s / 1.5, sol=min(90.0, 30 * s)), traj)
    return fake_eval(out, tasks)


def test_report_and_plots_from_a_small_run(tmp_path):
    out = _gpu_run(tmp_path / "gpu", {"a": 2.0, "b": 0.5, "c": None})
    summary = rebuild(out)
    md = (out / "summary.md").read_text()
    assert "fast_0 / fast_1 / fast_2" in md and "| a | 2 | success |" in md
    assert "Speedup vs eager after each round" in md and "| 1 | 2 |" in md
    assert json.loads((out / "summary.json").read_text())["overall"]["gpu_timed"] == 2
    assert len(summary["plots"]) == 3
    for plot in summary["plots"]:
        data = (out / plot).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
        assert f"]({plot})" in md


def test_plots_without_gpu_timings_say_so(tmp_path):
    out = fake_eval(tmp_path, {"a": report(review(kind="interpreter", speedup=None))})
    summary = rebuild(out)
    assert all((out / p).read_bytes().startswith(PNG_MAGIC) for p in summary["plots"])
    assert NO_GPU_NOTE in (out / "summary.md").read_text()


def test_compare_two_runs(tmp_path):
    a = _gpu_run(tmp_path / "a", {"x": 2.0, "y": None, "z": 1.0})
    b = _gpu_run(tmp_path / "b", {"x": 3.0, "y": 1.5, "z": 1.0})
    cmp = compare_summaries(build_summary(a), build_summary(b))
    by_key = {t["key"]: t for t in cmp["tasks"]}
    assert by_key["L2-x"]["ratio"] == pytest.approx(1.5) and not by_key["L2-x"]["status_changed"]
    assert by_key["L2-y"]["status_a"] == "failed" and by_key["L2-y"]["status_b"] == "success"
    assert by_key["L2-y"]["status_changed"] and by_key["L2-y"]["ratio"] is None
    assert cmp["deltas"]["success_rate"]["delta"] == pytest.approx(1 / 3)
    text = compare_markdown(cmp)
    assert "| L2-y | failed | **success** |" in text and "1.500" in text and "+0.333" in text


def test_cli_report_and_compare(tmp_path):
    a = _gpu_run(tmp_path / "a", {"x": 2.0, "y": None})
    b = _gpu_run(tmp_path / "b", {"x": 1.0, "y": 1.2})
    rep = cli.invoke(app, ["eval", "report", str(a), "--price-in", "1", "--price-out", "2"])
    assert rep.exit_code == 0, rep.output
    assert "fast_0" in rep.output and (a / "plots" / "speedup_vs_round.png").exists()
    assert json.loads((a / "summary.json").read_text())["overall"]["cost_usd"] == pytest.approx(200 * 1e-6 + 20 * 2e-6)
    cmp = cli.invoke(app, ["eval", "compare", str(a), str(b)])
    assert cmp.exit_code == 0, cmp.output
    assert "| cost_usd | 0.000 | - | - |" in cmp.output  # A's prices were saved by `eval report`
    assert "L2-x" in cmp.output and "0.500" in cmp.output and "**success**" in cmp.output
    assert cli.invoke(app, ["eval", "report", str(tmp_path / "nope")]).exit_code == 2
    helped = cli.invoke(app, ["eval", "--help"])
    assert "report" in helped.output and "compare" in helped.output and "--task-timeout" in helped.output


def test_cli_eval_runs_two_tasks_end_to_end_on_cpu(tmp_path, candidate):
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_scale_relu")
    make_task(tasks, "02_scale_relu")
    script = write_script(tmp_path / "script", [{"role": "generator", "reply": fenced(candidate("good"))}])
    out = tmp_path / "eval"
    args = ["eval", "--level", "1", "--tasks", str(tasks), "--scripted", str(script), "--rounds", "0"]
    # Two workers (on the CPU the "GPU" ids only name the workers): the two tasks run side by side.
    result = cli.invoke(app, [*args, "--device", "cpu", "--gpus", "0,1", "--out", str(out), "--task-timeout", "300"])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    m = summary["overall"]
    assert (m["tasks"], m["correct"], m["success"]) == (2, 2, 2)
    assert m["fast_1"] is None and m["speedup_vs_eager"]["geo_mean"] is None
    assert all(r["timing_kind"] == "interpreter" and r["speedup_vs_eager"] is None for r in summary["rows"])
    assert m["input_tokens"] > 0 and m["wall_s_total"] > 0
    assert "[2/2]" in result.output and "ETA" in result.output
    assert all((out / p).stat().st_size > 0 for p in summary["plots"])


def test_task_that_dies_is_an_error_and_is_retried_on_resume(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "t")
    out = tmp_path / "eval"

    def dying(job):
        job.run_dir.mkdir(parents=True, exist_ok=True)
        job.log_path.write_text("Traceback ...\nRuntimeError: endpoint down\n")
        return TaskExit(1, wall_s=0.5)

    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=dying)
    (row,) = summary["rows"]
    assert row["status"] == "error" and "exit code 1" in row["reason"] and "endpoint down" in row["reason"]

    def broken_launcher(job):
        raise OSError("no such interpreter")

    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=broken_launcher)
    assert "no such interpreter" in summary["rows"][0]["reason"]
    launcher = FakeLauncher()
    summary = run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=launcher)
    assert len(launcher.jobs) == 1 and summary["rows"][0]["status"] == "success"
    assert summary["rows"][0]["attempts"] == 3


def test_tf32_successes_are_named_in_the_notes():
    rows = [
        {"status": "success", "labels": ["tf32_dot"], "speedup_vs_eager": 5.0, "timing_kind": "cuda_events"},
        {"status": "success", "labels": [], "speedup_vs_eager": 1.0, "timing_kind": "cuda_events"},
    ]
    notes = summarize([_blank_row() | r for r in rows])["notes"]
    assert any(n.startswith("1 success(es) multiply fp32 tiles in TF32") for n in notes)
    assert not any("TF32" in n for n in summarize([_blank_row() | rows[1]])["notes"])


def test_repaired_successes_are_named_in_the_notes():
    ok = {"status": "success", "labels": [], "speedup_vs_eager": 1.0, "timing_kind": "cuda_events"}
    notes = summarize([_blank_row() | ok | {"repaired": True}, _blank_row() | ok])["notes"]
    assert any(n.startswith("1 success(es) had a round that passed only after a repair") for n in notes)
    assert not any("repair" in n for n in summarize([_blank_row() | ok])["notes"])


def test_gpu_workers_get_disjoint_cpu_shares(monkeypatch, tmp_path):
    import subprocess

    from kernelskill.evals.runner import task_job
    from kernelskill.graph.context import Context
    from kernelskill.runner import env

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    a, b = env.cpu_shares(2)
    assert a == list(range(16)) and b == list(range(16, 32))
    assert env.cpu_shares(1) == [[]]  # one worker keeps the whole machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert env.cpu_shares(2) == [[], []]  # too few cores to split
    job = task_job(TaskSpec(1, Path("t.py")), tmp_path, "1", Context(), 60.0, [4, 5])
    assert job.env[env.CPUS_ENV] == "4,5" and job.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env.CPUS_ENV not in task_job(TaskSpec(1, Path("t.py")), tmp_path, "", Context(), 60.0).env
    code = (
        "from kernelskill.runner.env import apply_cpu_share; import os; "
        "print(apply_cpu_share(), sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, env.CPUS_ENV: "0"}, capture_output=True, text=True
    )
    assert out.stdout.split() == ["[0]", "[0]"], out.stderr  # pinned, and what it starts inherits it


def test_a_task_that_imports_einops_is_usable(tmp_path):
    from kernelskill.evals.runner import check_task_file

    task = tmp_path / "t.py"
    task.write_text(
        "import torch\nfrom einops import rearrange\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return rearrange(x, 'b (h d) -> b h d', h=2)\n\n\n"
        "def get_inputs():\n    return [torch.randn(3, 8)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    assert check_task_file(task) is None


def test_a_level_folder_labels_its_tasks(tmp_path):
    from kernelskill.evals.suite import default_level

    assert default_level(None) == "1" and default_level(tmp_path) == "1"
    (tmp_path / "level2").mkdir()
    assert default_level(tmp_path / "level2") == "2" and default_level(tmp_path / "level2" / ".") == "2"


def test_the_benchmark_script_runs_every_policy_arm(tmp_path):
    # The script's commands, printed instead of run: a policy arm per level, tf32 on level 2 only.
    script = Path(__file__).parent.parent / "evals" / "benchmarks.sh"
    env = {**os.environ, "PY": "true", "KS": "echo", "LEVELS": "1 2", "KB": "/kb", "BENCH": "b"}
    for arm in ("suite-l2", "suite-l2-tf32", "kernelbench-l1"):  # eval directories already there
        (tmp_path / "b" / arm).mkdir(parents=True)
        (tmp_path / "b" / arm / "eval.json").write_text("{}")
    out = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # a level with two or more arms' directories gets them side by side
    assert (tmp_path / "b" / "policies-suite-l2.md").read_text().split() == [
        "eval", "policies", "b/suite-l2", "b/suite-l2-tf32"
    ]  # fmt: skip
    assert not (tmp_path / "b" / "policies-kernelbench-l1.md").exists()  # one arm: nothing to put beside it
    runs = {line.split("--out ")[1].split()[0]: line for line in out.stdout.splitlines() if "--out b/" in line}
    assert sorted(runs) == sorted(
        f"b/{suite}-l{lv}{arm}"
        for suite in ("suite", "kernelbench")
        for lv in (1, 2)
        for arm in ("", "-custom", "-tf32")
        if arm != "-tf32" or lv == 2
    )
    assert "--precision tf32 --kernels any" in runs["b/kernelbench-l2-tf32"]
    assert "--precision fp32 --kernels custom" in runs["b/suite-l1-custom"]
    bad = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env={**env, "ARMS": "any bogus"}, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "unknown arm 'bogus'" in bad.stderr


def test_an_eval_folder_copied_without_its_run_records_says_so_before_running_them_again(tmp_path):
    """The last summary counted a task as finished, but its ``runs/<key>`` is not there: a warning names it."""
    tasks = tmp_path / "tasks"
    make_task(tasks, "01_done")
    make_task(tasks, "02_todo")
    out = tmp_path / "eval"
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), quiet(), launch=FakeLauncher())
    shutil.rmtree(out / "runs" / "L2-01_done")  # the folder as a copy without its records
    console, again = quiet(), FakeLauncher()
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=again)
    said = " ".join(output(console).split())
    assert "counted 1 task(s) as finished whose run records are not in" in said and "L2-01_done" in said
    assert [j.spec.key for j in again.jobs] == ["L2-01_done"]
    console = quiet()
    run_eval([2], tasks, 0, "", out, Context(scripted="s.json", device="cpu"), console, launch=FakeLauncher())
    assert "run records are not in" not in output(console)  # records back: nothing said, nothing run
