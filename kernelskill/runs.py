"""Run directories: create, execute with a checkpointer and progress, resume, report.

Layout of one run (``runs/<thread-id>/``)::

    run.json            task path, the full run configuration (resume re-reads it) and the code's
                        fingerprint (:func:`code_fingerprint`)
    checkpoints.sqlite  LangGraph checkpoints, written synchronously after every node (with
                        ``checkpointer = postgres://...`` they go to that database instead, under the
                        run's own ``checkpoint_thread``, see :mod:`kernelskill.checkpoints`)
    events.jsonl        one line per finished node (time, node, round, summary, pid)
    candidates/         every candidate's source, request, result and log
    best.py             the best correct ModelNew source
    report.md / .json   the final report
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kernelskill.graph.context import Context
from kernelskill.graph.state import State


def runs_root() -> Path:
    """``$KERNELSKILL_RUNS_DIR`` or ``./runs``."""
    return Path(os.environ.get("KERNELSKILL_RUNS_DIR", "runs"))


CODE_PACKAGES = ("kernelskill", "graph", "nodes", "skills_kb", "evals", "runner", "engine")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A short hash of the kernelskill code this process runs (its .py, .yaml, .json and .md files).

    Recorded in every run.json; the eval runner starts a task over rather than resume a run that
    began under other code (a reviewer or seed that changed in between would mix two rules in one row).
    """
    import importlib.util

    digest = hashlib.sha256()
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name if name == "kernelskill" else f"kernelskill.{name}")
        # kernelskill's own folder only: imported from a checkout, its __path__ also holds the checkout's root
        # (kernelskill/__init__.py), whose eval folders, docs and virtual environment are not code
        roots = [Path(spec.origin).parent] if spec and spec.origin else []
        for root in roots:
            base = Path(root)
            for f in sorted(base.rglob("*")):
                if f.suffix in (".py", ".yaml", ".json", ".md") and "__pycache__" not in f.parts and f.is_file():
                    digest.update(f"{name}/{f.relative_to(base)}".encode())
                    digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def run_code(run_dir: Path) -> str:
    """The code fingerprint a run began under ("" when run.json has none or cannot be read)."""
    try:
        return str(json.loads((Path(run_dir) / "run.json").read_text()).get("code", ""))
    except (OSError, ValueError):
        return ""


@dataclass
class Run:
    """One optimization run on disk."""

    thread_id: str
    dir: Path
    task_path: str
    context: Context
    checkpoint_thread: str = ""  # the thread in a shared (Postgres) checkpointer; "" = thread_id

    @property
    def config(self) -> dict[str, Any]:
        """LangGraph config selecting this run's thread."""
        return {"configurable": {"thread_id": self.checkpoint_thread or self.thread_id}, "recursion_limit": 500}


class RunError(RuntimeError):
    """A run that cannot be created or found."""


def new_run(task_path: str | Path, ctx: Context, root: Path | None = None, thread_id: str = "") -> Run:
    """Create the run directory and save its configuration."""
    task = Path(task_path).resolve()
    tid = thread_id or f"{task.stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    run_dir = (root or runs_root()) / tid
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx.run_dir = str(run_dir.resolve())
    # one database holds the checkpoints of every eval and host: a run's thread there is unique to it
    checkpoint = f"{tid}-{secrets.token_hex(8)}" if ctx.postgres() else ""
    meta = {"thread_id": tid, "task_path": str(task), "context": ctx.to_dict(), "code": code_fingerprint()}
    if checkpoint:
        meta["checkpoint_thread"] = checkpoint
    (run_dir / "run.json").write_text(json.dumps(meta, indent=2))
    return Run(tid, run_dir, str(task), ctx, checkpoint)


def load_run(thread_id: str, root: Path | None = None) -> Run:
    """Find a run by thread id (a run directory path also works)."""
    candidates = [Path(thread_id), (root or runs_root()) / thread_id]
    for d in candidates:
        if (d / "run.json").is_file():
            meta = json.loads((d / "run.json").read_text())
            saved = {k: v for k, v in meta["context"].items() if k in Context.model_fields}  # keys since removed
            saved["run_dir"] = str(d.resolve())  # where it is now (copied to another host, or moved)
            return Run(meta["thread_id"], d, meta["task_path"], Context(**saved), meta.get("checkpoint_thread", ""))
    raise RunError(f"no run {thread_id!r} under {root or runs_root()} (looked for run.json)")


def describe(node: str, update: dict[str, Any]) -> str:
    """One progress line for a finished node."""
    if not update:
        return ""
    if node in ("generator", "diagnoser", "optimizer"):
        c = update["current"]
        what = f"{len(c['source'].splitlines())} lines" if c["source"] else f"no code ({c['note']})"
        from kernelskill.engine.compiler import UNAVAILABLE

        missing = [n for n in update.get("seed_notes") or [] if UNAVAILABLE in n]  # the others are candidates
        seeds = f" | {'; '.join(textwrap.shorten(n, 240, placeholder=' ...') for n in missing)}" if missing else ""
        return f"candidate {c['id']}: {what}{seeds}"
    if node == "reviewer":
        r = update["review"]
        if r["status"] == "correct":
            if r.get("timing_kind") == "cuda_events":
                t = f"{r['runtime_ms']:.4f} ms, {r.get('speedup_vs_eager') or 0:.2f}x vs eager"
            else:
                t = f"interpreter {r.get('runtime_ms') or 0:.1f} ms (not a speedup)"
            msg = f"{r.get('candidate_id')}: correct, {t}" + (" - new best" if "best" in update else "")
        else:
            msg = f"{r.get('candidate_id')}: {r['status']}: {r.get('error_digest', '')[:160]}"
        extra = update.get("attempts", [])[1:]
        if extra:
            msg += " | extra seeds: " + ", ".join(f"{a['candidate_id']} {a['status']}" for a in extra)
        if update.get("stop_reason"):
            msg += f" | stop: {update['stop_reason']}"
        return msg
    if node == "feature_extractor":
        f = update["features"]
        flags = [k for k in ("is_pointwise", "has_reduction", "uses_dot", "has_loops") if f.get(k)]
        note = f"; {update['search_note']}" if update.get("search_note") else ""
        return f"{f.get('num_kernels', 0)} kernel(s), {', '.join(flags) or 'no flags'}{note}"
    if node == "planner":
        p = update.get("plan")
        d = update.get("decision") or {}
        where = f"bottleneck {d['bottleneck']}" if d.get("bottleneck") else "no policy (no long-term memory)"
        if not p:
            return f"{where}; no plan: {update.get('stop_reason', '')}"
        rejected = [t.split(": ", 1)[1] for t in p.get("trace", []) if t.startswith("model plan rejected (")]
        note = f" [rejected first: {'; '.join(rejected)}]" if rejected else ""
        return f"{where} -> skill {p['skill_id']} ({p['reason']}){note}"
    return ""


ProgressFn = Callable[[str, str, str], None]  # (event, node, message)


def execute(run: Run, resume: bool = False, progress: ProgressFn | None = None) -> State:
    """Run (or resume) the graph to completion; returns the final state and writes the report."""
    from kernelskill.checkpoints import open_checkpointer
    from kernelskill.graph.builder import builder

    with open_checkpointer(run.dir, run.context.postgres()) as saver:
        graph = builder.compile(checkpointer=saver)
        snapshot = graph.get_state(run.config)
        started = bool(snapshot.values)
        if resume and not started:
            inputs: Any = {"task_path": run.task_path}  # killed before the first checkpoint
        elif resume or started:
            inputs = None
        else:
            inputs = {"task_path": run.task_path}
        if started and not snapshot.next:
            if progress:
                progress("info", "", "run already finished; rewriting the report")
        else:
            nxt = list(snapshot.next) if started else ["generator"]
            if progress and nxt:
                progress("start", nxt[0], "")
            events = open(run.dir / "events.jsonl", "a")
            try:
                for chunk in graph.stream(
                    inputs, run.config, context=run.context, durability="sync", stream_mode="updates"
                ):
                    for node, update in chunk.items():
                        msg = describe(node, update or {})
                        rnd = (update or {}).get("round")
                        events.write(
                            json.dumps(
                                {"t": time.time(), "node": node, "round": rnd, "summary": msg, "pid": os.getpid()}
                            )
                            + "\n"
                        )
                        events.flush()
                        if progress:
                            progress("done", node, msg)
                    if progress:
                        nxt = list(graph.get_state(run.config).next)
                        if nxt:
                            progress("start", nxt[0], "")
            finally:
                events.close()
        final: State = graph.get_state(run.config).values
    from kernelskill.report import write_report

    write_report(run, final)
    return final
