"""Run one evaluation in its own process, with a timeout and no secrets in its environment.

Candidate code is untrusted: it may raise, hang, segfault, or poison the CUDA context. Each
evaluation is a fresh ``python -m kernelskill.runner.worker`` process in its own session; on timeout
the whole process group is killed. Whatever happens there comes back as a typed
:class:`~.result.ReviewResult`; nothing propagates into the caller.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .result import ReviewResult, failure

_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
_SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "LANGSMITH_", "LANGCHAIN_", "KERNELSKILL_LLM_")


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without API keys, tokens or model-endpoint settings."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_review(
    task_path: str | Path,
    source: str,
    workdir: str | Path,
    candidate_id: str = "candidate",
    timeout_s: float = 300.0,
    device: str = "auto",
    **options: Any,
) -> ReviewResult:
    """Review ``source`` against the task in a child process; never raises for candidate faults.

    Args:
        task_path: the KernelBench-format reference task file.
        source: the candidate module's source (must define ``ModelNew``).
        workdir: where the candidate file, request and result are written.
        candidate_id: name used for files and in the result.
        timeout_s: wall-time limit for the whole evaluation.
        device: "auto" (CUDA when present), "cpu" (Triton interpreter) or "cuda".
        **options: passed to the worker (seed, trials, atol, rtol, time_trials, ...).
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_]", "_", candidate_id)
    cand = work / f"cand_{safe}.py"
    cand.write_text(source)
    req = {
        "task_path": str(Path(task_path).resolve()),
        "candidate_path": str(cand.resolve()),
        "candidate_id": candidate_id,
        "device": device,
        **options,
    }
    req_path, res_path = work / f"req_{safe}.json", work / f"res_{safe}.json"
    res_path.unlink(missing_ok=True)
    req_path.write_text(json.dumps(req))
    log_path = work / f"log_{safe}.txt"
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kernelskill.runner.worker", str(req_path), str(res_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=scrubbed_env(),
            cwd=str(work),
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return failure(
                "timeout",
                f"evaluation exceeded {timeout_s:g} s and was killed (hang or infinite loop?)",
                _tail(log_path),
                candidate_id,
                wall_s=time.perf_counter() - t0,
            )
    wall = time.perf_counter() - t0
    _kill_group(proc)  # leftovers (threads, children) never outlive the evaluation
    if code != 0 or not res_path.exists():
        how = _signal_name(code) if code < 0 else f"exit code {code}"
        return failure(
            "crashed",
            f"evaluation process died ({how}) before reporting a result",
            _tail(log_path),
            candidate_id,
            wall_s=wall,
        )
    result: ReviewResult = json.loads(res_path.read_text())
    result.setdefault("wall_s", wall)
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
