"""Load the skill cards shipped in ``skills_kb/cards`` (or any directory of card files)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .schema import CardError, SkillCard, load_card

CARDS_DIR = Path(__file__).parent / "cards"


@dataclass
class Library:
    """The valid cards by id, plus one message per card file that failed validation."""

    cards: dict[str, SkillCard] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)

    def get(self, skill_id: str) -> SkillCard:
        """The card with this id; KeyError naming the known ids otherwise."""
        try:
            return self.cards[skill_id]
        except KeyError:
            raise KeyError(f"no skill card {skill_id!r}; known: {', '.join(sorted(self.cards))}") from None


def load_library(cards_dir: str | Path = CARDS_DIR) -> Library:
    """Load every ``*.yaml`` card; a malformed card is reported in ``errors`` and skipped."""
    lib = Library()
    for path in sorted(Path(cards_dir).glob("*.yaml")):
        try:
            card = load_card(path)
        except CardError as e:
            lib.errors.append(str(e))
            continue
        if card.id in lib.cards:
            lib.errors.append(f"{path.name}: field 'id': duplicate id {card.id!r}")
            continue
        lib.cards[card.id] = card
        lib.hashes[card.id] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return lib


@lru_cache(maxsize=4)
def default_library() -> Library:
    """The packaged cards (cached per process)."""
    return load_library(CARDS_DIR)


def render_card(card: SkillCard, full: bool = True) -> str:
    """Markdown rendering of a card, for prompts and ``kernelskill skills show``."""
    lines = [f"### {card.title} (`{card.id}`)", f"Bottlenecks: {', '.join(card.bottlenecks)}"]
    lines.append(f"Mechanism: {card.mechanism.strip()}")
    lines.append("Steps:\n" + "\n".join(f"  {i + 1}. {s}" for i, s in enumerate(card.steps)))
    lines.append(f"Expected effect: {card.expected_effect.strip()}")
    lines.append("Pitfalls:\n" + "\n".join(f"  - {p}" for p in card.pitfalls))
    if full:
        if card.applies_when:
            lines.append("Applies when: " + "; ".join(card.applies_when))
        if card.avoid_when:
            lines.append("Avoid when: " + "; ".join(card.avoid_when))
        lines.append("Triton example:\n```python\n" + card.triton_example.rstrip() + "\n```")
        if card.cuda_equivalent:
            lines.append("CUDA equivalent:\n" + card.cuda_equivalent.rstrip())
    return "\n".join(lines)
