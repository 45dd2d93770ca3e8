"""Seeds and a small best-first search over correct candidates.

The generator writes ``Context.seeds`` seed candidates (default 1); the first goes through the
review-and-repair loop, the others are reviewed once, without repairs, in the same reviewer step.
Every correct candidate enters the *parents* pool, which keeps the ``Context.parents`` best
(GPU-timed candidates by runtime first, then the rest in the order they were found). Each
optimization round starts from one parent: the best one, except that with probability
``Context.explore`` (default 0.1) another parent of the pool is chosen, so a slower but different
line of kernels gets a chance. The draw uses a generator seeded by the run seed and the round
number, so a resumed run draws the same parent.
"""

from __future__ import annotations

import random
from typing import Any

from kernelskill.graph.state import Best, State


def _key(entry: Best, order: int) -> tuple[int, float, int]:
    review = entry["review"]
    if review.get("timing_kind") == "cuda_events" and review.get("runtime_ms") is not None:
        return (0, float(review["runtime_ms"]), order)
    return (1, 0.0, order)


def update_parents(parents: list[Best], new: Best, width: int) -> list[Best]:
    """The pool with ``new`` added: at most ``width`` entries, best first."""
    pool = [*parents, new]
    ranked = sorted(enumerate(pool), key=lambda p: _key(p[1], p[0]))
    return [entry for _, entry in ranked[: max(1, width)]]


def select_parent(state: State) -> tuple[Best, str]:
    """This round's parent and a one-line reason (deterministic for a given seed and round)."""
    search: dict[str, Any] = dict(state.get("search") or {})
    pool = list(state.get("parents") or []) or [state["best"]]
    best = state["best"]
    explore = float(search.get("explore", 0.0))
    rnd = state.get("round", 0) + 1
    others = [p for p in pool if p["candidate"]["id"] != best["candidate"]["id"]]
    rng = random.Random(f"{search.get('seed', 0)}-{rnd}")
    if others and rng.random() < explore:
        pick = rng.choice(others)
        return pick, f"exploring parent {pick['candidate']['id']} (rate {explore:g}; pool of {len(pool)})"
    return best, f"best-first: parent {best['candidate']['id']} (pool of {len(pool)})"


def parent_of(state: State) -> Best:
    """The parent chosen for this round (the best when none was chosen)."""
    return state.get("parent") or state["best"]
