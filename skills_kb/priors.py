"""Per-skill priors: what each skill achieved on earlier tasks, summarized from the outcome store.

For every skill: ``tries`` (informative, i.e. GPU-timed, rounds), ``wins`` (rounds whose candidate
became the new best), ``failures`` (informative rounds whose candidate never became correct), the
mean speedup gain of its correct informative rounds (``runtime_before / runtime_after - 1``), and
how many uninformative (interpreter-timed) rounds were recorded. The smoothed win rate
``(wins + 1) / (tries + 2)`` starts at 0.5 for a skill never tried and moves toward the observed
rate as evidence accumulates; the planner adds ``prior_weight * (win_rate - 0.5)`` to a skill's
similarity score (see :mod:`.ranking`).

Records repeated by a resumed run (same run, round and skill) count once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .outcomes import OutcomeStore, open_store


@dataclass
class Prior:
    """What one skill achieved so far."""

    skill_id: str
    tries: int = 0
    wins: int = 0
    failures: int = 0
    uninformative: int = 0
    gains: list[float] = field(default_factory=list, repr=False)

    @property
    def win_rate(self) -> float:
        """Smoothed win rate (Laplace): ``(wins + 1) / (tries + 2)``."""
        return (self.wins + 1) / (self.tries + 2)

    @property
    def score(self) -> float:
        """The prior's contribution before weighting: ``win_rate - 0.5`` (0 without evidence)."""
        return self.win_rate - 0.5

    @property
    def mean_gain(self) -> float | None:
        """Mean speedup gain over correct informative rounds (None when there are none)."""
        return sum(self.gains) / len(self.gains) if self.gains else None

    def describe(self) -> str:
        """``2/3 wins, mean gain +12.0%`` or ``no GPU-timed tries``."""
        if not self.tries:
            return "no GPU-timed tries"
        gain = f", mean gain {self.mean_gain:+.1%}" if self.mean_gain is not None else ""
        return f"{self.wins}/{self.tries} wins{gain}"


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Prior]:
    """Per-skill priors from outcome records (later duplicates of a run's round replace earlier ones)."""
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, rec in enumerate(records):
        key = (rec.get("run"), rec.get("task"), rec.get("round"), rec.get("skill_id")) if rec.get("run") else (i,)
        unique[key] = rec
    priors: dict[str, Prior] = {}
    for rec in unique.values():
        prior = priors.setdefault(str(rec["skill_id"]), Prior(str(rec["skill_id"])))
        if not rec.get("informative"):
            prior.uninformative += 1
            continue
        prior.tries += 1
        prior.wins += bool(rec.get("improved"))
        if not rec.get("success"):
            prior.failures += 1
        elif isinstance(rec.get("gain"), (int, float)):
            prior.gains.append(float(rec["gain"]))
    return priors


def load_priors(store: OutcomeStore | str | Path) -> dict[str, Prior]:
    """Priors from ``store`` (or the store at a path or Postgres URL; empty when it does not exist)."""
    return summarize((open_store(store) if isinstance(store, (str, Path)) else store).read())


def retired(prior: Prior | None, after: int, max_gain: float) -> bool:
    """True when ``prior`` shows only losses: at least ``after`` GPU-timed tries, no win, mean gain <= ``max_gain``."""
    if prior is None or prior.tries < after or prior.wins:
        return False
    gain = prior.mean_gain
    return gain is None or gain <= max_gain
