"""Record / replay: a recorded scripted run replays with no model configured; divergence is named."""

import json

import pytest

from kernelskill.graph.context import Context
from kernelskill.nodes.model.cassette import ReplayDivergence
from kernelskill.nodes.model.llm import ask
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def _shape(state):
    return (
        [(a["candidate_id"], a["status"]) for a in state["attempts"]],
        [(e["round"], e["skill_id"], e["outcome"], e["improved"]) for e in state["trajectory"]],
        state["stop_reason"],
        [(t["role"], t["input_tokens"], t["output_tokens"]) for t in state["tokens"]],
    )


def test_record_then_replay_same_trajectory(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "reply": fenced(candidate("raises"))},
        {"role": "diagnoser", "reply": fenced(candidate("good"))},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    script = write_script(tmp_path / "script", rules)
    cassette = tmp_path / "calls.jsonl"
    ctx = Context(scripted=str(script), record=str(cassette), device="cpu", max_rounds=1, max_repairs=2)
    recorded = execute(new_run(task_path, ctx, root=tmp_path / "runs"))
    calls = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [(c["role"], c["index"]) for c in calls] == [("generator", 0), ("diagnoser", 0), ("optimizer", 0)]
    assert all(len(c["sha256"]) == 64 for c in calls)

    replay_ctx = Context(replay=str(cassette), device="cpu", max_rounds=1, max_repairs=2)  # no model, no script
    assert not replay_ctx.scripted and not replay_ctx.model and replay_ctx.has_llm()
    run = new_run(task_path, replay_ctx, root=tmp_path / "runs")
    replayed = execute(run)
    assert _shape(replayed) == _shape(recorded)
    assert "REPLAYED" in json.loads((run.dir / "report.json").read_text())["mode"]


def test_diverging_prompt_names_role_index_and_line(tmp_path):
    cassette = tmp_path / "calls.jsonl"
    rec = Context(scripted=str(write_script(tmp_path / "s", [{"role": "optimizer", "reply": "ok"}])))
    rec.record = str(cassette)
    ask(rec, "optimizer", "system text", "Task t. Round: 1.\nsame line\nbest: 1.0 ms", index=0)
    ask(rec, "optimizer", "system text", "Task t. Round: 2.\nsame line\nbest: 0.9 ms", index=1)
    play = Context(replay=str(cassette))
    text, usage = ask(play, "optimizer", "system text", "Task t. Round: 2.\nsame line\nbest: 0.9 ms", index=1)
    assert text == "ok" and usage["model"] == "replay"
    # timings differ from run to run: decimal numbers are not part of the key
    assert ask(play, "optimizer", "system text", "Task t. Round: 2.\nsame line\nbest: 0.8 ms", index=1)[0] == "ok"
    with pytest.raises(ReplayDivergence) as err:
        ask(play, "optimizer", "system text", "Task t. Round: 3.\nsame line\nbest: 0.9 ms", index=1)
    msg = str(err.value)
    assert "role optimizer, call 1" in msg
    assert "line 3" in msg and "recorded: Task t. Round: 2." in msg and "now:      Task t. Round: 3." in msg
    with pytest.raises(ReplayDivergence, match="holds only 0 call"):
        ask(play, "generator", "s", "u", index=0)
