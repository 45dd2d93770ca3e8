"""reviewer: the only node that runs candidate code (in a sandboxed child process).

It turns the runner's typed result into state updates: the latest review, the attempt log, the
best-so-far, a trajectory entry when the round is finished, and the stop reason when the run ends.

A correct candidate becomes the new best only on a clear improvement: GPU timings (CUDA events)
at least ``IMPROVEMENT`` (2 %) faster than the best's. Interpreter timings never count, so on a
CPU-only machine the first correct candidate stays the best. Under the ``custom`` kernel-origin
policy (``Context.kernels``), a candidate whose main work runs in its own kernels always beats one
whose main work is PyTorch or a library call (cuBLAS / cuDNN), whatever their timings; under
``any`` (the default) the fastest correct candidate wins and keeps its label.

A seed round that ends with no correct candidate reviews one last resort, the reference's own ops
(:func:`reference_fallback`), so a run never ends without an answer when one exists. Under ``any``,
a run that ends with a GPU-timed best clearly slower than eager reviews the same candidate before it
ends (:func:`_reference_may_win`): the fastest correct answer is then the reference's own ops,
labelled ``torch_main_work``, never a custom-kernel success. A
``harness_error`` (the reviewer's own failure, already retried once in low-memory mode) is not
the candidate's: it goes to no repair and into no skill's priors. Without long-term memory
(``Context.memory``) no round is written to the priors store; the trajectory is always recorded
(the report and the routers read it; without short-term memory the other nodes do not).
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.graph import END
from langgraph.runtime import Runtime

from kernelskill.graph import deadline
from kernelskill.graph.context import Context
from kernelskill.graph.routing import decide_after_review, round_finished
from kernelskill.graph.search import update_parents
from kernelskill.graph.state import Attempt, Candidate, State, TrajectoryEntry, apply_update
from kernelskill.runner.result import ReviewResult, failure
from kernelskill.runner.sandbox import run_review
from kernelskill.runner.static_check import REFERENCE_FALLBACK_MARK

from .diagnoser import offline_repairable
from .model.candidates import run_dir

IMPROVEMENT = 0.02


def is_better(new: ReviewResult, old: ReviewResult, kernels: str = "any") -> bool:
    """True when ``new`` is a clear GPU-timed improvement on ``old``.

    Under the ``custom`` kernel-origin policy, a candidate whose main work runs in its own kernels
    beats one whose main work does not, whatever their timings; under ``any`` only speed counts,
    except where there are no GPU timings to compare (the CPU interpreter): the custom kernel wins.
    """
    new_custom, old_custom = new.get("custom_kernel", True), old.get("custom_kernel", True)
    timed = new.get("timing_kind") == "cuda_events" and old.get("timing_kind") == "cuda_events"
    if new_custom != old_custom and (kernels == "custom" or not timed):
        return bool(new_custom)  # without GPU timings to compare, the custom kernel is the answer
    if not timed:
        return False
    return float(new["runtime_ms"] or 0) < float(old["runtime_ms"] or 0) * (1 - IMPROVEMENT)


def _review(ctx: Context, state: State, cand: Candidate) -> ReviewResult:
    """Review one candidate in the sandbox (a candidate without code, or of an unusable task, is not run)."""
    if state.get("task_error"):
        return failure("invalid_task", state["task_error"], candidate_id=cand["id"])
    if not cand["source"]:
        return failure("no_code", cand["note"], candidate_id=cand["id"])
    return run_review(
        state["task"]["path"],
        cand["source"],
        run_dir(ctx) / "candidates",
        candidate_id=cand["id"],
        timeout_s=deadline.timeout(ctx.review_timeout_s, 0.0),
        device=ctx.device,
        seed=ctx.seed,
        trials=ctx.correctness_trials,
        float64_truth=ctx.float64_truth,
        ncu=ctx.ncu,
        precision=ctx.precision,
    )


def _needs_last_resort(state: State) -> bool:
    """The seed round ended without any correct candidate, and the reference fallback is untried."""
    return (
        "best" not in state
        and state.get("round", 0) == 0
        and not state.get("task_error")
        and state["review"]["status"] != "invalid_task"
        and not any(c["origin"] == "reference" for c in state.get("candidates", []))
    )


FALLBACK_REVIEW_S = 40.0  # time a review of the reference's own ops needs at least (baselines cached)


def _reference_may_win(ctx: Context, state: State) -> bool:
    """Under ``kernels = any``, the run ends with a GPU-timed best clearly slower than eager, and time is left.

    The reference's own ops run at eager's speed, so they would be the faster correct answer.
    """
    best = state.get("best")
    if ctx.kernels != "any" or best is None or state.get("task_error"):
        return False
    review = best["review"]
    speedup = review.get("speedup_vs_eager")
    if review.get("timing_kind") != "cuda_events" or speedup is None or speedup >= 1 - IMPROVEMENT:
        return False
    left = deadline.left()
    tried = any(c["origin"] == "reference" for c in state.get("candidates", []))
    return not tried and (left is None or left >= FALLBACK_REVIEW_S)


def reference_fallback(
    state: State, update: dict[str, Any], why_used: str = "no better candidate was correct"
) -> Candidate:
    """The last resort: a candidate that composes the reference's own ops (``torch_main_work``).

    Correct by construction, still reviewed like any other; its header says why each better
    candidate failed (or, ``why_used``, lost), so the report does too.
    """
    attempts = list(state.get("attempts", [])) + list(update.get("attempts", []))
    why = [f"{a['candidate_id']}: {a['status']}: {a['error_digest'][:200]}" for a in attempts] or ["no candidate"]
    header = "\n".join(
        [f"# {REFERENCE_FALLBACK_MARK}: the reference's own PyTorch ops, used because {why_used}."]
        + [f"# - {line}" for line in why]
    )
    source = f'{header}\n{state["task"]["source"]}\n\n\nclass ModelNew(Model):\n    """The reference\'s forward."""\n'
    n = len(state.get("candidates", [])) + len(update.get("candidates", []))
    note = "reference fallback (PyTorch main work): " + "; ".join(why)[:500]
    return Candidate(id=f"r0-reference-{n}", source=source, origin="reference", parent_id=None, round=0, note=note)


def _round_best(
    cand: Candidate, review: ReviewResult, extras: list[tuple[Candidate, ReviewResult]], kernels: str
) -> tuple[Candidate, ReviewResult]:
    """The candidate a finished round is remembered by: the best correct one it reviewed, else ``cand``."""
    best: tuple[Candidate, ReviewResult] = (cand, review)
    for c, r in extras:
        if r["status"] == "correct" and (best[1]["status"] != "correct" or is_better(r, best[1], kernels)):
            best = (c, r)
    return best


def reviewer(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: review the current candidate and record the outcome."""
    ctx = runtime.context or Context()
    cand = state["current"]
    review = _review(ctx, state, cand)
    rnd = state.get("round", 0)
    update: dict[str, Any] = {
        "review": review,
        "attempts": [
            Attempt(
                candidate_id=cand["id"], round=rnd, status=review["status"], error_digest=review.get("error_digest", "")
            )
        ],
    }
    improved = False
    width = int((state.get("search") or {}).get("parents", 1))

    def admit(c: Candidate, r: ReviewResult) -> None:
        """A correct result may become the best, and joins the pool of parents."""
        nonlocal improved
        if r["status"] != "correct":
            return
        best = update.get("best") or state.get("best")
        if best is None or is_better(r, best["review"], ctx.kernels):
            update["best"] = {"candidate": c, "review": r}
            improved = True
        pool = update.get("parents", state.get("parents", []))
        update["parents"] = update_parents(pool, {"candidate": c, "review": r}, width)

    def review_extra(c: Candidate) -> ReviewResult:
        """Review a further candidate of this step (no repairs), record the attempt, admit it if correct."""
        r = _review(ctx, state, c)
        update["attempts"].append(
            Attempt(candidate_id=c["id"], round=rnd, status=r["status"], error_digest=r.get("error_digest", ""))
        )
        admit(c, r)
        return r

    admit(cand, review)
    reviewed: list[tuple[Candidate, ReviewResult]] = []
    if state.get("pending_seeds"):  # extra seeds: reviewed once, no repairs; correct ones join the parents
        update["pending_seeds"] = []
        for extra in state["pending_seeds"]:
            reviewed.append((extra, review_extra(extra)))
    if state.get("engine") == "offline" and review["status"] != "correct":
        update["repairable"] = offline_repairable(apply_update(state, update))
    after = apply_update(state, update)
    if round_finished(after) and _needs_last_resort(after):
        extra = reference_fallback(state, update)
        update["candidates"] = list(update.get("candidates", [])) + [extra]
        reviewed.append((extra, review_extra(extra)))
    if round_finished(apply_update(state, update)):
        plan = state.get("plan") if rnd > 0 else None
        skill = plan["skill_id"] if plan else None
        best_now = update.get("best") or state.get("best")
        if best_now is not None and best_now["candidate"].get("round") == rnd:
            # the round's best may come from an earlier step of it (an extra seed, before a repair chain)
            reviewed.append((best_now["candidate"], best_now["review"]))
            improved = True  # a candidate of this round only becomes the best by improving on it
        shown, shown_review = _round_best(cand, review, reviewed, ctx.kernels)
        entry = TrajectoryEntry(
            round=rnd,
            candidate_id=shown["id"],
            skill_id=skill,
            plan_reason=plan["reason"] if plan else "seed",
            outcome=shown_review["status"] if shown_review["status"] in ("correct", "harness_error") else "abandoned",
            repairs=state.get("repairs", 0),
            runtime_ms=shown_review.get("runtime_ms"),
            timing_kind=shown_review.get("timing_kind"),
            speedup_vs_eager=shown_review.get("speedup_vs_eager"),
            error_digest=shown_review.get("error_digest", ""),
            improved=improved,
        )
        if cand.get("verdict", {}).get("root_cause"):
            entry["diagnosis"] = cand["verdict"]["root_cause"]
        if plan:
            fields = ("source", "rationale", "expected_effect", "code_region", "transform")
            entry["plan"] = {k: plan[k] for k in fields if k in plan}
        update["trajectory"] = [entry]
        if skill and not improved:
            update["failed_plans"] = [skill]
        if skill and review["status"] != "harness_error" and ctx.long_term_memory():  # long-term memory: the
            # round's outcome feeds the skill priors (never raises); a round the reviewer itself could not judge
            # says nothing of the skill; without long-term memory the store is neither read nor written
            from kernelskill.skills_kb.outcomes import record_round

            record_round(run_dir(ctx), state, review, improved, ctx.postgres())
    if "started_at" in state:
        update["elapsed_s"] = round(time.time() - state["started_at"], 3)
    update["time_left_s"] = deadline.left()
    nxt, reason = decide_after_review(apply_update(state, update))
    if nxt == END:
        update["stop_reason"] = reason
        after = apply_update(state, update)
        if _reference_may_win(ctx, after):
            best, was = after["best"], update.get("best")
            speedup = best["review"]["speedup_vs_eager"]
            slower = f"the best candidate ({best['candidate']['id']}) ran at {speedup:.2f}x eager"
            extra = reference_fallback(state, update, slower)
            update["candidates"] = list(update.get("candidates", [])) + [extra]
            review_extra(extra)
            if update.get("best") is not was:
                update["stop_reason"] = f"{reason}; kept the reference's own ops (kernels any): {slower}"
    return update
