"""Short-term memory: what the nodes read of the task's history, and compact summaries of it for the prompts.

The state records everything (the reports and the routers' budgets need it); :func:`recall` is what
a node may read of it. Without short-term memory (``Context.memory`` ``no-short-term`` or ``none``)
the trajectory, the review log, the tried plans and the pool of parents are hidden, so each round
sees only the best candidate and its latest review, and a plan that already failed can be chosen again.
"""

from __future__ import annotations

from typing import Any

from .context import Context
from .state import State

SHORT_TERM_FIELDS = ("trajectory", "attempts", "failed_plans", "parents")


def recall(state: State, ctx: Context) -> State:
    """The state as the nodes read it: whole, or without :data:`SHORT_TERM_FIELDS` when short-term memory is off."""
    if ctx.short_term_memory():
        return state
    seen: dict[str, Any] = {k: v for k, v in state.items() if k not in SHORT_TERM_FIELDS}
    return seen  # type: ignore[return-value]


def trajectory_summary(state: State, limit: int = 12) -> str:
    """One line per finished round: plan, outcome, timing or error."""
    lines = []
    for e in state.get("trajectory", [])[-limit:]:
        skill = e["skill_id"] or "seed"
        if e["outcome"] == "correct":
            kind = "GPU" if e["timing_kind"] == "cuda_events" else "interpreter, not a speedup"
            t = f"{e['runtime_ms']:.3f} ms ({kind})" if e["runtime_ms"] is not None else "untimed"
            extra = f"correct, {t}" + (", new best" if e["improved"] else ", not better than best")
        else:
            extra = f"{e['outcome']} after {e['repairs']} repairs: {e['error_digest'][:160]}"
        lines.append(f"- round {e['round']} [{skill}]: {extra}")
    failed = state.get("failed_plans", [])
    if failed:
        lines.append(f"- plans that did not improve (never repeat): {', '.join(sorted(set(failed)))}")
    return "\n".join(lines) or "- (nothing yet)"


def tried_plans(state: State) -> dict[str, str]:
    """Each skill that is not planned again on this task, and why: how its round came out."""
    why: dict[str, str] = {}
    for e in state.get("trajectory", []):
        skill = e.get("skill_id")
        if not skill or skill not in state.get("failed_plans", []):
            continue
        if e["outcome"] != "correct":
            why[skill] = f"failed ({e['outcome']})"
        elif e.get("timing_kind") != "cuda_events":
            why[skill] = "tried: correct, but interpreter timings cannot show a gain"
        else:
            why[skill] = "tried: correct, not faster than the best"
    for skill in state.get("failed_plans", []):
        why.setdefault(skill, "tried")
    return why


def failure_history(state: State, limit: int = 8) -> str:
    """The most recent failed reviews in this task, oldest first."""
    fails = [a for a in state.get("attempts", []) if a["status"] != "correct"][-limit:]
    return (
        "\n".join(
            f"- {a['candidate_id']} (round {a['round']}): {a['status']}: {a['error_digest'][:200]}" for a in fails
        )
        or "- (none)"
    )
