"""PNG plots of an eval summary (matplotlib, Agg canvas; no display or pyplot state needed).

Each plot is always written: without GPU timings it shows a visible "no GPU timings" note instead of
data, so a CPU-only run still has its three files.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .metrics import NO_GPU_NOTE, per_round

SPEEDUP_PLOT = "speedup_distribution.png"
ROUND_PLOT = "speedup_vs_round.png"
SOL_PLOT = "sol_pct.png"


def write_plots(summary: dict[str, Any], folder: Path) -> list[Path]:
    """Write the speedup-distribution, speedup-per-round and speed-of-light plots; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        _save(_speedup_distribution(summary), folder / SPEEDUP_PLOT),
        _save(_speedup_vs_round(summary), folder / ROUND_PLOT),
        _save(_sol_pct(summary), folder / SOL_PLOT),
    ]


def _figure(title: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    return fig, ax


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, format="png")
    return path


def _no_data(ax: Axes, why: str = NO_GPU_NOTE) -> None:
    ax.text(0.5, 0.5, why.replace(": ", ":\n", 1), ha="center", va="center", wrap=True, fontsize=11, color="0.3")
    ax.set_xticks([])
    ax.set_yticks([])


def _by_level(summary: dict[str, Any], key: str) -> dict[int, list[float]]:
    """Values of ``key`` of the GPU-timed successes, per level (levels without values left out)."""
    out: dict[int, list[float]] = {}
    for r in summary["rows"]:
        if r["status"] == "success" and r["speedup_vs_eager"] is not None and r.get(key) is not None:
            out.setdefault(int(r["level"]), []).append(float(r[key]))
    return out


def _speedup_distribution(summary: dict[str, Any]) -> Figure:
    fig, ax = _figure("Speedup vs eager per level (GPU-timed successes)")
    data = _by_level(summary, "speedup_vs_eager")
    if not data:
        _no_data(ax)
        return fig
    levels = sorted(data)
    labels = [f"level {lv}\n(n={len(data[lv])})" for lv in levels]
    ax.boxplot([data[lv] for lv in levels], tick_labels=labels, showfliers=False)  # every point is drawn below
    for i, lv in enumerate(levels, start=1):
        n = len(data[lv])
        xs = [i + 0.25 * ((k / max(n - 1, 1)) - 0.5) for k in range(n)]
        ax.scatter(xs, data[lv], s=12, alpha=0.6, color="tab:blue", zorder=3)
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label="eager PyTorch (1x)")
    ax.set_yscale("log")
    times = FuncFormatter(lambda v, _: f"{v:g}x")
    ax.yaxis.set_major_formatter(times)
    ax.yaxis.set_minor_formatter(times)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel("speedup vs eager (log scale)")
    ax.legend(loc="best")
    return fig


def _curve(rows: list[dict[str, Any]], level: int | None, kernels: str) -> list[dict[str, Any]]:
    return per_round([r for r in rows if level is None or r["level"] == level], kernels)


def _speedup_vs_round(summary: dict[str, Any]) -> Figure:
    fig, ax = _figure("Best-so-far speedup vs eager after each round (geometric mean)")
    rows = summary["rows"]
    levels = summary["levels"]
    kernels = summary.get("policy", {}).get("kernels", "custom")
    series = [(f"level {lv}", _curve(rows, lv, kernels)) for lv in levels]
    if len(levels) > 1:
        series.append(("all levels", _curve(rows, None, kernels)))
    series = [(name, [p for p in points if p["geo_mean"] is not None]) for name, points in series]
    series = [(name, points) for name, points in series if points]
    if not series:
        _no_data(ax)
        return fig
    for name, points in series:
        xs = [p["round"] for p in points]
        ns = sorted({p["tasks"] for p in points})
        n = f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}..{ns[-1]}"
        ax.plot(xs, [p["geo_mean"] for p in points], marker="o", label=f"{name} ({n} tasks)")
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1)
    ax.set_xlabel("round (0 = seed)")
    ax.set_ylabel("geo-mean speedup vs eager")
    ax.set_xticks(sorted({p["round"] for _, points in series for p in points}))
    ax.legend(loc="best")
    return fig


def _sol_pct(summary: dict[str, Any]) -> Figure:
    fig, ax = _figure("% of speed-of-light of the best kernel (GPU-timed successes)")
    data = _by_level(summary, "sol_pct")
    if not data:
        has_gpu = any(r["speedup_vs_eager"] is not None for r in summary["rows"])
        _no_data(
            ax, "no speed-of-light measurements: the GPU profile did not report sol_pct" if has_gpu else NO_GPU_NOTE
        )
        return fig
    levels = sorted(data)
    values = [[min(max(v, 0.0), 100.0) for v in data[lv]] for lv in levels]
    labels = [
        f"level {lv} (n={len(v)}, median {statistics.median(v):.0f}%)" for lv, v in zip(levels, values, strict=True)
    ]
    ax.hist(values, bins=[10 * i for i in range(11)], label=labels)  # side-by-side bars per bin
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of speed-of-light")
    ax.set_ylabel("tasks")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best")
    return fig
