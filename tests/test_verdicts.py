"""Structured verdicts: diagnoser and planner, structured output and plain-text fallbacks."""

import json
import logging

import pytest
from openai_stub import StubOpenAI

from kernelskill.graph.context import Context
from kernelskill.nodes.model.llm import ask_verdict
from kernelskill.nodes.model.verdicts import NOT_STATED, DiagnoserVerdict, diagnoser_from_text, planner_from_text
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def test_plain_text_parsers():
    v, problem = diagnoser_from_text("Root cause: the mask is missing.\n\n```python\nclass ModelNew:\n    pass\n```")
    assert v.root_cause == "the mask is missing." and "class ModelNew" in v.code and not problem
    assert diagnoser_from_text("no code")[0].root_cause == NOT_STATED
    p = planner_from_text('Here: {"skill_id": "autotune-configs", "rationale": "sweep"}')
    assert p.skill_id == "autotune-configs" and p.rationale == "sweep"
    p = planner_from_text("skill_id: `vectorized-loads`\nRationale: wide loads\nexpected effect: 10%")
    assert (p.skill_id, p.rationale, p.expected_effect) == ("vectorized-loads", "wide loads", "10%")
    assert planner_from_text("I would rather not say") is None


MODULE = "```python\nclass ModelNew:\n    pass\n```"


@pytest.mark.parametrize(
    "reply",
    [
        "**skill_id:** `vectorized-loads`\n**rationale:** loads are scalar",
        "**Skill**: vectorized-loads",
        '- *skill_id*: "vectorized-loads"',
        "Chosen skill: **vectorized-loads**.",
        "1. Skill: `vectorized-loads` (the loads are 4 bytes wide)",
        "### Chosen skill\n`vectorized-loads`\n\n### Why\nthe kernel is memory bound",
        "The loads are scalar, so I choose `vectorized-loads` for this round.",
        "I would recommend the `vectorized-loads` skill here.",
        "Skill: Vectorized-Loads",
    ],
)
def test_planner_skill_id_through_markdown(reply):
    assert planner_from_text(reply).skill_id == "vectorized-loads"


def test_planner_label_synonyms_and_emphasis():
    p = planner_from_text(
        "Here is my plan for this round.\n\n"
        "- **Skill:** `split-k`\n"
        "- **Why:** K is 16384 while M and N are small, so few programs run.\n"
        "- **Expected improvement:** about 1.5x\n"
        "- **Where:** `matmul_kernel`, the K loop\n"
    )
    assert p.skill_id == "split-k"
    assert p.rationale == "K is 16384 while M and N are small, so few programs run."
    assert p.expected_effect == "about 1.5x"
    assert p.code_region == "`matmul_kernel`, the K loop"
    p = planner_from_text("Skill id: autotune-configs\nReason: one fixed config\nRegion: the launch")
    assert (p.skill_id, p.rationale, p.code_region) == ("autotune-configs", "one fixed config", "the launch")


def test_planner_headings_take_the_paragraph_below():
    p = planner_from_text(
        "## Skill\nautotune-configs\n\n## Rationale\nThe block size is hard-coded\nat 128 for every shape.\n\n"
        "## Expected effect\n10-20%\n"
    )
    assert p.skill_id == "autotune-configs"
    assert p.rationale == "The block size is hard-coded at 128 for every shape."
    assert p.expected_effect == "10-20%"


def test_planner_json_in_fence_with_prose_braces_and_synonym_keys():
    reply = (
        "The launch grid {x, y} covers the output once, and the block {BLOCK_M, BLOCK_N} is fixed.\n"
        "```json\n"
        '{"skill": "autotune-configs", "reason": "sweep {BLOCK_M, BLOCK_N} and \\"num_warps\\"",\n'
        ' "expected improvement": "10%", "details": {"region": "ignored, nested"}, "where": "the launch"}\n'
        "```\nLet me know {if} this works."
    )
    p = planner_from_text(reply)
    assert p.skill_id == "autotune-configs"
    assert p.rationale == 'sweep {BLOCK_M, BLOCK_N} and "num_warps"'
    assert (p.expected_effect, p.code_region) == ("10%", "the launch")


def test_planner_json_nested_or_without_skill_is_skipped():
    p = planner_from_text('Stats: {"bytes": 4096}. Answer: {"answer": {"skill_id": "split-k", "plan": "x"}}')
    assert p.skill_id == "split-k"
    assert planner_from_text('{"rationale": "no skill here"} and {not json}') is None
    assert planner_from_text("I use `tl.load` everywhere") is None


@pytest.mark.parametrize(
    "reply",
    [
        "**Root cause:** the last block reads past the end of the row.",
        "**Root cause**: the last block reads past the end of the row.",
        "__root cause__: the last block reads past the end of the row.",
        "- *Cause*: `the last block reads past the end of the row.`",
        "1. Diagnosis: the last block reads past the end of the row.",
        "2) Problem: the last block reads past the end of the row.",
        "### Root cause\nthe last block reads past the end of the row.\n\n### Fix plan\nmask it",
        "**Root cause**\n\nthe last block reads past\nthe end of the row.\n\n**Fix plan:** mask it",
    ],
)
def test_diagnoser_root_cause_through_markdown(reply):
    v, problem = diagnoser_from_text(reply + "\n\n" + MODULE)
    assert v.root_cause == "the last block reads past the end of the row."
    assert "class ModelNew" in v.code and not problem


def test_diagnoser_numbered_and_bulleted_fields():
    v, _ = diagnoser_from_text(
        "1. Root cause: the store has no mask.\n"
        "2) Evidence: `IndexError: index 1024 is out of bounds`\n"
        "- Fix plan: mask the store with `offs < n`\n\n" + MODULE
    )
    assert v.root_cause == "the store has no mask."
    assert v.evidence == "IndexError: index 1024 is out of bounds"
    assert v.fix_plan == "mask the store with `offs < n`"


def test_diagnoser_labels_inside_code_are_not_fields():
    v, _ = diagnoser_from_text(
        "Root cause: stride of the wrong dimension.\n\n"
        "```python\n# Fix: this comment is code, not the plan\nclass ModelNew:\n    pass\n```"
    )
    assert v.root_cause == "stride of the wrong dimension." and v.fix_plan == ""


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (
            "I read the traceback. The root cause is that `offs` is never masked.\nHere is the fix.",
            "The root cause is that offs is never masked.",
        ),
        ("Looking at it, the bug is an fp16 accumulator! Fixed below.", "the bug is an fp16 accumulator!"),
        ("The issue is the missing\nsynchronisation\n\nFixed below.", "The issue is the missing synchronisation"),
        (
            "The failure is caused by reading `x` with the stride of `y`. Here is the new kernel.",
            "The failure is caused by reading x with the stride of y.",
        ),
    ],
)
def test_diagnoser_cause_sentence(reply, cause):
    assert diagnoser_from_text(reply + "\n" + MODULE)[0].root_cause == cause


def test_diagnoser_json_with_synonym_keys_and_code():
    reply = (
        "Here is my verdict, with the grid {n_rows} unchanged:\n```json\n"
        '{"diagnosis": "the \\"max\\" is taken over {the padded row}", "evidence": ["NaN in row 3", "-inf pads"],'
        ' "plan": "pad with -inf only where masked", "code": "class ModelNew:\\n    pass"}\n```'
    )
    v, problem = diagnoser_from_text(reply)
    assert v.root_cause == 'the "max" is taken over {the padded row}'
    assert v.evidence == "NaN in row 3; -inf pads" and v.fix_plan == "pad with -inf only where masked"
    assert v.code == "class ModelNew:\n    pass\n" and not problem


def test_diagnoser_without_a_stated_cause_records_not_stated(caplog):
    with caplog.at_level(logging.WARNING, logger="kernelskill.nodes.model.verdicts"):
        v, problem = diagnoser_from_text("Here is a corrected version.\n\n" + MODULE)
    assert v.root_cause == NOT_STATED and "class ModelNew" in v.code and not problem
    assert "no root cause" in caplog.text
    assert diagnoser_from_text("Cause\nthe word alone is prose\n" + MODULE)[0].root_cause == NOT_STATED


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
