"""Load the role prompt templates shipped in ``nodes/model/prompts`` (prompts are data, not code)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template

PROMPTS_DIR = Path(__file__).parent / "prompts"
SEPARATOR = "=== user ==="


@lru_cache(maxsize=16)
def _template(role: str) -> tuple[Template, Template]:
    text = (PROMPTS_DIR / f"{role}.md").read_text()
    system, sep, user = text.partition(SEPARATOR)
    if not sep:
        raise ValueError(f"prompt template {role}.md lacks the '{SEPARATOR}' line")
    return Template(system.strip()), Template(user.strip())


def render(role: str, **values: object) -> tuple[str, str]:
    """The (system, user) messages of ``role`` with ``values`` substituted.

    A placeholder without a value raises KeyError naming it, so templates and nodes stay in step.
    """
    system, user = _template(role)
    text = {k: str(v) for k, v in values.items()}
    return system.substitute(text), user.substitute(text)
