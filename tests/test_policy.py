"""The decision policy: deterministic classification with a trace, and the planner's guard."""

import pytest
from kernelskill.skills_kb.library import default_library
from kernelskill.skills_kb.policy import decide, load_policy

POINTWISE = {
    "num_kernels": 1,
    "is_pointwise": True,
    "uses_dot": False,
    "has_reduction": False,
    "torch_ops_in_forward": 0,
}
REDUCTION = {**POINTWISE, "is_pointwise": False, "has_reduction": True, "uses_transcendentals": True}
GEMM = {**POINTWISE, "is_pointwise": False, "uses_dot": True, "has_loops": True}


@pytest.mark.parametrize(
    "features, metrics, bottleneck, rule",
    [
        ({**POINTWISE, "torch_ops_in_forward": 2}, {}, "code_structure", "torch-ops-in-forward"),
        (GEMM, {"spill_bytes": 128}, "register_pressure", "spills"),
        (POINTWISE, {"launch_count": 12}, "launch_overhead", "many-launches"),
        (GEMM, {"sol_pct": 35}, "gemm_tiling", "gemm-far-from-sol"),
        (POINTWISE, {"dram_throughput_pct": 87}, "memory_bandwidth", "dram-saturated"),
        (POINTWISE, {"bandwidth_pct": 20}, "memory_latency", "low-bandwidth-memory-bound"),
        (GEMM, {"sol_pct": 80, "sm_throughput_pct": 75}, "compute", "compute-saturated"),
        (GEMM, {}, "gemm_tiling", "gemm-structure"),
        (POINTWISE, {}, "memory_bandwidth", "pointwise-structure"),
        (REDUCTION, {}, "memory_bandwidth", "reduction-structure"),
    ],
)
def test_classification(features, metrics, bottleneck, rule):
    d = decide(features, metrics)
    assert (d.bottleneck, d.rule) == (bottleneck, rule)
    assert d.trace[0].startswith(f"{bottleneck}: rule {rule} fired")
    assert d.allowed, "every class must leave at least one skill"


def test_trace_names_numbers():
    d = decide(POINTWISE, {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 87, "sol_pct": 50})
    assert "metrics.dram_throughput_pct >= 60 (actual 87)" in d.trace[0]
    assert any("medium_headroom" in t for t in d.trace)


def test_forbidden_never_allowed():
    d = decide(POINTWISE, {})
    for skill in load_policy()["table"]["memory_bandwidth"]["forbid"]:
        assert skill not in d.allowed


def test_policy_ids_exist():
    cards = default_library().cards
    for cls, row in load_policy()["table"].items():
        for sid in row.get("prefer", []) + row.get("forbid", []):
            assert sid in cards, f"policy table {cls} names unknown skill {sid}"


class _Runtime:
    def __init__(self):
        from kernelskill.graph.context import Context

        self.context = Context()


def _planner_state(failed):
    return {
        "features": REDUCTION,
        "best": {"candidate": {"id": "r0"}, "review": {"status": "correct", "metrics": {}}},
        "failed_plans": failed,
    }


def test_planner_never_repeats_a_failed_plan():
    from kernelskill.nodes.planner import planner

    first = planner(_planner_state([]), _Runtime())["plan"]
    second = planner(_planner_state([first["skill_id"]]), _Runtime())["plan"]
    assert second["skill_id"] != first["skill_id"]
    assert any("already failed" in t for t in second["trace"])


def test_planner_stops_when_everything_failed():
    from kernelskill.nodes.planner import planner

    allowed = decide(REDUCTION, {}).allowed
    out = planner(_planner_state(allowed), _Runtime())
    assert out["plan"] is None and "no applicable skill left" in out["stop_reason"]
