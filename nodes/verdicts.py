"""Structured verdicts of the diagnoser and the planner, and their plain-text fallbacks.

Endpoints that support structured output return these models directly (``with_structured_output``);
scripted models and servers without it reply in plain text, parsed here: the diagnoser's code block
(as before) and a ``Root cause:`` line; the planner's JSON object or ``field: value`` lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from .codeblock import extract_code


class DiagnoserVerdict(BaseModel):
    """The diagnoser's repair: why the candidate failed and the fixed module."""

    root_cause: str = Field(description="The root cause of the failure, one or two sentences.")
    evidence: str = Field(default="", description="The lines of the error or code that show it.")
    fix_plan: str = Field(default="", description="What the repair changes.")
    code: str = Field(description="The complete repaired module defining class ModelNew(nn.Module).")


class PlannerVerdict(BaseModel):
    """The planner's choice: one allowed skill for this round."""

    skill_id: str = Field(description="The id of ONE skill from the allowed list.")
    rationale: str = Field(default="", description="Why this skill, from the signals and the history.")
    expected_effect: str = Field(default="", description="What should improve, and roughly by how much.")
    code_region: str = Field(default="", description="The kernel or code region to change.")


_ROOT = re.compile(r"^\W*root[ _]cause\W*:\s*(.+)$", re.I | re.M)


def diagnoser_from_text(text: str) -> tuple[DiagnoserVerdict, str]:
    """A verdict from a plain reply (code block + optional ``Root cause:`` line) and the code problem."""
    code, problem = extract_code(text)
    m = _ROOT.search(text)
    return DiagnoserVerdict(root_cause=m.group(1).strip() if m else "", code=code), problem


def diagnoser_code(verdict: DiagnoserVerdict) -> tuple[str, str]:
    """The verdict's module source and, when unusable, why (the code field may itself be fenced)."""
    code = verdict.code
    if "```" in code or not code.strip():
        return extract_code(code)
    return extract_code(f"```python\n{code}\n```")


def planner_from_text(text: str) -> PlannerVerdict | None:
    """A verdict from a plain reply: a JSON object, else ``skill_id: ...`` style lines; None if neither."""
    for m in re.finditer(r"\{.*\}", text, re.S):
        try:
            return PlannerVerdict.model_validate(json.loads(m.group(0)))
        except (ValueError, ValidationError):
            pass
    fields: dict[str, Any] = {}
    for name in PlannerVerdict.model_fields:
        label = name.replace("_", "[ _]")
        hit = re.search(rf"^\W*{label}\W*:\s*(.+)$", text, re.I | re.M)
        if hit:
            fields[name] = hit.group(1).strip().strip("`")
    if "skill_id" not in fields:
        hit = re.search(r"^\W*skill\W*:\s*`?([\w.-]+)", text, re.I | re.M)
        if hit:
            fields["skill_id"] = hit.group(1)
    return PlannerVerdict(**fields) if "skill_id" in fields else None
