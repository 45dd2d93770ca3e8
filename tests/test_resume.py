"""A run killed with SIGKILL resumes from its last finished node without redoing finished rounds."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from scripts_util import fenced, write_script


def _events(run_dir):
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_resume_after_sigkill(tmp_path, task_path, candidate):
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
    runs = tmp_path / "runs"
    tid = "resume-test"
    cmd = [sys.executable, "-m", "kernelskill.cli"]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen(
        cmd
        + [
            "optimize",
            str(task_path),
            "--scripted",
            str(script),
            "--device",
            "cpu",
            "--rounds",
            "2",
            "--runs-dir",
            str(runs),
            "--thread-id",
            tid,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    run_dir = runs / tid
    deadline = time.time() + 300
    while time.time() < deadline:
        if any(e["node"] == "optimizer" and e["round"] == 2 for e in _events(run_dir)):
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.2)
    else:
        raise AssertionError("round 2 never started")
    time.sleep(1.5)  # inside the round-2 review now (the candidate is held)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _events(run_dir)
    assert not (run_dir / "report.json").exists()
    marker.unlink()

    out = subprocess.run(
        cmd + ["resume", tid, "--runs-dir", str(runs)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert tid in out.stdout
    events = _events(run_dir)
    after = events[len(before) :]
    assert {e["pid"] for e in before}.isdisjoint({e["pid"] for e in after})
    # nothing that had finished before the kill ran again
    assert [e["node"] for e in after] == ["reviewer"]
    counts = Counter((e["node"], e["round"]) for e in events)
    assert counts[("generator", 0)] == 1
    assert counts[("optimizer", 1)] == 1 and counts[("optimizer", 2)] == 1
    report = json.loads((run_dir / "report.json").read_text())
    assert [e["round"] for e in report["trajectory"]] == [0, 1, 2]
    assert "round budget" in report["stop_reason"]


def test_resume_unknown_thread(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kernelskill.cli", "resume", "nope", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "no run 'nope'" in out.stdout
