"""diagnoser: read the failure and the short-term history, write a repaired candidate."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from kernelskill.graph.context import Context
from kernelskill.graph.memory import failure_history
from kernelskill.graph.state import State
from kernelskill.skills_kb.retrieve import cards_text, retrieve

from .candidates import make_candidate
from .codeblock import extract_code
from .llm import ask, call_index
from .prompting import render


def diagnoser(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: one repair attempt on the current (failed) candidate."""
    ctx = runtime.context or Context()
    cand, review = state["current"], state["review"]
    repair = state.get("repairs", 0) + 1
    cards = retrieve(f"fix {review['status']}: {review.get('error_digest', '')}", k=2, db_dir=ctx.skills_db)
    system, user = render(
        "diagnoser",
        task_name=state["task"]["name"],
        round=state.get("round", 0),
        repair=repair,
        max_repairs=state["budget"]["max_repairs"],
        reference=state["task"]["source"],
        candidate_id=cand["id"],
        candidate=cand["source"] or "(no code: " + cand["note"] + ")",
        status=review["status"],
        error_digest=review.get("error_digest", ""),
        error_detail=(review.get("error_detail") or "")[-2500:],
        history=failure_history(state),
        skills=cards_text(cards),
    )
    reply, usage = ask(ctx, "diagnoser", system, user, call_index(state, "diagnoser"))
    source, problem = extract_code(reply)
    new = make_candidate(
        state, source, "diagnoser", cand["id"], state.get("round", 0), problem or f"repair {repair} of {cand['id']}"
    )
    return {"current": new, "candidates": [new], "repairs": repair, "tokens": [usage]}
