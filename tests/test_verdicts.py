"""Structured verdicts: diagnoser and planner, structured output and plain-text fallbacks."""

import json

from openai_stub import StubOpenAI

from kernelskill.graph.context import Context
from kernelskill.nodes.llm import ask_verdict
from kernelskill.nodes.verdicts import DiagnoserVerdict, diagnoser_from_text, planner_from_text
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def test_plain_text_parsers():
    v, problem = diagnoser_from_text("Root cause: the mask is missing.\n\n```python\nclass ModelNew:\n    pass\n```")
    assert v.root_cause == "the mask is missing." and "class ModelNew" in v.code and not problem
    assert diagnoser_from_text("no code")[0].root_cause == ""
    p = planner_from_text('Here: {"skill_id": "autotune-configs", "rationale": "sweep"}')
    assert p.skill_id == "autotune-configs" and p.rationale == "sweep"
    p = planner_from_text("skill_id: `vectorized-loads`\nRationale: wide loads\nexpected effect: 10%")
    assert (p.skill_id, p.rationale, p.expected_effect) == ("vectorized-loads", "wide loads", "10%")
    assert planner_from_text("I would rather not say") is None


def test_structured_output_through_real_client_and_400_fallback(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    verdict = {
        "root_cause": "no mask",
        "evidence": "IndexError",
        "fix_plan": "mask tails",
        "code": "class ModelNew: ...",
    }
    stub = StubOpenAI(reply=lambda body: json.dumps(verdict))
    try:
        ctx = Context(model="stub-model", base_url=stub.url, max_retries=0)
        v, text, usage = ask_verdict(ctx, "diagnoser", "sys", "user", DiagnoserVerdict)
        assert isinstance(v, DiagnoserVerdict) and v.root_cause == "no mask" and usage["input_tokens"] == 123
        assert "response_format" in stub.chat_posts()[-1] or "tools" in stub.chat_posts()[-1]
        stub.faults.append(400)  # a server without structured output: one plain call follows
        stub.reply = lambda body: "Root cause: plain\n```python\nclass ModelNew:\n    pass\n```"
        v, text, usage = ask_verdict(ctx, "diagnoser", "sys", "user", DiagnoserVerdict)
        assert v is None and text.startswith("Root cause: plain")
        assert "response_format" not in stub.chat_posts()[-1]
    finally:
        stub.stop()


def _run(tmp_path, task_path, rules, **ctx):
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", **ctx), root=tmp_path / "runs")
    return execute(run)


def test_diagnosis_recorded_and_model_plan_rejected_then_reasked(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": fenced(candidate("raises"))},
        {"role": "diagnoser", "reply": "Root cause: forward raises on purpose.\n" + fenced(candidate("good"))},
        {
            "role": "planner",
            "match": "previous answer was rejected",
            "reply": "skill_id: autotune-configs\nrationale: sweep block sizes\nexpected_effect: 10%\n"
            "code_region: the launch",
        },
        {"role": "planner", "reply": json.dumps({"skill_id": "tensor-core-dot", "rationale": "tensor cores"})},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    state = _run(tmp_path, task_path, rules, max_rounds=1, max_repairs=2)
    seed, round1 = state["trajectory"]
    assert seed["diagnosis"] == "forward raises on purpose."
    assert any(c.get("verdict", {}).get("root_cause") for c in state["candidates"])
    assert round1["skill_id"] == "autotune-configs"
    assert round1["plan"] == {
        "source": "model",
        "rationale": "sweep block sizes",
        "expected_effect": "10%",
        "code_region": "the launch",
    }
    trace = "\n".join(state["plan"]["trace"])
    assert "model plan rejected (attempt 1): skill 'tensor-core-dot' is forbidden by the policy" in trace
    assert sum(1 for t in state["tokens"] if t["role"] == "planner") == 2


def test_model_plan_rejected_twice_falls_back_to_policy(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": fenced(candidate("good"))},
        {"role": "planner", "reply": "skill_id: no-such-skill"},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    state = _run(tmp_path, task_path, rules, max_rounds=1)
    plan = state["plan"]
    assert plan["source"] == "policy (model plan rejected)"
    assert plan["skill_id"] in state["decision"]["allowed"]
    assert "model plans rejected twice" in plan["trace"][-1]
    assert "'no-such-skill' is not in the allowed list" in "\n".join(plan["trace"])
