"""The report of one run: best.py, report.json and report.md in the run directory."""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from kernelskill.graph.context import memory_line, policy_line
from kernelskill.graph.state import State

if TYPE_CHECKING:
    from kernelskill.runs import Run


def mode_label(ctx: Any, engine: str | None = None) -> str:
    """How the candidates were written: the offline engine, or how the model-backed roles were served."""
    if engine == "offline":
        return "OFFLINE engine - TorchInductor compiler seeds + deterministic skills, no model"
    if getattr(ctx, "replay", ""):
        return f"REPLAYED from cassette {ctx.replay} - no model was called"
    if ctx.scripted:
        return f"SCRIPTED model ({ctx.scripted}) - replies come from a file, not a live model"
    return f"model {ctx.model or ctx.role_model('generator')}" + (f" at {ctx.base_url}" if ctx.base_url else "")


def cost_usd(input_tokens: int, output_tokens: int, price_in: float | None, price_out: float | None) -> float | None:
    """Estimated cost in USD from prices per 1M tokens; None (unknown) when neither price is given."""
    if price_in is None and price_out is None:
        return None
    return input_tokens / 1e6 * (price_in or 0.0) + output_tokens / 1e6 * (price_out or 0.0)


def token_totals(state: State, price_in: float = 0.0, price_out: float = 0.0) -> dict[str, dict[str, Any]]:
    """Calls, input/output tokens and estimated cost (``cost_usd``, None = unknown) per role and in total."""
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "input_tokens": 0, "output_tokens": 0})
    for t in state.get("tokens", []):
        for key in (t["role"], "total"):
            totals[key]["calls"] += 1
            totals[key]["input_tokens"] += t["input_tokens"]
            totals[key]["output_tokens"] += t["output_tokens"]
    for row in totals.values():
        # the run configuration's 0 means "no price given"
        row["cost_usd"] = cost_usd(row["input_tokens"], row["output_tokens"], price_in or None, price_out or None)
    return dict(totals)


def versions_text(software: dict[str, str]) -> str:
    """A review's ``software`` in words: "torch 2.11.0+cu130, Triton 3.6.0"; "" when not recorded."""
    return ", ".join(
        f"{name} {software[key]}" for name, key in (("torch", "torch"), ("Triton", "triton")) if software.get(key)
    )


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def build_report(run: Run, state: State) -> dict[str, Any]:
    """The JSON report."""
    best = state.get("best")
    review = best["review"] if best else None
    return {
        "thread_id": run.thread_id,
        "task": state.get("task", {}).get("path", run.task_path),
        "mode": mode_label(run.context, state.get("engine")),
        "policy": run.context.policy(),
        "memory": run.context.memory,
        "stop_reason": state.get("stop_reason", "(not finished)"),
        "task_error": state.get("task_error") or None,
        "budget": state.get("budget", {}),
        "elapsed_s": state.get("elapsed_s"),
        "best_candidate": best["candidate"]["id"] if best else None,
        "best_review": review,
        "trajectory": state.get("trajectory", []),
        "attempts": state.get("attempts", []),
        "tokens": token_totals(
            state,
            float(getattr(run.context, "price_in_per_mtok", 0.0) or 0.0),
            float(getattr(run.context, "price_out_per_mtok", 0.0) or 0.0),
        ),
        "candidates": len(state.get("candidates", [])),
        "seed_notes": state.get("seed_notes", []),
    }


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown report."""
    r = report["best_review"]
    lines = [
        f"# kernelskill run `{report['thread_id']}`",
        "",
        f"- task: `{report['task']}`",
        f"- mode: {report['mode']}",
        f"- policies: {policy_line(report['policy'])}" if report.get("policy") else "- policies: unstated",
        f"- memory: {memory_line(report.get('memory', 'full'))}",
        f"- stop reason: {report['stop_reason']}",
        f"- candidates reviewed: {len(report['attempts'])}",
    ]
    lines += [f"- {note}" for note in report.get("seed_notes") or []]
    if r:
        versions = versions_text(r.get("software") or {})
        lines.append(
            f"- best: `{report['best_candidate']}` on {r.get('device', '?')}" + (f"; {versions}" if versions else "")
        )
        if r.get("timing_kind") == "cuda_events":
            compile_error = (r.get("timing") or {}).get("compile_error")
            lines.append(
                f"- best runtime: {r['runtime_ms']:.4f} ms; eager {r.get('eager_ms') or 0:.4f} ms; "
                f"speedup vs eager {r.get('speedup_vs_eager') or 0:.3f}x"
                + (f"; vs torch.compile {r['speedup_vs_compile']:.3f}x" if r.get("speedup_vs_compile") else "")
                + (f"; no torch.compile baseline ({compile_error})" if compile_error else "")
                + (
                    f"; vs torch.compile with TF32 matmuls {r['speedup_vs_compile_tf32']:.3f}x (context)"
                    if r.get("speedup_vs_compile_tf32")
                    else ""
                )
            )
        else:
            lines.append("- timings are Triton CPU-interpreter timings: correctness only, never a speedup")
        if r.get("labels"):
            lines.append(f"- labels of the best: {', '.join(r['labels'])}")
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
        note = e["error_digest"] or e["plan_reason"]
        if e.get("diagnosis"):
            note += f" (repair: {e['diagnosis']})"
        note = textwrap.shorten(note.replace("|", "/"), 160, placeholder=" ...")  # cut between words
        lines.append(
            f"| {e['round']} | {e['candidate_id']} | {e['skill_id'] or 'seed'} | {e['outcome']} | "
            f"{e['repairs']} | {rt} | {e['timing_kind'] or '-'} | {'yes' if e['improved'] else 'no'} | {note} |"
        )
    lines += ["", "## Tokens and cost", "", "| role | calls | input | output | cost |", "|---|---|---|---|---|"]
    for role, t in sorted(report["tokens"].items(), key=lambda kv: (kv[0] == "total", kv[0])):
        lines.append(
            f"| {role} | {t['calls']} | {t['input_tokens']} | {t['output_tokens']} | {_money(t.get('cost_usd'))} |"
        )
    if report["tokens"] and report["tokens"].get("total", {}).get("cost_usd") is None:
        lines.append("")
        lines.append("cost unknown: set price_in_per_mtok / price_out_per_mtok (USD per 1M tokens)")
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
