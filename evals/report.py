"""The eval summary: summary.json, summary.md and the plots, rebuilt from an eval directory alone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kernelskill.graph.context import ROLES, memory_line, policy_line
from kernelskill.runner.gpu_share import HOLD_LOG_NAME, hold_totals

from .metrics import platforms_line, summarize, task_row
from .suite import EVAL_META, read_meta, specs_from_meta, write_json

METRIC_DEFINITIONS = (
    "success = correct and the main work runs in the candidate's own kernels; "
    "correct (any) also counts candidates whose main work is done by PyTorch or a library; "
    "fast_p = fraction of finished tasks that are a success with a GPU-timed speedup vs eager > p; "
    "speedups use CUDA-event timings only, over GPU-timed successes; "
    "speedup per round = a task's final speedup vs eager divided by the rounds it used (the seed round included), "
    "averaged over the same tasks; "
    "speed-of-light = achieved share of the hardware roofline (median)."
)


class EvalDirError(ValueError):
    """A folder that is not an eval directory."""


def resolve_prices(meta: dict[str, Any], price_in: float | None, price_out: float | None) -> dict[str, float | None]:
    """Prices per 1M tokens: explicit values first, else those saved in eval.json, else None."""
    saved = meta.get("prices") or {}
    return {
        "in": price_in if price_in is not None else saved.get("in"),
        "out": price_out if price_out is not None else saved.get("out"),
    }


def other_limits(rows: list[dict[str, Any]], current: float | None) -> dict[str, int]:
    """The per-task limits other than ``current`` that tasks ran under (earlier launches): limit -> tasks."""
    if current is None:
        return {}
    limits = (float(r["timeout_s"]) for r in rows if r.get("timeout_s") is not None)
    return dict(Counter(f"{limit:g}" for limit in limits if limit != float(current)))


def limits_note(others: dict[str, int]) -> str:
    """`` (200 s for 19 tasks, run by an earlier launch)`` for :func:`other_limits`, or ""."""
    if not others:
        return ""
    parts = [f"{limit} s for {n} task{'s' if n != 1 else ''}" for limit, n in sorted(others.items())]
    return f" ({', '.join(parts)}, run by an earlier launch)"


def build_summary(out: Path, price_in: float | None = None, price_out: float | None = None) -> dict[str, Any]:
    """Summarize an eval directory (nothing is written).

    Raises:
        EvalDirError: when ``out`` has no eval.json.
    """
    out = Path(out)
    meta = read_meta(out)
    if not meta:
        raise EvalDirError(f"{out}: not an eval directory (no readable eval.json)")
    specs = specs_from_meta(meta)
    rows = [task_row(s, out / "runs" / s.key) for s in specs]
    prices = resolve_prices(meta, price_in, price_out)
    levels = sorted({s.level for s in specs}) or list(meta.get("levels") or [])
    policy = policy_of(meta.get("context") or {})
    overall = summarize(rows, prices, policy["kernels"])
    return {
        "eval_dir": str(out),
        "levels": levels,
        "tasks_dir": meta.get("tasks_dir"),
        "mode": _mode(meta.get("context") or {}),
        "policy": policy,
        "memory": memory_of(meta.get("context") or {}),
        "max_rounds": (meta.get("context") or {}).get("max_rounds"),
        "device": (meta.get("context") or {}).get("device"),
        "task_timeout_s": meta.get("task_timeout_s"),
        "other_limits": other_limits(rows, meta.get("task_timeout_s")),
        "workers": workers_line(
            [str(s.get("gpus", "")) for s in launches_of(meta)],
            [s.get("cluster") for s in launches_of(meta)],
            [bool(s.get("gpu_locks")) for s in launches_of(meta)],
        ),
        "prices": prices,
        "elapsed_s": sum(float(s.get("elapsed_s") or 0) for s in launches_of(meta)),
        "partial": overall["pending"] > 0,
        "tasks": overall["tasks"],
        "overall": overall,
        "per_level": {
            str(lv): summarize([r for r in rows if r["level"] == lv], prices, policy["kernels"]) for lv in levels
        },
        "rows": rows,
        "gpu_holds": hold_totals(out / "runs" / s.key / HOLD_LOG_NAME for s in specs),
    }


def policy_of(ctx: dict[str, Any]) -> dict[str, str]:
    """The comparison policies of a run's context.

    Runs made before the policies existed: "unstated" precision (TF32 products were allowed against
    fp32 baselines) and the ``custom`` kernel rule.
    """
    return {"precision": ctx.get("precision", "unstated"), "kernels": ctx.get("kernels", "custom")}


def memory_of(ctx: dict[str, Any]) -> str:
    """The memory setting of a run's context (``full`` for runs made before the setting existed)."""
    return str(ctx.get("memory", "full"))


def _mode(ctx: dict[str, Any]) -> str:
    has_model = any(ctx.get(k) for k in ("model", *(f"{r}_model" for r in ROLES), "scripted", "replay"))
    if ctx.get("engine") == "offline" or (not has_model and ctx.get("engine") != "llm"):
        return "OFFLINE engine (TorchInductor compiler seeds + deterministic skills, no model)"
    if ctx.get("scripted"):
        return f"SCRIPTED model ({ctx['scripted']})"
    return f"model {ctx.get('model') or '(per-role models)'}" + (
        f" at {ctx['base_url']}" if ctx.get("base_url") else ""
    )


def write_summary(summary: dict[str, Any]) -> list[Path]:
    """Write summary.json, summary.md and plots/*.png into the eval directory; the paths written."""
    from .plots import write_plots

    out = Path(summary["eval_dir"])
    plots = write_plots(summary, out / "plots")
    summary["plots"] = [str(p.relative_to(out)) for p in plots]
    write_json(out / "summary.json", summary)
    (out / "summary.md").write_text(summary_markdown(summary))
    return [out / "summary.json", out / "summary.md", *plots]


def rebuild(out: Path, price_in: float | None = None, price_out: float | None = None) -> dict[str, Any]:
    """Rebuild and write the summary and plots of an eval directory from its run directories.

    Prices given here are saved in eval.json, so later reports and comparisons use them too.
    """
    summary = build_summary(out, price_in, price_out)
    if price_in is not None or price_out is not None:
        meta = read_meta(out)
        write_json(Path(out) / EVAL_META, {**meta, "prices": summary["prices"]})
    write_summary(summary)
    return summary


def fmt(v: Any, digits: int = 3) -> str:
    """A table cell: ``-`` for None, rounded floats, plain text otherwise."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _count_rate(count: int, rate: float | None) -> str:
    return f"{count}" + (f" ({rate:.0%})" if rate is not None else "")


def _speedup(m: dict[str, Any], key: str) -> str:
    s = m[key]
    return "-" if not s["n"] else f"{s['arith_mean']:.3f} / {s['geo_mean']:.3f} (n={s['n']})"


def _geo(m: dict[str, Any], key: str) -> str:
    s = m.get(key) or {}
    return "-" if not s.get("n") else f"{s['geo_mean']:.3f} (n={s['n']})"


def _metric_lines(m: dict[str, Any]) -> list[tuple[str, str]]:
    cost = "unknown" if m["cost_usd"] is None else f"${m['cost_usd']:.{2 if m['cost_usd'] >= 1 else 4}f}"
    sol = "-" if m["sol_pct_median"] is None else f"{m['sol_pct_median']:.1f} (n={m['sol_pct_n']})"
    return [
        ("tasks finished", f"{m['finished']} of {m['tasks']}"),
        ("custom-kernel success", _count_rate(m["success"], m["success_rate"])),
        ("correct (any)", _count_rate(m["correct"], m["correctness_rate"])),
        ("correct, main work not custom", str(m["correct_not_custom"])),
        ("failed / errors / timeouts", f"{m['failed']} / {m['error']} / {m['timeout']}"),
        (f"GPU-timed, scored (kernels {m['kernels']})", str(m["gpu_timed"])),
        ("fast_0 / fast_1 / fast_2", " / ".join(fmt(m[f"fast_{p}"]) for p in (0, 1, 2))),
        ("speedup vs eager, arith / geo mean", _speedup(m, "speedup_vs_eager")),
        ("speedup vs torch.compile, arith / geo mean", _speedup(m, "speedup_vs_compile")),
        ("vs torch.compile with TF32 matmuls (context)", _speedup(m, "speedup_vs_compile_tf32")),
        ("timed tasks that are host-bound", str(m.get("host_bound", 0))),
        (
            "vs eager / vs torch.compile, not host-bound, geo mean",
            f"{_geo(m, 'speedup_vs_eager_gpu_bound')} / {_geo(m, 'speedup_vs_compile_gpu_bound')}",
        ),
        ("speedup per round (final / rounds used), arith / geo mean", _speedup(m, "speedup_per_round")),
        ("median % of speed-of-light", sol),
        ("tokens in / out", f"{m['input_tokens']} / {m['output_tokens']}"),
        ("estimated cost", cost),
        ("wall per task, mean / median (s)", f"{fmt(m['wall_s_mean'], 1)} / {fmt(m['wall_s_median'], 1)}"),
        ("wall, all tasks (s)", f"{m['wall_s_total']:.1f}"),
    ]


def launches_of(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The launches recorded in an eval's eval.json (``sessions`` in eval directories written before)."""
    return list(meta.get("launches") or meta.get("sessions") or [])


def workers_line(launches: list[str], clusters: list[str | None] | None = None, locks: list[bool] | None = None) -> str:
    """How the launches of an eval spread its tasks: workers per GPU, whether GPUs were shared, or the Ray cluster.

    ``locks``: per launch, whether it shared its GPUs' locks with other evals (``--gpu-locks``).
    """
    seen = []
    for i, gpus in enumerate(launches):
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        cluster = clusters[i] if clusters and i < len(clusters) else None
        if cluster:
            text = f"Ray tasks on cluster {cluster}"
        elif not ids:
            text = "one worker, default device"
        else:
            per = {g: ids.count(g) for g in dict.fromkeys(ids)}
            text = ", ".join(f"{n} on GPU {g}" for g, n in per.items())
            if locks and i < len(locks) and locks[i]:
                text += " (GPU locks shared with other evals: every timing held the GPU alone)"
            elif max(per.values()) > 1:
                text += " (a shared GPU's timings held it alone)"
        if text not in seen:
            seen.append(text)
    return "; then ".join(seen)


def _timing_cell(row: dict[str, Any], with_gpu: bool = False) -> str:
    """The timing kind, host-bound or not, and (``with_gpu``: an eval timed on several GPUs) the row's GPU."""
    kind = row["timing_kind"] or "-"
    kind = f"{kind}, host-bound" if row.get("host_bound") else kind
    return f"{kind}, {row['gpu']}" if with_gpu and row.get("gpu") else kind


def _holds_lines(holds: dict[str, dict[str, float]]) -> list[str]:
    """The GPU-sharing table (workers sharing a GPU log their holds), or nothing."""
    if not holds:
        return []
    lines = [
        "",
        "## GPU sharing",
        "",
        "The holds of the shared GPU, summed over the tasks' `gpu-holds.txt` (worker-seconds: shared holds "
        "of several workers overlap). `exclusive`: the GPU alone (timings of record, autotuning); `shared`: "
        "kernels beside other workers'; `released`: a compile on the host, the share given up.",
        "",
        "| kind | what | holds | held (s) | waited (s) |",
        "|---|---|---|---|---|",
    ]
    for key, t in holds.items():
        kind, _, what = key.partition(" ")
        lines.append(f"| {kind} | {what} | {int(t['holds'])} | {t['held_s']:.1f} | {t['waited_s']:.1f} |")
    return lines


def summary_markdown(summary: dict[str, Any]) -> str:
    """The Markdown report: metrics per level and overall, speedup per round, plots, per-task table."""
    levels = summary["levels"]
    overall = summary["overall"]
    title = ", ".join(f"level {lv}" for lv in levels) or "no tasks"
    lines = [
        f"# Eval: {title}",
        "",
        f"- eval dir: `{summary['eval_dir']}`"
        + (f"; tasks from `{summary['tasks_dir']}`" if summary["tasks_dir"] else ""),
        f"- mode: {summary['mode']}; rounds {fmt(summary['max_rounds'])}; device {fmt(summary['device'])}; "
        f"per-task limit {fmt(summary['task_timeout_s'], 0)} s{limits_note(summary.get('other_limits') or {})}; "
        f"eval wall time {summary['elapsed_s'] / 60:.1f} min "
        "(all launches)",
        f"- policies: {policy_line(summary['policy'])}",
        f"- memory: {memory_line(summary.get('memory', 'full'))}",
        f"- speedups timed on: {platforms_line(overall.get('platforms') or [])}",
    ]
    if summary.get("workers"):
        lines.append(f"- workers: {summary['workers']}")
    if summary["partial"]:
        lines.append(
            f"- **PARTIAL**: {overall['finished']} of {overall['tasks']} tasks finished; rates are over the "
            "finished tasks. Resume with the same command and `--out` this directory."
        )
    lines += ["", "## Metrics", ""]
    columns = [("all", overall)] + (
        [(f"level {lv}", summary["per_level"][str(lv)]) for lv in levels] if len(levels) > 1 else []
    )
    table = [_metric_lines(m) for _, m in columns]
    lines.append("| metric | " + " | ".join(name for name, _ in columns) + " |")
    lines.append("|---" * (len(columns) + 1) + "|")
    for i, (label, _) in enumerate(table[0]):
        lines.append(f"| {label} | " + " | ".join(t[i][1] for t in table) + " |")
    lines += ["", f"Definitions: {METRIC_DEFINITIONS}", ""]
    for note in overall["notes"]:
        lines.append(f"- note: {note}")
    lines += ["", "## Speedup vs eager after each round", ""]
    if overall["per_round"]:
        lines += ["| round | tasks with a GPU-timed best | arith mean | geo mean |", "|---|---|---|---|"]
        for p in overall["per_round"]:
            lines.append(f"| {p['round']} | {p['tasks']} | {fmt(p['arith_mean'])} | {fmt(p['geo_mean'])} |")
    else:
        lines.append("No GPU-timed successful task: no per-round speedups.")
    efficiency = overall.get("speedup_per_round") or {"n": 0}
    if efficiency["n"]:
        lines += [
            "",
            f"Speedup per round (final speedup vs eager / rounds used, the seed round included; {efficiency['n']} "
            f"task(s)): arith mean {efficiency['arith_mean']:.3f}, geo mean {efficiency['geo_mean']:.3f}.",
        ]
    lines += _holds_lines(summary.get("gpu_holds") or {})
    if summary.get("plots"):
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in summary["plots"]]
    lines += [
        "",
        "## Tasks",
        "",
        "| task | level | status | timing | runtime (ms) | vs eager | vs compile | SoL % | rounds | "
        "tokens in / out | wall (s) | stop reason / error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    several_gpus = len({r["gpu"] for r in summary["rows"] if r.get("gpu")}) > 1
    for r in summary["rows"]:
        why = "; ".join(dict.fromkeys(w for w in (r.get("reason"), r.get("stop_reason")) if w))
        why = why.replace("|", "/").replace("\n", " ")[:160]
        if r["labels"]:
            why = f"[{', '.join(r['labels'])}] {why}"
        lines.append(
            f"| {r['task']} | {r['level']} | {r['status']} | {_timing_cell(r, several_gpus)} | "
            f"{fmt(r['runtime_ms'], 4)} | {fmt(r['speedup_vs_eager'])} | {fmt(r['speedup_vs_compile'])} | "
            f"{fmt(r['sol_pct'], 1)} | {r['rounds']} | "
            f"{r['input_tokens']} / {r['output_tokens']} | {fmt(r['wall_s'], 1)} | {why} |"
        )
    return "\n".join(lines) + "\n"
