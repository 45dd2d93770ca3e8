"""A wall-clock deadline for one process: ``KERNELSKILL_DEADLINE`` (seconds since the epoch).

The eval runner sets it a little before its per-task hard limit, so a task wraps up with its best
candidate and its report instead of being killed with nothing (a level-3 LSTM's Triton-template
capture autotuned for more than the whole limit, and the task lost its finished library seed too).
Every launch gets its own deadline; ``resume`` launches as well.

- compiler-seed captures get at most the time left minus ``REVIEW_RESERVE_S`` (the seeds must still
  be reviewed); the optimizer's recaptures the time left minus ``ROUND_RESERVE_S``;
- the reviewer records the time left in the state (``time_left_s``); the router after a review
  ends the run when less than ``ROUND_RESERVE_S`` is left (another round would not finish), with a
  stop reason that says so.

On a shared GPU (``runner/gpu_share.py``) the time this launch's processes waited for the GPU is
added to the deadline: the eval's launcher extends its hard limit by the same amount.

Unset (a plain ``kernelskill optimize``) nothing changes: ``Context.max_wall_s`` is the user's own
budget, and the capture and review timeouts are ``Context.seed_timeout_s`` / ``review_timeout_s``.
"""

from __future__ import annotations

import os
import time

ENV = "KERNELSKILL_DEADLINE"
REVIEW_RESERVE_S = 60.0  # reviews of the seeds and the report, after the captures
ROUND_RESERVE_S = 45.0  # one optimization round: a transform (maybe a recapture) and its review
MIN_TIMEOUT_S = 10.0  # a child process always gets at least this long


def left(now: float | None = None) -> float | None:
    """Seconds until the deadline (negative when past), or None when no deadline is set."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        deadline = float(raw)
    except ValueError:
        return None
    from kernelskill.runner.gpu_share import credited

    return deadline + credited() - (time.time() if now is None else now)


def timeout(default_s: float, reserve_s: float) -> float:
    """A child's time limit: ``default_s``, capped by the time left minus ``reserve_s``."""
    remaining = left()
    if remaining is None:
        return default_s
    return max(MIN_TIMEOUT_S, min(default_s, remaining - reserve_s))


def stop_reason(remaining: float | None) -> str:
    """Why the graph should stop with ``remaining`` s left (another round would overrun), or ""."""
    if remaining is None or remaining >= ROUND_RESERVE_S:
        return ""
    return f"time limit of this launch near ({max(0.0, remaining):.0f} s left, a round needs ~{ROUND_RESERVE_S:.0f} s)"


def for_launch(timeout_s: float, now: float | None = None) -> str:
    """The ``ENV`` value for a launch hard-killed after ``timeout_s``: a grace period before that."""
    grace = min(20.0, 0.1 * timeout_s)
    return f"{(time.time() if now is None else now) + timeout_s - grace:.3f}"
