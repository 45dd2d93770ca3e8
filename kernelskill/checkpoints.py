"""The checkpointer of a run: SQLite in its run directory, or one Postgres database for every run and host.

``checkpointer = sqlite`` (the default) keeps ``checkpoints.sqlite`` in the run directory. A
``postgres://`` URL puts every run's checkpoints in that database (``langgraph-checkpoint-postgres``),
so a run started on one host resumes on any other that reaches the database and has its run
directory. The tables are created on first use; concurrent first uses are serialized by an
advisory lock, so parallel eval tasks can all start on an empty database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SQLITE_FILE = "checkpoints.sqlite"
_SETUP_LOCK = 0x6B736B63  # pg_advisory_lock key held while the checkpoint tables are created or migrated


@contextmanager
def postgres_connection(url: str) -> Iterator[Any]:
    """An autocommit psycopg connection to ``url`` returning rows as dicts (what ``PostgresSaver`` needs)."""
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        yield conn


@contextmanager
def advisory_lock(conn: Any, key: int) -> Iterator[None]:
    """Hold a session-level Postgres advisory lock for the ``with`` block."""
    conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


@contextmanager
def open_checkpointer(run_dir: str | Path, postgres: str = "") -> Iterator[Any]:
    """The saver of one run: ``PostgresSaver`` on ``postgres`` when given, else SQLite in ``run_dir``."""
    if postgres:
        from langgraph.checkpoint.postgres import PostgresSaver

        with postgres_connection(postgres) as conn:
            saver = PostgresSaver(conn)
            with advisory_lock(conn, _SETUP_LOCK):
                saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(Path(run_dir) / SQLITE_FILE), check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()
