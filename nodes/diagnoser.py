"""diagnoser: read the failure and the short-term history, write a repaired candidate."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from kernelskill.graph.context import Context
from kernelskill.graph.memory import failure_history
from kernelskill.graph.state import State
from kernelskill.skills_kb.retrieve import cards_text, retrieve

from .candidates import make_candidate
from .llm import ask_verdict, call_index
from .prompting import render
from .verdicts import DiagnoserVerdict, diagnoser_code, diagnoser_from_text


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
    verdict, reply, usage = ask_verdict(
        ctx, "diagnoser", system, user, DiagnoserVerdict, call_index(state, "diagnoser")
    )
    if isinstance(verdict, DiagnoserVerdict):
        source, problem = diagnoser_code(verdict)
    else:
        verdict, problem = diagnoser_from_text(reply)
        source = verdict.code
    note = problem or f"repair {repair} of {cand['id']}" + (f": {verdict.root_cause}" if verdict.root_cause else "")
    new = make_candidate(state, source, "diagnoser", cand["id"], state.get("round", 0), note[:300])
    new["verdict"] = verdict.model_dump(exclude={"code"})
    return {"current": new, "candidates": [new], "repairs": repair, "tokens": [usage]}
