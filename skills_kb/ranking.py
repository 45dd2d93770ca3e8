"""Ranking the policy's allowed skills: policy first, similarity second, prior outcomes third.

The sort key of an allowed skill is ``(group, -score, skill_id)``:

1. ``group``: the index of its preferred group in the decision (the firing rule's own ``prefer``
   groups, then the decision table's), or one past the last group for every other allowed skill.
   The policy's preference is never overridden.
2. ``score = similarity + prior_weight * (win_rate - 0.5)``: cosine similarity of the skill's card
   to the current situation (Chroma, MiniLM), plus its prior from earlier tasks
   (:class:`~.priors.Prior`; the smoothed win rate is 0.5 without evidence, so an untried skill
   gets no bonus and no penalty). ``prior_weight`` comes from ``policy.yaml`` (``ranking``).
3. the skill id, so equal scores rank the same way every time.

Skills excluded by the caller (those whose round already failed on this task) are never ranked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .policy import Decision
from .priors import Prior


@dataclass(frozen=True)
class Ranked:
    """One allowed skill with the numbers that placed it."""

    skill_id: str
    group: int  # preferred group index; == number of groups for non-preferred skills
    preferred: bool
    similarity: float
    prior: Prior
    score: float

    def describe(self) -> str:
        """``online-softmax (preferred group 2, similarity 0.612, prior 1/1 wins, score 0.695)``."""
        place = f"preferred group {self.group + 1}" if self.preferred else "not preferred"
        return (
            f"{self.skill_id} ({place}, similarity {self.similarity:.3f}, prior {self.prior.describe()}, "
            f"score {self.score:.3f})"
        )


def rank(
    decision: Decision,
    similarity: Mapping[str, float],
    priors: Mapping[str, Prior],
    prior_weight: float,
    exclude: Collection[str] = (),
) -> list[Ranked]:
    """The decision's allowed skills minus ``exclude``, best first (see the module docstring)."""
    ranked = []
    for sid in decision.allowed:
        if sid in exclude:
            continue
        prior = priors.get(sid) or Prior(sid)
        sim = float(similarity.get(sid, 0.0))
        group = decision.group_of(sid)
        ranked.append(Ranked(sid, group, group < len(decision.prefer), sim, prior, sim + prior_weight * prior.score))
    ranked.sort(key=lambda r: (r.group, -r.score, r.skill_id))
    return ranked
