"""Structured verdicts of the diagnoser and the planner, and their plain-text fallbacks.

Endpoints that support structured output return these models directly (``with_structured_output``);
scripted models and servers without it reply in plain text, parsed here the way chat models write:

* a JSON object, in a fence or in prose (found by balanced-brace scanning, so prose braces such as
  "the grid {x, y}" do no harm), whose keys may be synonyms (``skill`` for ``skill_id``, ``cause``
  for ``root_cause``, ``plan`` for ``fix_plan``);
* else labelled lines, with Markdown around them: ``**Root cause:** ...``, ``- *skill_id*: "x"``,
  ``1. Evidence: ...``, or a ``### Root cause`` heading with the text below it;
* else a sentence ("The bug is ...") for the diagnoser's root cause, and an "I choose `x`" for the
  planner's skill.

The diagnoser's code comes from its code block (:func:`~.codeblock.extract_code`) or a JSON ``code``
field. A diagnosis that states no root cause is recorded as :data:`NOT_STATED`, with a warning.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel, Field

from .codeblock import extract_code

_log = logging.getLogger(__name__)

NOT_STATED = "not stated"
"""The root cause recorded when a plain-text diagnosis states none."""


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


class MethodVerdict(PlannerVerdict):
    """The planner's choice without the skills knowledge base: one method it names itself."""

    skill_id: str = Field(description="A short name for ONE optimization method: lower-case words joined by hyphens.")
    rationale: str = Field(default="", description="Why this method, from the code, the signals and the history.")


# The labels (and JSON keys) each field is known by, compared lower-case with "_" and "-" as spaces.
_DIAGNOSER_LABELS: dict[str, tuple[str, ...]] = {
    "root_cause": ("root cause", "cause", "diagnosis", "problem"),
    "evidence": ("evidence",),
    "fix_plan": ("fix plan", "fix", "plan", "repair plan", "repair"),
}
_DIAGNOSER_KEYS = {**_DIAGNOSER_LABELS, "code": ("code", "module", "source")}
_PLANNER_LABELS: dict[str, tuple[str, ...]] = {
    "skill_id": ("skill id", "skill", "chosen skill", "selected skill"),
    "rationale": ("rationale", "why", "reason", "reasoning"),
    "expected_effect": ("expected effect", "expected improvement", "expected speedup", "expected gain"),
    "code_region": ("code region", "region", "where", "target region"),
}

_FENCED = re.compile(r"```.*?(?:```|\Z)", re.S)
_JSON_START = re.compile(r"\{\s*(?:\"|\})")  # a JSON object opens with a key string or closes at once
_SKILL_ID = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?", re.I)
_CHOSEN = re.compile(
    r"\b(?:choose|chose|pick|picked|recommend|select|selected|go\s+with)\s+(?:the\s+)?(?:skill\s+)?"
    r"[*_]*`([a-z0-9][a-z0-9._-]*)`",
    re.I,
)
_CAUSE_SENTENCE = re.compile(
    r"\b(?:the|this)\s+(?:(?:root\s+)?cause|bug|issue|problem)\s+(?:is|was)\b"
    r"|\b(?:the|this)\s+(?:failure|error|crash|mismatch)\s+(?:is|was)\s+(?:caused\s+by|due\s+to)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n[ \t]*\n")


def diagnoser_from_text(text: str) -> tuple[DiagnoserVerdict, str]:
    """Parses a plain diagnoser reply.

    Args:
        text: The reply: a code block plus a JSON object, labelled lines or prose.

    Returns:
        The verdict and, when the reply holds no usable module, why (else ""). A reply that states
        no root cause gets :data:`NOT_STATED`.
    """
    code, problem = extract_code(text)
    fields = _json_fields(text, _DIAGNOSER_KEYS, "root_cause") or _labelled_fields(text, _DIAGNOSER_LABELS)
    if not code and fields.get("code"):
        code, problem = diagnoser_code(DiagnoserVerdict(root_cause="", code=fields["code"]))
    root_cause = fields.get("root_cause") or _cause_sentence(text)
    if not root_cause:
        _log.warning("the diagnoser's reply states no root cause; recorded as %r", NOT_STATED)
        root_cause = NOT_STATED
    verdict = DiagnoserVerdict(
        root_cause=root_cause, evidence=fields.get("evidence", ""), fix_plan=fields.get("fix_plan", ""), code=code
    )
    return verdict, problem


def diagnoser_code(verdict: DiagnoserVerdict) -> tuple[str, str]:
    """The verdict's module source and, when unusable, why (the code field may itself be fenced)."""
    code = verdict.code
    if "```" in code or not code.strip():
        return extract_code(code)
    return extract_code(f"```python\n{code}\n```")


def planner_from_text(text: str) -> PlannerVerdict | None:
    """Parses a plain planner reply.

    Args:
        text: The reply: a JSON object, labelled lines, or prose naming a backticked skill id.

    Returns:
        The verdict, or None when the reply names no skill.
    """
    fields, skill_id = _planner_fields(text, _skill_id, str.lower)
    if not skill_id:
        return None
    return PlannerVerdict(**{**fields, "skill_id": skill_id})


def method_from_text(text: str) -> MethodVerdict | None:
    """Parses a plain planner reply that names its own method (no skills knowledge base).

    As :func:`planner_from_text`, but the whole name is kept (:func:`method_name`), not its first word.

    Args:
        text: The reply: a JSON object, labelled lines, or prose naming a backticked method.

    Returns:
        The verdict, or None when the reply names no method.
    """
    fields, name = _planner_fields(text, method_name, method_name)
    if not name:
        return None
    return MethodVerdict(**{**fields, "skill_id": name})


def _planner_fields(
    text: str, named: Callable[[str], str], chosen_named: Callable[[str], str]
) -> tuple[dict[str, str], str]:
    """A planner reply's fields and the id it names, else "".

    The id: ``named`` of its skill field, else ``chosen_named`` of what its prose says it chose.
    """
    fields = _json_fields(text, _PLANNER_LABELS, "skill_id") or _labelled_fields(text, _PLANNER_LABELS)
    name = named(fields.get("skill_id", ""))
    if not name:
        chosen = _CHOSEN.search(_prose(text))
        name = chosen_named(chosen.group(1)) if chosen else ""
    return fields, name


def method_name(value: str) -> str:
    """A method's name as an id: its backticked text, else the whole value, as lower-case words joined by hyphens."""
    ticked = re.search(r"`\s*([^`]+?)\s*`", value)
    words = re.findall(r"[a-z0-9]+", _clean(ticked.group(1) if ticked else value).lower())
    return "-".join(words)[:60].strip("-")


# --- JSON objects ---------------------------------------------------------------------------------


def _json_fields(text: str, keys: Mapping[str, tuple[str, ...]], required: str) -> dict[str, str]:
    """The fields of the first JSON object in ``text`` that has ``required`` (under any synonym)."""
    for obj in _json_objects(text):
        fields = _map_keys(obj, keys)
        if fields.get(required):
            return fields
    return {}


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``text``, outer before inner, skipping brace spans that are not JSON."""
    for start in _JSON_START.finditer(text):
        end = _matching_brace(text, start.start())
        if end is None:
            continue
        try:
            obj = json.loads(text[start.start() : end + 1])
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _matching_brace(text: str, start: int) -> int | None:
    """The index of the ``}`` closing the ``{`` at ``start``, respecting JSON strings; None if unclosed."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _map_keys(obj: Mapping[str, Any], keys: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The object's values under their field names (synonym keys mapped), as text; unknown keys dropped."""
    by_label = {label: name for name, labels in keys.items() for label in (name.replace("_", " "), *labels)}
    fields: dict[str, str] = {}
    for key, value in obj.items():
        name = by_label.get(_normal_label(str(key)))
        if name and name not in fields and value not in (None, ""):
            fields[name] = _as_text(value)
    return fields


def _as_text(value: Any) -> str:
    """A JSON value as text: strings as they are, lists joined with "; ", anything else as JSON."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return "; ".join(_as_text(v) for v in value)
    return json.dumps(value)


# --- labelled lines -------------------------------------------------------------------------------


def _labelled_fields(text: str, labels: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The fields given as labelled lines or headings outside code blocks, the first of each kept.

    A label with nothing after it (``### Root cause``, ``**Evidence:**``) takes the paragraph below.
    """
    line_re = _label_line_re(labels)
    by_label = {_normal_label(label): name for name, names in labels.items() for label in names}
    lines = _prose(text).splitlines()
    fields: dict[str, str] = {}
    for i, line in enumerate(lines):
        hit = line_re.match(line)
        if hit is None:
            continue
        name = by_label[_normal_label(hit.group("label"))]
        if name in fields:
            continue
        if hit.group("value") is None and not _is_heading(line, hit):
            continue
        value = _clean(hit.group("value") or "") or _paragraph_after(lines, i + 1, line_re)
        if value:
            fields[name] = value
    return fields


def _label_line_re(labels: Mapping[str, tuple[str, ...]]) -> re.Pattern[str]:
    """A line that starts with one of the labels, emphasised or not, after a list or heading mark.

    Group ``label`` is the label as written; ``value`` the rest after the colon, None without one.
    """
    words = sorted({label for names in labels.values() for label in names}, key=len, reverse=True)
    alternatives = "|".join(r"[ _-]+".join(map(re.escape, label.split())) for label in words)
    return re.compile(
        r"^[ \t>]*(?:[-*+•][ \t]+|\d+[.)][ \t]+|\#{1,6}[ \t]*)?"  # bullet, number or heading mark
        rf"[*_`]*[ \t]*(?P<label>{alternatives})[ \t]*[*_`]*[ \t]*"  # the label, maybe emphasised
        r"(?::(?:[*_]+(?=\s|$))?[ \t]*(?P<value>.*?)|[:*_`]*)[ \t]*$",  # ": value", or a bare heading
        re.I,
    )


def _is_heading(line: str, hit: re.Match[str]) -> bool:
    """True when a label without a colon is marked as a heading (``#``, bold, italic, code marks)."""
    marks = line[: hit.start("label")] + line[hit.end("label") :]
    return bool(re.search(r"[#*_`]", marks))


def _paragraph_after(lines: list[str], start: int, line_re: re.Pattern[str]) -> str:
    """The paragraph from ``lines[start]`` on, up to a blank line, a heading or another label."""
    taken: list[str] = []
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            if taken:
                break
            continue
        if stripped.startswith("#") or line_re.match(line):
            break
        taken.append(re.sub(r"^(?:[-*+•]|\d+[.)])[ \t]+", "", stripped))
    return _clean(" ".join(taken))


# --- values and prose -----------------------------------------------------------------------------


def _prose(text: str) -> str:
    """The reply without its code blocks (each replaced by a blank line, so paragraphs end there)."""
    return _FENCED.sub("\n\n", text)


def _normal_label(label: str) -> str:
    """A label compared lower-case, with runs of spaces, "_" and "-" as one space."""
    return " ".join(re.split(r"[ _-]+", label.strip().lower())).strip()


def _clean(value: str) -> str:
    """A value without bold marks, wrapping emphasis, code marks or quotes, and trailing ",;:"."""
    value = value.replace("**", "").strip()
    while len(value) >= 2 and value[0] == value[-1] and value[0] in "`\"'*_" and value[0] not in value[1:-1]:
        value = value[1:-1].strip()
    return value.rstrip(",;:").strip()


def _skill_id(value: str) -> str:
    """The skill id a value names: its backticked id, else its first id-like word, lower-cased."""
    ticked = re.search(r"`\s*([^`]+?)\s*`", value)
    hit = _SKILL_ID.search(ticked.group(1) if ticked else _clean(value))
    return hit.group(0).lower() if hit else ""


def _cause_sentence(text: str) -> str:
    """The sentence of the prose that states the cause ("The bug is ...", "The failure is caused by ...")."""
    prose = _prose(text).replace("**", "").replace("`", "")
    hit = _CAUSE_SENTENCE.search(prose)
    if hit is None:
        return ""
    end = _SENTENCE_END.search(prose, hit.end())
    stop = len(prose) if end is None else end.end() if end.group(0) in ".!?" else end.start()
    return " ".join(prose[hit.start() : stop].split())
