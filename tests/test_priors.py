"""Learning across tasks: the outcome store, per-skill priors, and their effect on the ranking."""

import json

import pytest

from kernelskill.skills_kb.outcomes import (
    OUTCOMES_FILE,
    append_outcome,
    outcomes_path,
    read_outcomes,
    record_round,
    round_record,
)
from kernelskill.skills_kb.priors import Prior, load_priors, summarize

SOFTMAX = {
    "num_kernels": 1,
    "num_launch_sites": 1,
    "uses_dot": False,
    "has_reduction": True,
    "is_pointwise": False,
    "uses_transcendentals": True,
    "has_masks": True,
    "num_loads": 1,
    "num_stores": 1,
    "torch_ops_in_forward": 0,
}


def _review(status="correct", runtime_ms=1.0, kind="cuda_events", speedup=2.0):
    return {"status": status, "runtime_ms": runtime_ms, "timing_kind": kind, "speedup_vs_eager": speedup}


def _state(skill="online-softmax", rnd=1, task="24_softmax", before=None):
    return {
        "task": {"name": task, "path": "", "source": ""},
        "round": rnd,
        "plan": {"skill_id": skill, "title": "", "reason": "", "trace": []},
        "best": {"candidate": {"id": "r0"}, "review": before or _review(runtime_ms=2.0, speedup=1.0)},
        "decision": {"bottleneck": "memory_bandwidth", "rule": "reduction-structure"},
    }


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "skill_outcomes.jsonl"
    monkeypatch.setenv("KERNELSKILL_SKILL_OUTCOMES", str(path))
    return path


def test_round_record_fields():
    rec = round_record(_state(), _review(runtime_ms=1.6, speedup=1.25), improved=True, run="run-1")
    assert rec is not None
    assert {k: rec[k] for k in ("run", "task", "round", "skill_id", "bottleneck", "rule")} == {
        "run": "run-1",
        "task": "24_softmax",
        "round": 1,
        "skill_id": "online-softmax",
        "bottleneck": "memory_bandwidth",
        "rule": "reduction-structure",
    }
    assert rec["success"] and rec["improved"] and rec["informative"] and rec["timing_kind"] == "cuda_events"
    assert (rec["runtime_before_ms"], rec["runtime_after_ms"]) == (2.0, 1.6)
    assert (rec["speedup_before"], rec["speedup_after"]) == (1.0, 1.25)
    assert rec["gain"] == pytest.approx(0.25)


def test_failed_and_interpreter_rounds():
    broken = round_record(_state(), {"status": "wrong_output", "timing_kind": None}, improved=False)
    assert broken is not None and not broken["success"] and broken["runtime_after_ms"] is None
    assert broken["informative"]  # a broken candidate on a GPU machine is a real loss
    cpu = round_record(
        _state(before=_review(kind="interpreter")), _review(kind="interpreter", speedup=None), improved=False
    )
    assert cpu is not None and cpu["timing_kind"] == "interpreter" and not cpu["informative"]
    assert round_record(_state(rnd=0), _review(), improved=True) is None  # the seed round applies no skill
    assert round_record({**_state(), "plan": None}, _review(), improved=True) is None


def test_store_location(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELSKILL_SKILL_OUTCOMES", raising=False)
    assert outcomes_path(tmp_path / "runs" / "task-1") == tmp_path / "runs" / OUTCOMES_FILE
    assert outcomes_path(root=tmp_path) == tmp_path / OUTCOMES_FILE
    monkeypatch.setenv("KERNELSKILL_SKILL_OUTCOMES", str(tmp_path / "elsewhere.jsonl"))
    assert outcomes_path(tmp_path / "runs" / "task-1") == tmp_path / "elsewhere.jsonl"


def test_record_round_appends_next_to_the_run_dirs(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELSKILL_SKILL_OUTCOMES", raising=False)
    run_dir = tmp_path / "runs" / "softmax-1"
    assert record_round(run_dir, _state(), _review(runtime_ms=1.0), improved=True)
    assert record_round(run_dir, _state(skill="single-pass-reduction", rnd=2), _review(), improved=False)
    records = read_outcomes(tmp_path / "runs" / OUTCOMES_FILE)
    assert [r["skill_id"] for r in records] == ["online-softmax", "single-pass-reduction"]
    assert records[0]["run"] == "softmax-1"


def test_record_round_never_raises(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("KERNELSKILL_SKILL_OUTCOMES", str(blocker / "skill_outcomes.jsonl"))
    assert record_round(tmp_path / "run", _state(), _review(), improved=True) is False
    assert record_round(tmp_path / "run", {"round": 1, "plan": {"skill_id": "x"}, "best": 5}, {}, False) is False


def test_priors_summarize_gpu_rounds_only(store):
    for i, (improved, runtime) in enumerate([(True, 1.0), (True, 1.6), (False, 2.5)]):
        record_round(store.parent / f"run-{i}", _state(), _review(runtime_ms=runtime), improved)
    record_round(store.parent / "run-3", _state(), {"status": "compile_error", "timing_kind": None}, False)
    record_round(store.parent / "run-4", _state(before=_review(kind="interpreter")), _review(kind="interpreter"), False)
    prior = load_priors(store)["online-softmax"]
    assert (prior.tries, prior.wins, prior.failures, prior.uninformative) == (4, 2, 1, 1)
    assert prior.win_rate == pytest.approx(3 / 6)
    assert prior.mean_gain == pytest.approx((1.0 + 0.25 - 0.2) / 3)
    assert prior.describe() == "2/4 wins, mean gain +35.0%"


def test_priors_smoothing_and_neutral_default():
    assert Prior("x").win_rate == 0.5 and Prior("x").score == 0 and Prior("x").describe() == "no GPU-timed tries"
    assert Prior("x", tries=3, wins=3).win_rate == pytest.approx(0.8)
    assert Prior("x", tries=3, wins=0).score == pytest.approx(-0.3)


def test_resumed_duplicates_count_once_and_bad_lines_are_skipped(store):
    rec = round_record(_state(), _review(), improved=True, run="run-1")
    assert rec is not None
    append_outcome(store, rec)
    append_outcome(store, rec)  # the reviewer re-ran after a kill before its checkpoint
    with open(store, "a") as f:
        f.write("{not json\n\n" + json.dumps({"no_skill": 1}) + "\n")
    assert len(read_outcomes(store)) == 2
    assert summarize(read_outcomes(store))["online-softmax"].tries == 1
    assert read_outcomes(store.parent / "missing.jsonl") == []


# --- priors change the ranking -----------------------------------------------------------------


class _Runtime:
    def __init__(self):
        from kernelskill.graph.context import Context

        self.context = Context()


def _plan():
    from kernelskill.nodes.planner import planner

    from conftest import REPO

    task = REPO / "evals" / "tasks" / "level1" / "24_softmax.py"
    state = {
        "features": SOFTMAX,
        "best": {"candidate": {"id": "r0"}, "review": {"status": "correct", "metrics": {}}},
        "failed_plans": [],
        "task": {"name": task.stem, "path": str(task), "source": task.read_text()},
    }
    return planner(state, _Runtime())["plan"]


def _ranking(plan):
    line = next(t for t in plan["trace"] if t.startswith("ranking: "))
    return [part.split(" (")[0].split(". ", 1)[1] for part in line.removeprefix("ranking: ").split("; ")]


def test_priors_change_the_ranking(store):
    before = _plan()
    first, second = _ranking(before)[:2]
    assert before["skill_id"] == first == "online-softmax"
    # the two share the policy's first preferred group, so only similarity and priors separate them
    from kernelskill.skills_kb.policy import decide

    group = decide(SOFTMAX, {}).prefer[0]
    assert first in group and second in group
    for i in range(4):  # the runner-up won on four earlier GPU-timed tasks
        record_round(store.parent / f"task-{i}", _state(skill=second), _review(runtime_ms=1.0), improved=True)
    after = _plan()
    assert after["skill_id"] == second
    assert "prior 4/4 wins" in after["reason"]
    assert _ranking(after)[1] == first


def test_interpreter_outcomes_do_not_change_the_ranking(store):
    first, second = _ranking(_plan())[:2]
    cpu = _review(kind="interpreter")
    for i in range(6):
        record_round(store.parent / f"task-{i}", _state(skill=second, before=cpu), cpu, improved=True)
    assert load_priors(store)[second].uninformative == 6
    assert _plan()["skill_id"] == first


def test_losses_push_a_skill_down(store):
    first, second = _ranking(_plan())[:2]
    for i in range(4):
        record_round(store.parent / f"task-{i}", _state(skill=first), _review(runtime_ms=3.0), improved=False)
    assert _plan()["skill_id"] == second


def test_a_run_records_its_rounds(tmp_path, task_path, candidate, monkeypatch):
    """The reviewer appends every finished round to <runs root>/skill_outcomes.jsonl (here: CPU, uninformative)."""
    from kernelskill.graph.context import Context
    from kernelskill.runs import execute, new_run

    from scripts_util import fenced, write_script

    monkeypatch.delenv("KERNELSKILL_SKILL_OUTCOMES", raising=False)
    rules = [
        {"role": "generator", "reply": fenced(candidate("good"))},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    context = Context(scripted=str(write_script(tmp_path / "script", rules)), device="cpu", max_rounds=1)
    run = new_run(task_path, context, root=tmp_path / "runs")
    state = execute(run)
    records = read_outcomes(tmp_path / "runs" / OUTCOMES_FILE)
    assert len(records) == 1
    rec = records[0]
    assert rec["skill_id"] == state["trajectory"][1]["skill_id"] and rec["run"] == run.thread_id
    assert rec["task"] == state["task"]["name"] and rec["round"] == 1
    assert rec["success"] and not rec["improved"] and rec["timing_kind"] == "interpreter" and not rec["informative"]
    assert rec["bottleneck"] == state["decision"]["bottleneck"]
