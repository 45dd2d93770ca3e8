"""Checkpoints and skill outcomes in a real PostgreSQL server started by the tests (tests/pg_util.py)."""

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.graph.context import load_context
from kernelskill.skills_kb.outcomes import JsonlStore, PostgresStore, open_store, store_for

from resume_util import check_resumed, resume, start_and_kill

cli = CliRunner()


def test_checkpointer_setting_is_validated(monkeypatch):
    assert load_context().checkpointer == "sqlite" and load_context().postgres() == ""
    monkeypatch.setenv("KERNELSKILL_CHECKPOINTER", "postgresql://u@db:5432/ks")
    assert load_context().postgres() == "postgresql://u@db:5432/ks"
    assert load_context(checkpointer="sqlite").postgres() == ""  # a flag wins over the environment
    with pytest.raises(ValueError, match="checkpointer must be sqlite or a postgres"):
        load_context(checkpointer="mysql://db/ks")


@pytest.mark.slow
def test_sigkill_then_resume_on_another_host_through_postgres(tmp_path, task_path, candidate, postgres_url):
    import psycopg

    runs, tid = tmp_path / "host-a" / "runs", "pg-resume"
    before = start_and_kill(tmp_path, task_path, candidate, runs, tid, ["--checkpointer", postgres_url])
    assert not (runs / tid / "checkpoints.sqlite").exists()  # the checkpoints are in the database
    thread = json.loads((runs / tid / "run.json").read_text())["checkpoint_thread"]
    assert thread.startswith(tid) and thread != tid
    # "another host": the run directory copied to another place; the checkpoints come from the database
    other = tmp_path / "host-b" / "runs"
    shutil.copytree(runs / tid, other / tid)
    shutil.rmtree(runs)
    out = resume(other, tid)
    assert out.returncode == 0, out.stdout + out.stderr
    check_resumed(other / tid, before)
    assert not (other / tid / "checkpoints.sqlite").exists() and not runs.exists()
    with psycopg.connect(postgres_url) as conn:
        threads = {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()}
    assert threads == {thread}


WRITER = """
import sys
from kernelskill.skills_kb.outcomes import PostgresStore
store = PostgresStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.append({"run": sys.argv[2], "task": "t", "round": i + 1, "skill_id": "split-k", "informative": True,
                  "success": True, "improved": i % 2 == 0, "gain": 0.5})
"""


def test_two_processes_write_outcomes_at_once_and_nothing_is_lost(tmp_path, postgres_url):
    n = 150
    # both start on an empty database: they also race to create the table
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, postgres_url, name, str(n)], stderr=subprocess.PIPE)
        for name in ("writer-a", "writer-b")
    ]
    for w in writers:
        assert w.wait(timeout=120) == 0, w.stderr.read().decode()
    records = PostgresStore(postgres_url).read()
    assert sorted((r["run"], r["round"]) for r in records) == sorted(
        (name, i + 1) for name in ("writer-a", "writer-b") for i in range(n)
    )
    # the same priors table as from the JSONL store holding the same records
    jsonl = JsonlStore(tmp_path / "outcomes.jsonl")
    for rec in records:
        jsonl.append(rec)
    from_pg = cli.invoke(app, ["skills", "stats", "--store", postgres_url])
    from_file = cli.invoke(app, ["skills", "stats", "--store", str(jsonl.path)])
    assert from_pg.exit_code == 0 and from_file.exit_code == 0, from_pg.output + from_file.output
    assert "300 round(s) recorded, 300 GPU-timed" in from_pg.output
    table = lambda out: out.split("\n", 1)[1]  # noqa: E731 - everything but the store line
    assert table(from_pg.output) == table(from_file.output) and "split-k" in table(from_pg.output)


def test_a_postgres_checkpointer_is_the_default_store(monkeypatch, postgres_url, tmp_path):
    monkeypatch.setenv("KERNELSKILL_CHECKPOINTER", postgres_url)
    store_for(tmp_path / "runs" / "task", load_context().postgres()).append(
        {"run": "r", "task": "t", "round": 1, "skill_id": "tiling", "informative": True, "improved": True}
    )
    assert isinstance(open_store(postgres_url), PostgresStore)
    shown = cli.invoke(app, ["skills", "stats"])
    assert shown.exit_code == 0, shown.output
    assert "1 round(s) recorded, 1 GPU-timed" in shown.output and "tiling" in shown.output
    assert "kernelskill_skill_outcomes" in shown.output and "postgres 127.0.0.1" in shown.output
