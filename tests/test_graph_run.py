"""Whole-graph runs with scripted models (no endpoint): garbage replies, repairs, planning."""

import json

from kernelskill.graph.context import Context
from kernelskill.graph.routing import decide_after_review
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def run_with(tmp_path, task_path, rules, **ctx):
    script = write_script(tmp_path / "script", rules)
    context = Context(scripted=str(script), device="cpu", **ctx)
    run = new_run(task_path, context, root=tmp_path / "runs")
    return run, execute(run)


def test_garbage_replies_never_crash(tmp_path, task_path):
    rules = [
        {"role": "generator", "reply": "I am not sure what you want. Here is some prose."},
        {"role": "diagnoser", "reply": "```python\nprint('no model here')\n```"},
    ]
    run, state = run_with(tmp_path, task_path, rules, max_repairs=2, max_rounds=1)
    statuses = [a["status"] for a in state["attempts"]]
    # the seed and its repairs, the last resort (the reference's own ops), one round of no code again
    assert statuses == ["no_code", "no_code", "no_code", "correct", "no_code", "no_code", "no_code"]
    assert "no ```python code block" in state["attempts"][0]["error_digest"]
    assert "none defines class ModelNew" in state["attempts"][1]["error_digest"]
    assert "round budget" in state["stop_reason"]
    assert decide_after_review(state) == ("__end__", state["stop_reason"])  # the router's own call, on the final state
    report = json.loads((run.dir / "report.json").read_text())
    assert report["best_candidate"] == state["attempts"][3]["candidate_id"]
    assert report["best_review"]["custom_kernel"] is False


def test_repair_then_plan_then_optimize(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": fenced(candidate("raises"))},
        {"role": "diagnoser", "reply": fenced(candidate("good"))},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    run, state = run_with(tmp_path, task_path, rules, max_rounds=1, max_repairs=2)
    assert [a["status"] for a in state["attempts"]] == ["runtime_error", "correct", "correct"]
    assert [e["round"] for e in state["trajectory"]] == [0, 1]
    seed, round1 = state["trajectory"]
    assert seed["skill_id"] is None and seed["repairs"] == 1 and seed["improved"]
    assert round1["skill_id"] and not round1["improved"]  # interpreter timing is never an improvement
    assert state["failed_plans"] == [round1["skill_id"]]
    assert state["best"]["candidate"]["id"] == seed["candidate_id"]
    assert "round budget" in state["stop_reason"]
    assert (run.dir / "best.py").read_text().strip() == candidate("good").strip()
    assert sum(t["input_tokens"] for t in state["tokens"]) > 0
    nodes = [json.loads(line)["node"] for line in (run.dir / "events.jsonl").read_text().splitlines()]
    assert set(nodes) == {"generator", "reviewer", "diagnoser", "feature_extractor", "planner", "optimizer"}


def test_a_launch_deadline_ends_the_run_cleanly_with_its_best(tmp_path, task_path, candidate, monkeypatch):
    from kernelskill.graph import deadline

    monkeypatch.setenv(deadline.ENV, str(__import__("time").time() + deadline.ROUND_RESERVE_S - 1))
    rules = [{"role": "generator", "reply": fenced(candidate("good"))}]
    run, state = run_with(tmp_path, task_path, rules, max_rounds=3)
    assert "time limit of this launch near" in state["stop_reason"]
    assert state["best"]["candidate"]["id"] == state["trajectory"][0]["candidate_id"]
    assert state["time_left_s"] < deadline.ROUND_RESERVE_S - 1
    assert (run.dir / "report.json").exists()
