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


def test_the_reviewers_view_of_the_next_state_is_langgraphs():
    """apply_update (what the reviewer hands the router) reduces exactly as LangGraph's channels do."""
    from langgraph.graph import END, START, StateGraph

    from kernelskill.graph.state import State, _reducers, apply_update

    assert set(_reducers()) == {"candidates", "attempts", "trajectory", "failed_plans", "tokens"}
    start = {"round": 1, "candidates": [{"id": "a"}], "attempts": [], "failed_plans": ["x"], "stop_reason": ""}
    update = {
        "round": 2,
        "candidates": [{"id": "b"}],
        "attempts": [{"candidate_id": "b"}],
        "trajectory": [{"round": 2}],
        "failed_plans": ["y"],
        "tokens": [{"input_tokens": 1}],
        "stop_reason": "done",
    }
    g = StateGraph(State)
    g.add_node("n", lambda s: update)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    final = g.compile().invoke(start)
    assert dict(apply_update(start, update)) == dict(final)


def test_a_rounds_row_names_its_best_even_when_an_earlier_step_found_it(monkeypatch, tmp_path):
    """An extra candidate became the best in the round's first review; a repair closes the round slower."""
    from kernelskill.graph.context import Context
    from kernelskill.nodes import reviewer as node

    def review(runtime_ms):
        return {"status": "correct", "runtime_ms": runtime_ms, "timing_kind": "cuda_events", "custom_kernel": True}

    monkeypatch.setattr(node, "_review", lambda ctx, state, cand: {**review(2.0), "candidate_id": cand["id"]})
    fast = {"id": "r1-extra", "source": "x", "origin": "optimizer", "parent_id": "r0", "round": 1, "note": ""}
    slow = {"id": "r1-repair", "source": "y", "origin": "diagnoser", "parent_id": "r1-first", "round": 1, "note": ""}
    state = {
        "round": 1,
        "current": slow,
        "repairs": 1,
        "budget": {"max_repairs": 2, "max_rounds": 3, "patience": 0},
        "best": {"candidate": fast, "review": review(1.0)},
        "task": {"path": str(tmp_path / "t.py")},
    }

    class Runtime:
        context = Context()

    update = node.reviewer(state, Runtime())
    (row,) = update["trajectory"]
    assert row["candidate_id"] == "r1-extra" and row["runtime_ms"] == 1.0 and row["improved"]
    assert "best" not in update  # the slower repair does not replace it
