"""diagnoser: read the failure and the short-term history, write a repaired candidate.

With a model, the model diagnoses and rewrites. Without long-term memory (``Context.memory``) its
prompt has no cards; without short-term memory, no earlier failures (``graph.memory.recall``): only
the failing candidate and its review. Offline (no model) the repairs are deterministic
(:func:`offline_repair`): ``compensated_dot`` (``engine/accumulation.py``) for a candidate whose
output was wrong and whose fp32 ``tl.dot`` loop (``ieee`` or ``tf32x3`` products) adds its K blocks in
sequence, and for a compiler seed with no kernel of its own (a bare convolution, all cuDNN's) the
recapture with that work in our kernels.
"""

from __future__ import annotations

import re
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.engine.accumulation import compensated
from kernelskill.graph.context import Context
from kernelskill.graph.memory import failure_history, recall
from kernelskill.graph.state import Candidate, State
from kernelskill.runner.static_check import NO_KERNEL
from kernelskill.skills_kb.retrieve import cards_text, retrieve

from .model.candidates import candidate_from_reply, make_candidate, make_candidates, run_dir
from .model.llm import ask_verdict, call_index
from .model.prompting import render
from .model.target import io_text, where_text
from .model.verdicts import DiagnoserVerdict, diagnoser_code, diagnoser_from_text


def diagnoser(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: one repair attempt on the current (failed) candidate."""
    ctx = runtime.context or Context()
    if state.get("engine") == "offline":
        return offline_repair(state, ctx)
    cand, review = state["current"], state["review"]
    repair = state.get("repairs", 0) + 1
    probe = state["task"].get("probe")
    system, user = render(
        "diagnoser",
        task_name=state["task"]["name"],
        round=state.get("round", 0),
        repair=repair,
        max_repairs=state["budget"]["max_repairs"],
        reference=state["task"]["source"],
        candidate_id=cand["id"],
        candidate=cand["source"] or _no_code(cand),
        target=where_text(ctx.precision, state["task"]),
        io=io_text(probe),
        status=review["status"],
        error_digest=review.get("error_digest", ""),
        error_detail=(review.get("error_detail") or "")[-2500:],
        history=failure_history(recall(state, ctx)),
        skills=cards_text(_relevant_cards(ctx, cand, review)),
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
    if usage.get("truncated"):
        new = candidate_from_reply(state, reply, usage, "diagnoser", cand["id"], state.get("round", 0), note)
    else:
        new = make_candidate(state, source, "diagnoser", cand["id"], state.get("round", 0), note[:300])
    new["verdict"] = verdict.model_dump(exclude={"code"})
    return {"current": new, "candidates": [new], "repairs": repair, "tokens": [usage]}


def _no_code(cand: Candidate) -> str:
    """What the diagnoser sees of a candidate without code: why, and a truncated reply's partial code."""
    text = f"(no code: {cand['note']})"
    if cand.get("partial"):
        text += "\n# --- the reply was truncated; its partial code follows ---\n" + cand["partial"]
    return text


def _relevant_cards(ctx: Context, cand: Candidate, review: dict[str, Any]) -> list[Any]:
    """Cards retrieved from the failure and the code; none without long-term memory or for a failure not in code."""
    if not ctx.long_term_memory():
        return []
    if not cand["source"] or review["status"] in ("timeout", "crashed") or "environment" in review.get("labels", []):
        return []
    kernels = ", ".join(sorted(set(re.findall(r"\btl\.(\w+)\(", cand["source"]))))[:300]
    query = f"{review['status']}: {review.get('error_digest', '')[:300]}; kernel uses tl.{kernels}"
    return retrieve(query, k=2, db_dir=ctx.skills_db)


# transforms that move a compiler seed's library main work (cuDNN's convolution, SDPA) into kernels of our own
KERNEL_FORMS = ("conv_kernel", "flash_attention")


def _kernel_form(cand: Candidate) -> str | None:
    """The first of :data:`KERNEL_FORMS` that applies to ``cand`` (a compiler seed), else None."""
    from kernelskill.engine.transforms import applicable

    return next((t for t in KERNEL_FORMS if applicable(t, cand["source"]) is None), None)


def _offline_target(state: State) -> tuple[Candidate, str] | None:
    """The candidate of this round a deterministic repair applies to, and the repair.

    Each candidate is repaired once, the current one first: a wrong output whose fp32 ``tl.dot`` loop
    adds its K blocks in sequence gets ``compensated_dot``; then a compiler seed rejected for having no
    kernel of its own (Inductor called cuDNN for its whole work: a bare convolution) gets its convolutions
    (or attention) recaptured in our kernels, one of :data:`KERNEL_FORMS`.
    """
    rnd = state.get("round", 0)
    cands = state.get("candidates", [])
    by_id = {c["id"]: c for c in cands}
    repaired = {c["parent_id"] for c in cands if c["origin"] == "diagnoser"}
    attempts = [a for a in state.get("attempts", []) if a["round"] == rnd and a["candidate_id"] not in repaired]
    current = state.get("current", {}).get("id")

    def failed(test: Any) -> list[Candidate]:
        ids = dict.fromkeys(a["candidate_id"] for a in attempts if test(a))
        return [by_id[c] for c in sorted(ids, key=lambda c: c != current) if c in by_id]

    for cand in failed(lambda a: a["status"] == "wrong_output"):
        if compensated(cand["source"])[1]:
            return cand, "compensated_dot"
    for cand in failed(lambda a: a["status"] == "rejected" and NO_KERNEL in a["error_digest"]):
        if cand["origin"] == "compiler" and (form := _kernel_form(cand)):
            return cand, form
    return None


def offline_repairable(state: State) -> bool:
    """True when :func:`offline_repair` has something to repair (the reviewer records it for the router)."""
    return _offline_target(state) is not None


def offline_repair(state: State, ctx: Context | None = None) -> dict[str, Any]:
    """Offline: a deterministic repair of a candidate of this round (:func:`_offline_target`).

    The current candidate comes first, then the other seeds reviewed with it (a library seed may be
    the current one while the Triton seed is the one that missed the tolerance). The router only
    comes here when one applies (``repairable``); should none, the new candidate has no code and
    says so, and the reviewer fails it without running it. A recapture that proposes several forms
    puts the first in review and the rest in ``pending_seeds`` (reviewed in the same step).
    """
    rnd = state.get("round", 0)
    repair = state.get("repairs", 0) + 1
    target = _offline_target(state)
    if target is None:
        note = f"offline: no deterministic repair for {state['review']['status']}"
        new = make_candidate(state, "", "diagnoser", state["current"]["id"], rnd, note)
        return {"current": new, "candidates": [new], "repairs": repair}
    cand, how = target
    if how == "compensated_dot":
        source, n = compensated(cand["source"])
        note = f"offline repair {repair} of {cand['id']}: compensated_dot (Kahan sum over the K blocks, {n} loop(s))"
        new = make_candidate(state, source, "diagnoser", cand["id"], rnd, note)
        new["verdict"] = {
            "root_cause": "accumulation error: the fp32 tl.dot loop adds its K blocks in sequence",
            "fix_plan": "carry each addition's rounding into the next block (Kahan summation)",
        }
        return {"current": new, "candidates": [new], "repairs": repair}
    from kernelskill.engine.transforms import apply

    ctx = ctx or Context()
    sources, notes, problem = apply(how, cand["source"], ctx, state["task"]["path"], run_dir(ctx) / "compiler")
    verdict = {
        "root_cause": "no custom kernel: the compiler seed's main work is a library call",
        "fix_plan": f"recapture the seed with that work in our own kernels ({how})",
    }
    if not sources:  # nothing to review: an empty candidate fails as no_code
        sources, notes = [""], [f"{how}: {problem}"]
    notes = [f"offline repair {repair} of {cand['id']}: {what}" for what in notes]
    made = make_candidates(state, sources, notes, "diagnoser", cand["id"], rnd)
    for new in made:
        new["verdict"] = verdict
    return {"current": made[0], "pending_seeds": made[1:], "candidates": made, "repairs": repair}
