"""Routers are pure functions of the state: no model, no GPU."""

import pytest

from kernelskill.graph.routing import (
    decide_after_review,
    round_finished,
    route_after_planner,
    route_after_review,
)

BUDGET = {"max_rounds": 2, "max_repairs": 2}
BEST = {"candidate": {"id": "r0"}, "review": {"status": "correct"}}


def state(status, rnd=0, repairs=0, best=True):
    s = {"review": {"status": status, "error_digest": "x"}, "budget": BUDGET, "round": rnd, "repairs": repairs}
    if best:
        s["best"] = BEST
    return s


@pytest.mark.parametrize(
    "s, expected",
    [
        (state("compile_error", best=False), "diagnoser"),
        (state("wrong_output", repairs=1, best=False), "diagnoser"),
        (state("no_code", repairs=1), "diagnoser"),
        (state("crashed", repairs=2, best=False), "__end__"),  # seed never worked
        (state("timeout", rnd=1, repairs=2), "feature_extractor"),  # abandoned, best exists, budget left
        (state("timeout", rnd=2, repairs=2), "__end__"),  # abandoned in the last round
        (state("correct", rnd=0), "feature_extractor"),
        (state("correct", rnd=1), "feature_extractor"),
        (state("correct", rnd=2), "__end__"),  # round budget spent
        (state("invalid_task", best=False), "__end__"),
    ],
)
def test_route_after_review(s, expected):
    assert route_after_review(s) == expected


def test_end_reasons_are_explained():
    assert "round budget" in decide_after_review(state("correct", rnd=2))[1]
    assert "no correct candidate" in decide_after_review(state("crashed", repairs=2, best=False))[1]
    assert "unusable" in decide_after_review(state("invalid_task", best=False))[1]
    assert decide_after_review(state("correct", rnd=0))[1] == ""


def test_round_finished():
    assert round_finished(state("correct"))
    assert not round_finished(state("compile_error", repairs=1))
    assert round_finished(state("compile_error", repairs=2))


def test_route_after_planner():
    assert route_after_planner({"plan": {"skill_id": "x"}}) == "optimizer"
    assert route_after_planner({"plan": None}) == "__end__"
    assert route_after_planner({}) == "__end__"
