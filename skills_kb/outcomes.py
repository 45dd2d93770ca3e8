"""The outcome store: one JSON line per finished optimization round, across tasks and runs.

Every round that applied a skill appends a record (task, skill, bottleneck, runtimes and speedups
before and after, improved or not, success or failure, timing kind) to ``skill_outcomes.jsonl`` in
the runs root, i.e. next to the run directories (``<parent of the run dir>/skill_outcomes.jsonl``),
or to ``$KERNELSKILL_SKILL_OUTCOMES``. :mod:`.priors` summarizes the store into per-skill priors.

Two backends behind one interface (:class:`OutcomeStore`): the JSONL file above (the default), and,
when the checkpointer is a ``postgres://`` URL, one table in that database
(:class:`PostgresStore`), shared by every run and host: each record is one ``INSERT`` (concurrent
writers are the database's business), read back in insertion order.

Only GPU-timed rounds (``timing_kind == "cuda_events"``) are *informative*: interpreter timings
say nothing about speed, so those rounds are recorded but marked ``informative: false``. Each
record is one ``write`` of one short line in append mode, so parallel eval workers sharing the
store do not interleave lines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

OUTCOMES_FILE = "skill_outcomes.jsonl"
OUTCOMES_ENV = "KERNELSKILL_SKILL_OUTCOMES"
POSTGRES_TABLE = "kernelskill_skill_outcomes"
_TABLE_LOCK = 0x6B736F75  # pg_advisory_lock key held while the table is created


def outcomes_path(run_dir: str | Path | None = None, *, root: str | Path | None = None) -> Path:
    """``$KERNELSKILL_SKILL_OUTCOMES``, else ``<parent of run_dir>/skill_outcomes.jsonl``, else ``<root>/...``."""
    env = os.environ.get(OUTCOMES_ENV)
    if env:
        return Path(env)
    if run_dir is not None:
        return Path(run_dir).parent / OUTCOMES_FILE
    return Path(root if root is not None else "runs") / OUTCOMES_FILE


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def round_record(
    state: Mapping[str, Any], review: Mapping[str, Any], improved: bool, run: str = ""
) -> dict[str, Any] | None:
    """The outcome record of a finished round, or None for the seed round (no skill applied).

    Args:
        state: the graph state before the reviewer's update (task, plan, best, decision, round).
        review: the review of the round's last candidate.
        improved: whether that candidate became the new best.
        run: the run's name (its directory), used to drop duplicate records after a resume.
    """
    plan = state.get("plan") or {}
    skill = plan.get("skill_id")
    if not skill or not state.get("round"):
        return None
    before = (state.get("best") or {}).get("review") or {}
    decision = state.get("decision") or {}
    success = review.get("status") == "correct"
    timing_kind = review.get("timing_kind") or before.get("timing_kind")
    before_ms = _float(before.get("runtime_ms"))
    after_ms = _float(review.get("runtime_ms")) if success else None
    gain = before_ms / after_ms - 1.0 if before_ms and after_ms else None
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
        "run": run,
        "task": (state.get("task") or {}).get("name", ""),
        "round": int(state.get("round") or 0),
        "skill_id": skill,
        "bottleneck": decision.get("bottleneck"),
        "rule": decision.get("rule"),
        "status": review.get("status"),
        "success": success,
        "improved": bool(improved),
        "runtime_before_ms": before_ms,
        "runtime_after_ms": after_ms,
        "speedup_before": _float(before.get("speedup_vs_eager")),
        "speedup_after": _float(review.get("speedup_vs_eager")) if success else None,
        "gain": gain,
        "timing_kind": timing_kind,
        "informative": timing_kind == "cuda_events",
    }


def append_outcome(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one record as one JSON line (creates the file and its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(dict(record), sort_keys=True) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


def record_round(
    run_dir: str | Path, state: Mapping[str, Any], review: Mapping[str, Any], improved: bool, postgres: str = ""
) -> bool:
    """Record a finished round in the run's store (:func:`store_for`); never raises (False when not written).

    Long-term memory is best effort: an unwritable store (OSError), an unreachable database or an odd
    state must never fail the review that produced the outcome, so every exception ends here.
    """
    try:
        record = round_record(state, review, improved, run=Path(run_dir).name)
        if record is None:
            return False
        store_for(run_dir, postgres).append(record)
    except Exception:  # noqa: BLE001 - see the docstring
        return False
    return True


def read_outcomes(path: str | Path) -> list[dict[str, Any]]:
    """Every well-formed record in the store (a missing file is an empty store; bad lines are skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return _well_formed(records)


def _well_formed(records: list[Any]) -> list[dict[str, Any]]:
    return [r for r in records if isinstance(r, dict) and r.get("skill_id")]


class OutcomeStore(Protocol):
    """Where outcome records go and come from."""

    def append(self, record: Mapping[str, Any]) -> None:
        """Add one record."""
        ...

    def read(self) -> list[dict[str, Any]]:
        """Every well-formed record, oldest first."""
        ...

    def describe(self) -> str:
        """Where the store is, for messages (no password)."""
        ...


@dataclass
class JsonlStore:
    """The default store: one JSON line per record in a file."""

    path: Path

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one line (see :func:`append_outcome`)."""
        append_outcome(self.path, record)

    def read(self) -> list[dict[str, Any]]:
        """See :func:`read_outcomes`."""
        return read_outcomes(self.path)

    def describe(self) -> str:
        """The file's path."""
        return str(self.path)


@dataclass
class PostgresStore:
    """One table (``kernelskill_skill_outcomes``: id, time written, the record as JSONB) in a Postgres database."""

    url: str
    _ready: bool = field(default=False, repr=False)

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def _setup(self, conn: Any) -> None:
        if self._ready:
            return
        from kernelskill.checkpoints import advisory_lock

        with advisory_lock(conn, _TABLE_LOCK):  # concurrent CREATE TABLEs can collide
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {POSTGRES_TABLE} (id BIGSERIAL PRIMARY KEY, "
                "written TIMESTAMPTZ NOT NULL DEFAULT now(), record JSONB NOT NULL)"
            )
        self._ready = True

    def append(self, record: Mapping[str, Any]) -> None:
        """Insert one record."""
        from psycopg.types.json import Jsonb

        with self._connect() as conn:
            self._setup(conn)
            conn.execute(f"INSERT INTO {POSTGRES_TABLE} (record) VALUES (%s)", (Jsonb(dict(record)),))

    def read(self) -> list[dict[str, Any]]:
        """Every record, in insertion order (an empty list before the first write)."""
        with self._connect() as conn:
            self._setup(conn)
            rows = conn.execute(f"SELECT record FROM {POSTGRES_TABLE} ORDER BY id").fetchall()
        return _well_formed([row[0] for row in rows])

    def describe(self) -> str:
        """The URL without its password."""
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.url)
        where = f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname', '')}"
        return f"postgres {where} table {POSTGRES_TABLE}"


def is_postgres(location: str | Path) -> bool:
    """True for a ``postgres://`` or ``postgresql://`` URL."""
    return str(location).startswith(("postgres://", "postgresql://"))


def open_store(location: str | Path) -> OutcomeStore:
    """The store at ``location``: a Postgres URL, else a JSONL file path."""
    return PostgresStore(str(location)) if is_postgres(location) else JsonlStore(Path(location))


def store_for(run_dir: str | Path | None, postgres: str = "") -> OutcomeStore:
    """The store of a run: the Postgres database of its checkpointer when set, else :func:`outcomes_path`."""
    return PostgresStore(postgres) if postgres else JsonlStore(outcomes_path(run_dir))
