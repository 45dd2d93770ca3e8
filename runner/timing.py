"""Timing: CUDA events with an L2 flush before every trial, or labelled interpreter timings."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from . import gpu_share


def _mean_std(samples: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation in floating point.

    (``statistics.stdev`` computes exactly with fractions: milliseconds per call, which once made the
    adaptive timing loop spend seconds on bookkeeping.)
    """
    n = len(samples)
    mean = math.fsum(samples) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in samples) / (n - 1))


def summarize(samples: list[float]) -> dict[str, Any]:
    """Mean, median, std, min, max and a 95 % confidence interval of the mean (ms)."""
    n = len(samples)
    mean, std = _mean_std(samples)
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


def _timed_trial(
    fn: Callable[[], Any], flush: Any, before: Callable[[], Any] | None = None, host: list[float] | None = None
) -> float:
    """One trial: ``before`` (untimed), flush the L2 (write a buffer larger than it), then time ``fn`` (ms).

    The flush is the last thing queued before the start event: ``fn``'s launch is queued while the GPU
    still flushes, so the window holds the kernels, not the host's launch latency. (Host work between
    the flush and the start event can leave the GPU idle when the start event fires.) ``host``, when
    given, gets the host's time to queue ``fn`` (ms): longer than the flush, the window holds the rest.
    """
    import torch

    if before is not None:
        before()
    flush.zero_()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    fn()
    end.record()
    if host is not None:
        host.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def _flush_ms(flush: Any) -> float:
    """GPU time of one L2 flush (ms): the head start ``fn``'s launch has in each trial."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    flush.zero_()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def time_cuda(fn: Callable[[], Any], trials: int = 50, warmup: int = 5, flush_bytes: int = 256 << 20) -> dict[str, Any]:
    """Time ``fn`` with CUDA events; the L2 is flushed before each trial; the first is dropped."""
    import torch

    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    fn()  # a first call may compile: outside the exclusive hold
    torch.cuda.synchronize()
    with gpu_share.exclusive("timing"):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        samples = [_timed_trial(fn, flush) for _ in range(trials + 1)]
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


def time_adaptive(
    fn: Callable[[], Any],
    min_trials: int = 20,
    max_trials: int = 300,
    rel_ci: float = 0.01,
    budget_s: float = 4.0,
    warmup_s: float = 0.3,
    before: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """CUDA-event timing that stops once the 95 % CI of the mean is within ``rel_ci``.

    Warm-up of at least 3 calls and ``warmup_s`` seconds of back-to-back calls (a GPU idle during
    the evaluation's start-up is at low clocks; 25 ms of warm-up once left a 17 % spread between
    evaluations on an H200), an L2 flush before every trial, the first trial dropped; at least
    ``min_trials`` and at most ``max_trials`` trials, or until ``budget_s`` is spent. Recorded beside
    the statistics: ``host_ms``, the host's median time to queue one call, and ``flush_ms``, the GPU
    time of one flush (the head start a call's launch has; see :func:`_timed_trial`). The first call
    (which may compile) runs before, and the warm-up and trials inside, the GPU's exclusive hold
    (:mod:`.gpu_share`: no-op unless workers share the GPU). ``before`` runs ahead of every call, outside
    the timed window (the reviewer marks the inputs as changed there: :func:`new_versions`).
    """
    import torch

    flush = torch.empty((256 << 20) // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    with gpu_share.exclusive("timing"):
        t0 = time.perf_counter()
        calls = 0
        while calls < 2 or time.perf_counter() - t0 < warmup_s:
            if before is not None:
                before()
            fn()
            calls += 1
        torch.cuda.synchronize()
        flush_ms = _flush_ms(flush)
        samples: list[float] = []
        host: list[float] = []
        start_all = time.perf_counter()
        while True:
            samples.append(_timed_trial(fn, flush, before, host))
            kept = samples[1:]
            if len(kept) >= min_trials and len(kept) % 10 == 0:
                mean, std = _mean_std(kept)
                if 1.96 * std / math.sqrt(len(kept)) <= rel_ci * mean or len(kept) >= max_trials:
                    break
                if time.perf_counter() - start_all > budget_s:
                    break
    stats = summarize(samples[1:])
    stats["kind"] = "cuda_events"
    # Where the host queues fn more slowly than the GPU flushes, the window also holds the difference.
    stats["host_ms"] = statistics.median(host[1:])
    stats["flush_ms"] = flush_ms
    return stats


def time_fresh(fn: Callable[[], Any], befores: list[Callable[[], Any]], cuda: bool) -> list[float]:
    """One timed call of ``fn`` after each of ``befores`` (untimed: the reviewer writes input values there), in ms.

    CUDA events with the L2 flushed (holding the GPU alone), or wall-clock time on the CPU. The timings of
    record reuse one set of input values; the reviewer follows each call on new values with calls on the same
    values written again and on the record's values written again, so an answer kept across calls under any
    key of the values (a sampled fingerprint, a hash) is computed on the first of each group and looked up
    on a later one (see ``runner/worker.py: _fresh_values``).
    """
    if cuda:
        import torch

        flush = torch.empty((256 << 20) // 4, dtype=torch.int32, device="cuda")
        with gpu_share.exclusive("timing"):
            return [_timed_trial(fn, flush, before) for before in befores]
    samples: list[float] = []
    for before in befores:
        before()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def kept_across_calls(repeated_ms: float, fresh_ms: float, cuda: bool, host_share: float = 0.0) -> bool:
    """Whether calls on new values (``fresh_ms``) are far slower than on the same values again (``repeated_ms``).

    Each the fastest of its calls. At least :data:`KEPT_RATIO` times as long and :data:`KEPT_MARGIN_MS` more
    (per device): a candidate that returned an answer kept from an earlier call with the same values.
    Value-dependent work of an honest kernel differs far less between two draws of the same task's inputs.
    ``host_share``: the timings of record's host time to queue a call over their median (``host_ms /
    median_ms``); a window that holds the host's time moves with the host's load (other workers
    compiling), so the ratio grows with it, up to :data:`KEPT_HOST_RATIO` for a host-bound call.
    """
    device = "cuda" if cuda else "cpu"
    ratio = KEPT_RATIO[device]
    if cuda:
        ratio += (KEPT_HOST_RATIO - ratio) * min(1.0, max(0.0, host_share))
    return fresh_ms > ratio * repeated_ms + KEPT_MARGIN_MS[device]


KEPT_RATIO = {"cuda": 1.5, "cpu": 10.0}  # honest calls differ by noise there; the interpreter moves with the load
KEPT_HOST_RATIO = 4.0  # a host-bound GPU timing (its window holds the host's time to queue the call)
KEPT_MARGIN_MS = {"cuda": 0.02, "cpu": 1.0}


def new_versions(objs: list[Any]) -> None:
    """Mark every tensor in ``objs`` as written (its version counter moves on; no kernel runs).

    Timed calls reuse the same input tensors: a candidate that keeps its answer keyed by the inputs'
    version would otherwise time a cache hit. (One keyed by address or identity alone is caught by the
    re-check after timing, which refills these very tensors in place.)
    """
    import torch

    for x in objs:
        if isinstance(x, torch.Tensor) and not x.is_inference():
            torch.autograd.graph.increment_version(x)
