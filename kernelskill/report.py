"""The report of one run: best.py, report.json and report.md in the run directory."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kernelskill.graph.state import State

if TYPE_CHECKING:
    from kernelskill.runs import Run


def mode_label(ctx: Any) -> str:
    """How the model-backed roles were served."""
    if getattr(ctx, "replay", ""):
        return f"REPLAYED from cassette {ctx.replay} - no model was called"
    if ctx.scripted:
        return f"SCRIPTED model ({ctx.scripted}) - replies come from a file, not a live model"
    return f"model {ctx.model or ctx.role_model('generator')}" + (f" at {ctx.base_url}" if ctx.base_url else "")


def token_totals(state: State) -> dict[str, dict[str, int]]:
    """Input/output tokens per role and in total."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "input_tokens": 0, "output_tokens": 0})
    for t in state.get("tokens", []):
        for key in (t["role"], "total"):
            totals[key]["calls"] += 1
            totals[key]["input_tokens"] += t["input_tokens"]
            totals[key]["output_tokens"] += t["output_tokens"]
    return dict(totals)


def build_report(run: Run, state: State) -> dict[str, Any]:
    """The JSON report."""
    best = state.get("best")
    review = best["review"] if best else None
    return {
        "thread_id": run.thread_id,
        "task": state.get("task", {}).get("path", run.task_path),
        "mode": mode_label(run.context),
        "stop_reason": state.get("stop_reason", "(not finished)"),
        "best_candidate": best["candidate"]["id"] if best else None,
        "best_review": review,
        "trajectory": state.get("trajectory", []),
        "attempts": state.get("attempts", []),
        "tokens": token_totals(state),
        "candidates": len(state.get("candidates", [])),
    }


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown report."""
    r = report["best_review"]
    lines = [
        f"# kernelskill run `{report['thread_id']}`",
        "",
        f"- task: `{report['task']}`",
        f"- mode: {report['mode']}",
        f"- stop reason: {report['stop_reason']}",
        f"- candidates reviewed: {len(report['attempts'])}",
    ]
    if r:
        lines.append(f"- best: `{report['best_candidate']}` on {r.get('device', '?')}")
        if r.get("timing_kind") == "cuda_events":
            lines.append(
                f"- best runtime: {r['runtime_ms']:.4f} ms; eager {r.get('eager_ms') or 0:.4f} ms; "
                f"speedup vs eager {r.get('speedup_vs_eager') or 0:.3f}x"
            )
        else:
            lines.append("- timings are Triton CPU-interpreter timings: correctness only, never a speedup")
    else:
        lines.append("- no correct candidate")
    lines += [
        "",
        "## Trajectory",
        "",
        "| round | candidate | skill | outcome | repairs | runtime (ms) | timing | new best | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["trajectory"]:
        rt = f"{e['runtime_ms']:.4f}" if e["runtime_ms"] is not None else "-"
        note = (e["error_digest"] or e["plan_reason"]).replace("|", "/")[:120]
        lines.append(
            f"| {e['round']} | {e['candidate_id']} | {e['skill_id'] or 'seed'} | {e['outcome']} | "
            f"{e['repairs']} | {rt} | {e['timing_kind'] or '-'} | {'yes' if e['improved'] else 'no'} | {note} |"
        )
    lines += ["", "## Tokens", "", "| role | calls | input | output |", "|---|---|---|---|"]
    for role, t in sorted(report["tokens"].items()):
        lines.append(f"| {role} | {t['calls']} | {t['input_tokens']} | {t['output_tokens']} |")
    return "\n".join(lines) + "\n"


def write_report(run: Run, state: State) -> dict[str, Any]:
    """Write best.py, report.json and report.md; return the JSON report."""
    report = build_report(run, state)
    best = state.get("best")
    if best:
        (run.dir / "best.py").write_text(best["candidate"]["source"])
    (run.dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (run.dir / "report.md").write_text(render_markdown(report))
    return report
