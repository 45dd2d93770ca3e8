"""Record / replay of model calls: a cassette makes any run reproducible and free to re-run.

A cassette is a JSON-lines file, one line per model call::

    {"role": "optimizer", "index": 1, "sha256": "...", "model": "gpt-4.1",
     "system": "...", "user": "...", "reply": "...", "usage": {"input_tokens": 812, "output_tokens": 430}}

``index`` is the role's call number in the run (0-based, counted from the state's token records,
so it is the same after a resume). ``sha256`` hashes the rendered system and user messages, as
stored: ``nodes/model/llm.py`` replaces the run directory by ``$RUN_DIR`` and decimal numbers (timings,
profile metrics, which vary between runs of the same trajectory) by ``#.#`` first. On
replay a call is answered by the entry with the same role and prompt hash (the one at the same
index first); no model is called. A prompt found nowhere in the cassette raises
:class:`ReplayDivergence`, naming the role, the call index and the first line where the prompt
differs from the recorded call with that index.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SEPARATOR = "\n=== user ===\n"


class ReplayDivergence(RuntimeError):
    """A replayed run asked for a prompt that the cassette does not hold."""


def prompt_hash(system: str, user: str) -> str:
    """sha256 (hex) of the rendered system and user messages."""
    return hashlib.sha256((system + SEPARATOR + user).encode()).hexdigest()


def record_call(path: str | Path, entry: dict[str, Any]) -> None:
    """Append one call to the cassette (the file and its folder are created when missing)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a") as f:
        f.write(json.dumps(entry) + "\n")


def load_cassette(path: str | Path) -> list[dict[str, Any]]:
    """All recorded calls, in order; :class:`ReplayDivergence` when the file is missing."""
    p = Path(path)
    if not p.is_file():
        raise ReplayDivergence(f"replay cassette not found: {p}")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def first_difference(recorded: str, current: str) -> str:
    """The first differing line of two prompts, as a readable two-line note."""
    old, new = recorded.splitlines(), current.splitlines()
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else "(end of prompt)"
        b = new[i] if i < len(new) else "(end of prompt)"
        if a != b:
            return f"line {i + 1}:\n  recorded: {a[:200]}\n  now:      {b[:200]}"
    return "no line differs (whitespace at the end of the prompt?)"


def replay_call(path: str | Path, role: str, index: int, system: str, user: str) -> dict[str, Any]:
    """The recorded entry answering this call; :class:`ReplayDivergence` when there is none."""
    entries = load_cassette(path)
    digest = prompt_hash(system, user)
    same = [e for e in entries if e["role"] == role and e["sha256"] == digest]
    if same:
        return next((e for e in same if e.get("index") == index), same[0])
    at_index = [e for e in entries if e["role"] == role and e.get("index") == index]
    where = f"replay diverged from cassette {path}: role {role}, call {index}"
    if not at_index:
        n = sum(1 for e in entries if e["role"] == role)
        raise ReplayDivergence(f"{where}: the cassette holds only {n} call(s) for this role")
    recorded = at_index[-1]["system"] + SEPARATOR + at_index[-1]["user"]
    raise ReplayDivergence(
        f"{where}: the prompt differs from the recorded one at {first_difference(recorded, system + SEPARATOR + user)}"
    )
