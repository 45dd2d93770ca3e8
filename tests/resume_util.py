"""Kill a scripted run with SIGKILL inside its round-2 review, then resume it: shared by the checkpointer tests."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from scripts_util import fenced, write_script

CLI = [sys.executable, "-m", "kernelskill.cli"]


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_and_kill(tmp_path: Path, task_path: Path, candidate, runs: Path, tid: str, extra: list[str]) -> list[dict]:
    """Start ``optimize`` (2 rounds, scripted, CPU), SIGKILL its process group inside the round-2 review.

    Returns the events written before the kill (the held candidate is released afterwards).
    """
    marker = tmp_path / "hold"
    marker.write_text("held")
    # The round-2 candidate waits while the marker exists, so the run can be killed inside its review.
    held = candidate("good").replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        "        import os, time\n"
        f"        while os.path.exists({str(marker)!r}):\n"
        "            time.sleep(0.05)\n",
        1,
    )
    script = write_script(
        tmp_path / "script",
        [
            {"role": "generator", "reply": fenced(candidate("good"))},
            {"role": "optimizer", "match": r"Round: 1\b", "reply": fenced(candidate("good"))},
            {"role": "optimizer", "match": r"Round: 2\b", "reply": fenced(held)},
        ],
    )
    args = ["optimize", str(task_path), "--scripted", str(script), "--device", "cpu", "--rounds", "2"]
    proc = subprocess.Popen(
        CLI + args + ["--runs-dir", str(runs), "--thread-id", tid, *extra],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    run_dir = runs / tid
    deadline = time.time() + 300
    while time.time() < deadline:
        if any(e["node"] == "optimizer" and e["round"] == 2 for e in events(run_dir)):
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    else:
        raise AssertionError("round 2 never started")
    time.sleep(1.5)  # inside the round-2 review now (the candidate is held)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = events(run_dir)
    assert not (run_dir / "report.json").exists()
    marker.unlink()
    return before


def resume(runs: Path, tid: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + ["resume", tid, "--runs-dir", str(runs)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def check_resumed(run_dir: Path, before: list[dict]) -> None:
    """Only the killed review ran again, in a new process; the report has every round."""
    all_events = events(run_dir)
    after = all_events[len(before) :]
    assert {e["pid"] for e in before}.isdisjoint({e["pid"] for e in after})
    # nothing that had finished before the kill ran again
    assert [e["node"] for e in after] == ["reviewer"]
    counts = Counter((e["node"], e["round"]) for e in all_events)
    assert counts[("generator", 0)] == 1
    assert counts[("optimizer", 1)] == 1 and counts[("optimizer", 2)] == 1
    report = json.loads((run_dir / "report.json").read_text())
    assert [e["round"] for e in report["trajectory"]] == [0, 1, 2]
    assert "round budget" in report["stop_reason"]
