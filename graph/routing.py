"""Pure routers: functions of the state alone, typed so Studio draws every branch."""

from __future__ import annotations

from typing import Literal

from kernelskill.runner.result import unusable_text

from . import deadline
from .state import State

AfterReview = Literal["diagnoser", "feature_extractor", "__end__"]
AfterPlanner = Literal["optimizer", "__end__"]


def tokens_used(state: State) -> int:
    """Input + output tokens of every model call so far."""
    return sum(int(t.get("input_tokens", 0)) + int(t.get("output_tokens", 0)) for t in state.get("tokens", []))


def stale_rounds(state: State) -> int:
    """Finished optimization rounds in a row, at the end of the trajectory, that did not improve the best."""
    n = 0
    for e in reversed(state.get("trajectory", [])):
        if e["round"] == 0 or e["improved"]:
            break
        n += 1
    return n


def decide_after_review(state: State) -> tuple[AfterReview, str]:
    """Where to go after a review, and why (the reason becomes ``stop_reason`` on END).

    - a broken reference task ends the run;
    - a spent token or wall-time budget (``budget.max_tokens`` / ``max_wall_s``; ``elapsed_s`` is
      written by the reviewer) ends it, even inside a repair chain; so does a launch deadline near
      (``time_left_s``, written by the reviewer from :mod:`.deadline`, which the eval runner sets);
    - a failed candidate goes to the diagnoser while its repair budget lasts (offline, only when a
      deterministic repair applies: ``repairable``, written by the reviewer); a ``harness_error``
      (the reviewer's own failure) never does: there is nothing in the candidate to repair;
    - a correct candidate (or an abandoned one, when a correct best exists) goes on to the next
      round while the round budget lasts;
    - the best reaching ``budget.target_sol_pct`` % of speed-of-light, or ``budget.patience``
      optimization rounds in a row without improvement, ends it;
    - otherwise the run ends.
    """
    review = state["review"]
    budget = state["budget"]
    rnd = state.get("round", 0)
    status = review["status"]
    if status == "invalid_task":
        return "__end__", unusable_text(review.get("error_digest", ""))
    used = tokens_used(state)
    if budget.get("max_tokens") and used >= budget["max_tokens"]:
        return "__end__", f"token budget spent ({used} of {budget['max_tokens']} tokens)"
    elapsed = state.get("elapsed_s", 0.0)
    if budget.get("max_wall_s") and elapsed >= budget["max_wall_s"]:
        return "__end__", f"wall-time budget spent ({elapsed:.0f} s of {budget['max_wall_s']:g} s)"
    late = deadline.stop_reason(state.get("time_left_s"))
    if late:
        return "__end__", late
    repairs = state.get("repairs", 0)
    if status not in ("correct", "harness_error") and repairs < budget["max_repairs"] and state.get("repairable", True):
        return "diagnoser", ""
    if "best" not in state:
        return "__end__", f"no correct candidate after {repairs} repair(s) of the seed"
    sol = (state["best"]["review"].get("metrics") or {}).get("sol_pct")
    if budget.get("target_sol_pct") and sol is not None and sol >= budget["target_sol_pct"]:
        return "__end__", f"speed-of-light target reached (best at {sol:.1f}% >= {budget['target_sol_pct']:g}%)"
    stale = stale_rounds(state)
    if budget.get("patience") and stale >= budget["patience"]:
        return "__end__", f"no improvement in {stale} optimization round(s) in a row (patience {budget['patience']})"
    if rnd >= budget["max_rounds"]:
        return "__end__", f"round budget spent ({budget['max_rounds']} optimization rounds)"
    return "feature_extractor", ""


def route_after_review(state: State) -> AfterReview:
    """Router after ``reviewer``: diagnoser, feature_extractor or END."""
    return decide_after_review(state)[0]


def round_finished(state: State) -> bool:
    """True when the reviewed candidate closes its round (correct, unjudgeable, or repairs exhausted)."""
    review = state["review"]
    if review["status"] in ("correct", "harness_error"):
        return True
    return state.get("repairs", 0) >= state["budget"]["max_repairs"] or not state.get("repairable", True)


def route_after_planner(state: State) -> AfterPlanner:
    """Router after ``planner``: optimizer when a plan was chosen, else END."""
    return "optimizer" if state.get("plan") else "__end__"
