"""generator: seed the first candidate from the reference and retrieved skills (none without long-term memory)."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.engine.compiler import SeedOutcome, compiler_seeds
from kernelskill.graph import deadline
from kernelskill.graph.context import Context
from kernelskill.graph.modes import engine_for, on_cuda
from kernelskill.graph.state import Candidate, State, Task
from kernelskill.runner import gpu_share
from kernelskill.runner.result import DEVICE_BUSY, HELD_ELSEWHERE, ReviewResult
from kernelskill.runner.sandbox import prestart_reviewer, prime_baselines, probe_task
from kernelskill.skills_kb.retrieve import cards_text, retrieve

from .model.candidates import candidate_from_reply, make_candidate, run_dir
from .model.llm import ask, call_index
from .model.prompting import render
from .model.target import io_text, where_text

OFFLINE_REPAIRS = 1  # one deterministic repair per candidate (compensated accumulation)
PRIME_MEMORY_SHARE = 0.1  # baselines are timed beside the captures only for a reference within this share of the GPU


def load_task(path: str) -> Task:
    """Read a task file (the reviewer validates it; here only its text is needed)."""
    p = Path(path)
    return Task(name=p.stem, path=str(p.resolve()), source=p.read_text())


def task_summary(source: str) -> str:
    """The task's docstrings and the torch calls in its forward, as a retrieval query."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source[:500]
    parts = [ast.get_docstring(tree) or ""]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            parts.append(ast.get_docstring(node) or "")
            parts += [ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)]
    return " ".join(p for p in parts if p)[:800]


STARTING_POINT = (
    "Starting point: TorchInductor's generated kernels for this task, verified by the reviewer as another "
    "seed (this is what torch.compile runs; beat it). Its Triton kernels are the strings passed to "
    "async_compile.triton:\n```python\n{code}\n```"
)
STARTING_POINT_CHARS = 12000


def _model_seeds(
    ctx: Context, state: State, task: Task, k: int, starting_point: str
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    query = "write a first Triton kernel for: " + task_summary(task["source"])
    cards = retrieve(query, k=3, db_dir=ctx.skills_db) if ctx.long_term_memory() else []  # no cards without it
    skills = cards_text(cards)
    seeds: list[Candidate] = []
    tokens: list[dict[str, Any]] = []
    for i in range(k):
        variant = f"This is seed {i + 1} of {k}: take a different approach from the other seeds." if k > 1 else ""
        if starting_point:
            variant = f"{variant}\n\n{starting_point}".strip()
        system, user = render(
            "generator",
            task_name=task["name"],
            reference=task["source"],
            skills=skills,
            variant=variant,
            target=where_text(ctx.precision, task),
            io=io_text(task.get("probe")),
        )
        reply, usage = ask(ctx, "generator", system, user, call_index(state, "generator") + i)
        note = "seed from the model" if k == 1 else f"seed {i + 1} of {k} from the model"
        seeds.append(candidate_from_reply({"candidates": seeds}, reply, usage, "generator", None, 0, note))
        tokens.append(usage)
    return seeds, tokens


def generator(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: load the task, set the budget, write the seed candidates.

    With a model: ``Context.seeds`` seeds from the model, plus (on CUDA, ``compiler_seed``) the
    compiler seeds, which the model also sees as its starting point. Offline: the compiler seeds
    alone, and at most ``OFFLINE_REPAIRS`` deterministic repair per candidate.

    Before anything else, a probe builds the reference and runs it once: a task whose reference
    raises, returns NaN / inf or does not fit is recorded as ``task_error``, and no candidate is
    written (no model call is paid) or reviewed.
    """
    ctx = runtime.context or Context()
    task = load_task(state["task_path"])
    engine = engine_for(ctx)
    prestart_reviewer()  # its imports overlap the captures / model calls below
    compiled: list[SeedOutcome] = []
    common = {"task": task, "engine": engine or "none", "started_at": time.time(), "round": 0, "repairs": 0}
    # first, alone on the device (a KernelBench-scale reference may need most of its memory)
    checked = probe_task(task["path"], run_dir(ctx) / "probe", _probe_timeout(ctx), ctx.device, ctx.seed)
    if checked["status"] == "invalid_task":  # a broken task: no candidate is written or reviewed
        return {**common, "budget": ctx.budget(), "task_error": checked["error_digest"], "current": _empty_seed("")}
    if device_busy(checked):  # every review would meet the same full device: none is written or paid for
        busy = f"{DEVICE_BUSY}: {checked['error_digest']} (free its memory, or choose another device)"
        return {**common, "budget": ctx.budget(), "task_error": busy, "current": _empty_seed("")}
    if checked.get("probe"):
        task["probe"] = checked["probe"]
    primer = _start_baselines(ctx, task, checked)
    if engine == "offline" or (ctx.compiler_seed and on_cuda(ctx)):
        compiled = compiler_seeds(ctx, task["path"], run_dir(ctx) / "compiler")
    seeds: list[Candidate] = []
    tokens: list[dict[str, Any]] = []
    if engine != "offline":
        ok = [c for c in compiled if c.ok]
        start = STARTING_POINT.format(code=strip_harness_for_prompt(ok[0].source)) if ok else ""
        seeds, tokens = _model_seeds(ctx, state, task, max(1, ctx.seeds), start)
    for outcome in compiled:
        if outcome.ok:
            seeds.append(make_candidate({"candidates": seeds}, outcome.source, "compiler", None, 0, outcome.note()))
    if not seeds:
        seeds.append(_empty_seed("; ".join(c.note() for c in compiled) or "no compiler seed was attempted"))
    if primer is not None:
        primer.join()  # bounded by its child's limit
    budget = ctx.budget()
    if engine == "offline":  # deterministic repairs only (nodes.diagnoser.offline_repair)
        budget["max_repairs"] = min(budget["max_repairs"], OFFLINE_REPAIRS)
    return {
        **common,
        "budget": budget,
        "search": {"seeds": len(seeds), "parents": ctx.parents, "explore": ctx.explore, "seed": ctx.seed},
        "seed_notes": [c.note() for c in compiled],
        "current": seeds[0],
        "pending_seeds": seeds[1:],
        "candidates": seeds,
        "tokens": tokens,
    }


def _start_baselines(ctx: Context, task: Task, checked: ReviewResult) -> threading.Thread | None:
    """Time the eager and ``torch.compile`` baselines beside the captures / model calls (a thread), or None.

    The first review would otherwise compile the reference once or twice more inside its own limit
    (minutes for a large network). Only on a GPU, and for a reference within ``PRIME_MEMORY_SHARE`` of
    its memory (the captures hold copies of it at the same time).
    """
    device = (checked.get("probe") or {}).get("device") or {}
    reference_bytes = float((checked.get("metrics") or {}).get("reference_bytes", 0.0))
    if checked.get("status") != "correct" or not device.get("memory_gib"):
        return None
    if reference_bytes > PRIME_MEMORY_SHARE * float(device["memory_gib"]) * 2**30:
        return None
    limit = deadline.timeout(ctx.review_timeout_s, deadline.REVIEW_RESERVE_S)
    args = (task["path"], run_dir(ctx) / "baselines", limit, ctx.device, ctx.seed, ctx.precision)
    thread = threading.Thread(target=prime_baselines, args=args, daemon=True)
    thread.start()
    return thread


def device_busy(probe: ReviewResult) -> bool:
    """The probe ran out of memory while other processes held the device, on a GPU not shared through the eval's locks.

    Shared through the locks, the probe has already waited for that memory, holding the GPU alone; the
    run goes on there, and each review does the same.
    """
    return probe["status"] == "harness_error" and HELD_ELSEWHERE in probe["error_digest"] and not gpu_share.active()


def _empty_seed(reasons: str) -> Candidate:
    """The seed of a run without one (its review says why each capture failed)."""
    return make_candidate({"candidates": []}, "", "compiler", None, 0, reasons[:600])


def _probe_timeout(ctx: Context) -> float:
    """The probe's time limit: one review's, capped by the launch deadline."""
    return deadline.timeout(ctx.review_timeout_s, 0.0)


def strip_harness_for_prompt(source: str) -> str:
    """A compiler seed's source for a prompt: the reference copy removed, capped in length."""
    text = source.split("# ---- kernelskill wrapper", 1)[0]
    if len(text) > STARTING_POINT_CHARS:
        text = text[:STARTING_POINT_CHARS] + "\n# ... (truncated)"
    return text
