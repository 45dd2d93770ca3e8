"""Run one evaluation in its own process, with a timeout and no secrets in its environment.

Candidate code is untrusted: it may raise, hang, segfault, or poison the CUDA context. Each
evaluation is a fresh ``python -m kernelskill.runner.worker`` process in its own session; on timeout
the whole process group is killed. Whatever happens there comes back as a typed
:class:`~.result.ReviewResult`; nothing propagates into the caller.

Spare workers: a process serves exactly one evaluation, but it need not start when the evaluation
does. When a review (or a compiler-seed capture) takes its process, the next one is started at once
(``MODULE --spare``: it imports torch and, on a CUDA machine, the TorchInductor and Triton modules
that compiler-seed candidates and captures import, then waits on its stdin for one request), so
the interpreter start and those imports (measured on an H200 host: ~5 s for torch, ~7 s more for
``torch._inductor``'s) overlap the current work instead of adding to the next. ``prestart``
starts one ahead of its first use (the generator does it for the reviewer while it captures). A
spare that finds its stdin closed (the parent went away) exits; ``KERNELSKILL_SPARE_WORKER=0``
turns spares off.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import gpu_share
from .result import HELD_ELSEWHERE, ReviewResult, ReviewStatus, failure

_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
REVIEW_MODULE = "kernelskill.runner.worker"
_SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "LANGSMITH_", "LANGCHAIN_", "KERNELSKILL_LLM_")


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without API keys, tokens or model-endpoint settings."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def review_env() -> dict[str, str]:
    """What a review's process adds to the scrubbed environment.

    TorchInductor modules (compiler seeds) compile their kernels in-process: a compile-worker pool
    would take seconds to start in every evaluation, and Triton's on-disk cache makes kernels load fast.
    """
    return {"TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1")}


def prestart_reviewer() -> None:
    """Start the reviewer's spare process now, so it is warm when the first review comes."""
    if spares_enabled():
        SPARES.prestart(REVIEW_MODULE, scrubbed_env(review_env()))


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
    out = run_child(REVIEW_MODULE, req, work, safe, timeout_s, env_extra=review_env(), spare=True)
    if isinstance(out, ChildFailure):
        return failure(_status(out), out.digest, out.log_tail, candidate_id, wall_s=out.wall_s)
    result: ReviewResult = out.result
    result.setdefault("wall_s", out.wall_s)
    if needs_gpu_alone(result, req):
        # on a shared GPU another task's memory may be the cause: once more holding the GPU alone
        again = run_review(
            task_path, source, workdir, candidate_id, timeout_s, device, **{**options, **alone_request(result)}
        )
        again.setdefault("warnings", []).insert(
            0, f"reviewed again holding the shared GPU alone after: {result.get('error_digest', '')[:200]}"
        )
        return again
    if result.get("status") == "harness_error" and not options.get("low_memory"):
        # the reviewer's own failure: once more in low-memory mode (never charged to the candidate)
        again = run_review(
            task_path, source, workdir, candidate_id, timeout_s, device, **{**options, "low_memory": True}
        )
        again.setdefault("warnings", []).insert(0, f"reviewed again in low-memory mode after: {result['error_digest']}")
        return again
    return result


def _failure_text(result: Mapping[str, Any]) -> str:
    return " ".join(str(result.get(k, "")) for k in ("error_digest", "error_detail", "error"))


def alone_request(result: Mapping[str, Any]) -> dict[str, Any]:
    """The request's additions for a run holding the shared GPU alone after ``result`` ran out of memory.

    The memory to wait for: the result's ``need_bytes``, else a float64 run's estimate in its text, else
    the allocation its out-of-memory message says failed (a lower bound).
    """
    need = float(result.get("need_bytes") or 0)
    if not need:
        m = re.search(r"the float64 run needs about ([\d.]+) GiB", _failure_text(result))
        need = float(m[1]) * 2**30 if m else gpu_share.tried_bytes(_failure_text(result))
    return {"gpu_alone": True, "need_bytes": need}


def needs_gpu_alone(result: Mapping[str, Any], req: Mapping[str, Any]) -> bool:
    """A child's failed result (a review's or a capture's) that ran out of memory on a shared GPU, not yet alone.

    Another task's memory may be the cause (an out-of-memory, or a float64 run of the reference skipped
    while other processes held the device): the caller runs ``req`` once more with ``gpu_alone``.
    """
    if not gpu_share.active() or req.get("gpu_alone"):
        return False
    failed = result.get("status", "correct") != "correct" or result.get("ok") is False
    text = _failure_text(result)
    return failed and (gpu_share.out_of_memory(text) or HELD_ELSEWHERE in text)


def probe_task(
    task_path: str | Path, workdir: str | Path, timeout_s: float = 300.0, device: str = "auto", seed: int = 42
) -> ReviewResult:
    """Build the task's reference and run it once on its first inputs, in a child process.

    ``correct`` (with the reference's peak device memory and first-call time in ``metrics``) when
    the task is usable; ``invalid_task`` with one sentence when the reference raises, returns NaN /
    inf or does not fit; ``timeout`` / ``crashed`` when the process did not report.
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    req = {"task_path": str(Path(task_path).resolve()), "probe": True, "device": device, "seed": seed}
    out = run_child(REVIEW_MODULE, req, work, "probe", timeout_s, env_extra=review_env(), spare=True)
    if isinstance(out, ChildFailure):
        return failure(_status(out), out.digest, out.log_tail, "probe", wall_s=out.wall_s)
    result: ReviewResult = out.result
    result.setdefault("wall_s", out.wall_s)
    if needs_gpu_alone(result, req):
        out = run_child(
            REVIEW_MODULE, {**req, **alone_request(result)}, work, "probe", timeout_s, env_extra=review_env()
        )
        if isinstance(out, ChildFailure):
            return failure(_status(out), out.digest, out.log_tail, "probe", wall_s=out.wall_s)
        result = out.result
        result.setdefault("wall_s", out.wall_s)
    return result


def prime_baselines(
    task_path: str | Path,
    workdir: str | Path,
    timeout_s: float = 300.0,
    device: str = "auto",
    seed: int = 42,
    precision: str = "fp32",
) -> ReviewResult:
    """Time the task's eager and ``torch.compile`` baselines into the cache, in a child process.

    The reviews that follow find them there (``runner/worker.py: _baselines_only``). ``correct`` when
    they are cached (now or before); a failure changes nothing: the first review times them itself.
    Not a spare and not :func:`review_env`: its ``torch.compile`` of the reference uses Inductor's pool of
    compile workers, where a review compiles in-process.
    """
    req = {
        "task_path": str(Path(task_path).resolve()),
        "baselines_only": True,
        "device": device,
        "seed": seed,
        "precision": precision,
    }
    out = run_child(REVIEW_MODULE, req, Path(workdir), "baselines", timeout_s)
    if isinstance(out, ChildFailure):
        return failure(_status(out), out.digest, out.log_tail, "baselines")
    result: ReviewResult = out.result
    result.setdefault("wall_s", out.wall_s)
    return result


def _status(out: ChildFailure) -> ReviewStatus:
    """A review's status for a child that did not report (one stopped by its caller counts as crashed)."""
    return "timeout" if out.status == "timeout" else "crashed"


@dataclass
class ChildFailure:
    """A child process that timed out (``timeout``), died unreported (``crashed``) or was stopped (``cancelled``)."""

    status: Literal["timeout", "crashed", "cancelled"]
    digest: str
    log_tail: str
    wall_s: float


@dataclass
class ChildResult:
    """The JSON result a child process wrote, and how long it ran."""

    result: Any
    wall_s: float


def run_child(
    module: str,
    req: dict[str, Any],
    workdir: str | Path,
    name: str,
    timeout_s: float,
    env_extra: dict[str, str] | None = None,
    spare: bool = False,
    cancel: threading.Event | None = None,
) -> ChildResult | ChildFailure:
    """Run ``python -m MODULE REQ.json RES.json`` in its own session with a scrubbed environment.

    The request is written to ``workdir/req_NAME.json``, the output to ``log_NAME.txt``; on timeout
    the whole process group is killed. Used for reviews and for compiler-seed captures. With
    ``spare`` (a module that supports ``--spare``, i.e. the worker) a pre-started process is used
    when one is ready, and the next one is started. Once ``cancel`` is set, the process group is
    killed too (status ``cancelled``): its caller no longer wants the result.
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    req_path, res_path = work / f"req_{name}.json", work / f"res_{name}.json"
    seal_path = Path(f"{res_path}{SEAL_SUFFIX}")
    res_path.unlink(missing_ok=True)
    seal_path.unlink(missing_ok=True)
    req_path.write_text(json.dumps(req))
    log_path = work / f"log_{name}.txt"
    key = secrets.token_hex(16)  # handed over on stdin only: the child seals its result with it
    t0 = time.perf_counter()
    env = scrubbed_env(env_extra)
    with open(log_path, "w") as log:
        proc = SPARES.take(module, env) if spare and spares_enabled() else None
        if proc is None:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, str(req_path), str(res_path)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(work),
                start_new_session=True,
                text=True,
            )
        else:  # hand the waiting process its one request
            assert proc.stdin is not None
            proc.stdin.write(json.dumps([str(req_path), str(res_path), str(log_path), str(work)]) + "\n")
        assert proc.stdin is not None
        try:
            proc.stdin.write(key + "\n")
            proc.stdin.close()
        except OSError:  # it died before reading: reported below
            pass
        # on a shared GPU the limit grows by the time the launch waits for the GPU meanwhile, as its deadline
        # does (graph/deadline.py): a capture queued behind other workers' timings is not killed for it
        shared = bool(os.environ.get(gpu_share.WAIT_LOG_ENV, "").strip())
        try:
            code = gpu_share.wait_credited(proc, timeout_s, gpu_share.credited if shared else None, cancel=cancel)
        except subprocess.TimeoutExpired as e:
            _kill_group(proc)
            limit, extra = f"{timeout_s:g} s", e.timeout - timeout_s
            if extra > 0.5:
                limit = f"{e.timeout:.6g} s ({limit} + {extra:.0f} s waited for the shared GPU)"
            return ChildFailure(
                "timeout",
                f"evaluation exceeded {limit} and was killed (hang or infinite loop?)",
                _tail(log_path),
                time.perf_counter() - t0,
            )
        if code is None:  # cancel was set
            _kill_group(proc)
            wall = time.perf_counter() - t0
            return ChildFailure("cancelled", f"stopped by its caller after {wall:.0f} s", _tail(log_path), wall)
    wall = time.perf_counter() - t0
    _kill_group(proc)  # leftovers (threads, children) never outlive the evaluation
    if code != 0 or not res_path.exists():
        how = _signal_name(code) if code < 0 else f"exit code {code}"
        return ChildFailure(
            "crashed", f"evaluation process died ({how}) before reporting a result", _tail(log_path), wall
        )
    text = res_path.read_text()
    seal = seal_path.read_text().strip() if seal_path.exists() else ""
    if not hmac.compare_digest(seal, _seal(text, key)):
        return ChildFailure(
            "crashed",
            "the evaluation process's result is not its own (no valid seal): something other than the reviewer "
            "wrote it, such as the candidate before exiting",
            _tail(log_path),
            wall,
        )
    return ChildResult(json.loads(text), wall)


SEAL_SUFFIX = ".seal"


def _seal(text: str, key: str) -> str:
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def read_key() -> str:
    """The child's sealing key: the line its parent writes on stdin after the request (empty from a terminal).

    Read before any candidate code is imported, and kept by the child's ``main`` only: a candidate that writes
    a result file itself cannot seal it.
    """
    return "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.readline().strip()


def write_result(path: str, result: Any, key: str) -> None:
    """Write a child's result and its seal (``PATH.seal``, an HMAC of the text under ``key``)."""
    text = json.dumps(result, default=str)
    Path(path).write_text(text)
    Path(f"{path}{SEAL_SUFFIX}").write_text(_seal(text, key))


def spares_enabled() -> bool:
    """Spare workers are on unless ``KERNELSKILL_SPARE_WORKER=0``."""
    return os.environ.get("KERNELSKILL_SPARE_WORKER", "1") != "0"


class _Spares:
    """At most one waiting process per module, made for one environment; each serves one request.

    The modules are the reviewer's worker and the compiler-seed capture. Thread-safe: the generator
    captures two variants at once.
    """

    def __init__(self) -> None:
        self.waiting: dict[str, tuple[tuple[tuple[str, str], ...], subprocess.Popen]] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    def take(self, module: str, env: dict[str, str]) -> subprocess.Popen | None:
        """The ready spare for this module and environment (None on first use), and start the next."""
        with self._lock:
            proc = self._ready(module, env)
            if proc is not None:
                del self.waiting[module]
            self._start(module, env)
        return proc

    def prestart(self, module: str, env: dict[str, str]) -> None:
        """Have a spare waiting for this module and environment (start one unless there is one)."""
        with self._lock:
            if self._ready(module, env) is None:
                self._start(module, env)

    def _ready(self, module: str, env: dict[str, str]) -> subprocess.Popen | None:
        key, proc = self.waiting.get(module, ((), None))
        if proc is None or key != tuple(sorted(env.items())) or proc.poll() is not None:
            return None  # none, made for another environment (never to be used), or it died waiting
        return proc

    def _start(self, module: str, env: dict[str, str]) -> None:
        if module in self.waiting:
            _kill_group(self.waiting.pop(module)[1])
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--spare"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tempfile.gettempdir(),
            start_new_session=True,
            text=True,
        )
        self.waiting[module] = (tuple(sorted(env.items())), proc)

    def close(self) -> None:
        """Stop every waiting spare (at exit)."""
        with self._lock:
            for _, proc in self.waiting.values():
                _kill_group(proc)
            self.waiting.clear()


SPARES = _Spares()


def request_paths(argv: list[str], warm_modules: tuple[str, ...]) -> tuple[str, str] | None:
    """A child module's request and result paths: ``argv[1:3]``, or, with ``--spare``, from stdin.

    ``--spare``: import ``warm_modules`` (:func:`warm_cuda_imports`), then wait for one request line
    ``[request path, result path, log path, working directory]``; the log file replaces stdout and
    stderr. None when stdin closes first (the parent went away). A failed import is ignored: the
    request then pays for it itself.
    """
    if argv[1:] != ["--spare"]:
        return argv[1], argv[2]
    try:
        warm_cuda_imports(warm_modules)
    except Exception:  # noqa: BLE001, S110 - best effort by design
        pass
    line = sys.stdin.readline()
    if not line.strip():
        return None
    req_path, res_path, log_path, cwd = json.loads(line)
    os.chdir(cwd)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return req_path, res_path


def warm_cuda_imports(modules: tuple[str, ...]) -> None:
    """Import torch, and ``modules`` too when CUDA is present and Triton is not interpreted.

    Only on a CUDA machine: there compiler seeds exist and their imports (``torch._inductor``) are the
    largest part of a candidate's load. Without CUDA (or under ``TRITON_INTERPRET=1``, which triton
    reads when kernels are decorated) nothing beyond torch is imported.
    """
    import importlib

    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return
    for name in modules:
        importlib.import_module(name)


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
