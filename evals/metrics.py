"""Eval metrics: one row per task from its run directory, and the aggregates over rows.

Definitions (every rate is over the finished tasks of the group; a finished task is one that
produced a report, timed out, or failed with an error):

- **success**: the best candidate is correct *and* its main work runs in its own kernels
  (``review["custom_kernel"]``, default True, and no ``torch_main_work`` / ``library_main_work``
  label). A correct candidate whose main work is done by PyTorch or a library counts as
  ``correct_not_custom``, never as a success.
- **correctness rate**: any correct candidate (successes and ``correct_not_custom``).
- **fast_p** (KernelBench): fraction of tasks that are a success with a GPU-timed speedup vs eager
  greater than ``p``. Speedups come only from CUDA-event timings (``timing_kind == "cuda_events"``);
  Triton-interpreter timings are never speedups. With no GPU timing at all, fast_p is None.
- **mean speedups** vs eager and vs torch.compile: arithmetic and geometric means over the GPU-timed
  successes (vs torch.compile: those where it was measured).
- **speed-of-light**: median of ``review["metrics"]["sol_pct"]`` over the GPU-timed successes.
- **speedup after round r**: per task, the speedup of the best candidate after round r (the last
  GPU-timed trajectory entry marked ``improved`` at or before r, carried forward once the task has
  stopped); averaged over the successful tasks that have a GPU-timed best by round r.
- **speedup per round** (the efficiency figure of memory-ablation studies): per task, the final
  speedup vs eager divided by the rounds the task used (its trajectory entries, the seed round
  included, so at least 1); arithmetic and geometric mean over the same tasks as the mean speedups.
- **host-bound**: a GPU-timed task whose candidate, eager or torch.compile timing has the host's median
  time to queue one call at :data:`HOST_BOUND` or more of the timed one (``host_ms``, recorded by
  ``runner.timing.time_adaptive``). Its timings measure the CPU as much as the GPU and move with the
  machine's load (on a GPU shared by eval workers, the other workers' compiles); the speedup means are
  also given over the other timed tasks (``*_gpu_bound``).
- **tokens** and **cost**: summed over the tasks' reports; cost needs a price per 1M input and
  output tokens, otherwise it is None ("unknown").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernelskill.report import cost_usd as run_cost_usd
from kernelskill.report import versions_text
from kernelskill.runner.result import NOT_CUSTOM_LABELS, unusable_text

from .suite import REPORT, TASK_RECORD, TaskSpec, log_tail, read_json

GPU_TIMING = "cuda_events"
FAST_P = (0.0, 1.0, 2.0)
STATUSES = ("success", "correct_not_custom", "failed", "error", "timeout", "pending")
HOST_BOUND = 0.8  # host_ms / median_ms at or above which a timing is host-bound
NO_GPU_NOTE = "no GPU timings in this run: speedup metrics are not reported (interpreter timings are never speedups)"


def is_custom(review: dict[str, Any]) -> bool:
    """True when the candidate's main work runs in its own kernels."""
    labels = set(review.get("labels") or [])
    return bool(review.get("custom_kernel", True)) and not labels & NOT_CUSTOM_LABELS


def gpu_value(review: dict[str, Any], key: str) -> float | None:
    """``review[key]`` when the review's timings are GPU timings and the value is a positive number."""
    if review.get("timing_kind") != GPU_TIMING:
        return None
    value = review.get(key)
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def host_bound(review: dict[str, Any]) -> bool | None:
    """True when a timing of the review (candidate, eager, torch.compile) is host-bound; None without GPU timings."""
    if review.get("timing_kind") != GPU_TIMING:
        return None
    timing = review.get("timing") or {}
    fractions = [
        t["host_ms"] / t["median_ms"]
        for t in (timing.get(k) for k in ("candidate", "eager", "compile"))
        if isinstance(t, dict) and t.get("host_ms") and t.get("median_ms")
    ]
    return any(f >= HOST_BOUND for f in fractions)


def round_curve(trajectory: list[dict[str, Any]]) -> list[float | None]:
    """Best-so-far GPU speedup vs eager after each round 0..last (None until a GPU-timed best exists)."""
    if not trajectory:
        return []
    last = max(int(e.get("round", 0)) for e in trajectory)
    best: float | None = None
    curve: list[float | None] = []
    for r in range(last + 1):
        for e in trajectory:
            if int(e.get("round", 0)) == r and e.get("improved"):
                speedup = gpu_value(e, "speedup_vs_eager")
                if speedup is not None:
                    best = speedup
        curve.append(best)
    return curve


def task_row(spec: TaskSpec, run_dir: Path) -> dict[str, Any]:
    """One task's row of the summary, from its run directory (report.json and eval_task.json)."""
    record = read_json(run_dir / TASK_RECORD)
    row: dict[str, Any] = {
        "key": spec.key,
        "task": spec.name,
        "level": spec.level,
        "path": str(spec.path),
        "status": "pending",
        "correct": False,
        "custom_kernel": None,
        "labels": [],
        "timing_kind": None,
        "host_bound": None,
        "runtime_ms": None,
        "eager_ms": None,
        "speedup_vs_eager": None,
        "speedup_vs_compile": None,
        "speedup_vs_compile_tf32": None,
        "speedup_per_round": None,
        "sol_pct": None,
        "rounds": 0,
        "curve": [],
        "stop_reason": None,
        "reason": None,
        "gpu": None,
        "software": {},
        "input_tokens": 0,
        "output_tokens": 0,
        "wall_s": record.get("wall_s"),
        "timeout_s": record.get("timeout_s"),
        "attempts": record.get("attempts", 0),
        "repaired": False,
    }
    report = read_json(run_dir / REPORT)
    if report and report.get("task_error"):  # the reference itself is unusable: no candidate was judged
        row.update(status="error", reason=unusable_text(report["task_error"]), stop_reason=report.get("stop_reason"))
    elif report:
        review = report.get("best_review") or {}
        correct = bool(review.get("correct"))
        status = "failed" if not correct else ("success" if is_custom(review) else "correct_not_custom")
        total = (report.get("tokens") or {}).get("total") or {}
        trajectory = report.get("trajectory") or []
        metrics = review.get("metrics") or {}
        speedup = gpu_value(review, "speedup_vs_eager")
        row.update(
            status=status,
            correct=correct,
            custom_kernel=is_custom(review) if correct else None,
            labels=list(review.get("labels") or []),
            timing_kind=review.get("timing_kind"),
            host_bound=host_bound(review),
            runtime_ms=review.get("runtime_ms"),
            eager_ms=review.get("eager_ms"),
            speedup_vs_eager=speedup,
            speedup_vs_compile=gpu_value(review, "speedup_vs_compile"),
            speedup_vs_compile_tf32=gpu_value(review, "speedup_vs_compile_tf32"),
            sol_pct=metrics.get("sol_pct") if review.get("timing_kind") == GPU_TIMING else None,
            rounds=len(trajectory),
            speedup_per_round=speedup / len(trajectory) if speedup is not None and trajectory else None,
            curve=round_curve(trajectory),
            stop_reason=report.get("stop_reason"),
            input_tokens=int(total.get("input_tokens", 0)),
            output_tokens=int(total.get("output_tokens", 0)),
            repaired=any(e.get("repairs") and e.get("outcome") == "correct" for e in trajectory),
        )
        row["reason"] = no_compile_baseline(review)
        if review.get("timing_kind") == GPU_TIMING:
            row.update(gpu=gpu_name(review.get("device") or ""), software=dict(review.get("software") or {}))
    elif record.get("status") in ("timeout", "error", "exited"):
        row["status"] = "timeout" if record["status"] == "timeout" else "error"
        row["reason"] = record.get("reason") or log_tail(run_dir / "eval.log")
    return row


def gpu_name(device: str) -> str:
    """The GPU of a review's device label (``"cuda:0 (NVIDIA H200)"`` -> ``"NVIDIA H200"``)."""
    head, _, rest = device.partition(" (")
    return rest[:-1] if rest.endswith(")") else head


def platforms(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs and versions that timed ``rows`` (GPU-timed rows only), each with its task count, most first."""
    counts: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if r.get("gpu"):
            sw = r.get("software") or {}
            key = (r["gpu"], sw.get("torch", ""), sw.get("triton", ""))
            counts[key] = counts.get(key, 0) + 1
    return [
        {"gpu": gpu, "torch": torch_v, "triton": triton_v, "tasks": n}
        for (gpu, torch_v, triton_v), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def platforms_line(found: list[dict[str, Any]]) -> str:
    """``platforms`` in words: "NVIDIA H200, torch 2.11.0, Triton 3.6.0 (31 tasks); ..."; "none" without one."""
    parts = [
        f"{p['gpu']}, {versions_text(p) or 'versions not recorded'} ({p['tasks']} task{'s' * (p['tasks'] != 1)})"
        for p in found
    ]
    return "; ".join(parts) or "none"


def no_compile_baseline(review: dict[str, Any]) -> str | None:
    """Why a GPU-timed review has no speedup vs torch.compile; None where it has one.

    The reference's torch.compile failed (its error), or no record of why (reports written before the
    error was kept).
    """
    timing = review.get("timing") or {}
    if review.get("timing_kind") != GPU_TIMING or review.get("speedup_vs_compile") is not None:
        return None
    error = timing.get("compile_error")
    return f"no torch.compile baseline: {error}" if error else "no torch.compile baseline (its error was not recorded)"


def means(values: Iterable[float]) -> dict[str, Any]:
    """Arithmetic and geometric mean of positive values (None when there are none), and their count."""
    v = [x for x in values if x > 0]
    if not v:
        return {"n": 0, "arith_mean": None, "geo_mean": None}
    return {"n": len(v), "arith_mean": sum(v) / len(v), "geo_mean": math.exp(sum(math.log(x) for x in v) / len(v))}


def cost_usd(input_tokens: int, output_tokens: int, prices: dict[str, float | None]) -> float | None:
    """Estimated cost from the eval's prices per 1M tokens; None (unknown) when no price is given."""
    return run_cost_usd(input_tokens, output_tokens, prices.get("in"), prices.get("out"))


def per_round(rows: list[dict[str, Any]], kernels: str = "custom") -> list[dict[str, Any]]:
    """Mean best-so-far speedup after each round, over the scored tasks with a GPU-timed best by then.

    Scored as in :func:`summarize`: the custom-kernel successes (``kernels = custom``), or every correct
    task (``any``).
    """
    scored = [r for r in rows if r["status"] == "success" or (kernels == "any" and r["correct"])]
    curves = [r["curve"] for r in scored if r["curve"]]
    if not curves:
        return []
    out = []
    for rnd in range(max(len(c) for c in curves)):
        values = [v for c in curves if (v := c[min(rnd, len(c) - 1)]) is not None]
        out.append({"round": rnd, "tasks": len(values), **{k: v for k, v in means(values).items() if k != "n"}})
    return out if any(p["tasks"] for p in out) else []


def summarize(
    rows: list[dict[str, Any]], prices: dict[str, float | None] | None = None, kernels: str = "custom"
) -> dict[str, Any]:
    """Aggregate metrics over ``rows`` (the module docstring defines each).

    ``kernels`` is the kernel-origin policy the speedups are scored under: ``custom``, over the
    custom-kernel successes; ``any``, over every correct task (library or PyTorch main work included).
    """
    prices = prices or {}
    done = [r for r in rows if r["status"] != "pending"]
    n = len(done)
    count = {s: sum(1 for r in done if r["status"] == s) for s in STATUSES}
    successes = [r for r in done if r["status"] == "success"]
    scored = successes if kernels == "custom" else [r for r in done if r["correct"]]
    timed = [r for r in scored if r["speedup_vs_eager"] is not None]
    interpreter_only = sum(1 for r in done if r["correct"] and r["timing_kind"] == "interpreter")
    tokens_in = sum(r["input_tokens"] for r in done)
    tokens_out = sum(r["output_tokens"] for r in done)
    walls = [float(r["wall_s"]) for r in done if r.get("wall_s") is not None]
    sol = [float(r["sol_pct"]) for r in timed if r.get("sol_pct") is not None]

    def rate(k: int) -> float | None:
        return k / n if n else None

    def fast(p: float) -> float | None:
        return rate(sum(1 for r in timed if r["speedup_vs_eager"] > p)) if timed else None

    notes = []
    if not timed:
        notes.append(NO_GPU_NOTE)
    if interpreter_only:
        notes.append(f"{interpreter_only} correct task(s) have interpreter timings only: counted, never as speedups")
    if count["correct_not_custom"]:
        notes.append(
            f"{count['correct_not_custom']} correct task(s) do their main work in PyTorch or a library: "
            + (
                "not custom-kernel successes, not in the speedups"
                if kernels == "custom"
                else "in the speedups (kernels any)"
            )
        )
    tf32 = sum(1 for r in successes if "tf32_dot" in (r.get("labels") or []))
    if tf32:
        notes.append(
            f"{tf32} success(es) multiply fp32 tiles in TF32 (label tf32_dot): within the tolerance, "
            "not fp32-exact products; torch.compile's baseline keeps its matmuls fp32 (PyTorch's default), while its "
            "cuDNN convolutions run TF32 (also PyTorch's default)"
        )
    repaired = sum(1 for r in successes if r.get("repaired"))
    if repaired:
        notes.append(
            f"{repaired} success(es) had a round that passed only after a repair (a model's, or offline the "
            "compensated_dot rewrite: Kahan sum over a tl.dot loop's K blocks)"
        )
    gpu_bound = [r for r in timed if not r.get("host_bound")]
    if len(gpu_bound) < len(timed):
        notes.append(
            f"{len(timed) - len(gpu_bound)} timed task(s) are host-bound (the host queues one call in at least "
            f"{HOST_BOUND:.0%} of its timed time): their speedups move with the machine's CPU load; "
            f"the means over the other {len(gpu_bound)} are given apart"
        )
    found = platforms(timed)
    gpus = sorted({p["gpu"] for p in found})
    if len(gpus) > 1:
        notes.append(
            f"the speedups were timed on {len(gpus)} GPUs ({', '.join(gpus)}): each is against baselines timed in its "
            "own run on its own GPU, and the means mix them"
        )
    if count["timeout"] or count["error"]:
        notes.append("tokens and cost count only tasks that wrote a report (timeouts and errors are not included)")
    if cost_usd(tokens_in, tokens_out, prices) is None:
        notes.append("cost unknown: no price given (--price-in / --price-out, USD per 1M tokens)")
    return {
        "tasks": len(rows),
        "finished": n,
        **{s: count[s] for s in STATUSES if s != "pending"},
        "pending": len(rows) - n,
        "success_rate": rate(count["success"]),
        "correct": count["success"] + count["correct_not_custom"],
        "correctness_rate": rate(count["success"] + count["correct_not_custom"]),
        "gpu_timed": len(timed),
        **{f"fast_{p:g}": fast(p) for p in FAST_P},
        "speedup_vs_eager": means(r["speedup_vs_eager"] for r in timed),
        "speedup_vs_compile": means(r["speedup_vs_compile"] for r in timed if r["speedup_vs_compile"] is not None),
        "speedup_vs_compile_tf32": means(
            r["speedup_vs_compile_tf32"] for r in timed if r.get("speedup_vs_compile_tf32")
        ),
        "speedup_per_round": means(r["speedup_per_round"] for r in timed if r.get("speedup_per_round")),
        "host_bound": len(timed) - len(gpu_bound),
        "speedup_vs_eager_gpu_bound": means(r["speedup_vs_eager"] for r in gpu_bound),
        "speedup_vs_compile_gpu_bound": means(
            r["speedup_vs_compile"] for r in gpu_bound if r["speedup_vs_compile"] is not None
        ),
        "kernels": kernels,
        "platforms": found,
        "sol_pct_median": statistics.median(sol) if sol else None,
        "sol_pct_n": len(sol),
        "per_round": per_round(done, kernels),
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cost_usd": cost_usd(tokens_in, tokens_out, prices),
        "wall_s_total": sum(walls),
        "wall_s_mean": sum(walls) / len(walls) if walls else None,
        "wall_s_median": statistics.median(walls) if walls else None,
        "notes": notes,
    }
