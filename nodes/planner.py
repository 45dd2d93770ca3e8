"""planner: the decision policy picks the allowed skills; retrieval ranks them; one is chosen.

Ranking: the policy's preferred skills for the bottleneck first (in the decision table's order),
then the other allowed skills by semantic similarity of their card to the current situation.
A skill whose round already failed on this task is never chosen again.
"""

from __future__ import annotations

import json
from typing import Any

from kernelskill.graph.context import Context
from kernelskill.graph.state import Plan, State
from kernelskill.skills_kb.index import open_index
from kernelskill.skills_kb.library import default_library
from kernelskill.skills_kb.policy import decide, load_policy
from langgraph.runtime import Runtime


def situation(bottleneck: str, features: dict[str, Any], metrics: dict[str, Any]) -> str:
    """A natural-language description of the current situation, for retrieval."""
    flags = [k.replace("_", " ") for k, v in features.items() if v is True]
    return (
        f"bottleneck {bottleneck.replace('_', ' ')}; kernel traits: {', '.join(flags)}; metrics: {json.dumps(metrics)}"
    )


def planner(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: choose this round's plan, or None when nothing applicable is left."""
    ctx = runtime.context or Context()
    features = state.get("features", {})
    metrics = state["best"]["review"].get("metrics", {}) or {}
    decision = decide(features, metrics)
    failed = set(state.get("failed_plans", []))
    open_ids = [s for s in decision.allowed if s not in failed]
    trace = list(decision.trace)
    if failed & set(decision.allowed):
        trace.append(f"already failed on this task, skipped: {', '.join(sorted(failed & set(decision.allowed)))}")
    prefer = load_policy()["table"].get(decision.bottleneck, {}).get("prefer", [])
    preferred = [s for s in prefer if s in open_ids]
    rest = [s for s in open_ids if s not in preferred]
    if rest:
        hits = open_index(ctx.skills_db).search(
            situation(decision.bottleneck, features, metrics), k=len(rest), among=rest
        )
        rest = [h.skill_id for h in hits] + [s for s in rest if s not in {h.skill_id for h in hits}]
    ranked = preferred + rest
    if not ranked:
        return {
            "decision": decision.to_dict(),
            "plan": None,
            "stop_reason": f"no applicable skill left for bottleneck {decision.bottleneck} "
            f"(failed: {', '.join(sorted(failed)) or 'none'})",
        }
    choice = ranked[0]
    why = "preferred by the decision table" if choice in preferred else "closest card to the situation"
    plan = Plan(
        skill_id=choice,
        title=default_library().get(choice).title,
        reason=f"bottleneck {decision.bottleneck} (rule {decision.rule}); {why}; "
        f"{len(ranked) - 1} other allowed skill(s) left",
        trace=trace,
    )
    return {"decision": decision.to_dict(), "plan": plan}
