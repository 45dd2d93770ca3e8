"""Budgets and early stopping: each stop reason from hand-made states, two from scripted runs."""

import json

import pytest

from kernelskill.graph.context import Context
from kernelskill.graph.routing import decide_after_review, stale_rounds, tokens_used
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def entry(rnd, improved):
    return {"round": rnd, "improved": improved}


def make(status="correct", rnd=1, repairs=0, best_sol=None, **budget):
    review = {"status": "correct", "metrics": {} if best_sol is None else {"sol_pct": best_sol}}
    return {
        "review": {"status": status, "error_digest": "x"},
        "budget": {"max_rounds": 5, "max_repairs": 2, **budget},
        "round": rnd,
        "repairs": repairs,
        "best": {"candidate": {"id": "r0"}, "review": review},
        "tokens": [{"input_tokens": 600, "output_tokens": 400}, {"input_tokens": 100, "output_tokens": 0}],
        "trajectory": [entry(0, True), entry(1, False)],
        "elapsed_s": 50.0,
    }


@pytest.mark.parametrize(
    "state, nxt, reason",
    [
        (make(max_tokens=1100), "__end__", "token budget spent (1100 of 1100 tokens)"),
        (make(max_tokens=1101), "feature_extractor", ""),
        (make("compile_error", max_tokens=1000), "__end__", "token budget spent"),  # even inside repairs
        (make(max_wall_s=50), "__end__", "wall-time budget spent (50 s of 50 s)"),
        (make(max_wall_s=51), "feature_extractor", ""),
        (make(best_sol=81.5, target_sol_pct=80), "__end__", "speed-of-light target reached (best at 81.5% >= 80%)"),
        (make(best_sol=79.0, target_sol_pct=80), "feature_extractor", ""),
        (make(target_sol_pct=80), "feature_extractor", ""),  # no sol_pct (CPU): never stops on it
        (make(patience=1), "__end__", "no improvement in 1 optimization round(s) in a row (patience 1)"),
        (make(patience=2), "feature_extractor", ""),
        (make(rnd=5), "__end__", "round budget spent (5 optimization rounds)"),
        (make(rnd=5, max_tokens=0, max_wall_s=0, target_sol_pct=0, patience=0), "__end__", "round budget spent"),
    ],
)
def test_stop_reasons(state, nxt, reason):
    got, why = decide_after_review(state)
    assert got == nxt
    assert why.startswith(reason)


def test_counters():
    s = make()
    assert tokens_used(s) == 1100
    assert stale_rounds(s) == 1
    s["trajectory"] += [entry(2, False), entry(3, False)]
    assert stale_rounds(s) == 3
    s["trajectory"].append(entry(4, True))
    assert stale_rounds(s) == 0
    assert stale_rounds({"trajectory": [entry(0, True)]}) == 0


def _run(tmp_path, task_path, candidate, **ctx):
    rules = [
        {"role": "generator", "reply": fenced(candidate("good"))},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    context = Context(scripted=str(write_script(tmp_path / "script", rules)), device="cpu", **ctx)
    run = new_run(task_path, context, root=tmp_path / "runs")
    return run, execute(run)


def test_patience_stops_a_scripted_run(tmp_path, task_path, candidate):
    run, state = _run(tmp_path, task_path, candidate, max_rounds=3, patience=1)
    assert [e["round"] for e in state["trajectory"]] == [0, 1]  # CPU timings never improve
    assert state["stop_reason"].startswith("no improvement in 1 optimization round")
    report = json.loads((run.dir / "report.json").read_text())
    assert report["stop_reason"] == state["stop_reason"] and report["budget"]["patience"] == 1
    assert report["elapsed_s"] > 0


def test_token_budget_stops_a_scripted_run(tmp_path, task_path, candidate):
    _, state = _run(tmp_path, task_path, candidate, max_rounds=3, max_tokens=10)
    assert [e["round"] for e in state["trajectory"]] == [0]
    assert state["stop_reason"].startswith("token budget spent")
