"""Making candidates and finding a run's working directory (shared by the model-backed roles)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kernelskill.graph.context import Context
from kernelskill.graph.state import Candidate, Origin, State

from .codeblock import extract_code, truncated_code


def make_candidate(state: State, source: str, origin: Origin, parent_id: str | None, rnd: int, note: str) -> Candidate:
    """A new candidate with a unique, readable id such as ``r1-optimizer-4``."""
    n = len(state.get("candidates", []))
    return Candidate(id=f"r{rnd}-{origin}-{n}", source=source, origin=origin, parent_id=parent_id, round=rnd, note=note)


def make_candidates(
    state: State, sources: list[str], notes: list[str], origin: Origin, parent_id: str, rnd: int
) -> list[Candidate]:
    """One new candidate per source (with its note), numbered after the state's candidates and each other."""
    made: list[Candidate] = []
    for src, note in zip(sources, notes, strict=True):
        so_far: Any = {"candidates": [*state.get("candidates", []), *made]}
        made.append(make_candidate(so_far, src, origin, parent_id, rnd, note))
    return made


def run_dir(ctx: Context) -> Path:
    """The run directory from the context, or a fresh temporary one (e.g. under Studio)."""
    if ctx.run_dir:
        path = Path(ctx.run_dir)
    else:
        path = Path(tempfile.gettempdir()) / "kernelskill-studio"
    path.mkdir(parents=True, exist_ok=True)
    return path


def candidate_from_reply(
    state: State, reply: str, usage: dict[str, Any], origin: Origin, parent_id: str | None, rnd: int, note: str
) -> Candidate:
    """A candidate from a model reply: its code, or none and why (``note`` when the code is fine).

    A reply cut at the completion limit (``usage["truncated"]``, from the finish reason) has no
    source; its note says "truncated" and its partial code is kept for the diagnoser.
    """
    if usage.get("truncated"):
        partial = truncated_code(reply) or extract_code(reply)[0] or reply[-4000:]
        why = f"truncated: the reply was cut at the completion limit (finish reason {usage.get('finish_reason')})"
        cand = make_candidate(state, "", origin, parent_id, rnd, why)
        cand["partial"] = partial[-8000:]
        return cand
    source, problem = extract_code(reply)
    return make_candidate(state, source, origin, parent_id, rnd, problem or note)
