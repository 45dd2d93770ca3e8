"""The same tasks under several precision / kernel-origin policies, side by side.

Each run's speedups are against baselines of its own policy (eager and ``torch.compile`` timed under its
precision), so this puts runs next to each other without comparing their speedups with one another, which
:mod:`.compare` refuses. Per task: each run's speedups and whether its answer's main work is its own
kernels or a library's. Per run: its aggregates over the tasks it scored, and the first run's over those
same tasks (the tasks a partial run finished are rarely a random sample).
"""

from __future__ import annotations

from typing import Any

from .metrics import summarize
from .report import fmt


def policy_label(summary: dict[str, Any]) -> str:
    """``fp32 + any``: a run's precision and kernel-origin policies."""
    p = summary.get("policy") or {}
    return f"{p.get('precision', 'unstated')} + {p.get('kernels', 'custom')}"


def _labels(summaries: list[dict[str, Any]]) -> list[str]:
    labels = [policy_label(s) for s in summaries]
    return [
        f"{lab} ({s['eval_dir']})" if labels.count(lab) > 1 else lab for lab, s in zip(labels, summaries, strict=True)
    ]


def _origin(row: dict[str, Any]) -> str:
    return "own kernels" if row.get("custom_kernel") else "library"


def task_cell(row: dict[str, Any] | None, policy: dict[str, str]) -> str:
    """One run's cell of a task: its speedups against its own baselines, and the answer's origin."""
    if row is None or row["status"] == "pending":
        return "-"
    if not row.get("correct"):
        return str(row["status"])
    if policy.get("kernels", "custom") == "custom" and not row.get("custom_kernel"):
        return "not scored (library)"
    if row.get("speedup_vs_eager") is None:
        return f"correct, not GPU-timed ({_origin(row)})"
    parts = [row["speedup_vs_eager"], row.get("speedup_vs_compile")]
    if policy.get("precision") == "fp32" and row.get("speedup_vs_compile_tf32") is not None:
        parts.append(row["speedup_vs_compile_tf32"])
    return " / ".join(fmt(p) for p in parts) + f" ({_origin(row)})"


def _speedups(m: dict[str, Any], key: str) -> str:
    block = m.get(key) or {}
    if not block.get("n"):
        return "-"
    return f"{fmt(block['arith_mean'])} / {fmt(block['geo_mean'])}"


def policies_table(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-task cells and per-run aggregates of ``summaries`` (from :func:`.report.build_summary`)."""
    if not summaries:
        raise ValueError("no eval directories given")
    labels = _labels(summaries)
    by_key = [{r["key"]: r for r in s["rows"]} for s in summaries]
    keys: list[str] = []
    for rows in by_key:
        keys += [k for k in rows if k not in keys]
    tasks = [
        [k] + [task_cell(rows.get(k), s["policy"]) for rows, s in zip(by_key, summaries, strict=True)] for k in keys
    ]
    first, first_rows = summaries[0], by_key[0]
    runs = []
    for label, s, rows in zip(labels, summaries, by_key, strict=True):
        m = s["overall"]
        scored = [
            k
            for k, r in rows.items()
            if r["status"] != "pending"
            and r.get("speedup_vs_eager") is not None
            and (r["status"] == "success" if s["policy"]["kernels"] == "custom" else r.get("correct"))
        ]
        same = summarize(
            [first_rows[k] for k in scored if k in first_rows], first.get("prices"), first["policy"]["kernels"]
        )
        runs.append(
            {
                "label": label,
                "eval_dir": s["eval_dir"],
                "finished": m["finished"],
                "tasks": m["tasks"],
                "own_kernels": sum(1 for r in rows.values() if r["status"] != "pending" and r.get("custom_kernel")),
                "scored": m["speedup_vs_eager"].get("n", 0) if m.get("speedup_vs_eager") else 0,
                "vs_eager": _speedups(m, "speedup_vs_eager"),
                "vs_compile": _speedups(m, "speedup_vs_compile"),
                "vs_compile_tf32": _speedups(m, "speedup_vs_compile_tf32")
                if s["policy"]["precision"] == "fp32"
                else "",
                "first_same_tasks": _speedups(same, "speedup_vs_compile") if s is not first else "",
                "first_same_n": (same.get("speedup_vs_compile") or {}).get("n", 0),
            }
        )
    return {"labels": labels, "tasks": tasks, "runs": runs}


def policies_markdown(summaries: list[dict[str, Any]]) -> str:
    """Markdown: the per-run aggregates, then one row per task with each run's cell."""
    t = policies_table(summaries)
    first = t["labels"][0]
    lines = [
        "# Eval runs under their policies",
        "",
        "Every speedup is against eager and `torch.compile` timed under the run's own precision policy; "
        "under `fp32`, also against `torch.compile` with TF32 matmuls allowed (context). Runs are not "
        "compared with each other except on the same tasks, each against its own baselines.",
        "",
        "| run | policy | tasks with a row | own-kernel answers | scored | vs eager, arith / geo "
        "| vs torch.compile, arith / geo | vs TF32 torch.compile, arith / geo "
        f"| {first} on the same tasks, vs torch.compile |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t["runs"]:
        same = f"{r['first_same_tasks']} (n={r['first_same_n']})" if r["first_same_tasks"] else "-"
        lines.append(
            f"| `{r['eval_dir']}` | {r['label']} | {r['finished']} of {r['tasks']} | {r['own_kernels']} "
            f"| {r['scored']} | {r['vs_eager']} | {r['vs_compile']} | {r['vs_compile_tf32'] or '-'} | {same} |"
        )
    head = " | ".join(
        f"{lab}: vs eager / vs torch.compile" + (" / vs TF32 torch.compile" if lab.startswith("fp32") else "")
        for lab in t["labels"]
    )
    lines += ["", f"| task | {head} |", "|---" * (len(t["labels"]) + 1) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in t["tasks"]]
    return "\n".join(lines) + "\n"
