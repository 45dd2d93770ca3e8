"""Pure routers: functions of the state alone, typed so Studio draws every branch."""

from __future__ import annotations

from typing import Literal

from .state import State

AfterReview = Literal["diagnoser", "feature_extractor", "__end__"]
AfterPlanner = Literal["optimizer", "__end__"]


def decide_after_review(state: State) -> tuple[AfterReview, str]:
    """Where to go after a review, and why (the reason becomes ``stop_reason`` on END).

    - a broken reference task ends the run;
    - a failed candidate goes to the diagnoser while its repair budget lasts;
    - a correct candidate (or an abandoned one, when a correct best exists) goes on to the next
      round while the round budget lasts;
    - otherwise the run ends.
    """
    review = state["review"]
    budget = state["budget"]
    rnd = state.get("round", 0)
    status = review["status"]
    if status == "invalid_task":
        return "__end__", f"the reference task is unusable: {review.get('error_digest', '')}"
    if status != "correct" and state.get("repairs", 0) < budget["max_repairs"]:
        return "diagnoser", ""
    if "best" not in state:
        return "__end__", f"no correct candidate after {budget['max_repairs']} repairs of the seed"
    if rnd >= budget["max_rounds"]:
        return "__end__", f"round budget spent ({budget['max_rounds']} optimization rounds)"
    return "feature_extractor", ""


def route_after_review(state: State) -> AfterReview:
    """Router after ``reviewer``: diagnoser, feature_extractor or END."""
    return decide_after_review(state)[0]


def round_finished(state: State) -> bool:
    """True when the reviewed candidate closes its round (correct, or repairs exhausted)."""
    review = state["review"]
    if review["status"] == "correct":
        return True
    return state.get("repairs", 0) >= state["budget"]["max_repairs"]


def route_after_planner(state: State) -> AfterPlanner:
    """Router after ``planner``: optimizer when a plan was chosen, else END."""
    return "optimizer" if state.get("plan") else "__end__"
