"""Retrieval helpers the nodes use: the cards relevant to a situation, as compact prompt text."""

from __future__ import annotations

from .index import open_index
from .library import default_library
from .schema import SkillCard

RELEVANCE = 0.35  # cosine similarity below which a card is not shown in a prompt
MARGIN = 0.1  # nor a card this far below the best match


def retrieve(query: str, k: int = 3, among: list[str] | None = None, db_dir: str = "") -> list[SkillCard]:
    """Up to ``k`` cards relevant to ``query``: similarity at least RELEVANCE and within MARGIN of the best."""
    hits = open_index(db_dir).search(query, k=k, among=among)
    if not hits:
        return []
    floor = max(RELEVANCE, hits[0].similarity - MARGIN)
    lib = default_library()
    return [lib.cards[h.skill_id] for h in hits if h.skill_id in lib.cards and h.similarity >= floor]


def cards_text(cards: list[SkillCard]) -> str:
    """A compact list of the cards' method steps and pitfalls, for a prompt."""
    blocks = []
    for c in cards:
        steps = "; ".join(s.rstrip(".") for s in c.steps)
        pitfalls = "; ".join(p.rstrip(".") for p in c.pitfalls[:2])
        blocks.append(f"- {c.title} (`{c.id}`): {steps}." + (f" Pitfalls: {pitfalls}." if pitfalls else ""))
    return "\n".join(blocks) or "(none relevant)"
