"""A run killed with SIGKILL resumes from its last finished node without redoing finished rounds."""

import subprocess
import sys

from resume_util import check_resumed, resume, start_and_kill


def test_resume_after_sigkill(tmp_path, task_path, candidate):
    runs = tmp_path / "runs"
    tid = "resume-test"
    before = start_and_kill(tmp_path, task_path, candidate, runs, tid, [])
    out = resume(runs, tid)
    assert out.returncode == 0, out.stdout + out.stderr
    assert tid in out.stdout
    assert (runs / tid / "checkpoints.sqlite").is_file()
    check_resumed(runs / tid, before)


def test_resume_unknown_thread(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kernelskill.cli", "resume", "nope", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "no run 'nope'" in out.stdout
