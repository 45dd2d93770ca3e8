"""Run the optimizer over a task suite: one worker per GPU, resumable, summarized.

Each task runs as its own ``kernelskill optimize`` process, in its own session (a crash or hang in
one task never stops the suite), under a per-task wall-time limit. Each launch is told its
deadline (``KERNELSKILL_DEADLINE``, :mod:`kernelskill.graph.deadline`, a little before the limit),
so it caps its captures and stops optimizing in time to write its report; past the limit its
process tree is killed and the task is recorded as ``timeout``. The eval directory (layout in
:mod:`kernelskill.evals.suite`) makes the run resumable: a task whose ``report.json`` exists (or
that timed out) is never re-run; a task with a run directory but no report resumes from its
checkpoint; a task the folder's last summary counted as finished whose run directory is gone (a copy
of the folder without ``runs/``) is named before it runs again. Ctrl-C stops the running tasks, writes a
partial summary and prints the command that resumes the run. With several GPU workers each gets its own
share of the CPU cores (``KERNELSKILL_CPUS``): a task's compile pool then never competes with another GPU's timing loop.
A GPU named more than once (``--gpus 0,0,0``) runs that many workers on it; they share its lock
(:mod:`kernelskill.runner.gpu_share`): kernels of several tasks may run at once, but every timing of
record holds the GPU alone; a task that ran out of memory there (a review's or a seed capture's, beside the
other workers' processes) runs again from the start, alone, once the launch's other tasks are done.
With ``cluster`` set (``--cluster ray[://ADDRESS]``) the same jobs run as Ray tasks on any node of a
cluster (:mod:`kernelskill.evals.cluster`), one task per GPU.
"""

from __future__ import annotations

import fnmatch
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from kernelskill.graph import deadline
from kernelskill.graph.context import Context
from kernelskill.runner import gpu_share
from kernelskill.runner.env import CPUS_ENV, EVAL_PID_ENV, cpu_shares
from kernelskill.runner.result import DEVICE_BUSY

from .metrics import task_row
from .report import rebuild, summary_markdown
from .suite import (
    REPORT,
    TASK_RECORD,
    TaskSpec,
    check_task_file,
    is_finished,
    log_tail,
    meta_tasks,
    read_json,
    read_meta,
    select_tasks,
    specs_from_meta,
    task_files,
    thread_id_for,
    write_json,
)

__all__ = [
    "Launch",
    "SubprocessLauncher",
    "TaskExit",
    "TaskJob",
    "run_eval",
    "task_files",
    "thread_id_for",
]


@dataclass
class TaskJob:
    """One launch of one task: the command, its environment and its wall-time limit."""

    spec: TaskSpec
    run_dir: Path
    cmd: list[str]
    env: dict[str, str]
    timeout_s: float

    @property
    def log_path(self) -> Path:
        """Where the task process's output goes (appended across attempts)."""
        return self.run_dir / "eval.log"


@dataclass
class TaskExit:
    """How a launch ended."""

    returncode: int | None
    timed_out: bool = False
    wall_s: float = 0.0
    error: str = ""  # the launch itself failed (e.g. the command could not be started)
    gpu_wait_s: float = 0.0  # waited for a shared GPU, and added to the launch's limit


Launch = Callable[[TaskJob], TaskExit]
"""Runs one job to its end (tests inject a fake; the default is :class:`SubprocessLauncher`)."""


def _wait_log(job: TaskJob, env: dict[str, str]) -> str | None:
    """On a shared GPU: a fresh file where this launch's processes log their waits (added to its limit).

    Their holds go to ``gpu-holds.txt`` beside it, across launches (:mod:`.gpu_share`'s hold log).
    """
    if gpu_share.ENV not in job.env:
        return None
    path = (job.run_dir / "gpu-wait.txt").resolve()
    path.write_text("")
    env[gpu_share.WAIT_LOG_ENV] = str(path)
    env[gpu_share.HOLD_LOG_ENV] = str((job.run_dir / gpu_share.HOLD_LOG_NAME).resolve())
    env[gpu_share.WAIT_MAX_ENV] = f"{job.timeout_s:g}"  # the limit at most doubles
    return str(path)


class SubprocessLauncher:
    """Runs each job as a subprocess in its own session; kills its whole process tree on timeout or request."""

    def __init__(self) -> None:
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._closed = False  # after kill_all, no new task starts

    def __call__(self, job: TaskJob) -> TaskExit:
        """Run ``job`` until it exits or exceeds ``job.timeout_s``."""
        job.run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(job.log_path, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(job.cmd)}\n".encode())
            log.flush()
            with self._lock:  # started under the lock: kill_all never misses a task that is starting
                if self._closed:
                    return TaskExit(None, error="the eval was stopped before this task started")
                # the task wraps up by itself (report, best so far) a little before the hard limit
                env = {**job.env, deadline.ENV: deadline.for_launch(job.timeout_s), EVAL_PID_ENV: str(os.getpid())}
                waits = _wait_log(job, env)
                proc = subprocess.Popen(job.cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                self._running[proc.pid] = proc
            timed_out = False
            # the limit, plus the time this launch waits for a shared GPU (its log is fresh: all of it)
            credit = (lambda: gpu_share.credited(waits, job.timeout_s)) if waits else None
            try:
                gpu_share.wait_credited(proc, job.timeout_s, credit, poll_s=5.0)
            except subprocess.TimeoutExpired as e:
                timed_out = True
                kill_task_tree(proc.pid)
                proc.wait()
                log.write(f"\n[eval] task exceeded {e.timeout:g} s: its process tree was killed\n".encode())
            finally:
                with self._lock:
                    self._running.pop(proc.pid, None)
            kill_task_tree(proc.pid)  # leftovers never outlive the task
        waited = gpu_share.credited(waits, job.timeout_s) if waits else 0.0
        return TaskExit(proc.returncode, timed_out, time.monotonic() - t0, gpu_wait_s=waited)

    def running(self) -> int:
        """How many tasks are running now."""
        with self._lock:
            return len(self._running)

    def kill_all(self) -> int:
        """Kill every running task's process tree and start no new one; how many were running."""
        with self._lock:
            self._closed = True
            procs = list(self._running.values())
        for proc in procs:
            kill_task_tree(proc.pid)
        return len(procs)


def descendants(pid: int) -> list[int]:
    """All descendant process ids of ``pid`` (from /proc; empty where /proc is unavailable)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_task_tree(pid: int) -> None:
    """Kill the process group led by ``pid`` and the groups of all its descendants.

    The reviewer runs each evaluation in its own session, so killing the task's group alone would
    leave an evaluation running (and holding the GPU) after its task is gone. The task's group is
    stopped first so that it cannot start new processes while the tree is collected.
    """
    try:
        os.killpg(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_groups(pid, {pid})


def _kill_groups(pid: int, groups: set[int]) -> None:
    """SIGKILL ``groups`` and the process groups of all ``pid``'s descendants, never this process's own group."""
    groups = set(groups)
    for child in descendants(pid):
        try:
            groups.add(os.getpgid(child))
        except (ProcessLookupError, PermissionError):
            pass
    for group in groups - {os.getpgrp()}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def follow_the_eval() -> None:
    """In a task process the eval launched: end the task's process tree when the eval process dies.

    The tasks run in sessions of their own (the eval kills each tree when it stops), so an eval killed
    without a word (``kill -9``, the out-of-memory killer) would leave them running and holding their GPUs
    until their own limits. On Linux the task asks for SIGTERM at its parent's death (``PR_SET_PDEATHSIG``)
    and, on it, kills its descendants' process groups, then its own. A no-op elsewhere, and outside an eval.
    """
    parent = os.environ.pop(EVAL_PID_ENV, "")  # the task's own children are not tasks
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    def end_tree(_signum: int, _frame: Any) -> None:
        _kill_groups(os.getpid(), set())
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, end_tree)
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != int(parent):  # the eval died before the request: nothing would send the signal
        end_tree(signal.SIGTERM, None)


def context_flags(ctx: Context) -> list[str]:
    """``optimize`` flags that carry the eval's run configuration to each task."""
    flags = []
    if ctx.scripted:
        flags += ["--scripted", ctx.scripted]
    if ctx.model:
        flags += ["--model", ctx.model]
    flags += ["--rounds", str(ctx.max_rounds), "--device", ctx.device, "--engine", ctx.engine]
    flags += ["--precision", ctx.precision, "--kernels", ctx.kernels, "--memory", ctx.memory]
    if ctx.postgres():
        flags += ["--checkpointer", ctx.checkpointer]
    return flags


def task_job(
    spec: TaskSpec,
    runs: Path,
    gpu: str,
    ctx: Context,
    timeout_s: float,
    cpus: Sequence[int] = (),
    share_dir: Path | None = None,
) -> TaskJob:
    """The launch of one task: ``optimize`` the first time, ``resume`` when its run directory exists.

    ``cpus``: this GPU worker's share of the cores (``KERNELSKILL_CPUS``; see ``runner.env``).
    ``share_dir``: the GPU's lock directory when several workers share it (``runner.gpu_share``).
    """
    run_dir = runs / spec.key
    cmd = [sys.executable, "-m", "kernelskill.cli"]
    if (run_dir / "run.json").exists():
        cmd += ["resume", spec.key, "--runs-dir", str(runs)]
    else:
        cmd += ["optimize", str(spec.path), "--runs-dir", str(runs), "--thread-id", spec.key, *context_flags(ctx)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if cpus:
        env[CPUS_ENV] = ",".join(map(str, cpus))
    env.pop(gpu_share.ENV, None)
    if share_dir is not None:  # absolute: each process runs in its own working directory
        env[gpu_share.ENV] = str(Path(share_dir).resolve())
    return TaskJob(spec, run_dir, cmd, env, timeout_s)


def supersede(runs: Path, keys: list[str], patterns: str) -> list[str]:
    """Move the run directories of the ``keys`` matching any glob in ``patterns`` to ``../superseded/``.

    Returns the keys moved (a task without a run directory just runs). A key superseded twice keeps
    both earlier directories (``KEY``, ``KEY.2``, ...).
    """
    globs = [g.strip() for g in patterns.split(",") if g.strip()]
    return _set_aside_where(runs, keys, lambda key: any(fnmatch.fnmatchcase(key, g) for g in globs))


def _set_aside_where(runs: Path, keys: list[str], start_over: Callable[[str], bool]) -> list[str]:
    """Set aside the existing run directories of the ``keys`` for which ``start_over`` holds; returns those keys."""
    moved = [key for key in keys if (runs / key).exists() and start_over(key)]
    for key in moved:
        _set_aside(runs, key)
    return moved


def _set_aside(runs: Path, key: str) -> None:
    """Move ``runs/key`` to ``../superseded/key`` (``key.2``, ... when that exists)."""
    dest, n = runs.parent / "superseded" / key, 1
    while dest.exists():
        n += 1
        dest = runs.parent / "superseded" / f"{key}.{n}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(runs / key), str(dest))


def set_aside_stale(runs: Path, keys: list[str], retry_timeouts: bool) -> list[str]:
    """Set aside the unfinished runs of ``keys`` that began under other code (:func:`.runs.code_fingerprint`).

    Such a task starts over instead of resuming: its earlier steps (compiler seeds, reviews) were made
    by another reviewer or engine. A run that recorded no fingerprint resumes. Returns the keys moved.
    """
    from kernelskill.runs import code_fingerprint, run_code

    now = code_fingerprint()

    def stale(key: str) -> bool:
        began = run_code(runs / key)  # "" without a run.json
        return bool(began) and began != now and not is_finished(runs / key, retry_timeouts)

    return _set_aside_where(runs, keys, stale)


def records_missing(out: Path) -> list[str]:
    """Tasks the folder's last summary counted as finished whose run records ``runs/<key>`` are gone.

    An eval folder copied without its ``runs/`` (or with some of them) would silently run those tasks
    again: the runner says so first. A task whose run directory is there is not listed (it resumes or
    is skipped as usual).
    """
    rows = read_json(out / "summary.json").get("rows") or []
    return [
        str(row["key"])
        for row in rows
        if row.get("status") not in (None, "pending", "interrupted") and not (out / "runs" / str(row["key"])).exists()
    ]


def set_aside_busy(runs: Path, keys: list[str]) -> list[str]:
    """Set aside the runs of ``keys`` that stopped because another process filled the device; returns the keys.

    Such a stop says nothing of the task (``DEVICE_BUSY``): the task starts over when the eval resumes.
    """
    return _set_aside_where(
        runs, keys, lambda key: str(read_json(runs / key / REPORT).get("task_error") or "").startswith(DEVICE_BUSY)
    )


def owes_a_run_alone(run_dir: Path) -> bool:
    """A finished task that ran out of memory on a shared GPU and has not run again alone since.

    Its run alone comes at the end of the launch that met the out-of-memory; a launch stopped before
    its end (Ctrl-C, ``--stop-after``, a kill) leaves it owed, and the next launch runs it alone at its own
    end. A record written before records said whether the GPU was shared owes nothing (``--rerun`` it).
    """
    record = read_json(run_dir / TASK_RECORD)
    return bool(record.get("gpu_shared") and not record.get("alone")) and ran_out_of_memory(run_dir)


def ran_out_of_memory(run_dir: Path) -> bool:
    """True when a finished task's run met an out-of-memory: a review's or a compiler seed capture's.

    Beside other workers' processes on one GPU, such a task's answer may be the reference's own ops, or none,
    for want of memory others held: :func:`run_eval` runs it again alone at the end of the launch.
    """
    report = read_json(run_dir / REPORT)
    texts = [str(a.get("error_digest") or "") for a in report.get("attempts") or []]
    texts += [str(note) for note in report.get("seed_notes") or []]
    return any(gpu_share.out_of_memory(text) for text in texts)


def resume_command(
    levels: Sequence[int],
    tasks_dir: Path | None,
    limit: int,
    gpus: str,
    ctx: Context,
    timeout_s: float,
    out: Path,
    gpu_locks: Path | None = None,
) -> str:
    """The command that resumes this eval (the same command with ``--out``)."""
    parts = ["kernelskill", "eval", "--level", ",".join(map(str, levels))]
    if tasks_dir:
        parts += ["--tasks", str(tasks_dir)]
    if limit:
        parts += ["--limit", str(limit)]
    if gpus:
        parts += ["--gpus", gpus]
    if gpu_locks:
        parts += ["--gpu-locks", str(gpu_locks)]
    if ctx.cluster:
        parts += ["--cluster", ctx.cluster]
    parts += context_flags(ctx) + ["--task-timeout", f"{timeout_s:g}", "--out", str(out)]
    return shlex.join(parts)


class LaunchTimeSpent(KeyboardInterrupt):
    """The launch's ``--stop-after`` time is spent: it stops as Ctrl-C stops it (the message says why)."""


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the launch stops as Ctrl-C stops it (the message names the signal)."""


STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def _stop_on_signals() -> dict[int, Any]:
    """Turn SIGTERM and SIGHUP into the Ctrl-C stop while the launch runs; the handlers replaced.

    The tasks run in sessions of their own: killed without a word, the eval would leave them running (and
    holding their GPUs) with no summary written. A signal ignored when the launch starts stays ignored (``nohup``
    ignores SIGHUP so that the eval outlives its terminal). Only the main thread can set handlers: elsewhere
    none is set.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, _frame: Any) -> None:
        raise _Stopped(f"stopped by {signal.Signals(signum).name}")

    saved = {}
    for name in STOP_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) != signal.SIG_IGN:
            saved[signum] = signal.signal(signum, stop)
    return saved


def _restore_signals(saved: dict[int, Any]) -> None:
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _say(console: Console, text: str) -> None:
    """Print plain text: task names, reasons and labels such as ``[torch_main_work]`` are not markup."""
    console.print(text, markup=False, soft_wrap=True)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class _Progress:
    """One line per finished task: outcome, task wall time, elapsed time and ETA."""

    def __init__(self, console: Console, total: int, done: int, to_run: int) -> None:
        self.console, self.total, self.done, self.to_run = console, total, done, to_run
        self.ran = 0
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def again(self, n: int) -> None:
        """``n`` finished tasks are to run again: counted as not done, and in the ETA."""
        with self.lock:
            self.done -= n
            self.to_run += n

    def task_done(self, spec: TaskSpec, status: str, wall_s: float, speedup: float | None) -> None:
        with self.lock:
            self.done += 1
            self.ran += 1
            elapsed = time.monotonic() - self.t0
            eta = elapsed / self.ran * (self.to_run - self.ran)
            speed = f" {speedup:.2f}x" if speedup else ""
            _say(
                self.console,
                f"[{self.done}/{self.total}] {spec.key}: {status}{speed}  (task {_duration(wall_s)}; "
                f"elapsed {_duration(elapsed)}, ETA {_duration(eta)})",
            )


def _record_exit(
    run_dir: Path, job: TaskJob, result: TaskExit, stopping: bool, gpu_shared: bool = False, alone: bool = False
) -> dict[str, Any]:
    """Update the task's eval_task.json after a launch; the record written.

    ``gpu_shared``: the task's GPU was shared with other workers (this eval's or, on ``--gpu-locks``, other
    evals'); ``alone``: it ran again alone after running out of memory there (:func:`owes_a_run_alone`).
    """
    prev = read_json(run_dir / TASK_RECORD)
    record: dict[str, Any] = {
        "wall_s": float(prev.get("wall_s") or 0.0) + result.wall_s,
        "gpu_wait_s": float(prev.get("gpu_wait_s") or 0.0) + result.gpu_wait_s,
        "attempts": int(prev.get("attempts") or 0) + 1,
        "returncode": result.returncode,
        "reason": None,
        "timeout_s": job.timeout_s,  # the per-task limit of the launch that ran it last
        "gpu_shared": gpu_shared,
        "alone": alone,
    }
    if (run_dir / REPORT).exists():
        record["status"] = "finished"
    elif result.timed_out:
        record["status"] = "timeout"
        record["reason"] = f"exceeded the per-task limit of {job.timeout_s:g} s; its process tree was killed"
    elif stopping:
        record["status"] = "interrupted"
        record["reason"] = "interrupted; resumes from its checkpoint"
    elif result.error:
        record["status"] = "exited"
        record["reason"] = f"could not run the task: {result.error}"
    else:
        record["status"] = "exited"
        record["reason"] = f"exit code {result.returncode} without a report: {log_tail(job.log_path)}"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / TASK_RECORD, record)
    return record


def limit_earlier_records(runs: Path, earlier_s: float) -> None:
    """Write ``earlier_s`` into the task records without a per-task limit, before a resume under another limit.

    Records written before they carried their limit ran under the folder's earlier one; the summary then
    says which tasks ran under which limit.
    """
    for path in runs.glob(f"*/{TASK_RECORD}"):
        record = read_json(path)
        if record and record.get("timeout_s") is None:
            write_json(path, {**record, "timeout_s": earlier_s})


def _save_meta(
    out: Path,
    specs: list[TaskSpec],
    levels: Sequence[int],
    tasks_dir: Path | None,
    limit: int,
    gpus: str,
    ctx: Context,
    timeout_s: float,
    price_in: float | None,
    price_out: float | None,
) -> None:
    meta = read_meta(out)
    before = meta.get("context") or {}
    fixed = {**ctx.policy(), "memory": ctx.memory}  # one eval directory, one setting of each
    changed = {k: (before[k], v) for k, v in fixed.items() if k in before and before[k] != v}
    if changed and meta.get("tasks"):
        said = "; ".join(f"{k} was {a}, now {b}" for k, (a, b) in changed.items())
        raise ValueError(
            f"{out} was run under other policies or memory ({said}): resume it with the same ones, or use a new --out"
        )
    earlier = meta.get("task_timeout_s")
    if earlier is not None and float(earlier) != timeout_s:  # a resume that goes ahead, under another limit
        limit_earlier_records(out / "runs", float(earlier))
    prices = dict(meta.get("prices") or {"in": None, "out": None})
    if price_in is not None:
        prices["in"] = price_in
    if price_out is not None:
        prices["out"] = price_out
    meta.update(
        levels=list(levels),
        tasks_dir=str(Path(tasks_dir).resolve()) if tasks_dir else None,
        limit=limit,
        gpus=gpus,
        task_timeout_s=timeout_s,
        prices=prices,
        context=ctx.to_dict(),
        tasks=_held_tasks(out, meta, specs),
    )
    meta.setdefault("launches", meta.pop("sessions", []))
    write_json(out / "eval.json", meta)


def _held_tasks(out: Path, meta: dict[str, Any], specs: list[TaskSpec]) -> list[dict[str, Any]]:
    """The folder's task list after this launch: the earlier list's tasks that have run records, then this launch's.

    A launch over a subset (``--tasks`` a few files, ``--limit``) into a folder an earlier launch filled keeps
    the earlier tasks in the summary, so a report covers every task the folder holds. An earlier task with no
    run record (never started) is dropped: it was not this launch's to run.
    """
    now = meta_tasks(specs)
    keys = {t["key"] for t in now}
    kept = [t for t in specs_from_meta(meta) if t.key not in keys and (out / "runs" / t.key).is_dir()]
    return meta_tasks(kept) + now


_LAUNCH_LOCK = threading.Lock()


def _add_launch(
    out: Path, started: float, interrupted: bool, gpus: str, cluster: str = "", index: int = -1, locks: str = ""
) -> int:
    """Record this launch in eval.json (or update record ``index``): its start, time so far, whether cut short.

    A launch is recorded when it starts (as interrupted, until it ends) and updated after each task, so
    one killed without a word (a signal, a lost machine) still counts its time up to its last task.
    """
    with _LAUNCH_LOCK:
        meta = read_meta(out)
        launch: dict[str, Any] = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "elapsed_s": time.time() - started,
            "interrupted": interrupted,
            "gpus": gpus,
        }
        if cluster:
            launch["cluster"] = cluster
        if locks:
            launch["gpu_locks"] = locks
        launches = meta.setdefault("launches", [])  # _save_meta moved an older eval.json's "sessions" here
        if 0 <= index < len(launches):
            launches[index] = launch
        else:
            launches.append(launch)
            index = len(launches) - 1
        write_json(out / "eval.json", meta)
        return index


def _ray_launcher(ctx: Context, out: Path) -> Launch:
    """The launcher of ``--cluster``: Ray tasks asking for a GPU unless the candidates run on the CPU."""
    from kernelskill.graph.modes import engine_for
    from kernelskill.skills_kb.outcomes import outcomes_path

    from .cluster import RayLauncher

    store = "" if ctx.postgres() else outcomes_path(out / "runs" / "task")
    launcher = RayLauncher(
        ctx.cluster,
        out,
        gpu={"cpu": False, "cuda": True}.get(ctx.device),
        forward_env=[ctx.api_key_env],
        outcomes_store=store,
    )
    if not launcher.gpu and engine_for(ctx, cuda=False) is None:  # the offline engine, and no GPU to run it on
        launcher.close()
        raise ValueError(
            f"--cluster {ctx.cluster}: the offline engine needs CUDA GPUs and the cluster has none "
            f"(resources: {', '.join(sorted(launcher.resources)) or 'none'}); configure a model to run on CPUs"
        )
    return launcher


def run_eval(
    levels: Sequence[int],
    tasks_dir: Path | None,
    limit: int,
    gpus: str,
    out: Path | None,
    ctx: Context,
    console: Console,
    task_timeout_s: float = 3600.0,
    price_in: float | None = None,
    price_out: float | None = None,
    launch: Launch | None = None,
    retry_timeouts: bool = False,
    rerun: str = "",
    gpu_locks: Path | None = None,
    stop_after_s: float = 0.0,
) -> dict[str, Any]:
    """Run every unfinished task of the suite, then write summary.json, summary.md and the plots.

    Ctrl-C, SIGTERM or SIGHUP (a job scheduler's stop, a closed terminal) and the end of ``stop_after_s``
    stop the launch the same way: the running tasks are stopped (they resume from their checkpoints), the
    partial summary is written and the resume command printed.

    Args:
        levels: task levels (of the bundled suite; with ``tasks_dir``, exactly one, used as a label).
        tasks_dir: a folder of task files instead of the bundled suite (e.g. a KernelBench level).
        limit: at most this many tasks per level (0 = all).
        gpus: comma-separated GPU ids, one worker each (empty = one worker, default device).
        out: the eval directory; an existing one is resumed.
        ctx: the run configuration passed to every task.
        console: where progress and the summary go (printed without markup).
        task_timeout_s: wall-time limit of one task launch.
        price_in: USD per 1M input tokens, for the cost estimate (saved in eval.json).
        price_out: USD per 1M output tokens.
        launch: runs one task job; default :class:`SubprocessLauncher`, or with ``ctx.cluster`` a
            :class:`~kernelskill.evals.cluster.RayLauncher` (one worker per slot it reports).
        retry_timeouts: run the tasks that timed out in an earlier launch again (they resume from
            their checkpoint with a fresh limit); by default a timeout is final.
        rerun: comma-separated glob patterns over task keys (``L1-46*,L3-0[36]*``): those tasks start
            over (e.g. after a change to the engine); their previous run directories are moved to
            ``superseded/`` in the eval directory, kept but no longer reported.
        gpu_locks: a lock directory shared with other evals on this host: every GPU in ``gpus`` is then
            shared through ``gpu_locks/gpuN`` (``runner.gpu_share``), so two evals running at once on one
            GPU still time alone. By default only a GPU named twice is shared, through a directory of ``out``.
        stop_after_s: stop the launch this many seconds after it starts, as Ctrl-C does (0: no limit), so that
            it ends within a time-boxed allocation; the next launch with the same ``out`` resumes it.

    Returns:
        The summary, with ``"interrupted": True`` when the run was stopped before its end.

    Raises:
        ValueError: on an unusable task selection (see :func:`~kernelskill.evals.suite.select_tasks`),
            when ``out`` was run under other precision / kernel-origin policies or another memory setting,
            when ``gpus`` and ``ctx.cluster`` are both given (Ray places the tasks), or when ``gpu_locks``
            comes without ``gpus``.
    """
    from kernelskill.runs import runs_root

    if ctx.cluster and gpus:
        raise ValueError("--gpus names this host's GPUs; with --cluster Ray places the tasks: drop --gpus")
    if gpu_locks and not [g for g in gpus.split(",") if g.strip()]:
        raise ValueError("--gpu-locks shares the GPUs named by --gpus: name them (e.g. --gpus 0)")
    specs = select_tasks(list(levels), tasks_dir, limit)
    out = Path(out) if out else runs_root() / f"eval-L{'-'.join(map(str, levels))}-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    _save_meta(out, specs, levels, tasks_dir, limit, gpus, ctx, task_timeout_s, price_in, price_out)
    locks = str(Path(gpu_locks).resolve()) if gpu_locks else ""
    hint = resume_command(levels, tasks_dir, limit, gpus, ctx, task_timeout_s, out, gpu_locks)
    launcher = launch or (_ray_launcher(ctx, out) if ctx.cluster else SubprocessLauncher())
    slots = getattr(launcher, "slots", None)
    workers = [""] * slots() if callable(slots) else [g.strip() for g in gpus.split(",") if g.strip()] or [""]
    shares = cpu_shares(len(workers))
    shared_gpus = {g for g in workers if g and (locks or workers.count(g) > 1)}
    todo: queue.Queue[TaskSpec] = queue.Queue()
    stop = threading.Event()
    started = time.time()
    interrupted = False
    launch_index = _add_launch(out, started, True, gpus, ctx.cluster, locks=locks)
    threads: list[threading.Thread] = []
    deadline = started + stop_after_s if stop_after_s > 0 else None

    def wait_for(thread: threading.Thread) -> None:
        while thread.is_alive():
            thread.join(timeout=0.5)
            if deadline is not None and time.time() >= deadline:
                raise LaunchTimeSpent(f"the launch's time ({stop_after_s:g} s, --stop-after) is spent")

    handlers = _stop_on_signals()
    try:
        finished, unusable = 0, 0
        lost = records_missing(out)
        if lost:
            _say(
                console,
                f"the last summary of {out} counted {len(lost)} task(s) as finished whose run records are not in "
                f"{runs} (a copy of the folder without them?); they run again: {', '.join(lost)}",
            )
        moved = supersede(runs, [spec.key for spec in specs], rerun)
        if moved:
            _say(console, f"starting over ({len(moved)}): {', '.join(moved)} (previous runs in {out / 'superseded'})")
        stale = set_aside_stale(runs, [spec.key for spec in specs], retry_timeouts)
        busy = set_aside_busy(runs, [spec.key for spec in specs])
        if busy:
            _say(console, f"starting over ({len(busy)}), stopped on a device another process filled: {', '.join(busy)}")
        if stale:
            _say(
                console,
                f"starting over ({len(stale)}), begun under other kernelskill code: {', '.join(stale)} "
                f"(previous runs in {out / 'superseded'})",
            )
        short_of_memory: list[tuple[TaskSpec, str]] = []  # (task, its GPU): ran out of memory beside other workers
        for spec in specs:
            run_dir = runs / spec.key
            if is_finished(run_dir, retry_timeouts):
                finished += 1
                if owes_a_run_alone(run_dir):
                    short_of_memory.append((spec, workers[0]))
                continue
            reason = check_task_file(spec.path)
            if reason:
                run_dir.mkdir(parents=True, exist_ok=True)
                write_json(run_dir / TASK_RECORD, {"status": "error", "reason": f"unusable task file: {reason}"})
                unusable += 1
                _say(console, f"{spec.key}: unusable task file, reported as an error: {reason}")
                continue
            todo.put(spec)
        _say(
            console,
            f"eval dir {out}: {len(specs)} tasks, {finished} already finished, {unusable} unusable, "
            f"{todo.qsize()} to run on {len(workers)} worker(s)\nresume with: {hint}",
        )
        if short_of_memory:
            _say(
                console,
                f"{len(short_of_memory)} task(s) ran out of GPU memory beside other workers in an earlier launch that "
                f"stopped before running them again alone; they run alone at the end of this one: "
                f"{', '.join(spec.key for spec, _ in short_of_memory)}",
            )
        progress = _Progress(console, len(specs), finished + unusable, todo.qsize())

        def work(index: int, gpu: str, alone: bool = False) -> None:
            share_dir = (Path(locks) if locks else out / "gpu-share") / f"gpu{gpu}" if gpu in shared_gpus else None
            while not stop.is_set():
                try:
                    spec = todo.get_nowait()
                except queue.Empty:
                    return
                job = task_job(spec, runs, gpu, ctx, task_timeout_s, shares[index], share_dir)
                try:
                    result = launcher(job)
                except Exception as e:  # a launcher failure is this task's error, not the suite's
                    result = TaskExit(None, error=f"{type(e).__name__}: {e}")
                record = _record_exit(job.run_dir, job, result, stop.is_set(), gpu in shared_gpus, alone)
                if record["status"] == "interrupted":
                    return
                row = task_row(spec, job.run_dir)
                _add_launch(out, started, True, gpus, ctx.cluster, launch_index, locks)
                progress.task_done(spec, row["status"], result.wall_s, row["speedup_vs_eager"])
                if not alone and gpu in shared_gpus and ran_out_of_memory(job.run_dir):
                    short_of_memory.append((spec, gpu))

        threads = [
            threading.Thread(target=work, args=(i, g), daemon=True, name=f"eval-{i}-gpu{g}")
            for i, g in enumerate(workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            wait_for(t)
        if short_of_memory and not stop.is_set():  # once, one at a time, this eval's other workers done
            _say(
                console,
                f"running again alone ({len(short_of_memory)}), out of GPU memory beside other workers: "
                f"{', '.join(spec.key for spec, _ in short_of_memory)} (previous runs in {out / 'superseded'})",
            )
            progress.again(len(short_of_memory))
            for spec, gpu in short_of_memory:
                if stop.is_set():
                    break
                _set_aside(runs, spec.key)
                todo.put(spec)
                retry = threading.Thread(target=work, args=(0, gpu, True), daemon=True, name=f"eval-alone-gpu{gpu}")
                threads.append(retry)  # joined on Ctrl-C like the others
                retry.start()
                wait_for(retry)
    except KeyboardInterrupt as e:
        interrupted = True
        stop.set()
        _say(console, f"\n{str(e) or 'interrupted'}: stopping the running tasks...")
        kill_all = getattr(launcher, "kill_all", None)
        if callable(kill_all):
            kill_all()
        for t in threads:
            t.join(timeout=30)
    finally:
        _restore_signals(handlers)
        close = getattr(launcher, "close", None)
        if callable(close):
            close()
    _add_launch(out, started, interrupted, gpus, ctx.cluster, launch_index, locks)
    summary = rebuild(out)
    _say(console, summary_markdown(summary))
    _say(console, f"summary: {out / 'summary.md'}")
    if interrupted or summary["partial"]:
        _say(console, f"run is resumable; resume with: {hint}")
    summary["interrupted"] = interrupted
    return summary
