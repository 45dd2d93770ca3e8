"""The decision policy: normalization, derived fields, classification with a trace, labelled scenarios."""

from pathlib import Path

import pytest
import yaml

from kernelskill.skills_kb.expr import ExprError, parse_expr
from kernelskill.skills_kb.library import default_library
from kernelskill.skills_kb.policy import (
    POLICY_FILE,
    PolicyError,
    decide,
    load_policy,
    normalize_metrics,
    parse_policy,
    policy_errors,
)

SCENARIOS = yaml.safe_load((Path(__file__).parent / "data" / "policy_scenarios.yaml").read_text())
TASKS = Path(__file__).resolve().parents[1] / "evals" / "tasks"

POINTWISE = {
    "num_kernels": 1,
    "num_launch_sites": 1,
    "is_pointwise": True,
    "uses_dot": False,
    "has_reduction": False,
    "torch_ops_in_forward": 0,
}
REDUCTION = {**POINTWISE, "is_pointwise": False, "has_reduction": True, "uses_transcendentals": True}
GEMM = {**POINTWISE, "is_pointwise": False, "uses_dot": True, "has_loops": True}
NO_DOT = {**GEMM, "uses_dot": False}
STALL = "stall_long_scoreboard_pct"


@pytest.fixture(autouse=True)
def _empty_outcome_store(tmp_path, monkeypatch):
    """Priors start neutral: every test reads its own, empty outcome store."""
    monkeypatch.setenv("KERNELSKILL_SKILL_OUTCOMES", str(tmp_path / "skill_outcomes.jsonl"))


@pytest.mark.parametrize(
    "features, metrics, bottleneck, rule",
    [
        ({**POINTWISE, "torch_ops_in_forward": 2}, {}, "code_structure", "torch-ops-in-forward"),
        (GEMM, {"spill_bytes": 128}, "register_pressure", "spills"),
        (POINTWISE, {"launch_count": 12}, "launch_overhead", "many-launches"),
        (NO_DOT, {"arithmetic_intensity": 500, "sol_pct": 3}, "gemm_tiling", "dense-math-off-tensor-cores"),
        (GEMM, {"sol_pct": 35}, "gemm_tiling", "gemm-far-from-sol"),
        (POINTWISE, {"dram_throughput_pct": 87}, "memory_bandwidth", "dram-saturated"),
        (GEMM, {"branch_efficiency_pct": 55, "dram_throughput_pct": 20}, "divergence", "divergent-branches"),
        (REDUCTION, {"achieved_occupancy_pct": 20, STALL: 45}, "memory_latency", "low-occupancy-stalls"),
        (REDUCTION, {"achieved_occupancy_pct": 70, STALL: 45}, "memory_latency", "waiting-on-memory"),
        (POINTWISE, {"bandwidth_pct": 20, "arithmetic_intensity": 0}, "memory_latency", "memory-bound-low-bandwidth"),
        (GEMM, {"sol_pct": 80, "sm_throughput_pct": 75}, "compute", "compute-saturated"),
        (GEMM, {}, "gemm_tiling", "gemm-structure"),
        (POINTWISE, {}, "memory_bandwidth", "pointwise-structure"),
        (REDUCTION, {}, "memory_bandwidth", "reduction-structure"),
    ],
)  # fmt: skip
def test_classification(features, metrics, bottleneck, rule):
    d = decide(features, metrics)
    assert (d.bottleneck, d.rule) == (bottleneck, rule)
    assert d.trace[0].startswith(f"{bottleneck}: rule {rule} fired")
    assert d.allowed, "every class must leave at least one skill"


def test_fallback_when_nothing_is_known():
    d = decide({}, {})
    assert (d.bottleneck, d.rule, d.tier) == ("code_structure", "fallback", "unknown")
    assert d.trace[0] == "code_structure: no rule fired; fallback class"


def test_trace_names_rule_and_numbers():
    d = decide(POINTWISE, {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 87, "sm_throughput_pct": 20})
    assert d.trace[0] == "memory_bandwidth: rule dram-saturated fired: metrics.dram_throughput_pct >= 60 (actual 87)"
    assert "headroom tier near_speed_of_light: derived.limiter_pct = 87" in d.trace[1]
    assert any(r.startswith("rule spills (register_pressure) did not fire") for r in d.rules_checked)


def test_derived_values_name_their_inputs():
    d = decide(GEMM, {"sol_pct": 35})
    assert "derived.limiter_pct < 60 (actual 35 from metrics.sol_pct=35)" in d.trace[0]
    assert d.derived["headroom_pct"] == 65 and d.tier == "medium_headroom"


def test_tier_follows_the_primary_limiter():
    ncu = decide(POINTWISE, {"dram_throughput_pct": 30, "sm_throughput_pct": 70, "sol_pct": 10})
    assert ncu.derived["limiter_pct"] == 70 and ncu.tier == "small_headroom"  # ncu wins over sol_pct
    timing = decide(POINTWISE, {"sol_pct": 10})
    assert timing.derived["limiter_pct"] == 10 and timing.tier == "large_headroom"
    assert decide(POINTWISE, {}).tier == "unknown"


def test_memory_bound_and_launch_estimates():
    policy = load_policy()
    assert decide(GEMM, {"arithmetic_intensity": 2}).derived["memory_bound"] is True
    assert decide(GEMM, {"arithmetic_intensity": 500}).derived["memory_bound"] is False
    assert decide(GEMM, {"dram_throughput_pct": 80, "sm_throughput_pct": 20}).derived["memory_bound"] is True
    assert decide(GEMM, {}).derived["memory_bound"] is None
    static = decide({**POINTWISE, "num_launch_sites": 2, "torch_ops_in_forward": 1}, {})
    assert static.derived["launches_per_forward"] == 3
    assert decide(POINTWISE, {"launch_count": 7}).derived["launches_per_forward"] == 7
    assert policy.constants["ridge_flops_per_byte"] > 0


def test_unit_normalization():
    metrics, notes = normalize_metrics(
        {
            "dram_throughput_ratio": 0.87,  # ratio -> %
            "achieved_occupancy": 0.25,  # ratio alias -> %
            "gpu__time_duration.sum": 1_500_000,  # ns -> ms
            "n_spills": 8,  # Triton: 4-byte words
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": "1,234.5",  # ncu CSV string
            "launch__registers_per_thread": 64,
            "registers_per_thread": 96,  # our own name wins over the alias
            "sol_ms": 0.2,
            "bandwidth_pct": "n/a",
        },
        load_policy(),
    )
    assert metrics["dram_throughput_pct"] == pytest.approx(87)
    assert metrics["achieved_occupancy_pct"] == pytest.approx(25)
    assert metrics["runtime_ms"] == pytest.approx(1.5)
    assert metrics["spill_bytes"] == 32
    assert metrics["sm_throughput_pct"] == pytest.approx(1234.5)
    assert metrics["registers_per_thread"] == 96
    assert "sol_ms" not in metrics and "bandwidth_pct" not in metrics
    text = "\n".join(notes)
    assert "dram_throughput_ratio -> dram_throughput_pct = 87" in text
    assert "ignored launch__registers_per_thread: registers_per_thread is given directly" in text
    assert "ignored sol_ms" in text and "ignored bandwidth_pct: not a number" in text


def test_rule_none_clause_silences_launch_overhead_for_long_runs():
    assert decide(POINTWISE, {"launch_count": 8, "runtime_ms": 0.05}).rule == "many-launches"
    long = decide(POINTWISE, {"launch_count": 8, "runtime_ms": 5.0})
    assert long.rule != "many-launches"
    assert any("many-launches" in r and "metrics.runtime_ms >= 1 (actual 5) holds" in r for r in long.rules_checked)


def test_a_host_bound_program_goes_to_cuda_graphs_first_however_long_it_runs():
    seed = {**GEMM, "conv_not_own_kernel": True, "num_launch_sites": 40}
    host_bound = {"launch_count": 60, "runtime_ms": 2.4, "host_pct": 97.0, "arithmetic_intensity": 40.0}
    d = decide(seed, host_bound)
    assert (d.rule, d.bottleneck) == ("host-bound", "launch_overhead") and d.allowed[0] == "cuda-graphs"
    gpu_bound = decide(seed, {**host_bound, "host_pct": 30.0})  # the GPU is busy: better kernels first
    assert d.rule != gpu_bound.rule == "conv-outside-own-kernel"
    assert gpu_bound.excluded.get("cuda-graphs", "").startswith("avoid_when") or "cuda-graphs" not in gpu_bound.allowed
    assert "cuda-graphs" in decide(POINTWISE, {"launch_count": 8, "runtime_ms": 0.05}).allowed  # no host time: short
    long = decide(POINTWISE, {"launch_count": 8, "runtime_ms": 5.0})
    assert "cuda-graphs" not in long.allowed  # no host time and a long run: the launches are hidden


def test_under_kernels_custom_a_library_answer_moves_into_our_kernel_before_its_launches_are_graphed():
    """A host-bound seed whose review labelled its main work cuDNN's: under ``kernels = any`` CUDA graphs first (the
    fastest correct answer counts); under ``custom`` a graphed library call is still no answer, so the convolution
    goes to our kernel first. The feature comes from the parent's review and the run's policy."""
    from kernelskill.engine.compiler import SEED_MARK
    from kernelskill.graph.context import Context
    from kernelskill.nodes.feature_extractor import feature_extractor

    head = f'"""{SEED_MARK} for t: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    seed = head + "def call(args):\n    buf0 = extern_kernels.convolution(x, w)\n"
    parent = {"candidate": {"id": "r0-compiler-0", "source": seed}, "review": {"labels": ["library_main_work"]}}
    host_bound = {"launch_count": 400, "runtime_ms": 2.9, "host_pct": 95.0, "arithmetic_intensity": 200.0}
    rules = {}
    for kernels in ("any", "custom"):
        runtime = type("Runtime", (), {"context": Context(kernels=kernels)})()
        features = feature_extractor({"best": parent, "round": 0}, runtime)["features"]
        assert features["own_kernels_needed"] is (kernels == "custom")
        d = decide(features, host_bound)
        rules[kernels] = (d.rule, d.allowed[0])
    assert rules == {"any": ("host-bound", "cuda-graphs"), "custom": ("conv-outside-own-kernel", "implicit-gemm-conv")}


def test_forbidden_never_allowed():
    d = decide(POINTWISE, {})
    for skill in load_policy().table["memory_bandwidth"].forbid:
        assert skill not in d.allowed
    data = _policy_data()
    data["table"]["memory_bandwidth"]["forbid"] = ["vectorized-loads"]  # preferred and forbidden: forbid wins
    d = decide(POINTWISE, {}, policy=parse_policy(data))
    assert "vectorized-loads" not in d.allowed
    assert d.excluded["vectorized-loads"] == "forbidden for memory_bandwidth by the decision table"
    assert "vectorized-loads: excluded, forbidden for memory_bandwidth by the decision table" in d.trace


def test_card_predicates_exclude_with_reason():
    d = decide(REDUCTION, {})  # one kernel, one launch: nothing to fuse
    assert "fuse-elementwise-chain" not in d.allowed
    assert d.excluded["fuse-elementwise-chain"] == ("applies_when failed: derived.launches_per_forward >= 2 (actual 1)")
    assert "online-softmax" in d.allowed
    plain_sum = decide({**REDUCTION, "uses_transcendentals": False}, {})
    assert "online-softmax" not in plain_sum.allowed  # no exp: not a softmax


def test_policy_names_only_existing_skills():
    assert policy_errors(load_policy(), default_library()) == []


def test_preferred_groups_come_first_in_allowed():
    d = decide(GEMM, {"sol_pct": 30})
    flat = [s for g in d.prefer for s in g]
    assert d.allowed[: len(flat)] == flat
    assert d.group_of(flat[0]) == 0 and d.group_of("no-such-skill") == len(d.prefer)


def _policy_data():
    return yaml.safe_load(POLICY_FILE.read_text())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p["rules"][0].update(bottleneck="slowness"), "rules[0] (torch-ops-in-forward): unknown bottleneck"),
        (lambda p: p["rules"][5].update(any=["metrics.colour > 1"]), "rules[5] (conv-kernel-spills): unknown metrics"),
        (lambda p: p["derived"].update(limiter_pct="__import__('os').system('true')"), "derived.limiter_pct"),
        (lambda p: p["derived"].update(headroom_pct="100 - metrics.nope"), "unknown field metrics.nope"),
        (lambda p: p["derived"].update(speed="1"), "derived.speed: not listed in skills_kb/schema.py DERIVED"),
        (lambda p: p["derived"].pop("memory_bound"), "no formula for memory_bound"),
        (lambda p: p["aliases"].update(foo="bar_pct"), "aliases.foo: 'bar_pct' is not a metric"),
        (lambda p: p["table"].update(slowness={}), "table: unknown bottleneck class 'slowness'"),
    ],
)  # fmt: skip
def test_bad_policy_is_named(mutate, message):
    data = _policy_data()
    mutate(data)
    with pytest.raises(PolicyError, match="policy.yaml: ") as err:
        parse_policy(data, str(POLICY_FILE))
    assert message in str(err.value)


def test_expressions_are_interpreted_not_evaluated():
    for bad in ("__import__('os')", "metrics.x.__class__", "(lambda: 1)()", "metrics['x']", "open('f')", "'text'"):
        with pytest.raises(ExprError):
            parse_expr(bad)
    expr = parse_expr("coalesce(max(metrics.a, metrics.b), metrics.c) / 2")
    assert expr.evaluate({"metrics": {"b": 8, "c": 100}}) == 4
    assert expr.evaluate({"metrics": {"c": 100}}) == 50
    assert expr.evaluate({"metrics": {}}) is None


def test_expressions_use_three_valued_logic():
    scope = {"metrics": {"x": 5}}
    assert parse_expr("metrics.x > 1 and metrics.y > 1").evaluate(scope) is None
    assert parse_expr("metrics.x > 9 and metrics.y > 1").evaluate(scope) is False
    assert parse_expr("metrics.x > 1 or metrics.y > 1").evaluate(scope) is True
    assert parse_expr("not metrics.y").evaluate(scope) is None
    assert parse_expr("metrics.x / 0").evaluate(scope) is None
    assert parse_expr("1 < metrics.x <= 5").evaluate(scope) is True


# --- the planner ------------------------------------------------------------------------------


class _Runtime:
    def __init__(self):
        from kernelskill.graph.context import Context

        self.context = Context()


def _state(features, metrics=None, task=None, failed=()):
    state = {
        "features": features,
        "best": {"candidate": {"id": "r0"}, "review": {"status": "correct", "metrics": metrics or {}}},
        "failed_plans": list(failed),
    }
    if task:
        path = TASKS / task
        state["task"] = {"name": path.stem, "path": str(path), "source": path.read_text()}
    return state


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["id"] for s in SCENARIOS])
def test_labelled_scenario(scenario):
    from kernelskill.nodes.planner import planner

    out = planner(_state(scenario["features"], scenario.get("metrics"), scenario.get("task")), _Runtime())
    expect = scenario["expect"]
    decision, plan = out["decision"], out["plan"]
    assert plan is not None, out.get("stop_reason")
    got = {
        "bottleneck": decision["bottleneck"],
        "rule": decision["rule"],
        "tier": decision["tier"],
        "top": plan["skill_id"],
    }
    assert {k: got[k] for k in expect} == expect, "\n".join(plan["trace"])


def test_scenarios_cover_every_style():
    styles = [s["style"] for s in SCENARIOS]
    assert len(SCENARIOS) >= 20
    assert {"ncu", "timing", "cpu"} <= set(styles) and min(styles.count(k) for k in ("ncu", "timing", "cpu")) >= 5
    assert all(("metrics" in s) == (s["style"] != "cpu") for s in SCENARIOS)


def test_plan_reason_and_ranking_trace():
    from kernelskill.nodes.planner import planner

    plan = planner(_state(REDUCTION, task="level1/24_softmax.py"), _Runtime())["plan"]
    assert plan["skill_id"] == "online-softmax"
    assert plan["reason"].startswith("bottleneck memory_bandwidth (rule reduction-structure); preferred group 1")
    assert "similarity" in plan["reason"] and "prior no GPU-timed tries" in plan["reason"]
    assert any(t.startswith("ranking: 1. online-softmax (preferred group 1") for t in plan["trace"])


def test_planner_never_repeats_a_failed_plan():
    from kernelskill.nodes.planner import planner

    first = planner(_state(REDUCTION), _Runtime())["plan"]
    second = planner(_state(REDUCTION, failed=[first["skill_id"]]), _Runtime())["plan"]
    assert second["skill_id"] != first["skill_id"]
    assert any("already tried on this task" in t for t in second["trace"])
    assert first["skill_id"] not in next(t for t in second["trace"] if t.startswith("ranking:"))


def test_an_untimed_correct_round_is_not_called_a_failure():
    from kernelskill.nodes.planner import planner

    first = planner(_state(REDUCTION), _Runtime())["plan"]
    state = _state(REDUCTION, failed=[first["skill_id"]])
    state["trajectory"] = [
        {
            "round": 1,
            "skill_id": first["skill_id"],
            "outcome": "correct",
            "timing_kind": "interpreter",
            "improved": False,
        }
    ]
    trace = planner(state, _Runtime())["plan"]["trace"]
    line = next(t for t in trace if t.startswith("already tried"))
    assert "interpreter timings cannot show a gain" in line and "failed" not in line


def test_planner_stops_when_everything_failed():
    from kernelskill.nodes.planner import planner

    allowed = decide(REDUCTION, {}).allowed
    out = planner(_state(REDUCTION, failed=allowed), _Runtime())
    assert out["plan"] is None and "no applicable skill left" in out["stop_reason"]
    assert out["decision"]["bottleneck"] == "memory_bandwidth"
