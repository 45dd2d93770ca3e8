"""Realistic model replies through the real ChatOpenAI client (local stub server) and the scripted model.

Each case goes where it should, and none crashes the run: a structured verdict that does not parse
or is refused falls back to plain text; a reply cut at the completion limit goes to the diagnoser
with its partial code and the word "truncated"; an endpoint that keeps failing pauses the run
(resumable); every reply is saved in the run directory; prompts carry the environment and shapes.
"""

import json

import pytest
from langchain_core.messages import AIMessage
from openai_stub import StubOpenAI
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.graph.context import Context
from kernelskill.nodes.model.llm import finish_reason, reply_text
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script

runner = CliRunner()


# ---- content normalization ------------------------------------------------------------------------


def test_reply_text_reads_strings_and_content_blocks():
    code = "```python\nclass ModelNew: ...\n```"
    assert reply_text(code) == code
    responses_api = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking..."}]},
        {"type": "output_text", "text": "Here is the kernel.", "annotations": []},
        {"type": "text", "text": code},
    ]
    assert reply_text(responses_api) == "Here is the kernel.\n" + code
    assert reply_text([{"type": "refusal", "refusal": "I can't help with that."}]) == "I can't help with that."
    assert reply_text(["plain", {"type": "tool_use", "id": "x"}]) == "plain"


def test_finish_reason_from_both_apis():
    assert finish_reason(AIMessage(content="x", response_metadata={"finish_reason": "length"})) == "length"
    cut = AIMessage(
        content=[], response_metadata={"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    )
    assert finish_reason(cut) == "length"
    assert finish_reason(AIMessage(content="x")) == ""


def test_structured_output_setting_is_validated():
    assert Context(structured_output="off").structured_output == "off"
    with pytest.raises(ValueError, match="structured_output must be one of auto, on, off"):
        Context(structured_output="sometimes")


# ---- the real client against the stub -----------------------------------------------------------


def optimize(reply, tmp_path, task_path):
    """``optimize --rounds 0`` through the real client against a stub answering ``reply``: (result, stub)."""
    stub = StubOpenAI(reply=reply)
    args = ["optimize", str(task_path), "--model", "stub-model", "--base-url", stub.url, "--device", "cpu"]
    try:
        return runner.invoke(app, [*args, "--runs-dir", str(tmp_path), "--thread-id", "t", "--rounds", "0"]), stub
    finally:
        stub.stop()


def is_generator(body):
    return "Write the first Triton implementation" in body["messages"][-1]["content"]


@pytest.mark.parametrize("refusal", ["prose", "fenced_json", 422, "length"])
def test_a_structured_verdict_that_fails_falls_back_to_plain_text(tmp_path, task_path, candidate, clean_env, refusal):
    good, broken = fenced(candidate("good")), fenced(candidate("raises"))

    def reply(body):
        if is_generator(body):
            return broken
        if "response_format" in body:  # the structured request
            if refusal == 422:
                return 422
            if refusal == "prose":
                return "The kernel indexes past the end of the buffer; I would add a mask."
            if refusal == "length":
                return ('{"root_cause": "the kernel raises", "code": "import torch', "length")
            return '```json\n{"root_cause": "missing mask"}\n```'  # fenced and incomplete: does not validate
        return "Root cause: the kernel raises on purpose.\n\n" + good

    out, stub = optimize(reply, tmp_path, task_path)
    assert out.exit_code == 0, out.output
    state = json.loads((tmp_path / "t" / "report.json").read_text())
    assert [a["status"] for a in state["attempts"]] == ["runtime_error", "correct"]
    assert any("response_format" in b for b in stub.chat_posts())  # structured output was asked first
    replies = sorted(p.name for p in (tmp_path / "t" / "replies").iterdir())
    assert replies[0].startswith("diagnoser-") and replies[-1].startswith("generator-")


def test_structured_output_off_never_asks_for_it(tmp_path, task_path, candidate, clean_env, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_STRUCTURED_OUTPUT", "off")
    good, broken = fenced(candidate("good")), fenced(candidate("raises"))
    out, stub = optimize(
        lambda body: broken if is_generator(body) else "Root cause: raises.\n" + good, tmp_path, task_path
    )
    assert out.exit_code == 0, out.output
    assert not any("response_format" in b for b in stub.chat_posts())


def test_a_truncated_reply_goes_to_the_diagnoser_with_its_partial_code(tmp_path, task_path, candidate, clean_env):
    good = fenced(candidate("good"))
    cut = "Here it is:\n\n```python\nimport torch\nimport triton\n\n@triton.jit\ndef relu_kernel(x_ptr, out"
    seen = []

    def reply(body):
        if is_generator(body):
            return (cut, "length")
        seen.append(body["messages"][-1]["content"])
        return "Root cause: the reply was cut off.\n" + good

    out, stub = optimize(reply, tmp_path, task_path)
    assert out.exit_code == 0, out.output
    first_post = stub.chat_posts()[0]
    assert first_post.get("max_completion_tokens") or first_post.get("max_tokens")  # a completion limit is sent
    report = json.loads((tmp_path / "t" / "report.json").read_text())
    first = report["attempts"][0]
    assert first["status"] == "no_code" and "truncated" in first["error_digest"]
    assert seen and "truncated" in seen[0] and "def relu_kernel(x_ptr, out" in seen[0]
    assert report["attempts"][-1]["status"] == "correct"


def test_an_endpoint_that_keeps_failing_pauses_the_run_and_resume_continues(
    tmp_path, task_path, candidate, clean_env, monkeypatch
):
    monkeypatch.setenv("KERNELSKILL_MAX_RETRIES", "1")
    good = fenced(candidate("good"))
    out, stub = optimize(lambda body: 500, tmp_path, task_path)
    assert out.exit_code == 1 and "run paused" in out.output and "kernelskill resume t" in out.output
    stub = StubOpenAI(reply=lambda body: good, port=int(stub.url.rsplit(":", 1)[1].split("/")[0]))
    try:
        out = runner.invoke(app, ["resume", "t", "--runs-dir", str(tmp_path)])
    finally:
        stub.stop()
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "t" / "report.json").read_text())["best_candidate"]


# ---- the environment, in the verdict and the prompts -------------------------------------------


CUDA_ONLY = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask) * 2.0, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        assert x.is_cuda, "expects a CUDA tensor"
        out = torch.empty_like(x)
        scale_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
"""


def test_a_cuda_only_assertion_on_the_interpreter_is_an_environment_failure(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": fenced(CUDA_ONLY)},
        {"role": "diagnoser", "reply": "Root cause: asserts CUDA tensors.\n" + fenced(candidate("good"))},
    ]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=0), root=tmp_path / "runs")
    state = execute(run)
    first = state["attempts"][0]
    assert first["status"] == "runtime_error" and first["error_digest"].startswith("environment (CPU interpreter)")
    assert "CUDA tensors" in first["error_digest"]
    prompt = (run.dir / "replies").exists()  # the scripted replies are saved too
    assert prompt


def test_prompts_state_the_interpreter_and_the_shapes(tmp_path, task_path, candidate):
    from kernelskill.nodes.model.prompting import render
    from kernelskill.nodes.model.target import INTERPRETER, io_text, target_text

    probe = {"inputs": [{"shape": [4, 8], "dtype": "float32"}], "outputs": [{"shape": [4, 8], "dtype": "float32"}]}
    probe["device"] = {"name": "cpu (triton interpreter)"}
    system, user = render(
        "generator",
        task_name="t",
        reference="...",
        skills="-",
        variant="",
        target=target_text(probe),
        io=io_text(probe),
    )
    assert INTERPRETER in user and "float32 [4, 8]" in user and "class ModelNew(nn.Module)" in system
    gpu = {
        "name": "NVIDIA H200",
        "capability": "9.0",
        "sms": 132,
        "memory_gib": 139.8,
        "regs_per_multiprocessor": 65536,
    }
    text = target_text({"device": gpu})
    assert "132 SMs" in text and "HBM 4.8 TB/s" in text and "load_inline" in text


def test_the_planner_does_not_offer_skills_the_interpreter_cannot_run(tmp_path, task_path, candidate):
    rules = [{"role": "generator", "reply": fenced(candidate("good"))}, {"role": "optimizer", "reply": "no"}]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=1), root=tmp_path / "runs")
    state = execute(run)
    plan = state["trajectory"][1]["skill_id"]
    assert plan not in ("autotune-configs", "cuda-graphs")


def test_content_blocks_through_the_whole_graph(tmp_path, task_path, candidate):
    rules = [{"role": "generator", "reply": fenced(candidate("good")), "content_blocks": True}]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=0), root=tmp_path / "runs")
    state = execute(run)
    assert state["attempts"][0]["status"] == "correct"


def test_a_truncated_scripted_reply_is_a_truncated_candidate(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": "```python\nimport torch\nclass ModelNew(", "finish_reason": "length"},
        {"role": "diagnoser", "reply": "Root cause: cut off.\n" + fenced(candidate("good"))},
    ]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=0), root=tmp_path / "runs")
    state = execute(run)
    seed = state["candidates"][0]
    assert seed["note"].startswith("truncated") and "class ModelNew(" in seed["partial"]
    assert [a["status"] for a in state["attempts"]] == ["no_code", "correct"]


# The same kernel with two autotune configs, launched with a grid that reads the chosen BLOCK.
AUTOTUNED = (
    CUDA_ONLY.replace(
        "@triton.jit",
        '@triton.autotune(configs=[triton.Config({"BLOCK": 256}), '
        'triton.Config({"BLOCK": 1024})], key=["n"])\n@triton.jit',
    )
    .replace('        assert x.is_cuda, "expects a CUDA tensor"\n', "")
    .replace(
        "[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)",
        '[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())',
    )
)


def test_several_autotune_configs_on_the_interpreter_are_an_environment_failure(tmp_path, task_path):
    from kernelskill.runner.sandbox import run_review

    r = run_review(task_path, AUTOTUNED, tmp_path, "autotuned", device="cpu")
    assert r["status"] == "runtime_error" and "environment" in r["labels"]
    assert "autotune" in r["error_digest"]


@pytest.mark.parametrize(
    "error, cause",
    [
        ("RuntimeError: Error building extension 'x' (CUDA_HOME not set)", "load_inline"),
        ("AssertionError: (candidate line 3: assert x.is_cuda)", "CUDA tensors"),
        ("AssertionError: Torch not compiled with CUDA enabled", "CUDA-only"),
        ("IndexError: index 5 is out of bounds", ""),
    ],
)
def test_environment_causes_are_told_from_code_bugs(error, cause):
    from kernelskill.runner.worker import environment_cause

    found = environment_cause(error)
    assert (cause in found) if cause else found == ""


# ---- realistic reply shapes through the whole graph (scripted model) ------------------------------


def _shapes(good: str, wrong: str) -> dict[str, str]:
    return {
        "python3_tag": f"Sure! Here's a Triton version.\n\n```python3\n{good}\n```\nIt fuses the ops.",
        "after_then_before": f"Optimized version:\n```python\n{good}\n```\n\nBefore:\n```python\n{wrong}\n```\n",
        "kernel_then_module": (
            "First the kernel:\n```python\n" + good.split("class ModelNew")[0] + "```\n\nThen the module:\n"
            "```python\nimport torch\nimport torch.nn as nn\nimport triton\n\nclass ModelNew"
            + good.split("class ModelNew")[1]
            + "```\n"
        ),
        "tilde_fence": f"~~~py\n{good}\n~~~\n",
    }


@pytest.mark.parametrize("shape", ["python3_tag", "after_then_before", "kernel_then_module", "tilde_fence"])
def test_realistic_code_replies_reach_review_with_the_right_code(tmp_path, task_path, candidate, shape):
    reply = _shapes(candidate("good"), candidate("wrong"))[shape]
    script = write_script(tmp_path / "script", [{"role": "generator", "reply": reply}])
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=0), root=tmp_path / "runs")
    state = execute(run)
    assert state["attempts"][0]["status"] == "correct", state["attempts"][0]["error_digest"]


@pytest.mark.parametrize(
    "verdict, cause",
    [
        ("**Root cause:** the kernel raises on purpose.", "the kernel raises on purpose."),
        ("1. Root cause: forward raises.\n2. Fix: remove the raise.", "forward raises."),
        ("The root cause is that forward raises before the launch.", "forward raises before the launch"),
        ('```json\n{"cause": "an explicit raise in forward", "fix": "remove it"}\n```', "an explicit raise in forward"),
        ("I rewrote the module.", "not stated"),
    ],
)
def test_realistic_diagnoses_are_recorded(tmp_path, task_path, candidate, verdict, cause):
    rules = [
        {"role": "generator", "reply": fenced(candidate("raises"))},
        {"role": "diagnoser", "reply": verdict + "\n\n" + fenced(candidate("good"))},
    ]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_rounds=0), root=tmp_path / "runs")
    state = execute(run)
    assert [a["status"] for a in state["attempts"]] == ["runtime_error", "correct"]
    assert cause in state["trajectory"][0]["diagnosis"]
