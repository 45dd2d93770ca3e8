"""Run the optimizer over a task suite: one worker per GPU, resumable, summarized.

Each task runs as its own ``kernelskill optimize`` process (a crash or hang in one task never stops
the suite) under a per-task wall-time limit. The eval directory holds ``runs/<thread-id>/`` per
task; a task whose ``report.json`` exists is finished and never re-run; a task with a run directory
but no report is resumed from its checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelskill.graph.context import Context

TASKS_DIR = Path(__file__).parent / "tasks"


def task_files(level: int, tasks_dir: Path | None, limit: int) -> list[Path]:
    """The task files to run, sorted, at most ``limit`` (0 = all)."""
    folder = tasks_dir or TASKS_DIR / f"level{level}"
    files = sorted(p for p in Path(folder).glob("*.py") if not p.name.startswith("_"))
    return files[:limit] if limit else files


def thread_id_for(level: int, path: Path) -> str:
    """Stable thread id of a task inside an eval run."""
    return f"L{level}-{path.stem}"


def task_outcome(run_dir: Path, task: Path) -> dict[str, Any]:
    """One row of the summary, from a task's report (or its absence)."""
    report_path = run_dir / "report.json"
    row: dict[str, Any] = {"task": task.stem, "path": str(task)}
    if not report_path.exists():
        return {**row, "status": "error", "correct": False, "reason": _last_lines(run_dir / "eval.log")}
    report = json.loads(report_path.read_text())
    review = report.get("best_review") or {}
    return {
        **row,
        "status": "correct" if review.get("correct") else "failed",
        "correct": bool(review.get("correct")),
        "timing_kind": review.get("timing_kind"),
        "runtime_ms": review.get("runtime_ms"),
        "eager_ms": review.get("eager_ms"),
        "speedup_vs_eager": review.get("speedup_vs_eager"),
        "rounds": len(report.get("trajectory", [])),
        "stop_reason": report.get("stop_reason"),
        "tokens": report.get("tokens", {}).get("total", {}),
    }


def _last_lines(path: Path, n: int = 5) -> str:
    try:
        return " / ".join(path.read_text(errors="replace").strip().splitlines()[-n:])[-600:]
    except OSError:
        return "no log"


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Success, correctness rate, fast_p and mean speedups (GPU timings only)."""
    n = len(rows)
    correct = [r for r in rows if r["correct"]]
    timed = [r for r in correct if r.get("timing_kind") == "cuda_events" and r.get("speedup_vs_eager")]
    speedups = [float(r["speedup_vs_eager"]) for r in timed]

    def fast(p: float) -> float | None:
        return sum(1 for s in speedups if s > p) / n if n and timed else None

    return {
        "tasks": n,
        "correct": len(correct),
        "correctness_rate": len(correct) / n if n else 0.0,
        "gpu_timed": len(timed),
        "fast_0": fast(0.0),
        "fast_1": fast(1.0),
        "fast_2": fast(2.0),
        "speedup_vs_eager_arith_mean": sum(speedups) / len(speedups) if speedups else None,
        "speedup_vs_eager_geo_mean": math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None,
        "note": None
        if timed
        else "no GPU timings in this run: speedups are not reported (interpreter timings never count)",
    }


def run_eval(
    level: int,
    tasks_dir: Path | None,
    limit: int,
    gpus: str,
    out: Path | None,
    ctx: Context,
    console: Any,
    task_timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Run every task (resuming a previous eval directory), then write summary.json / summary.md."""
    files = task_files(level, tasks_dir, limit)
    out = out or Path("runs") / f"eval-L{level}-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(
        json.dumps({"level": level, "tasks": [str(f) for f in files], "context": ctx.to_dict()}, indent=2)
    )
    todo: queue.Queue[Path] = queue.Queue()
    done_before = 0
    for f in files:
        if (runs / thread_id_for(level, f) / "report.json").exists():
            done_before += 1
        else:
            todo.put(f)
    console.print(f"eval dir {out}: {len(files)} tasks, {done_before} already finished, {todo.qsize()} to run")
    workers = [g.strip() for g in gpus.split(",") if g.strip()] or [""]
    lock = threading.Lock()
    finished = [done_before]
    t0 = time.time()

    def work(gpu: str) -> None:
        while True:
            try:
                task = todo.get_nowait()
            except queue.Empty:
                return
            tid = thread_id_for(level, task)
            run_dir = runs / tid
            cmd = [sys.executable, "-m", "kernelskill.cli"]
            if (run_dir / "run.json").exists():
                cmd += ["resume", tid, "--runs-dir", str(runs)]
            else:
                cmd += ["optimize", str(task), "--runs-dir", str(runs), "--thread-id", tid]
                cmd += _context_flags(ctx)
            env = dict(os.environ)
            if gpu:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(run_dir / "eval.log", "a") as log:
                try:
                    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=task_timeout_s)
                except subprocess.TimeoutExpired:
                    log.write(f"\ntask exceeded {task_timeout_s:g} s\n")
            row = task_outcome(run_dir, task)
            with lock:
                finished[0] += 1
                elapsed = time.time() - t0
                ran = finished[0] - done_before
                eta = elapsed / ran * (len(files) - finished[0]) if ran else 0
                speed = f", {row['speedup_vs_eager']:.2f}x" if row.get("speedup_vs_eager") else ""
                console.print(
                    f"[{finished[0]}/{len(files)}] {task.stem}: {row['status']}{speed}  (ETA {eta / 60:.1f} min)"
                )

    threads = [threading.Thread(target=work, args=(g,), daemon=True) for g in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [task_outcome(runs / thread_id_for(level, f), f) for f in files]
    summary = {"level": level, **summarize(rows), "rows": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text(summary_markdown(summary))
    console.print(summary_markdown(summary))
    return summary


def _context_flags(ctx: Context) -> list[str]:
    flags = []
    if ctx.scripted:
        flags += ["--scripted", ctx.scripted]
    if ctx.model:
        flags += ["--model", ctx.model]
    flags += ["--rounds", str(ctx.max_rounds), "--device", ctx.device]
    return flags


def summary_markdown(summary: dict[str, Any]) -> str:
    """Markdown table of an eval run."""

    def fmt(v: Any) -> str:
        return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    lines = [
        f"# Eval, level {summary['level']}",
        "",
        f"- tasks {summary['tasks']}, correct {summary['correct']} ({summary['correctness_rate']:.0%})",
        f"- fast_0 {fmt(summary['fast_0'])}, fast_1 {fmt(summary['fast_1'])}, fast_2 {fmt(summary['fast_2'])}",
        f"- speedup vs eager: arithmetic mean {fmt(summary['speedup_vs_eager_arith_mean'])}, "
        f"geometric mean {fmt(summary['speedup_vs_eager_geo_mean'])}",
    ]
    if summary.get("note"):
        lines.append(f"- note: {summary['note']}")
    lines += [
        "",
        "| task | status | runtime (ms) | timing | speedup vs eager | rounds | stop reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        reason = (r.get("stop_reason") or r.get("reason") or "").replace("|", "/")[:80]
        lines.append(
            f"| {r['task']} | {r['status']} | {fmt(r.get('runtime_ms'))} | {r.get('timing_kind') or '-'} | "
            f"{fmt(r.get('speedup_vs_eager'))} | {r.get('rounds', '-')} | {reason} |"
        )
    return "\n".join(lines) + "\n"
