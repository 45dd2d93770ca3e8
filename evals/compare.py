"""Compare two eval runs: per-task status and speedup changes, and the deltas of the aggregates.

Two runs under different precision or kernel-origin policies are not compared (their speedups are
not comparable). Runs under different memory settings are: that is a memory ablation, and the
comparison shows each run's setting side by side with its success, speedups and speedup per round.
"""

from __future__ import annotations

from typing import Any

from .metrics import platforms_line
from .report import fmt

# Overall metrics compared, with how to read them out of a summary's "overall" block.
AGGREGATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("finished", ("finished",)),
    ("success_rate", ("success_rate",)),
    ("correctness_rate", ("correctness_rate",)),
    ("correct_not_custom", ("correct_not_custom",)),
    ("fast_0", ("fast_0",)),
    ("fast_1", ("fast_1",)),
    ("fast_2", ("fast_2",)),
    ("speedup_vs_eager_arith", ("speedup_vs_eager", "arith_mean")),
    ("speedup_vs_eager_geo", ("speedup_vs_eager", "geo_mean")),
    ("speedup_vs_compile_geo", ("speedup_vs_compile", "geo_mean")),
    ("speedup_vs_compile_gpu_bound_geo", ("speedup_vs_compile_gpu_bound", "geo_mean")),
    ("host_bound", ("host_bound",)),
    ("speedup_per_round_arith", ("speedup_per_round", "arith_mean")),
    ("speedup_per_round_geo", ("speedup_per_round", "geo_mean")),
    ("sol_pct_median", ("sol_pct_median",)),
    ("input_tokens", ("input_tokens",)),
    ("output_tokens", ("output_tokens",)),
    ("cost_usd", ("cost_usd",)),
    ("wall_s_mean", ("wall_s_mean",)),
)


# Run settings shown side by side (they may differ: e.g. a memory ablation), with the value of a summary without one.
SETTINGS = {"memory": "full", "mode": None, "max_rounds": None}


def _get(block: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = block
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def compare_summaries(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-task differences (matched by task key) and aggregate deltas (B minus A).

    Raises:
        ValueError: when the two runs were made under different precision / kernel-origin policies.
    """
    pa, pb = a.get("policy") or {}, b.get("policy") or {}
    if pa != pb:
        raise ValueError(
            f"the runs were made under different policies (A: {_policy(pa)}; B: {_policy(pb)}): their speedups "
            "are not comparable; re-run one with the other's --precision / --kernels"
        )
    rows_a = {r["key"]: r for r in a["rows"]}
    rows_b = {r["key"]: r for r in b["rows"]}
    tasks = []
    for key in list(rows_a) + [k for k in rows_b if k not in rows_a]:
        ra, rb = rows_a.get(key), rows_b.get(key)
        sa = ra["speedup_vs_eager"] if ra else None
        sb = rb["speedup_vs_eager"] if rb else None
        tasks.append(
            {
                "key": key,
                "status_a": ra["status"] if ra else None,
                "status_b": rb["status"] if rb else None,
                "speedup_a": sa,
                "speedup_b": sb,
                "ratio": sb / sa if sa and sb else None,
                "rounds_a": ra["rounds"] if ra else None,
                "rounds_b": rb["rounds"] if rb else None,
                "status_changed": (ra or {}).get("status") != (rb or {}).get("status"),
            }
        )
    deltas = {}
    for name, path in AGGREGATES:
        va, vb = _get(a["overall"], path), _get(b["overall"], path)
        numeric = isinstance(va, int | float) and isinstance(vb, int | float)
        deltas[name] = {"a": va, "b": vb, "delta": vb - va if numeric else None}
    settings = {key: {"a": a.get(key, default), "b": b.get(key, default)} for key, default in SETTINGS.items()}
    plat_a, plat_b = (s["overall"].get("platforms") or [] for s in (a, b))
    settings["speedups timed on"] = {"a": platforms_line(plat_a), "b": platforms_line(plat_b)}
    gpus_a, gpus_b = ({p["gpu"] for p in plat} for plat in (plat_a, plat_b))
    return {
        "a": a["eval_dir"],
        "b": b["eval_dir"],
        "policy": pa,
        "settings": settings,
        "tasks": tasks,
        "deltas": deltas,
        "same_gpus": gpus_a == gpus_b or not (gpus_a and gpus_b),
    }


def _policy(policy: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(policy.items())) or "unstated"


def compare_markdown(cmp: dict[str, Any]) -> str:
    """The comparison as Markdown tables."""
    lines = [
        f"# Eval comparison: A = `{cmp['a']}`, B = `{cmp['b']}`",
        "",
        f"Both under: {_policy(cmp.get('policy') or {})}.",
        "",
        *(
            []
            if cmp.get("same_gpus", True)
            else [
                "The runs were timed on different GPUs: each speedup is against baselines of its own run, so a "
                "change compares the GPUs as well as the runs.",
                "",
            ]
        ),
        "| setting | A | B |",
        "|---|---|---|",
        *(f"| {key} | {fmt(v['a'])} | {fmt(v['b'])} |" for key, v in (cmp.get("settings") or {}).items()),
        "",
        "| task | status A | status B | speedup A | speedup B | B / A | rounds A | rounds B |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in cmp["tasks"]:
        status_b = t["status_b"] or "-"
        if t["status_changed"]:
            status_b = f"**{status_b}**"
        lines.append(
            f"| {t['key']} | {t['status_a'] or '-'} | {status_b} | {fmt(t['speedup_a'])} | "
            f"{fmt(t['speedup_b'])} | {fmt(t['ratio'])} | {fmt(t['rounds_a'])} | {fmt(t['rounds_b'])} |"
        )
    changed = sum(1 for t in cmp["tasks"] if t["status_changed"])
    lines += [
        "",
        f"{changed} task(s) changed status (bold). Speedups are GPU-timed speedups vs eager; '-' = none measured.",
        "",
        "| metric | A | B | B - A |",
        "|---|---|---|---|",
    ]
    for name, d in cmp["deltas"].items():
        delta = (
            "-" if d["delta"] is None else (f"{d['delta']:+d}" if isinstance(d["delta"], int) else f"{d['delta']:+.3f}")
        )
        lines.append(f"| {name} | {fmt(d['a'])} | {fmt(d['b'])} | {delta} |")
    return "\n".join(lines) + "\n"
