"""Retrieval helpers the nodes use: the best-matching cards for a situation, as prompt text."""

from __future__ import annotations

from .index import open_index
from .library import default_library, render_card
from .schema import SkillCard


def retrieve(query: str, k: int = 3, among: list[str] | None = None, db_dir: str = "") -> list[SkillCard]:
    """The ``k`` cards closest to ``query`` (optionally only among the given ids)."""
    hits = open_index(db_dir).search(query, k=k, among=among)
    lib = default_library()
    return [lib.cards[h.skill_id] for h in hits if h.skill_id in lib.cards]


def cards_text(cards: list[SkillCard], full: bool = False) -> str:
    """Markdown of several cards for a prompt."""
    return "\n\n".join(render_card(c, full=full) for c in cards) or "(no skills retrieved)"
