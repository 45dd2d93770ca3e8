"""The memory switch (full | no-long-term | no-short-term | none): configuration, what each node reads under
each setting (scripted whole-graph runs whose recorded prompts are checked), the offline draw, and the
eval summary's speedup per round beside each run's memory setting in ``eval compare``."""

import json
import random

import pytest
from langgraph.runtime import Runtime
from test_evals import entry, fake_eval, report, review
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.graph.context import Context, load_context
from kernelskill.graph.memory import recall
from kernelskill.nodes.feature_extractor import extract_features
from kernelskill.runs import execute, new_run
from kernelskill.skills_kb.library import default_library

from conftest import FIXTURES
from scripts_util import fenced, write_script

runner = CliRunner()
TASK = FIXTURES / "tasks" / "scale_relu.py"


def _run(folder, rules, memory, **ctx):
    """A scripted run under ``memory``; its final state and every prompt it sent, in order."""
    script = write_script(folder / "script", rules)
    cassette = folder / "calls.jsonl"
    context = Context(scripted=str(script), device="cpu", memory=memory, record=str(cassette), **ctx)
    state = execute(new_run(TASK, context, root=folder / "runs"))
    calls = [json.loads(line) for line in cassette.read_text().splitlines()] if cassette.exists() else []
    return state, calls


def _prompt(call):
    return call["system"] + "\n" + call["user"]


def _skill_texts():
    """What the knowledge base would put in a prompt: every card's title and method steps."""
    cards = default_library().cards.values()
    return [c.title for c in cards] + [s.rstrip(".") for c in cards for s in c.steps]


# --- configuration ------------------------------------------------------------------------------


def test_memory_is_validated_and_set_by_flag_environment_and_file(tmp_path, monkeypatch):
    assert Context().memory == "full"
    flags = {m: (Context(memory=m).long_term_memory(), Context(memory=m).short_term_memory()) for m in
             ("full", "no-long-term", "no-short-term", "none")}  # fmt: skip
    assert flags == {
        "full": (True, True),
        "no-long-term": (False, True),
        "no-short-term": (True, False),
        "none": (False, False),
    }
    with pytest.raises(ValueError, match="memory must be one of full, no-long-term, no-short-term, none, not 'half'"):
        load_context(tmp_path / "none.toml", memory="half")
    out = runner.invoke(app, ["optimize", str(TASK), "--memory", "no_long_term", "--device", "cpu"])
    assert out.exit_code == 2 and "memory must be one of full, no-long-term, no-short-term, none" in out.output
    out = runner.invoke(app, ["eval", "--memory", "off", "--device", "cpu", "--out", str(tmp_path / "e")])
    assert out.exit_code == 2 and "memory must be one of" in out.output
    monkeypatch.setenv("KERNELSKILL_MEMORY", "no-short-term")
    assert load_context(tmp_path / "none.toml").memory == "no-short-term"
    toml = tmp_path / "kernelskill.toml"
    toml.write_text('memory = "none"\n')
    assert load_context(toml).memory == "none"
    toml.write_text('memory = "partial"\n')
    with pytest.raises(ValueError, match="memory must be one of"):
        load_context(toml)


def test_the_eval_passes_memory_to_every_task_and_keeps_one_setting_per_directory(tmp_path):
    from test_evals import FakeLauncher, make_task, quiet

    from kernelskill.evals.runner import context_flags, run_eval

    assert context_flags(Context(memory="no-long-term"))[-2:] == ["--memory", "no-long-term"]
    tasks = tmp_path / "tasks"
    make_task(tasks, "a")
    out = tmp_path / "eval"
    launch = FakeLauncher()
    run_eval([1], tasks, 0, "", out, Context(scripted="s.json", memory="none"), quiet(), launch=launch)
    assert launch.jobs[0].cmd[launch.jobs[0].cmd.index("--memory") + 1] == "none"
    with pytest.raises(ValueError, match="memory was none, now full"):
        run_eval([1], tasks, 0, "", out, Context(scripted="s.json"), quiet(), launch=FakeLauncher())


# --- short-term memory --------------------------------------------------------------------------

# a seed that fails, a first repair that fails again, a second that works; then two rounds that stay correct
# (interpreter timings never improve on the best, so each round's plan counts as tried without a gain)
SHORT_TERM_SCRIPT = [
    ("generator", None, "raises"),
    ("diagnoser", "repair 1 of", "raises"),
    ("diagnoser", None, "good"),
    ("optimizer", None, "good"),
]


@pytest.fixture(scope="module")
def short_term_runs(tmp_path_factory):
    def read(name):
        return (FIXTURES / "candidates" / f"{name}.py").read_text()

    rules = []
    for role, match, name in SHORT_TERM_SCRIPT:
        reply = ("Root cause: the forward raises.\n" if role == "diagnoser" else "") + fenced(read(name))
        rules.append({"role": role, "reply": reply} | ({"match": match} if match else {}))
    return {
        memory: _run(tmp_path_factory.mktemp(memory), rules, memory, max_rounds=2, max_repairs=2)
        for memory in ("full", "no-short-term")
    }


def test_without_short_term_memory_a_failed_plan_is_tried_again(short_term_runs):
    full, _ = short_term_runs["full"]
    forgetful, _ = short_term_runs["no-short-term"]
    for state in (full, forgetful):
        assert [a["status"] for a in state["attempts"]] == ["runtime_error"] * 2 + ["correct"] * 3
        assert not state["trajectory"][1]["improved"]  # round 1's plan did not improve on the best
    full_skills = [e["skill_id"] for e in full["trajectory"][1:]]
    forgetful_skills = [e["skill_id"] for e in forgetful["trajectory"][1:]]
    assert full_skills[0] != full_skills[1]  # the tried plan is excluded
    assert forgetful_skills[0] == forgetful_skills[1]  # the same plan again
    assert forgetful["failed_plans"] == forgetful_skills  # still recorded for the report, just not read
    assert not any("already tried on this task" in t for t in forgetful["plan"]["trace"])
    assert any("already tried on this task" in t for t in full["plan"]["trace"])


def test_without_short_term_memory_no_prompt_carries_the_trajectory_or_earlier_failures(short_term_runs):
    full, full_calls = short_term_runs["full"]
    forgetful, calls = short_term_runs["no-short-term"]
    assert [c["role"] for c in calls] == [c["role"] for c in full_calls] == [
        "generator", "diagnoser", "diagnoser", "optimizer", "optimizer",
    ]  # fmt: skip
    seed_id, first_repair = forgetful["candidates"][0]["id"], forgetful["candidates"][1]["id"]
    second_repair = calls[2]["user"]
    assert f"Failing candidate `{first_repair}`" in second_repair  # the current failure and its review, only
    assert seed_id not in second_repair and "- (none)" in second_repair
    for call in calls:
        text = _prompt(call)
        assert "round 0 [seed]" not in text and "round 1 [" not in text
        assert "plans that did not improve" not in text
    assert "- (nothing yet)" in calls[4]["user"]
    # the same run with short-term memory shows them (so the checks above can fail)
    assert f"{full['candidates'][0]['id']} (round 0): runtime_error" in full_calls[2]["user"]
    assert "- round 0 [seed]: correct" in full_calls[4]["user"] and "- round 1 [" in full_calls[4]["user"]
    assert "plans that did not improve (never repeat)" in full_calls[4]["user"]


def test_recall_hides_the_history_but_not_the_current_candidate():
    state = {
        "trajectory": [{"round": 0}],
        "attempts": [{"status": "runtime_error"}],
        "failed_plans": ["x"],
        "parents": [{"candidate": {"id": "p"}}],
        "best": {"candidate": {"id": "b"}},
        "review": {"status": "correct"},
        "current": {"id": "c"},
        "candidates": [{"id": "c"}],
        "round": 2,
    }
    assert recall(state, Context()) is state
    seen = recall(state, Context(memory="none"))
    assert set(seen) == {"best", "review", "current", "candidates", "round"}


def test_without_short_term_memory_the_round_starts_from_the_best(task_path):
    from kernelskill.graph.search import select_parent
    from kernelskill.nodes.feature_extractor import feature_extractor

    best = {"candidate": {"id": "best", "source": ""}, "review": {}}
    other = {"candidate": {"id": "other", "source": ""}, "review": {}}
    state = {"best": best, "parents": [best, other], "search": {"explore": 1.0, "seed": 0}, "round": 0}
    assert select_parent(state)[0]["candidate"]["id"] == "other"  # explore = 1: always another parent
    for memory, expect in (("full", "other"), ("no-short-term", "best")):
        out = feature_extractor(state, Runtime(context=Context(memory=memory)))
        assert out["parent"]["candidate"]["id"] == expect


# --- long-term memory ---------------------------------------------------------------------------

FORBIDDEN_PLAN = "skill_id: tensor-core-dot\nrationale: run the work on tensor cores\nexpected_effect: 2x"


class _Untouched:
    """Stands in for a long-term-memory reader that must not be called."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise AssertionError(f"{self.name} was called without long-term memory")


@pytest.fixture(scope="module")
def long_term_runs(tmp_path_factory):
    def read(name):
        return (FIXTURES / "candidates" / f"{name}.py").read_text()

    rules = [
        {"role": "generator", "reply": fenced(read("raises"))},
        {"role": "diagnoser", "reply": "Root cause: the forward raises.\n" + fenced(read("good"))},
        {"role": "planner", "reply": FORBIDDEN_PLAN},
        {"role": "optimizer", "reply": fenced(read("good"))},
    ]
    runs = {}
    for memory in ("full", "no-long-term"):
        folder = tmp_path_factory.mktemp(memory)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KERNELSKILL_SKILL_OUTCOMES", str(folder / "outcomes.jsonl"))
            if memory != "full":  # the knowledge base, the policy and the priors store are never reached
                import kernelskill.nodes.diagnoser as diagnoser
                import kernelskill.nodes.generator as generator
                import kernelskill.nodes.planner as planner
                import kernelskill.skills_kb.outcomes as outcomes

                readers = [(generator, "retrieve"), (diagnoser, "retrieve"), (planner, "open_index")]
                readers += [(planner, "decide"), (planner, "load_priors"), (outcomes, "record_round")]
                for module, name in readers:
                    mp.setattr(module, name, _Untouched(name))
            state, calls = _run(folder, rules, memory, max_rounds=1, max_repairs=1)
        runs[memory] = (state, calls, folder / "outcomes.jsonl")
    return runs


def test_without_long_term_memory_a_skill_the_policy_forbids_can_be_chosen(long_term_runs):
    full, _, _ = long_term_runs["full"]
    free, _, _ = long_term_runs["no-long-term"]
    assert full["trajectory"][1]["skill_id"] != "tensor-core-dot"
    assert "skill 'tensor-core-dot' is forbidden by the policy" in "\n".join(full["plan"]["trace"])
    plan = free["plan"]
    assert free["trajectory"][1]["skill_id"] == plan["skill_id"] == "tensor-core-dot"
    assert plan["source"] == "model" and plan["rationale"] == "run the work on tensor cores"
    assert free["decision"] == {} and "no policy decision" in plan["trace"][0]
    assert not any("forbidden" in t or "rejected" in t for t in plan["trace"])
    assert [a["status"] for a in free["attempts"]] == ["runtime_error", "correct", "correct"]


def test_without_long_term_memory_no_prompt_carries_skill_text_or_a_policy_decision(long_term_runs):
    _, full_calls, _ = long_term_runs["full"]
    _, calls, _ = long_term_runs["no-long-term"]
    assert [c["role"] for c in calls] == ["generator", "diagnoser", "planner", "optimizer"]
    texts = _skill_texts()
    for call in calls:
        prompt = _prompt(call)
        assert not [t for t in texts if t in prompt], call["role"]
        assert "bottleneck" not in prompt and "Allowed skills" not in prompt
    planner = calls[2]
    assert "Choose exactly one optimization method yourself" in planner["system"]
    assert "Why this skill: named by the planner's model (no skills knowledge base)" in calls[3]["user"]
    assert "Policy decision: (none)" in calls[3]["user"]
    # with long-term memory the same prompts carry cards and the policy (so the checks above can fail)
    full_text = "\n".join(_prompt(c) for c in full_calls)
    assert [t for t in texts if t in full_text] and "bottleneck" in full_text


def test_without_long_term_memory_the_priors_store_is_not_written(long_term_runs):
    _, _, full_store = long_term_runs["full"]
    _, _, free_store = long_term_runs["no-long-term"]
    assert [json.loads(line)["round"] for line in full_store.read_text().splitlines()] == [1]
    assert not free_store.exists()


def test_reports_state_the_memory_setting(long_term_runs):
    store = long_term_runs["no-long-term"][2]
    (run_dir,) = [p.parent for p in store.parent.glob("runs/*/report.json")]
    assert json.loads((run_dir / "report.json").read_text())["memory"] == "no-long-term"
    assert json.loads((run_dir / "run.json").read_text())["context"]["memory"] == "no-long-term"
    assert "- memory: no-long-term (ablation" in (run_dir / "report.md").read_text()


def test_a_model_planner_without_skills_is_asked_again_for_a_tried_method_and_stops_without_one(tmp_path):
    from kernelskill.nodes.model.planner_model import method_plan

    best = {"candidate": {"id": "r0", "source": "x = 1"}, "review": {"status": "correct"}}
    state = {"task": {"name": "t"}, "best": best, "features": {}, "round": 1}
    rules = [
        {"role": "planner", "match": "previous answer was rejected", "reply": "I would rather not say."},
        {"role": "planner", "reply": "skill_id: `Vectorized Loads`\nrationale: wider loads"},
    ]
    ctx = Context(scripted=str(write_script(tmp_path / "s", rules)), memory="no-long-term")
    plan, tokens, why = method_plan(state, ctx, set(), [])
    assert plan is not None and plan["skill_id"] == "vectorized-loads" and len(tokens) == 1
    plan, tokens, why = method_plan(state, ctx, {"vectorized-loads"}, [])
    assert plan is None and len(tokens) == 2
    assert why.endswith("the reply names no method")


# --- the offline engine without long-term memory ------------------------------------------------

SWEEPABLE = (
    (FIXTURES / "candidates" / "good.py")
    .read_text()
    .replace("n = x.numel()\n", "n = x.numel()\n        BLOCK = 256\n")
    .replace("triton.cdiv(n, 256)", "triton.cdiv(n, BLOCK)")
    .replace("BLOCK=256", "BLOCK=BLOCK")
)


def _offline_state(seed, rnd=0, tried=()):
    best = {"candidate": {"id": "r0-compiler-0", "source": SWEEPABLE}, "review": {"status": "correct", "metrics": {}}}
    trajectory = [entry(i + 1) | {"skill_id": t, "plan": {"transform": t}} for i, t in enumerate(tried)]
    return {
        "engine": "offline",
        "best": best,
        "features": extract_features(SWEEPABLE),
        "round": rnd,
        "search": {"seed": seed},
        "trajectory": trajectory,
        "failed_plans": list(tried),
    }


def test_offline_without_long_term_memory_draws_uniformly_among_the_applicable_transforms():
    from kernelskill.engine.transforms import TRANSFORMS
    from kernelskill.nodes.planner import planner

    named = {c.transform for c in default_library().cards.values() if c.transform}
    assert named == set(TRANSFORMS)  # the engine's list is the one the cards name
    full = planner(_offline_state(0), Runtime(context=Context()))["plan"]
    assert full["skill_id"] == "block-size-num-warps" and full["transform"] == "autotune_sweep"
    assert "cuda-graphs (applies_when failed" in "\n".join(full["trace"])  # the policy rules cuda_graph out

    def draw(seed, memory="no-long-term", **kw):
        return planner(_offline_state(seed, **kw), Runtime(context=Context(memory=memory)))

    picks = [draw(seed)["plan"]["transform"] for seed in range(40)]
    assert set(picks) == {"autotune_sweep", "cuda_graph"}  # cuda_graph: the cards' predicates would rule it out
    assert picks == [draw(seed)["plan"]["transform"] for seed in range(40)]  # seeded by the run
    expect = [random.Random(f"{seed}-1-transform").choice(["autotune_sweep", "cuda_graph"]) for seed in range(40)]
    assert picks == expect
    out = draw(3)
    assert out["decision"] == {} and out["plan"]["source"] == "draw"
    assert "uniform draw over the 2 applicable transform(s)" in out["plan"]["reason"]
    # a tried transform is left out with short-term memory, and drawn again without it
    assert {draw(s, tried=["cuda_graph"])["plan"]["transform"] for s in range(20)} == {"autotune_sweep"}
    assert {draw(s, "none", tried=["cuda_graph"])["plan"]["transform"] for s in range(20)} == {
        "autotune_sweep",
        "cuda_graph",
    }
    out = draw(0, tried=["cuda_graph", "autotune_sweep"])
    assert out["plan"] is None and out["stop_reason"].startswith("offline, no long-term memory: no transform left")


def test_offline_optimizer_applies_the_drawn_transform(tmp_path):
    from kernelskill.engine.transforms import GRAPH_MARK
    from kernelskill.nodes.optimizer import optimizer

    state = _offline_state(0) | {"task": {"name": "t", "path": str(TASK)}, "candidates": []}
    state["plan"] = {"skill_id": "cuda_graph", "title": "", "reason": "", "trace": [], "transform": "cuda_graph"}
    out = optimizer(state, Runtime(context=Context(memory="none", run_dir=str(tmp_path))))
    assert GRAPH_MARK in out["current"]["source"] and out["round"] == 1


# --- the eval summary: speedup per round, and the memory setting in reports and compare ----------


def _ablation(path, memory, speedups_and_rounds):
    tasks = {}
    for name, (speedup, rounds) in speedups_and_rounds.items():
        trajectory = [entry(r, speedup if r == rounds - 1 else None, improved=r == rounds - 1) for r in range(rounds)]
        tasks[name] = report(review(speedup=speedup), trajectory)
    return fake_eval(path, tasks, level=1, context={"device": "cuda", "max_rounds": 3, "memory": memory})


def test_speedup_per_round_in_the_summary_and_compare_across_memory_settings(tmp_path):
    from kernelskill.evals.compare import compare_markdown, compare_summaries
    from kernelskill.evals.report import build_summary, summary_markdown

    full = build_summary(_ablation(tmp_path / "full", "full", {"x": (3.0, 3), "y": (2.0, 1)}))
    ablated = build_summary(_ablation(tmp_path / "nlt", "no-long-term", {"x": (1.5, 3), "y": (1.0, 2)}))
    assert [r["speedup_per_round"] for r in full["rows"]] == [1.0, 2.0]
    m = full["overall"]["speedup_per_round"]
    assert m["n"] == 2 and m["arith_mean"] == pytest.approx(1.5) and m["geo_mean"] == pytest.approx(2**0.5)
    assert full["memory"] == "full" and ablated["memory"] == "no-long-term"
    text = summary_markdown(ablated)
    assert "- memory: no-long-term (ablation" in text
    assert "| speedup per round (final / rounds used), arith / geo mean | 0.500 / 0.500 (n=2) |" in text
    assert "Speedup per round (final speedup vs eager / rounds used, the seed round included; 2 task(s))" in text
    cmp = compare_summaries(full, ablated)  # different memory: compared, side by side
    assert cmp["settings"]["memory"] == {"a": "full", "b": "no-long-term"}
    assert cmp["deltas"]["speedup_per_round_arith"]["delta"] == pytest.approx(-1.0)
    out = compare_markdown(cmp)
    assert "| memory | full | no-long-term |" in out and "| speedup_per_round_arith | 1.500 | 0.500 | -1.000 |" in out
    assert "| L1-y | success | success | 2.000 | 1.000 | 0.500 | 1 | 2 |" in out
    res = runner.invoke(app, ["eval", "compare", str(tmp_path / "full"), str(tmp_path / "nlt")])
    assert res.exit_code == 0 and "| memory | full | no-long-term |" in res.output


def test_an_eval_without_a_memory_setting_reads_as_full(tmp_path):
    from kernelskill.evals.report import build_summary

    summary = build_summary(fake_eval(tmp_path, {"a": report(review(), [entry(0, 2.0)])}))
    assert summary["memory"] == "full" and summary["rows"][0]["speedup_per_round"] == 2.0


# --- long-term memory retires a transform that only lost in the same situation ---------------------


def test_offline_a_skill_that_only_lost_under_the_rule_is_not_spent_again(tmp_path, monkeypatch):
    from kernelskill.nodes.planner import planner
    from kernelskill.skills_kb.outcomes import record_round
    from kernelskill.skills_kb.policy import decide

    store = tmp_path / "skill_outcomes.jsonl"
    monkeypatch.setenv("KERNELSKILL_SKILL_OUTCOMES", str(store))
    state = _offline_state(0)
    rule = decide(state["features"], {}).rule
    first = planner(state, Runtime(context=Context()))["plan"]["skill_id"]

    def lose(i, rule_=rule, runtime_ms=2.0, improved=False):
        before = {"status": "correct", "runtime_ms": 1.0, "timing_kind": "cuda_events", "speedup_vs_eager": 2.0}
        after = before | {"runtime_ms": runtime_ms, "speedup_vs_eager": 2.0 / runtime_ms}
        round_state = {
            "task": {"name": f"t{i}", "path": "", "source": ""},
            "round": 1,
            "plan": {"skill_id": first, "title": "", "reason": "", "trace": []},
            "best": {"candidate": {"id": "r0"}, "review": before},
            "decision": {"bottleneck": "x", "rule": rule_},
        }
        assert record_round(tmp_path / f"run-{i}", round_state, after, improved=improved)

    def plan(kernels="any"):
        return planner(state, Runtime(context=Context(kernels=kernels)))

    for i in range(3):
        lose(i)
    assert plan()["plan"]["skill_id"] == first  # three losses: not yet evidence enough
    lose(3, rule_="another-rule")
    assert plan()["plan"]["skill_id"] == first  # a loss in another situation does not count
    lose(4)
    out = plan()
    assert out["plan"] is None or out["plan"]["skill_id"] != first
    trace = "\n".join(out["plan"]["trace"]) if out["plan"] else out["stop_reason"]
    assert f"{first} (0/4 wins, mean gain -50.0%)" in trace and f"rule {rule}" in trace
    assert plan("custom")["plan"]["skill_id"] == first  # a slower custom kernel may still be the answer
    no_lt = planner(state, Runtime(context=Context(memory="no-long-term")))
    assert no_lt["plan"] is not None and no_lt["plan"]["source"] == "draw"  # no priors read at all
    lose(5, runtime_ms=0.5, improved=True)  # one win under the rule: tried again
    assert plan()["plan"]["skill_id"] == first
