"""Making candidates and finding a run's working directory (shared by the model-backed roles)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kernelskill.graph.context import Context
from kernelskill.graph.state import Candidate, Origin, State


def make_candidate(state: State, source: str, origin: Origin, parent_id: str | None, rnd: int, note: str) -> Candidate:
    """A new candidate with a unique, readable id such as ``r1-optimizer-4``."""
    n = len(state.get("candidates", []))
    return Candidate(id=f"r{rnd}-{origin}-{n}", source=source, origin=origin, parent_id=parent_id, round=rnd, note=note)


def run_dir(ctx: Context) -> Path:
    """The run directory from the context, or a fresh temporary one (e.g. under Studio)."""
    if ctx.run_dir:
        path = Path(ctx.run_dir)
    else:
        path = Path(tempfile.gettempdir()) / "kernelskill-studio"
    path.mkdir(parents=True, exist_ok=True)
    return path
