"""``kernelskill skills explain | stats | list | reindex`` through Typer's CliRunner."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.skills_kb.library import CARDS_DIR
from kernelskill.skills_kb.outcomes import append_outcome

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[1] / "skills_kb" / "examples"


def _explain(name, *extra):
    out = runner.invoke(
        app,
        ["skills", "explain", str(EXAMPLES / f"{name}.metrics.json"), str(EXAMPLES / f"{name}.features.json"), *extra],
    )
    assert out.exit_code == 0, out.output
    return out.output


def test_explain_ncu_memory_bound_pointwise():
    text = _explain("ncu_pointwise_memory_bound")
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed -> dram_throughput_pct = 87.3" in text
    assert "* memory_bandwidth: rule dram-saturated fired: metrics.dram_throughput_pct >= 60 (actual 87.3)" in text
    assert "Bottleneck: memory_bandwidth (rule dram-saturated)" in text
    assert "Tier: near_speed_of_light: derived.limiter_pct = 87.3" in text
    assert "rule spills (register_pressure) did not fire" in text
    assert "Forbidden for memory_bandwidth by the decision table: split-k, tensor-core-dot" in text
    assert "fuse-elementwise-chain: applies_when failed: derived.launches_per_forward >= 2 (actual 1)" in text
    assert "vectorized-loads: applies_when failed: derived.mem_util_pct < 80 (actual 87.3)" in text
    allowed = next(line for line in text.splitlines() if line.startswith("Allowed"))
    assert "block-size-num-warps" in allowed and "fuse-elementwise-chain" not in allowed


def test_explain_timing_only_gemm_far_from_sol():
    text = _explain("timing_gemm_far_from_sol")
    assert (
        "* gemm_tiling: rule gemm-far-from-sol fired: features.uses_dot == true (actual true); "
        "derived.limiter_pct < 60 (actual 21.7 from metrics.sol_pct=21.7)"
    ) in text
    assert "Tier: large_headroom" in text and "dense_math = true" in text
    assert "Preferred groups (tried first, group by group):\n  1. autotune-configs\n" in text
    assert "tensor-core-dot: applies_when failed: features.uses_dot == false (actual true)" in text


def test_explain_register_spills_with_ranking(tmp_path):
    store = tmp_path / "outcomes.jsonl"
    text = _explain("register_spills", "--rank", "--store", str(store))
    assert "achieved_occupancy_ratio -> achieved_occupancy_pct = 12" in text
    assert "* register_pressure: rule spills fired: metrics.spill_bytes > 0 (actual 1536)" in text
    assert "Forbidden for register_pressure by the decision table: persistent-kernel" in text
    ranking = text.split("Ranking (score = similarity + 0.5 x (win rate - 0.5)):\n", 1)[1].splitlines()
    assert ranking[0].startswith("  1. register-pressure-relief (preferred group 1, similarity")


def test_explain_metrics_only_and_review_result(tmp_path):
    review = tmp_path / "result.json"
    review.write_text(json.dumps({"status": "correct", "metrics": {"launch_count": 9, "runtime_ms": 0.03}}))
    out = runner.invoke(app, ["skills", "explain", str(review)])
    assert out.exit_code == 0, out.output
    assert "Bottleneck: launch_overhead (rule many-launches)" in out.output


def test_explain_features_from_candidate_source(tmp_path, candidate):
    metrics = tmp_path / "m.json"
    metrics.write_text("{}")
    source = tmp_path / "cand.py"
    source.write_text(candidate("good"))
    out = runner.invoke(app, ["skills", "explain", str(metrics), str(source)])
    assert out.exit_code == 0, out.output
    assert "Bottleneck: memory_bandwidth (rule pointwise-structure)" in out.output


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_explain_bad_input_exits_2(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = runner.invoke(app, ["skills", "explain", str(bad)])
    assert out.exit_code == 2 and "bad.json" in out.output
    assert runner.invoke(app, ["skills", "explain", str(tmp_path / "missing.json")]).exit_code == 2


def test_stats(tmp_path):
    store = tmp_path / "outcomes.jsonl"
    empty = runner.invoke(app, ["skills", "stats", "--store", str(store)])
    assert empty.exit_code == 0 and "0 round(s) recorded" in empty.output and "neutral" in empty.output
    base = {"task": "t", "informative": True, "success": True}
    append_outcome(store, {**base, "run": "a", "round": 1, "skill_id": "online-softmax", "improved": True, "gain": 0.4})
    append_outcome(store, {**base, "run": "b", "round": 1, "skill_id": "online-softmax", "improved": False, "gain": 0})
    append_outcome(store, {**base, "run": "c", "round": 1, "skill_id": "split-k", "success": False, "improved": False})
    append_outcome(store, {"run": "d", "round": 1, "skill_id": "split-k", "informative": False})
    out = runner.invoke(app, ["skills", "stats", "--store", str(store)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "4 round(s) recorded, 3 GPU-timed" in lines[0]
    softmax = next(line for line in lines if line.startswith("online-softmax"))
    assert softmax.split() == ["online-softmax", "2", "1", "0", "0.50", "+20.0%", "0"]
    split = next(line for line in lines if line.startswith("split-k"))
    assert split.split() == ["split-k", "1", "0", "1", "0.33", "-", "1"]
    assert lines.index(softmax) < lines.index(split)


def test_list_and_reindex_report_malformed_cards(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    good = sorted(CARDS_DIR.glob("*.yaml"))[:2]
    for p in good:
        (cards / p.name).write_text(p.read_text())
    data = yaml.safe_load(good[0].read_text())
    (cards / "bad-class.yaml").write_text(yaml.safe_dump({**data, "id": "bad-class", "bottlenecks": ["slowness"]}))
    (cards / "bad-pred.yaml").write_text(
        yaml.safe_dump({**data, "id": "bad-pred", "avoid_when": ["derived.colour > 1"]})
    )
    listed = runner.invoke(app, ["skills", "list", "--cards", str(cards)])
    assert listed.exit_code == 0, listed.output
    assert "invalid card: bad-class.yaml: field 'bottlenecks.0'" in listed.output
    assert "invalid card: bad-pred.yaml: field 'avoid_when'" in listed.output and "colour" in listed.output
    assert "2 cards, 2 invalid (skipped)" in listed.output
    assert all(p.stem in listed.output for p in good)
    indexed = runner.invoke(app, ["skills", "reindex", "--cards", str(cards), "--db", str(tmp_path / "db")])
    assert indexed.exit_code == 0, indexed.output
    assert "2 embedded, 0 removed, 2 cards" in indexed.output
    assert "skipped invalid card: bad-class.yaml: field 'bottlenecks.0'" in indexed.output
