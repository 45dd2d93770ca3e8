"""Timing: CUDA events with an L2 flush before every trial, or labelled interpreter timings."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any


def summarize(samples: list[float]) -> dict[str, Any]:
    """Mean, median, std, min, max and a 95 % confidence interval of the mean (ms)."""
    n = len(samples)
    mean = statistics.fmean(samples)
    std = statistics.stdev(samples) if n > 1 else 0.0
    half = 1.96 * std / math.sqrt(n) if n > 1 else 0.0
    return {
        "n": n,
        "mean_ms": mean,
        "median_ms": statistics.median(samples),
        "std_ms": std,
        "min_ms": min(samples),
        "max_ms": max(samples),
        "ci95_ms": [mean - half, mean + half],
    }


def time_cuda(fn: Callable[[], Any], trials: int = 50, warmup: int = 5, flush_bytes: int = 256 << 20) -> dict[str, Any]:
    """Time ``fn`` with CUDA events; the L2 is flushed before each trial; the first is dropped."""
    import torch

    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    for _ in range(trials + 1):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    stats = summarize(samples[1:])
    stats["kind"] = "cuda_events"
    return stats


def time_interpreter(fn: Callable[[], Any], runs: int = 2) -> dict[str, Any]:
    """Wall-clock timing on the CPU; a smoke signal only, never a speedup."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    stats = summarize(samples)
    stats["kind"] = "interpreter"
    return stats
