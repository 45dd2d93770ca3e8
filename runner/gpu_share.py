"""Several evaluations on one GPU with exclusive timings: a reader-writer lock across processes.

``kernelskill eval --gpus 0,0,0`` runs three task workers on GPU 0. Every process that runs kernels
on that GPU holds its lock *shared* while it does (the reference, correctness checks, compiler-seed
captures), and a timing of record (CUDA events: a candidate, eager, torch.compile) holds it
*exclusive*. While a candidate or a baseline is timed, no other process's kernels run on that GPU;
only CPU work (compiling, planning) goes on beside it, on the other workers' own cores.

Writers go first: a timing that waits closes a turnstile that new shared holders must pass, so it
waits only for the shared holders already in, never behind a stream of new ones. A process that
holds the lock shared and starts a timing gives its share up first (no deadlock between two such
processes) and takes it back afterwards. Work on the CPU alone inside a shared hold (a compile, a
Triton kernel's JIT compile at its first call: :func:`compile_released`) runs under :func:`released`,
which gives the share up meanwhile, so a timing need not wait for it; a long shared hold (a review's
checks) gives its share up between its steps while a timing is queued (:func:`yield_to_timing`). The
autotuning benchmarks inside such a compile (Inductor's max-autotune) take the GPU exclusive, one turn
per tuned kernel (:func:`tune_alone`, :func:`tuning`): their choice is made on an idle GPU, and a long
autotuning compile never keeps the other workers' timings waiting.

Waiting is not the task's own time: with ``KERNELSKILL_GPU_WAIT_LOG`` set (a file per task launch, by
the eval), every wait is appended there, and the launch's deadline and hard limit are extended by the
sum (:func:`credited`; ``graph/deadline.py`` and the eval's launcher read it).

With ``KERNELSKILL_GPU_HOLD_LOG`` set (the eval: ``gpu-holds.txt`` in each run directory), every hold
is appended there when it ends: ``END_UNIX PID KIND HELD_S WAITED_S LABEL``. KIND is ``shared``,
``exclusive`` or ``released`` (a shared hold given up meanwhile, for a compile); a shared hold's HELD_S
leaves out the time it was given up (its ``released`` and ``exclusive`` lines); LABEL says what held it
(``review``, ``seed:VARIANT``, ``timing``, ``ncu``, ``tuning:FUNCTION``, ``compile``). So a run shows who
kept the GPU, and for how long.

The lock files live in the directory named by ``KERNELSKILL_GPU_SHARE`` (one directory per physical
GPU; the eval sets it only where workers share a GPU). Without it every function here is a no-op.
The locks are ``flock`` locks: the kernel releases them when a process dies, a killed one too.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ENV = "KERNELSKILL_GPU_SHARE"
WAIT_LOG_ENV = "KERNELSKILL_GPU_WAIT_LOG"
HOLD_LOG_ENV = "KERNELSKILL_GPU_HOLD_LOG"
HOLD_LOG_NAME = "gpu-holds.txt"  # the eval's hold log, one in each run directory
WAIT_MAX_ENV = "KERNELSKILL_GPU_WAIT_MAX"  # at most this much credit (seconds), the launch's own limit
MIN_LOGGED_S = 0.01  # shorter waits are not worth a line


@dataclass
class _Holder:
    """This process's hold on one lock directory (locks belong to open files, one pair per process)."""

    gate: IO[bytes]
    data: IO[bytes]
    shared: int = 0
    exclusive: int = 0
    pid: int = field(default_factory=os.getpid)  # a forked child opens its own files
    waited_s: dict[str, float] = field(default_factory=lambda: {"shared": 0.0, "exclusive": 0.0})
    away_s: float = 0.0  # seconds a shared hold of this process was given up (released, or for an exclusive turn)


_HOLDERS: dict[str, _Holder] = {}


def active() -> bool:
    """True when this process's GPU is shared with other workers."""
    return bool(os.environ.get(ENV, "").strip())


def _holder() -> _Holder | None:
    where = os.environ.get(ENV, "").strip()
    if not where:
        return None
    if not os.path.isabs(where):  # processes of one GPU run in different directories
        raise ValueError(f"{ENV} must be an absolute path, not {where!r}")
    if where not in _HOLDERS or _HOLDERS[where].pid != os.getpid():
        Path(where).mkdir(parents=True, exist_ok=True)
        _HOLDERS[where] = _Holder(open(Path(where) / "gate.lock", "a+b"), open(Path(where) / "gpu.lock", "a+b"))  # noqa: SIM115
    return _HOLDERS[where]


def _waited(h: _Holder, kind: str, seconds: float) -> None:
    h.waited_s[kind] += seconds
    log = os.environ.get(WAIT_LOG_ENV, "").strip()
    if log and seconds >= MIN_LOGGED_S:
        with open(log, "a") as f:  # one short append per wait: whole lines, whatever process writes
            f.write(f"{seconds:.3f}\n")


def _held(kind: str, t_start: float, waited_s: float, label: str, away_s: float = 0.0) -> None:
    """One line of the hold log: held since ``t_start``, less ``away_s`` given up meanwhile."""
    log = os.environ.get(HOLD_LOG_ENV, "").strip()
    if not log:
        return
    held = max(0.0, time.perf_counter() - t_start - away_s)
    with contextlib.suppress(OSError), open(log, "a") as f:  # one short append per hold: whole lines
        f.write(f"{time.time():.2f} {os.getpid()} {kind} {held:.3f} {waited_s:.3f} {label or '-'}\n")


def hold_totals(paths: Iterable[str | Path]) -> dict[str, dict[str, float]]:
    """The holds of hold logs per ``KIND WHAT`` (the label up to its first ``:``), the longest held first.

    Each: ``holds`` (count), ``held_s`` and ``waited_s`` (sums). Missing files and malformed lines are skipped.
    """
    totals: dict[str, dict[str, float]] = {}
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) != 6:
                continue
            try:
                held, waited = float(parts[3]), float(parts[4])
            except ValueError:
                continue
            t = totals.setdefault(f"{parts[2]} {parts[5].split(':')[0]}", {"holds": 0, "held_s": 0.0, "waited_s": 0.0})
            t["holds"] += 1
            t["held_s"] += held
            t["waited_s"] += waited
    ranked = sorted(totals.items(), key=lambda kv: -kv[1]["held_s"])
    return {
        k: {"holds": v["holds"], "held_s": round(v["held_s"], 1), "waited_s": round(v["waited_s"], 1)}
        for k, v in ranked
    }


def credited(path: str | None = None, cap: float | None = None) -> float:
    """Seconds the processes of this launch have waited for the shared GPU, at most ``KERNELSKILL_GPU_WAIT_MAX``.

    0 without a wait log (a GPU of its own, or no eval). ``path`` / ``cap``: the log and the cap
    (default: this process's ``KERNELSKILL_GPU_WAIT_LOG`` / ``KERNELSKILL_GPU_WAIT_MAX``).
    """
    log = path if path is not None else os.environ.get(WAIT_LOG_ENV, "").strip()
    if not log:
        return 0.0
    try:
        with open(log) as f:
            total = sum(float(x) for x in f.read().split() if x.replace(".", "", 1).isdigit())
    except OSError:
        return 0.0
    if cap is None:
        raw = os.environ.get(WAIT_MAX_ENV, "").strip()
        cap = float(raw) if raw else None
    return total if cap is None else min(total, cap)


def wait_credited(
    proc: subprocess.Popen[Any],
    timeout_s: float,
    credit: Callable[[], float] | None = None,
    poll_s: float = 0.5,
    cancel: threading.Event | None = None,
) -> int | None:
    """``proc``'s exit code, or None once ``cancel`` is set; ``TimeoutExpired`` once the limit is reached.

    The limit: ``timeout_s``, plus what ``credit()`` (e.g. :func:`credited`: the time the launch waited for
    the shared GPU) grew by since the call, read every ``poll_s`` seconds; the exception's ``timeout`` is
    the limit reached. Without ``credit`` and ``cancel``, a plain wait.
    """
    if credit is None and cancel is None:
        return proc.wait(timeout=timeout_s)
    credit0 = credit() if credit else 0.0
    end = time.monotonic() + timeout_s
    while True:
        if cancel is not None and cancel.is_set():
            return None
        grown = credit() - credit0 if credit else 0.0
        left = end + grown - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s + grown)
        try:
            return proc.wait(timeout=min(poll_s, left))
        except subprocess.TimeoutExpired:
            continue


def _enter_shared(h: _Holder) -> float:
    t0 = time.perf_counter()
    fcntl.flock(h.gate, fcntl.LOCK_EX)  # pass the turnstile: wait while a timing is queued
    fcntl.flock(h.gate, fcntl.LOCK_UN)
    fcntl.flock(h.data, fcntl.LOCK_SH)
    waited = time.perf_counter() - t0
    _waited(h, "shared", waited)
    return waited


@contextmanager
def shared(label: str = "") -> Iterator[None]:
    """Hold the GPU shared: other processes' work may run beside this, but no timing of record.

    ``label``: what holds it, for the hold log (see the module doc).
    """
    h = _holder()
    if h is None or h.shared or h.exclusive:
        if h is not None:
            h.shared += 1
        try:
            yield
        finally:
            if h is not None:
                h.shared -= 1
        return
    waited = _enter_shared(h)
    t_in, away_in = time.perf_counter(), h.away_s
    h.shared += 1
    try:
        yield
    finally:
        h.shared -= 1
        if not h.shared and not h.exclusive:
            fcntl.flock(h.data, fcntl.LOCK_UN)
            give_room()
        _held("shared", t_in, waited, label, h.away_s - away_in)


@contextmanager
def exclusive(label: str = "") -> Iterator[None]:
    """Hold the GPU alone (for a timing of record): waits for the shared holders already in.

    ``label``: what holds it, for the hold log (see the module doc).
    """
    h = _holder()
    if h is None or h.exclusive:
        if h is not None:
            h.exclusive += 1
        try:
            yield
        finally:
            if h is not None:
                h.exclusive -= 1
        return
    had_share = h.shared > 0
    t0 = time.perf_counter()
    if had_share:
        fcntl.flock(h.data, fcntl.LOCK_UN)  # give the share up before queueing (see the module doc)
    fcntl.flock(h.gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(h.data, fcntl.LOCK_EX)
    finally:
        fcntl.flock(h.gate, fcntl.LOCK_UN)
    waited = time.perf_counter() - t0
    _waited(h, "exclusive", waited)
    t_in = time.perf_counter()
    h.exclusive += 1
    try:
        yield
    finally:
        h.exclusive -= 1
        fcntl.flock(h.data, fcntl.LOCK_UN)
        _held("exclusive", t_in, waited, label)
        if had_share:
            _enter_shared(h)
            h.away_s += time.perf_counter() - t0


@contextmanager
def released(label: str = "compile") -> Iterator[None]:
    """Give this process's shared hold up for work on the CPU alone (compiling), and take it back after.

    A timing queued meanwhile runs instead of waiting for the compile to end (while a shared holder
    compiles, a queued timing closes the turnstile and every other worker's GPU work waits behind it).
    The process's queued GPU work is finished first (``torch.cuda.synchronize``), so none of it runs
    beside a timing; the body must not start GPU work of its own (a hold taken inside it is a hold of
    its own). A no-op without a shared hold, or inside an exclusive one. ``label``: the hold log's.
    """
    h = _holder()
    if h is None or h.exclusive or not h.shared or capturing():
        yield
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        give_room()
    depth, h.shared = h.shared, 0
    fcntl.flock(h.data, fcntl.LOCK_UN)
    t_out = time.perf_counter()
    try:
        yield
    finally:
        waited = _enter_shared(h)
        h.shared = depth
        h.away_s += time.perf_counter() - t_out
        _held("released", t_out, waited, label)


def capturing() -> bool:
    """True while this process captures a CUDA graph on the current stream (no synchronize allowed then)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())


def timing_queued(h: _Holder) -> bool:
    """True when another process's timing waits at the turnstile (or a shared holder is passing it just now)."""
    try:
        fcntl.flock(h.gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(h.gate, fcntl.LOCK_UN)
    return False


def yield_to_timing() -> float:
    """Inside a shared hold: when a timing is queued, give the share up until it has run, then take it back.

    A long shared hold (a review's checks: the reference, the candidate's first calls and their compiles,
    five input sets) otherwise keeps a queued timing, and every worker queued behind it, waiting to its
    end. Called between the steps of such a hold. The process's queued GPU work is finished first, as in
    :func:`released`. The seconds the share was given up (0.0 when nothing was queued, without a shared
    hold, or inside an exclusive one).
    """
    h = _holder()
    if h is None or h.exclusive or not h.shared or not timing_queued(h):
        return 0.0
    away_before = h.away_s
    with released("yield"):  # nothing to do meanwhile: the share back through the turnstile, behind the timing
        pass
    return h.away_s - away_before


def in_share(fn: Any, label: str = "") -> Any:
    """``fn`` run under :func:`shared`, its GPU work finished before the share is given up again.

    For the program a compile returns when the whole first call (TorchDynamo's trace, the compile)
    runs under :func:`released`: the trace and the compile keep no timing waiting, and the program's
    run takes the share back for as long as it runs. Attributes of ``fn`` (e.g. ``_boxed_call``) are kept.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with shared(label):
            out = fn(*args, **kwargs)
            h = _holder()
            torch = sys.modules.get("torch")
            if h is not None and h.shared == 1 and not h.exclusive and torch is not None:
                if torch.cuda.is_initialized():
                    torch.cuda.synchronize()  # the share is given up next: nothing of it may run on
            return out

    return run


_TUNED_ALONE: set[str] = set()  # the functions of this process already wrapped by tune_alone
# Inductor's autotuning loops, each one turn as a whole (all the configs or templates of one kernel, not one turn
# per config): (module, class, method)
_TUNING_LOOPS = (
    ("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark_in_current_process"),  # max-autotune
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "benchmark_all_configs"),  # at a first run
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "coordinate_descent_tuning"),
)
_BENCHMARKER = "torch._inductor.runtime.benchmarking"


@contextmanager
def tuning(label: str = "tuning") -> Iterator[None]:
    """The hold of an autotuning benchmark: the GPU alone where this process holds nothing, else the hold it has.

    Inside a compile that gave its share up (:func:`released`: Inductor's max-autotune benchmarks as it
    compiles), the benchmark takes the GPU exclusive: its choice is made on an idle GPU, and the compile
    around it keeps no other worker's timing waiting. Inside a hold (a kernel's configs tuned at its first
    run, in a shared correctness check or a timing's first call), it runs there: a turn of its own per
    tuned kernel would cost a network with hundreds of kernels as many waits for the GPU.
    """
    h = _holder()
    if h is None or h.shared or h.exclusive:
        yield
        return
    with exclusive(label):
        yield


def tune_alone(inductor: bool = False) -> None:
    """Make every autotuning benchmark of this process run under :func:`tuning` (a no-op unless shared).

    Inductor's tuning loops (:data:`_TUNING_LOOPS`: max-autotune's template choices for one GEMM or
    convolution, the configs of one kernel tuned at its first run, coordinate descent) take one turn for the
    whole loop, with its inputs' fills; every other benchmark (Inductor's ``benchmark_gpu``,
    ``triton.testing.do_bench`` under ``@triton.autotune``) one of its own.

    Inductor's modules are wrapped when already imported (a candidate that is Inductor's output imports
    them), or imported first with ``inductor`` (before a compile: it imports them as it goes, and tunes at
    once). Each function is wrapped once; call again after an import to cover what it brought.
    """
    if not active():
        return

    def alone(fn: Any) -> Any:
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "benchmark"
        label = f"tuning:{name.split('<locals>.')[-1]}"

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with tuning(label):
                return fn(*args, **kwargs)

        return run

    def loaded(module: str) -> Any:
        if inductor:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        return sys.modules.get(module)

    for module, cls_name, name in _TUNING_LOOPS:
        key = f"{module}.{cls_name}.{name}"
        cls = getattr(loaded(module), cls_name, None)
        raw = cls.__dict__.get(name) if isinstance(cls, type) else None
        if key in _TUNED_ALONE or raw is None:  # another torch version: the catch-alls below still hold
            continue
        setattr(cls, name, classmethod(alone(raw.__func__)) if isinstance(raw, classmethod) else alone(raw))
        _TUNED_ALONE.add(key)
    if "triton.testing.do_bench" not in _TUNED_ALONE:
        with contextlib.suppress(ImportError):
            import triton.testing

            triton.testing.do_bench = alone(triton.testing.do_bench)
            _TUNED_ALONE.add("triton.testing.do_bench")
    if "triton.JITFunction._do_compile" not in _TUNED_ALONE:  # a kernel's compile: the CPU alone
        with contextlib.suppress(ImportError):
            from triton.runtime.jit import JITFunction

            if compile_released(JITFunction, "_do_compile"):
                _TUNED_ALONE.add("triton.JITFunction._do_compile")
    benchmarker = getattr(loaded(_BENCHMARKER), "benchmarker", None)
    if benchmarker is not None and "benchmarker.benchmark_gpu" not in _TUNED_ALONE:
        # the instance every Inductor module calls: an attribute of its own shadows the method
        benchmarker.benchmark_gpu = alone(benchmarker.benchmark_gpu)
        _TUNED_ALONE.add("benchmarker.benchmark_gpu")


def compile_released(cls: type, name: str) -> bool:
    """Make ``cls.name`` (a compile: Triton's JIT compile of one kernel specialization) run under :func:`released`.

    A Triton kernel compiles at its first call with new arguments' specialization, often inside a shared
    hold (a candidate's first call in a review, a tuning candidate's first run): its seconds on the CPU then
    keep no queued timing waiting. False when ``cls`` has no such function (another Triton version).
    """
    raw = cls.__dict__.get(name)
    if not callable(raw):
        return False

    @functools.wraps(raw)
    def run(*args: Any, **kwargs: Any) -> Any:
        with released():
            return raw(*args, **kwargs)

    setattr(cls, name, run)
    return True


@contextmanager
def hold(alone: bool, label: str = "", need_bytes: float = 0.0) -> Iterator[None]:
    """:func:`exclusive` for a process asked to run holding the GPU alone (``gpu_alone``), else :func:`shared`.

    Run alone after an out-of-memory, it first waits for ``need_bytes`` of free memory (:func:`wait_for_room`).
    """
    if not alone:
        with shared(label):
            yield
        return
    wait_for_room(need_bytes)
    with exclusive(label):
        yield


_OUT_OF_MEMORY = (  # lower case: see out_of_memory
    "out of memory",
    "outofmemoryerror",
    "cudaerrormemoryallocation",
    "_alloc_failed",
    "device_allocation_failed",
)


def out_of_memory(text: str) -> bool:
    """A failure's text says the device ran out of memory.

    PyTorch's allocator (``OutOfMemoryError``), the CUDA runtime (``CUDA error: out of memory``,
    ``cudaErrorMemoryAllocation``, raised as an ``AcceleratorError`` by a launch or a library's own
    allocation) or a CUDA library (cuBLAS / cuDNN / cuFFT ``..._ALLOC_FAILED``, cuDNN 9's
    ``CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED``).
    """
    low = text.lower()
    return any(s in low for s in _OUT_OF_MEMORY)


def waited() -> dict[str, float] | None:
    """Seconds this process has waited for the GPU lock (``None`` when the GPU is not shared)."""
    h = _holder()
    return None if h is None else {k: round(v, 3) for k, v in h.waited_s.items()}


ROOM_WAIT_MAX_S = 120.0  # at most this long for other processes' memory to leave before a run alone
ROOM_SLACK_BYTES = 1 << 30  # memory other processes may hold before an out-of-memory is called theirs
ROOM_WANTED = "room-wanted."  # + pid: in the lock directory while that process waits for memory (wait_for_room)


def room_wanted() -> bool:
    """Another process of this GPU waits for device memory to be freed (:func:`wait_for_room`)."""
    where = os.environ.get(ENV, "").strip()
    if not where:
        return False
    try:
        with os.scandir(where) as entries:
            marks = [e.path for e in entries if e.name.startswith(ROOM_WANTED)]
    except OSError:
        return False
    wanted = False
    for mark in marks:
        pid = mark.rsplit(".", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if _alive(int(pid)):
            wanted = True
        else:  # its process was killed while it waited: the mark would ask for the caches forever
            with contextlib.suppress(OSError):
                os.unlink(mark)
    return wanted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def give_room() -> bool:
    """Give this process's cached, unused device memory back while another process waits for room; True if so.

    PyTorch's allocator keeps the blocks a process freed (a float64 reference run's, a capture's) for its next
    allocations; to another process they are memory in use. A process of a shared GPU calls this at the end
    of each hold and as it gives its share up for a compile, so a run alone waiting for room after an
    out-of-memory gets the others' caches, not only the memory of processes that end. Live tensors stay.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized() or capturing() or not room_wanted():
        return False
    torch.cuda.empty_cache()
    return True


def free_device_memory() -> None:
    """Give this process's cached device memory back (after a failure or a task, its tensors gone with its frames)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def elsewhere_bytes() -> int:
    """Memory of this process's CUDA device that other processes hold (beyond this one's reserve)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return max(0, int(total - free - torch.cuda.memory_reserved()))


def tried_bytes(text: str) -> float:
    """The allocation an out-of-memory message says failed (PyTorch's ``Tried to allocate 8.00 GiB``), else 0."""
    units = {"B": 0, "KiB": 1, "MiB": 2, "GiB": 3, "TiB": 4}
    m = re.search(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)", text)
    return float(m[1]) * 1024 ** units[m[2]] if m else 0.0


def need_after_oom(error: BaseException | str) -> int:
    """Device memory a run that raised ``error`` (out of memory) needed at least: peak reserve plus the request."""
    import torch

    held = torch.cuda.max_memory_reserved() if torch.cuda.is_initialized() else 0
    return int(held + tried_bytes(str(error)))


def wait_for_room(need_bytes: float, max_s: float = ROOM_WAIT_MAX_S, poll_s: float = 1.0) -> float:
    """Wait (holding no lock) until ``need_bytes`` of the device are free, at most ``max_s``; the seconds waited.

    Before a run that holds a shared GPU alone after an out-of-memory: another worker's memory leaves
    when its process ends, which a lock does not bring about, or when it gives its allocator's cache
    back, which the wait asks of them (a ``room-wanted.PID`` file in the lock directory: :func:`give_room`).
    The wait is logged like a lock's (the launch's deadline is extended by it).
    """
    import torch

    if need_bytes <= 0:
        return 0.0
    t0 = time.perf_counter()
    where = os.environ.get(ENV, "").strip()
    mark = Path(where) / f"{ROOM_WANTED}{os.getpid()}" if where else None
    try:
        while torch.cuda.mem_get_info()[0] < need_bytes + ROOM_SLACK_BYTES and time.perf_counter() - t0 < max_s:
            if mark is not None and not mark.exists():
                with contextlib.suppress(OSError):
                    mark.touch()  # the other processes of this GPU give their cached memory back (give_room)
            time.sleep(poll_s)
    finally:
        if mark is not None:
            with contextlib.suppress(OSError):
                mark.unlink(missing_ok=True)
    seconds = time.perf_counter() - t0
    h = _holder()
    if h is not None:
        _waited(h, "exclusive", seconds)
    return seconds


def without_share(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a child that runs inside this process's hold (it must not queue for the lock itself)."""
    return {k: v for k, v in env.items() if k != ENV}
