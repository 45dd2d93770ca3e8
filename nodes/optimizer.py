"""optimizer: apply this round's plan (one skill) to the best candidate.

With a model, the model rewrites the parent following the skill card. Offline, the plan's
deterministic transform (``engine/transforms.py``) rewrites it; a transform that proposes several
variants (a configuration sweep) puts the first in review and the rest in ``pending_seeds``, which
the reviewer reviews in the same step (the fastest correct one becomes the best).

Without long-term memory (``Context.memory``) the prompt carries the planner's method and reasons
but no card and no policy decision; without short-term memory, no trajectory (``graph.memory.recall``).
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.graph.context import Context
from kernelskill.graph.memory import recall, trajectory_summary
from kernelskill.graph.search import parent_of
from kernelskill.graph.state import Candidate, Plan, State
from kernelskill.skills_kb.library import default_library, render_card

from .model.candidates import candidate_from_reply, make_candidate, make_candidates, run_dir
from .model.llm import ask, call_index
from .model.prompting import render
from .model.target import io_text, profile_text, where_text


def optimizer(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: start the next round with a candidate that applies the plan."""
    ctx = runtime.context or Context()
    plan = state["plan"]
    assert plan is not None, "optimizer runs only after a plan was chosen"
    best = parent_of(state)  # the best, or the parent the search chose for this round
    rnd = state.get("round", 0) + 1
    if state.get("engine") == "offline":
        transform = plan.get("transform") or default_library().get(plan["skill_id"]).transform or ""
        return _apply_transform(state, ctx, transform, best["candidate"], rnd, plan["skill_id"])
    probe = state["task"].get("probe")
    system, user = render(
        "optimizer",
        task_name=state["task"]["name"],
        round=rnd,
        reference=state["task"]["source"],
        candidate_id=best["candidate"]["id"],
        candidate=best["candidate"]["source"],
        timing=profile_text(best["review"]),
        target=where_text(ctx.precision, state["task"]),
        io=io_text(probe),
        features=json.dumps(state.get("features", {}), sort_keys=True),
        decision="\n".join(state.get("decision", {}).get("trace", [])) or "(none)",
        skill=_method_text(ctx, plan),
        history=trajectory_summary(recall(state, ctx)),
    )
    reply, usage = ask(ctx, "optimizer", system, user, call_index(state, "optimizer"))
    new = candidate_from_reply(
        state, reply, usage, "optimizer", best["candidate"]["id"], rnd, f"apply {plan['skill_id']}"
    )
    return {"current": new, "candidates": [new], "round": rnd, "repairs": 0, "tokens": [usage]}


def _method_text(ctx: Context, plan: Plan) -> str:
    """The method to apply: the skill card and the plan's reasons, or without long-term memory the reasons alone."""
    if ctx.long_term_memory():
        return render_card(default_library().get(plan["skill_id"]), full=True) + _plan_text(plan)
    return plan["title"] + _plan_text(plan)


def _plan_text(plan: Plan) -> str:
    """Why the planner chose the skill, and (from a model-backed planner) the effect and code region it expects."""
    lines = [f"\n\nWhy this skill: {plan['reason']}"]
    for key, label in (("expected_effect", "Expected effect"), ("code_region", "Code region to change")):
        if plan.get(key):
            lines.append(f"{label}: {plan[key]}")
    return "\n".join(lines)


def _apply_transform(
    state: State, ctx: Context, transform: str, parent: Candidate, rnd: int, skill_id: str
) -> dict[str, Any]:
    from kernelskill.engine.transforms import apply

    sources, notes, problem = apply(transform, parent["source"], ctx, state["task"]["path"], run_dir(ctx) / "compiler")
    if not sources:  # nothing to review: an empty candidate fails as no_code and the round ends
        new = make_candidate(state, "", "optimizer", parent["id"], rnd, f"apply {skill_id}: {problem}")
        return {"current": new, "candidates": [new], "round": rnd, "repairs": 0}
    made = make_candidates(state, sources, notes, "optimizer", parent["id"], rnd)
    return {"current": made[0], "pending_seeds": made[1:], "candidates": made, "round": rnd, "repairs": 0}
