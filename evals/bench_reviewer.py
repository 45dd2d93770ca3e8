"""Measure the reviewer on a GPU: baselines, throughput, timing spread, crash containment.

``python -m kernelskill.evals.bench_reviewer --out DIR [--per-level K]`` writes ``reviewer.json`` and
``reviewer.md``. Imports only the runner (torch + triton), so it runs on a bare GPU machine.

- baselines: eager and torch.compile medians (the reviewer's own adaptive CUDA-event protocol, L2
  flushed) for the first K tasks of each level, stored in the same cache the reviewer reads;
- throughput: hand-written level-1 solutions (tests/fixtures/solutions) fully reviewed one after
  another with baselines cached: candidates per GPU-minute, and where the time goes (phases);
- spread: one correct kernel reviewed 5 times in separate evaluations, median-to-median spread;
- containment: a candidate with an illegal memory access, then a correct one, in the same run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "evals" / "tasks"
SOLUTIONS = REPO / "tests" / "fixtures" / "solutions"
FIXTURES = REPO / "tests" / "fixtures"


def environment() -> dict[str, Any]:
    """GPU, driver and library versions."""
    import torch
    import triton

    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    )
    return {
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": smi.stdout.strip(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def measure_baseline(task_path: Path) -> dict[str, Any]:
    """Eager and torch.compile timings of one task (and store them in the reviewer's cache)."""
    import torch

    from kernelskill.runner import cache
    from kernelskill.runner.taskfile import load_task_module
    from kernelskill.runner.timing import time_adaptive

    task = load_task_module(task_path, name=f"bench_{task_path.stem}")
    torch.manual_seed(42)
    with torch.device("cuda"):
        model = task.Model(*task.get_init_inputs()).cuda().eval()
        torch.manual_seed(49)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    out: dict[str, Any] = {"task": f"{task_path.parent.name}/{task_path.stem}"}
    with torch.no_grad():
        eager = time_adaptive(lambda: model(*inputs))
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(model)
            compiled(*inputs)
            out["compile_s"] = time.perf_counter() - t0
            comp: dict[str, Any] | None = time_adaptive(lambda: compiled(*inputs))
        except Exception as e:  # reported, not fatal
            comp, out["compile_error"] = None, f"{type(e).__name__}: {str(e)[:200]}"
    key = cache.baseline_key(task_path.read_text(), torch.cuda.get_device_name(0), torch.__version__)
    cache.put("baselines", key, {"eager": eager, "compile": comp})
    out.update(eager_ms=eager["median_ms"], compile_ms=comp["median_ms"] if comp else None)
    out["compile_speedup"] = eager["median_ms"] / comp["median_ms"] if comp else None
    return out


def main() -> None:
    """Run every measurement and write the report."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-level", type=int, default=4)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from kernelskill.runner import gpu_share
    from kernelskill.runner.sandbox import run_review

    report: dict[str, Any] = {"environment": environment()}
    solved = sorted(SOLUTIONS.glob("*.py"))
    tasks = [TASKS / "level1" / p.name for p in solved]
    for level in (1, 2, 3):
        tasks += [p for p in sorted((TASKS / f"level{level}").glob("*.py"))[: args.per_level] if p not in tasks]
    report["baselines"] = []
    for t in tasks:
        row = measure_baseline(t)
        gpu_share.free_device_memory()
        report["baselines"].append(row)
        print(f"baseline {row['task']}: eager {row['eager_ms']:.4f} ms, compile {row['compile_ms']}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-reviewer-"))
    reviews = []
    t0 = time.perf_counter()
    for sol in solved:
        r = run_review(TASKS / "level1" / sol.name, sol.read_text(), work, sol.stem, device="cuda")
        reviews.append(
            {
                "task": sol.stem,
                "status": r["status"],
                "error": r.get("error_digest", ""),
                "runtime_ms": r.get("runtime_ms"),
                "eager_ms": r.get("eager_ms"),
                "compile_ms": r.get("compile_ms"),
                "speedup_vs_eager": r.get("speedup_vs_eager"),
                "speedup_vs_compile": r.get("speedup_vs_compile"),
                "sol_pct": r.get("metrics", {}).get("sol_pct"),
                "registers": r.get("metrics", {}).get("registers_per_thread"),
                "wall_s": r.get("wall_s"),
                "phases": r.get("phases", {}),
                "correctness_seconds": (r.get("correctness") or {}).get("seconds", {}),
            }
        )
        print(f"review {sol.stem}: {r['status']} {r.get('speedup_vs_eager')} wall {r.get('wall_s'):.1f}s", flush=True)
    total = time.perf_counter() - t0
    report["throughput"] = {
        "candidates": len(solved),
        "total_s": total,
        "candidates_per_gpu_minute": len(solved) / (total / 60),
        "reviews": reviews,
    }

    gelu = (SOLUTIONS / "14_gelu.py").read_text()
    medians = []
    for i in range(5):
        r = run_review(TASKS / "level1" / "14_gelu.py", gelu, work, f"spread{i}", device="cuda")
        medians.append(r["runtime_ms"])
    report["spread"] = {
        "task": "level1/14_gelu",
        "medians_ms": medians,
        "spread_pct": 100 * (max(medians) - min(medians)) / statistics.median(medians),
    }

    bad = run_review(
        FIXTURES / "tasks" / "scale_relu.py", (FIXTURES / "gpu" / "illegal_access.py").read_text(), work, "ima"
    )
    good = run_review(TASKS / "level1" / "14_gelu.py", gelu, work, "after_ima", device="cuda")
    report["containment"] = {
        "illegal_access": {"status": bad["status"], "digest": bad.get("error_digest")},
        "next_review": {"status": good["status"], "runtime_ms": good.get("runtime_ms")},
    }
    (args.out / "reviewer.json").write_text(json.dumps(report, indent=2, default=str))
    (args.out / "reviewer.md").write_text(markdown(report))
    print(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    env = report["environment"]

    def f(v: Any, p: int = 4) -> str:
        return "-" if v is None else f"{v:.{p}f}"

    lines = [
        f"GPU {env['gpu']} ({env['nvidia_smi']}); torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}; "
        f"{env['date']}",
        "",
        "| task | eager (ms) | torch.compile (ms) | compile speedup | compile wall (s) |",
        "|---|---|---|---|---|",
    ]
    for b in report["baselines"]:
        lines.append(
            f"| {b['task']} | {f(b['eager_ms'])} | {f(b['compile_ms'])} | {f(b['compile_speedup'], 2)} | "
            f"{f(b.get('compile_s'), 1)} |"
        )
    t = report["throughput"]
    lines += [
        "",
        f"Throughput: {t['candidates']} candidates fully reviewed in {t['total_s']:.1f} s = "
        f"**{t['candidates_per_gpu_minute']:.1f} candidates per GPU-minute** (baselines cached).",
        "",
        "| candidate | status | runtime (ms) | vs eager | vs compile | SOL % | regs | wall (s) | phases (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t["reviews"]:
        phases = ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
        lines.append(
            f"| {r['task']} | {r['status']} | {f(r['runtime_ms'])} | {f(r['speedup_vs_eager'], 2)} | "
            f"{f(r['speedup_vs_compile'], 2)} | {f(r['sol_pct'], 1)} | {r['registers']} | {f(r['wall_s'], 1)} | "
            f"{phases} |"
        )
    s = report["spread"]
    c = report["containment"]
    lines += [
        "",
        f"Spread: {s['task']} reviewed 5 times in separate evaluations: medians "
        f"{', '.join(f'{m:.4f}' for m in s['medians_ms'])} ms, spread {s['spread_pct']:.2f} %.",
        "",
        f"Containment: illegal access -> {c['illegal_access']['status']} ({c['illegal_access']['digest']}); "
        f"next review -> {c['next_review']['status']}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
