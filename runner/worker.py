"""The evaluation process: load reference and candidate, check correctness, time both.

Run as ``python -m kernelskill.runner.worker REQUEST.json RESULT.json``; :mod:`.sandbox` starts it in
a fresh process with a timeout. Top-level imports are stdlib only: on a machine without CUDA the
interpreter flag must be set before triton is first imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import gpu_share
from .correctness import device_room, float64_reference, permitted_ops, permitted_run, seeded_forward
from .env import policy_numerics, tf32_matmuls, tf32_ops
from .integrity import Integrity, Tampered
from .result import HELD_ELSEWHERE, NOT_CUSTOM_LABELS, ReviewResult, failure
from .sandbox import read_key, request_paths, write_result


def _digest(exc: BaseException, candidate_file: str) -> str:
    """``Type: message`` plus the candidate's own line where it was raised, when there is one."""
    msg = str(exc).strip().splitlines()
    head = f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == candidate_file:
            return f"{head} (candidate line {frame.lineno}: {(frame.line or '').strip()[:120]})"
    return head


# What the CPU interpreter environment cannot do, found in an error's text: (pattern, the cause).
ENVIRONMENT = (
    (re.compile(r"load_inline|CUDA_HOME|nvcc|cpp_extension"), "CUDA C++ through load_inline cannot build without CUDA"),
    (re.compile(r"active drivers"), "@triton.autotune with several configs (or do_bench) needs a GPU to time them"),
    (re.compile(r"is_cuda|device\.type ?== ?['\"]cuda"), "the code requires CUDA tensors; the review runs CPU tensors"),
    (
        re.compile(
            r"Torch not compiled with CUDA|no NVIDIA driver|CUDA driver|cuda.*not available|torch\.cuda\.", re.I
        ),
        "a CUDA-only API",
    ),
)


def environment_cause(text: str) -> str:
    """The environment limit behind a CPU-interpreter failure, or "" when it reads as a code bug."""
    return next((cause for pattern, cause in ENVIRONMENT if pattern.search(text)), "")


def _detail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-4000:]


def _classify(exc: BaseException) -> str:
    """compile_error for errors raised by Triton's front end, runtime_error otherwise.

    Kernel bodies cannot raise on a GPU: anything the interpreter raises from inside a kernel
    (``InterpreterError``: bad shapes, non-power-of-two ranges, type errors) is what a real compile
    would have rejected, so it is a compile error too.
    """
    name = type(exc).__name__
    return "compile_error" if name in ("CompilationError", "InterpreterError") else "runtime_error"


def _to(obj: Any, device: str) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def _all_fp32(objs: list[Any]) -> bool:
    """Every floating tensor among ``objs`` is float32 (and there is one)."""
    import torch

    floats = [o.dtype for o in objs if isinstance(o, torch.Tensor) and o.is_floating_point()]
    return bool(floats) and all(d == torch.float32 for d in floats)


def _clone(objs: list[Any]) -> list[Any]:
    import torch

    return [o.clone() if isinstance(o, torch.Tensor) else o for o in objs]


def poison_cuda_cache(limit_bytes: int = 8 << 30) -> None:
    """Fill the caching allocator's free blocks with NaN bytes (0xFF) before a candidate runs.

    A candidate that returns ``torch.empty`` memory it never wrote then returns NaN instead of
    whatever an earlier computation (the reference's, say) left there.
    """
    import torch

    free = max(0, torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    free = min(free, limit_bytes)
    blocks = []
    size = free
    while free > 0 and size >= 1 << 16:
        try:
            blocks.append(torch.empty(size, dtype=torch.uint8, device="cuda").fill_(0xFF))
            free -= size
        except torch.OutOfMemoryError:
            size //= 2
    del blocks


class Evaluation:
    """One review's explicit record: what the phases read and write, in the order they run.

    The anti-cheat order is :func:`evaluate`'s: static checks before any candidate code runs; the
    reference built and run on the first inputs before the candidate is built; every candidate call
    on cloned inputs with the allocator's free memory poisoned; which kernels ran recorded on the
    first trial and on the re-check; new inputs again after timing. Every seed after the first trial's
    is drawn from the OS's random source once the candidate is built (:meth:`unseen_seed`): a table
    of answers computed ahead for seeds derived from the review's own misses them.
    """

    def __init__(self, req: dict[str, Any]) -> None:
        self.req = req
        self.cid: str = req.get("candidate_id", "")
        self.seed = int(req.get("seed", 42))
        self.low_memory = bool(req.get("low_memory"))
        self.t_start = self.mark = time.perf_counter()
        self.phases: dict[str, float] = {}
        self.steps: dict[str, float] = {}  # seconds per correctness step, summed over the trials
        self.correctness: dict[str, Any] = {
            "trials": 0,
            "atol": req.get("atol"),
            "rtol": req.get("rtol"),
            "seconds": {},
        }
        self.launched: list[str] = []  # kernels and aten ops the first trial launched (aten ops on the CPU too)
        self.audited: list[str] = []  # what the re-check's call ran (kernels, aten ops, the library ops under them)
        self.captured: list[str] = []  # aten ops captured in a CUDA graph while ModelNew was built (forward replays)
        self.answer_op: str | None = None  # the PyTorch op that computed the first trial's answer (provenance)
        self.ref_ops: list[str] = []  # aten ops of the reference's first forward
        self.use_cuda, self.device, self.gpu, self.label = False, "cpu", "", "cpu (triton interpreter)"
        self.task: Any = None
        self.static: Any = None
        self.common: dict[str, Any] = {}
        self.cand_file, self.source = "", ""
        self.module: Any = None
        self.ref: Any = None
        self.new: Any = None
        self.recorder: Any = None
        self.first: list[Any] | None = None  # trial 0's inputs
        self.probe_out: Any = None  # a probe's reference output (a review keeps none: see _check)
        self.reference_bytes = 0  # device memory the reference's forward took at its peak
        self.need_bytes = 0  # after the reference ran out of memory: what it needed at least
        self.reference_s = 0.0  # wall time of the reference's first forward
        self.timing_inputs: list[Any] = []
        self.integrity: Integrity | None = None  # the process as the candidate found it (see .integrity)

    def unseen_seed(self) -> int:
        """A seed no code in the process can know ahead (recorded in ``correctness["seeds"]``)."""
        import secrets

        seed = secrets.randbelow(2**31)
        self.correctness.setdefault("seeds", []).append(seed)
        return seed

    def phase(self, name: str) -> None:
        """Close the phase ``name``: its seconds since the last mark.

        On a shared GPU a timing queued meanwhile runs now (:func:`.gpu_share.yield_to_timing`), outside every phase.
        """
        now = time.perf_counter()
        self.phases[name] = round(now - self.mark, 4)
        gpu_share.yield_to_timing()
        self.mark = time.perf_counter()

    def step(self, name: str, t0: float) -> float:
        """Add the seconds since ``t0`` to the correctness step ``name`` (then yield, as :meth:`phase`)."""
        now = time.perf_counter()
        self.steps[name] = round(self.steps.get(name, 0.0) + now - t0, 4)
        return now + gpu_share.yield_to_timing()

    def fail(self, status: Any, exc: BaseException, when: str, **extra: Any) -> ReviewResult:
        """A failed result from a candidate's exception (on the CPU, one the environment caused says so).

        What the candidate reached for ``when`` it raised comes first: :func:`_verify` raises
        :class:`.integrity.Tampered` (a refused process or file write raises in the candidate, say).
        """
        _verify(self, when)
        digest, detail = _digest(exc, self.cand_file), _detail(exc)
        cause = "" if self.use_cuda else environment_cause(digest + "\n" + detail)
        if cause:
            if "environment" not in self.static.labels:
                self.static.labels.append("environment")
            digest = f"environment (CPU interpreter): {cause}; the candidate's error: {digest}"
        return failure(status, digest, detail, self.cid, **{**self.common, **extra})

    def inputs(self, seed: int) -> list[Any]:
        """Fresh inputs from the task's ``get_inputs`` under ``seed``, on the device."""
        import torch

        torch.manual_seed(seed)
        with torch.device(self.device):  # generated on the device: CPU randn of GBs takes seconds
            return list(_to(list(self.task.get_inputs()), self.device))

    def reference(self, inputs: list[Any]) -> Any:
        """The reference's output on a copy of ``inputs``: :class:`TaskError` when it raises, out of memory excepted."""
        import torch

        try:
            with torch.no_grad(), tf32_matmuls(self.req.get("precision") == "tf32"):
                seeded_forward()
                out = self.ref(*_clone(inputs))
            if self.use_cuda:
                torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            raise
        except Exception as e:
            text = f"{type(e).__name__}: {str(e).strip()}"
            if gpu_share.out_of_memory(text):  # the runtime's or a library's allocation: handled as PyTorch's
                raise torch.OutOfMemoryError(text[:500]) from e
            raise TaskError(f"the reference raised {text[:300]}") from e
        return out

    def truth(self, inputs: list[Any]) -> Any:
        """The reference's outputs for ``inputs`` in float64 (see :func:`.correctness.float64_reference`)."""
        params = sum(p.numel() * p.element_size() for p in self.ref.parameters())
        ins = sum(x.numel() * x.element_size() for x in inputs if hasattr(x, "numel"))
        need = 2 * (self.reference_bytes + params + ins)
        cpu_ok = not self.use_cuda or self.reference_s <= CPU_FLOAT64_MAX_S
        return float64_reference(self.ref, inputs, need, self.low_memory, cpu_ok)

    def permitted(self, inputs: list[Any]) -> Any:
        """The reference's outputs with the TF32 products the precision policy permits it, or None.

        None where no such op ran (the reference's own run is then the permitted one), in low-memory
        mode, and where one more output does not fit (:mod:`.correctness`, the float64 second chance).
        """
        ops = () if self.low_memory else permitted_ops(self.req.get("precision", "fp32"), self.use_cuda)
        if ops and self.use_cuda and 2 * self.reference_bytes > device_room():
            return None
        return permitted_run(lambda: self.reference(inputs), ops)


class TaskError(Exception):
    """The reference task itself is unusable: it raises, returns NaN / inf, or does not fit."""


class HarnessError(Exception):
    """The reviewer's own code failed (never the candidate's fault)."""


CPU_FLOAT64_MAX_S = 0.02  # a float64 run on the CPU is tried only for a reference this fast on the GPU


def _import_candidate(path: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernelskill_candidate", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernelskill_candidate"] = module
    spec.loader.exec_module(module)
    return module


def load_for_profiling(req: dict[str, Any]) -> tuple[Any, list[Any]]:
    """ModelNew on CUDA and one set of inputs (used under ncu by :mod:`.profiling`)."""
    import torch

    from .taskfile import load_task_module

    policy_numerics(req.get("precision", "fp32"))  # as the review ran it
    task = load_task_module(req["task_path"], name="kernelskill_reference")
    sys.path.insert(0, str(Path(req["candidate_path"]).parent))
    module = _import_candidate(req["candidate_path"])
    seed = int(req.get("seed", 42))
    torch.manual_seed(seed)
    with torch.device("cuda"):
        new = module.ModelNew(*task.get_init_inputs()).to("cuda")  # as built, like the reference
        torch.manual_seed(seed + 1000)
        return new, list(_to(list(task.get_inputs()), "cuda"))


def evaluate(req: dict[str, Any]) -> ReviewResult:
    """Review one candidate against the task's reference: one function per phase, in order.

    A task whose reference raises, returns NaN / inf or does not fit in memory on the first inputs
    is ``invalid_task`` before the candidate is built (``probe`` requests stop there). An exception
    in the reviewer's own code (out of memory while comparing, say) is ``harness_error``: never the
    candidate's fault (:func:`.sandbox.run_review` retries it once in low-memory mode).
    """
    ev = Evaluation(req)
    try:
        _setup(ev)
        bad = _load(ev)
        if bad:
            return bad
        alone, need = bool(req.get("gpu_alone")), float(req.get("need_bytes") or 0)
        with gpu_share.hold(alone, "review", need) if ev.use_cuda else contextlib.nullcontext():
            result = _on_device(ev)
        if ev.use_cuda and result["status"] != "correct" and gpu_share.out_of_memory(result["error_digest"]):
            result["need_bytes"] = gpu_share.need_after_oom(result["error_digest"])  # for a run alone, if shared
    except TaskError as e:
        return failure("invalid_task", str(e), "", ev.cid, **ev.common)
    except Tampered as e:
        return failure("rejected", str(e), "", ev.cid, compiled=True, **ev.common)
    except Exception as e:  # noqa: BLE001 - the reviewer's own failure, never charged to the candidate
        return _harness_error(ev, e)
    waited = gpu_share.waited()
    if waited is not None:
        result["gpu_wait_s"] = waited
    result["phases"] = ev.phases
    result["wall_s"] = time.perf_counter() - ev.t_start
    return result


def _on_device(ev: Evaluation) -> ReviewResult:
    """The phases that run kernels: reference, candidate, checks, timing, re-check, profile."""
    if ev.req.get("baselines_only"):
        return _baselines_only(ev)
    _reference_phase(ev)
    if ev.req.get("probe"):
        return _probe_result(ev)
    bad = _build_candidate(ev) or _correctness(ev) or _kernels_ran(ev) or _compile_check(ev) or _precision_policy(ev)
    if bad is None:
        _pytorch_work(ev)
    if bad:
        return bad
    result = _passed(ev)
    _timing(ev, result)
    bad = _fresh_values(ev, result) or _recheck(ev, result)
    if bad:
        return bad
    if ev.use_cuda:
        _profile_on_gpu(ev.req, ev, ev.timing_inputs, result, ev.gpu, ev.launched)
        ev.phase("profile")
    return result


def _harness_error(ev: Evaluation, e: BaseException) -> ReviewResult:
    what = "out of memory" if type(e).__name__ == "OutOfMemoryError" else "an error"
    first = (str(e).strip().splitlines() or [""])[0][:200]
    digest = str(e) if isinstance(e, HarnessError) else f"the reviewer itself hit {what} ({type(e).__name__}: {first})"
    extra = {"need_bytes": ev.need_bytes} if ev.need_bytes else {}
    return failure("harness_error", digest, _detail(e), ev.cid, **{**ev.common, "low_memory": ev.low_memory, **extra})


def _setup(ev: Evaluation) -> None:
    """Choose the device (the interpreter flag is set before triton is first imported)."""
    want = ev.req.get("device", "auto")
    if want == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    ev.use_cuda = want != "cpu" and torch.cuda.is_available()
    if ev.use_cuda:
        os.environ.pop("TRITON_INTERPRET", None)  # inherited from a CPU pytest run: kernels must compile
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    ev.device = "cuda" if ev.use_cuda else "cpu"
    policy_numerics(ev.req.get("precision", "fp32"))  # before the integrity snapshot: the state it keeps
    ev.gpu = torch.cuda.get_device_name(0) if ev.use_cuda else ""
    ev.label = f"cuda:0 ({ev.gpu})" if ev.use_cuda else "cpu (triton interpreter)"
    ev.common = {"device": ev.label, "software": software()}
    ev.phase("start")


def _load(ev: Evaluation) -> ReviewResult | None:
    """The task module, the static checks and the candidate's import."""
    from .static_check import check_source
    from .taskfile import TaskFileError, load_task_module

    try:
        ev.task = load_task_module(ev.req["task_path"], cpu=not ev.use_cuda, name="kernelskill_reference")
    except TaskFileError as e:
        return failure("invalid_task", str(e), candidate_id=ev.cid, device=ev.label)
    if ev.req.get("probe") or ev.req.get("baselines_only"):
        return None
    ev.cand_file = str(Path(ev.req["candidate_path"]).resolve())
    ev.source = Path(ev.cand_file).read_text()
    ev.static = check_source(ev.source, Path(ev.req["task_path"]).read_text())
    # The lists are the static report's own: labels and warnings added during the review land in both.
    ev.common.update(labels=ev.static.labels, warnings=ev.static.warnings)
    ev.phase("static_check")  # with the task module's import; "load" below is the candidate's import
    if not ev.static.ok:
        return failure(
            "rejected",
            "static check: " + ev.static.strict[0],
            "\n".join(ev.static.strict),
            ev.cid,
            compiled=True,
            **ev.common,
        )
    sys.path.insert(0, str(Path(ev.cand_file).parent))
    ev.integrity = Integrity(ev.task)
    try:
        ev.module = _import_candidate(ev.cand_file)
    except BaseException as e:  # noqa: BLE001 - SyntaxError, NameError, SystemExit...
        return ev.fail("compile_error", e, "while it was imported")
    ev.integrity.verify("while it was imported")
    gpu_share.tune_alone()  # before the candidate's first call tunes: Triton's and the Inductor modules it imported
    if not hasattr(ev.module, "ModelNew"):
        return failure("compile_error", "candidate defines no class ModelNew", "", ev.cid, **ev.common)
    ev.phase("load")
    return None


def _reference_phase(ev: Evaluation) -> None:
    """Build the reference and run it on the first trial's inputs: the task must be usable.

    Raises :class:`TaskError` when the reference fails to build, raises, does not fit in memory or
    returns NaN / inf; keeps the inputs and output for trial 0, and the forward's peak memory.
    """
    import torch

    from .correctness import flatten

    try:
        torch.manual_seed(ev.seed)
        with torch.device(ev.device):
            ev.ref = ev.task.Model(*ev.task.get_init_inputs()).to(ev.device)  # as built: correctness.FORWARD_SEED
        inputs = ev.inputs(ev.seed + 1000)
        if ev.use_cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        from .profiling import aten_ops

        t0 = time.perf_counter()
        with aten_ops(ev.ref_ops):  # what PyTorch computes for the reference (see _pytorch_work)
            out = ev.reference(inputs)
        ev.reference_s = time.perf_counter() - t0
        if ev.use_cuda:
            ev.reference_bytes = max(0, torch.cuda.max_memory_allocated() - base)
    except TaskError:
        raise
    except Exception as e:
        if not (isinstance(e, torch.OutOfMemoryError) or gpu_share.out_of_memory(f"{type(e).__name__}: {e}")):
            raise TaskError(
                f"the reference failed on its first inputs: {type(e).__name__}: {str(e).strip()[:300]}"
            ) from e
        # out of memory: PyTorch's allocator, or the CUDA runtime / a library's allocation (AcceleratorError)
        first = str(e).strip().splitlines()[0][:200]
        if ev.use_cuda:
            ev.ref = None
            ev.need_bytes = gpu_share.need_after_oom(e)
            torch.cuda.empty_cache()
            elsewhere = gpu_share.elsewhere_bytes()
            if elsewhere >= gpu_share.ROOM_SLACK_BYTES:  # the device is shared: their memory, not the task's size
                raise HarnessError(
                    f"the reference ran out of memory on {ev.label} {HELD_ELSEWHERE} "
                    f"{elsewhere / 2**30:.1f} GiB of it: {first}"
                ) from e
        raise TaskError(f"the reference does not fit in memory on {ev.label} with its first inputs: {first}") from e
    for i, o in enumerate(flatten(out)):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all()):
            what = "NaN" if bool(torch.isnan(o).any()) else "inf"
            raise TaskError(
                f"the reference returns {what} (output {i}) on its first inputs: nothing to compare against"
            )
    ev.first = inputs  # the output is not kept: the candidate runs before the reference in every trial
    ev.probe_out = out if ev.req.get("probe") else None
    del out
    if ev.integrity is not None:
        ev.integrity.watch_reference(ev.ref)
    ev.phase("reference")


def _probe_result(ev: Evaluation) -> ReviewResult:
    """A probe's answer: the task is usable.

    With its reference's peak memory and first-call time, the shapes and dtypes of its inputs and
    outputs (as reviewed here) and the device's properties (``probe``).
    """
    import torch

    from .correctness import flatten

    assert ev.first is not None
    inputs, out = ev.first, ev.probe_out

    def describe(objs: list[Any]) -> list[dict[str, Any]]:
        return [
            {"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")}
            if isinstance(o, torch.Tensor)
            else {"value": repr(o)[:80]}
            for o in objs
        ]

    device: dict[str, Any] = {"name": ev.gpu or "cpu (triton interpreter)"}
    if ev.use_cuda:
        props = torch.cuda.get_device_properties(0)
        device.update(
            sms=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            capability=f"{props.major}.{props.minor}",
            **{
                k: getattr(props, k)
                for k in ("shared_memory_per_block_optin", "regs_per_multiprocessor", "L2_cache_size")
                if hasattr(props, k)
            },
        )
    ev.common["probe"] = {"inputs": describe(inputs), "outputs": describe(flatten(out)), "device": device}
    return _correct(
        ev,
        metrics={"reference_bytes": float(ev.reference_bytes), "reference_s": round(ev.reference_s, 4)},
        phases=ev.phases,
        probe=ev.common["probe"],
    )


def _build_candidate(ev: Evaluation) -> ReviewResult | None:
    """``ModelNew`` under the reference's seed, on the device."""
    import torch

    from .gpu_share import capturing
    from .profiling import aten_ops

    try:
        torch.manual_seed(ev.seed)
        # PyTorch work captured in a CUDA graph here runs in forward's replays, unseen by forward's record
        captured = aten_ops(ev.captured, only_while=capturing) if ev.use_cuda else contextlib.nullcontext()
        with torch.device(ev.device), captured:
            ev.new = ev.module.ModelNew(*_clone(list(ev.task.get_init_inputs()))).to(ev.device)  # as built
    except BaseException as e:  # noqa: BLE001
        return ev.fail("runtime_error", e, "while ModelNew was built")
    _verify(ev, "while ModelNew was built")
    if not ev.use_cuda:
        from .compile_check import LaunchRecorder

        ev.recorder = LaunchRecorder()
    return None


def _check(
    ev: Evaluation,
    trial_seed: int,
    when: str,
    record: bool = False,
    given: list[Any] | None = None,
    audit: bool = False,
) -> ReviewResult | None:
    """One correctness check on fresh inputs (trial 0 reuses the reference phase's inputs).

    ``given``: the candidate is called on these very tensors (not copies); the reference on copies made
    before the candidate runs. ``record``: which kernels and ops the call ran, into ``ev.launched``;
    ``audit``: into ``ev.audited``, with the library ops PyTorch's profiler saw.
    """
    import torch

    from .correctness import compare
    from .static_check import label_tf32

    t = time.perf_counter()
    if given is not None:
        inputs = given
    elif ev.first is not None:
        inputs, ev.first = ev.first, None
    else:
        inputs = ev.inputs(trial_seed)
    pristine = _clone(inputs) if given is not None else inputs  # the reference's, whatever the candidate writes
    if record and ev.static.default_precision_dots and _all_fp32(inputs):
        label_tf32(ev.static)  # Triton's default tl.dot precision for fp32 operands is TF32
    t = ev.step("inputs", t)
    if ev.use_cuda:
        poison_cuda_cache(1 << 30 if ev.low_memory else 8 << 30)
        t = ev.step("poison", t)
    # The candidate runs first: no reference output of these inputs exists yet for it to find in the process.
    _mark(ev)
    try:
        with torch.no_grad():
            new_out = _call_candidate(ev, inputs, record, copies=given is None, audit=audit)
        if ev.use_cuda:
            torch.cuda.synchronize()
    except HostWork as e:
        return failure("rejected", str(e), "", ev.cid, compiled=True, correctness=ev.correctness, **ev.common)
    except BaseException as e:  # noqa: BLE001
        return ev.fail(_classify(e), e, f"during {when}", correctness=ev.correctness)
    t = ev.step("candidate_first_call" if record else "candidate", t)
    _verify(ev, f"during {when}")
    if ev.low_memory and ev.use_cuda:  # the candidate's output waits on the host while the reference runs
        new_out = _to(new_out, "cpu")
        torch.cuda.empty_cache()
    ref_out = ev.reference(pristine)  # compared chunk by chunk on the device (correctness._chunks)
    t = ev.step("reference", t)
    noise: list[float] = []
    notes: list[str] = []
    truth = (lambda: ev.truth(pristine)) if ev.req.get("float64_truth", True) else None
    permitted = lambda: ev.permitted(pristine)  # noqa: E731 - called only with the float64 run
    if ev.use_cuda:
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    reason = compare(
        ref_out,
        new_out,
        ev.req.get("atol"),
        ev.req.get("rtol"),
        truth,
        noise,
        notes,
        low_memory=ev.low_memory,
        permitted=permitted,
    )
    if ev.use_cuda:  # the comparison's own device memory (a float64 run of the reference included)
        extra = torch.cuda.max_memory_allocated() - held
        ev.correctness["compare_extra_bytes"] = max(ev.correctness.get("compare_extra_bytes", 0), extra)
    if noise:
        ev.correctness["float64_truth"] = ev.correctness.get("float64_truth", 0) + 1
        ev.correctness["reference_noise"] = max(ev.correctness.get("reference_noise", 0.0), *noise)
    for note in notes:
        if note not in ev.static.warnings:
            ev.static.warnings.append(note)
    ev.step("compare", t)
    if reason:
        return failure(
            "wrong_output",
            f"{when} (seed {trial_seed}): {reason}",
            reason,
            ev.cid,
            correctness=ev.correctness,
            compiled=True,
            **ev.common,
        )
    return None


def _mark(ev: Evaluation) -> None:
    """:meth:`.integrity.Integrity.mark` before the candidate runs (what :func:`_verify` compares with)."""
    if ev.integrity is not None:
        ev.integrity.mark()


def _verify(ev: Evaluation, when: str) -> None:
    """:meth:`.integrity.Integrity.verify` (raises :class:`.integrity.Tampered`) once the candidate ran."""
    if ev.integrity is not None:
        ev.integrity.verify(when)


@contextlib.contextmanager
def host_arrays_watch(found: list[str]) -> Iterator[None]:
    """Record in ``found`` every conversion of a tensor to a NumPy array (``Tensor.numpy`` / ``__array__``).

    Around the candidate's correctness calls: work done in NumPy beside a dummy kernel is not kernel work.
    """
    import torch

    cls = torch.Tensor
    saved = {name: (name in vars(cls), getattr(cls, name)) for name in ("numpy", "__array__")}

    def watched(name: str, original: Any) -> Any:
        def convert(self: Any, *args: Any, **kwargs: Any) -> Any:
            found.append(f"Tensor.{name}")
            return original(self, *args, **kwargs)

        return convert

    for name, (_, original) in saved.items():
        setattr(cls, name, watched(name, original))
    try:
        yield
    finally:
        for name, (own, original) in saved.items():
            if own:
                setattr(cls, name, original)
            else:
                delattr(cls, name)


def _call_candidate(ev: Evaluation, inputs: list[Any], record: bool, copies: bool = True, audit: bool = False) -> Any:
    """The candidate on a copy of ``inputs``, the RNG seeded as for the reference.

    ``copies`` False: on ``inputs`` themselves. On ``record``, which kernels it launched; on ``audit``, the
    same into ``ev.audited`` with PyTorch's profiler too. Tensor data moved to NumPy meanwhile raises
    :class:`HostWork` (rejected), and so does an output that is a tensor subclass (:func:`_plain_tensors`).
    """
    found: list[str] = []
    with host_arrays_watch(found):
        out = _candidate_call(ev, inputs, record, copies, audit)
    if found:
        raise HostWork(
            f"moved tensor data to NumPy ({found[0]}) during the call: work outside the candidate's own kernels "
            "is not allowed"
        )
    _plain_tensors(out)
    return out


class HostWork(Exception):
    """The candidate did part of its work outside its kernels (in NumPy), or returned what computes later."""


def _plain_tensors(out: Any) -> None:
    """Raise :class:`HostWork` where an output is a tensor subclass (a ``Parameter`` aside).

    A subclass's ``__torch_dispatch__`` or ``__torch_function__`` runs its own code when the comparison
    reads it: work after the call, outside the record and the timer.
    """
    import torch

    from .correctness import flatten

    for i, o in enumerate(flatten(out)):
        if isinstance(o, torch.Tensor) and type(o) not in (torch.Tensor, torch.nn.Parameter):
            raise HostWork(
                f"output {i} is a {type(o).__name__}, a subclass of torch.Tensor whose own code runs when it is read: "
                "an output is a plain tensor computed by the call"
            )


def _candidate_call(ev: Evaluation, inputs: list[Any], record: bool, copies: bool, audit: bool = False) -> Any:
    seeded_forward()
    args = _clone(inputs) if copies else inputs
    if audit:  # the re-check: PyTorch's profiler beside the record
        from .profiling import library_calls

        with library_calls(ev.audited):
            return _recorded_call(ev, args, ev.audited)
    if record:  # the first trial: on the CPU, every kernel launch too (the sm_90 compile check's)
        from .correctness import tolerances
        from .provenance import AnswerTrace

        with ev.recorder if ev.recorder is not None else contextlib.nullcontext(), AnswerTrace() as trace:
            out = _recorded_call(ev, args, ev.launched)
        ev.answer_op = trace.answer_op(out, lambda dtype: tolerances(dtype, ev.req.get("atol"), ev.req.get("rtol")))
        return out
    return ev.new(*args)


def _recorded_call(ev: Evaluation, args: list[Any], names: list[str]) -> Any:
    """``ev.new(*args)``, what it ran appended to ``names`` (kernels and aten ops; aten ops alone on the CPU)."""
    from .profiling import aten_ops, launched_kernels

    if ev.use_cuda:
        outs: list[Any] = []
        names.extend(launched_kernels(lambda: outs.append(ev.new(*args))))
        return outs[0]
    with aten_ops(names):
        return ev.new(*args)


def _correctness(ev: Evaluation) -> ReviewResult | None:
    """``trials`` checks on freshly seeded inputs."""
    from .correctness import TRUTH_MARGIN

    trials = int(ev.req.get("trials", 5))
    for trial in range(trials):
        seed = ev.seed + 1000 if trial == 0 else ev.unseen_seed()  # trial 0: the reference phase's inputs
        bad = _check(ev, seed, f"trial {trial}", record=trial == 0)
        if bad:
            return bad
        ev.correctness["trials"] = trial + 1
    ev.correctness["seconds"] = dict(ev.steps)
    if ev.correctness.get("float64_truth"):
        ev.static.warnings.append(
            f"outside atol/rtol of the reference on {ev.correctness['float64_truth']} check(s), but within "
            f"{TRUTH_MARGIN:g}x the reference's own error (up to {ev.correctness['reference_noise']:.3g}) of a "
            "float64 run of the reference: accepted"
        )
    ev.phase("correctness")
    return None


def _precision_policy(ev: Evaluation) -> ReviewResult | None:
    """Under ``fp32``, single-pass TF32 products only where the reference itself uses them."""
    from .static_check import tf32_allowed

    precision = ev.req.get("precision", "fp32")
    if "tf32_dot" not in ev.static.labels or tf32_allowed(precision, Path(ev.req["task_path"]).read_text()):
        return None
    return failure(
        "rejected",
        f"precision {precision}: a tl.dot multiplies fp32 tiles in single-pass TF32, which the reference does not "
        '(its matmuls are fp32): use input_precision="ieee" or "tf32x3", or run with --precision tf32',
        "",
        ev.cid,
        compiled=True,
        correctness=ev.correctness,
        **ev.common,
    )


def _kernels_ran(ev: Evaluation) -> ReviewResult | None:
    """The candidate's own kernels ran during forward (recorded on the first trial)."""
    rejected = dict(compiled=True, correctness=ev.correctness, **ev.common)
    if ev.recorder is not None:
        if not ev.recorder.launches and ev.static.kernels and not ev.static.cuda_names:
            return failure(
                "rejected",
                "no Triton kernel ran during forward: the output came from PyTorch or a dead code path",
                "",
                ev.cid,
                **rejected,
            )
        return None
    own = set(ev.static.kernel_names)
    # CUDA C++ kernels launch from their extension's functions, which the record does not see: Triton ones only.
    if ev.use_cuda and own and not ev.static.cuda_names:
        if not any(any(n.startswith(k) for k in own) for n in ev.launched):
            return failure(
                "rejected",
                f"none of the candidate's kernels ({', '.join(sorted(own))}) ran during forward",
                "kernels launched: " + ", ".join(sorted(set(ev.launched))[:20]),
                ev.cid,
                **rejected,
            )
    return None


def _pytorch_work(ev: Evaluation, ran_ops: list[str] | None = None) -> None:
    """Label a forward whose main work PyTorch ran: not custom-kernel work (the label ``torch_main_work``).

    Either a heavy op (a GEMM, a convolution, attention), or every compute op the reference's forward ran,
    recorded on the first trial (and, with ``ran_ops``, on the re-check too: :func:`_relabel`) whatever the
    call path (an ``nn.Sequential`` of convolutions, an op fetched by ``getattr``, a copy of the reference
    executed from the task file), so a candidate whose source the static checks read as kernels only is
    labelled by what it ran; the ops a CUDA graph captured while ``ModelNew`` was built count as run (its
    forward replays them). Or, on the first trial, an answer that PyTorch's ops computed from the inputs
    and the module's tensors, whichever ops (:mod:`.provenance`), with the candidate's kernels copying it at
    most.
    """
    from .profiling import compute_ops, library_ops

    if NOT_CUSTOM_LABELS & set(ev.static.labels):
        return
    own = ev.launched if ran_ops is None else ran_ops
    launched = own + ev.captured
    ops, ran, ref = library_ops(launched), set(launched), compute_ops(ev.ref_ops)
    graphed = " (in a CUDA graph captured while ModelNew was built)"
    if ops:
        what = f"forward ran PyTorch's {', '.join(ops)}" + ("" if library_ops(own) == ops else graphed)
    elif ref and ref <= ran:
        what = f"forward ran every PyTorch op of the reference ({', '.join(sorted(n[6:] for n in ref))})"
        what += "" if ref <= set(own) else graphed
    elif ev.answer_op and ran_ops is None:
        what = (
            f"forward's answer is PyTorch's {ev.answer_op} of the inputs and the module's tensors (the candidate's "
            "kernels at most copied it)"
        )
    else:
        return
    ev.static.warnings.append(f"{what}: the main work is not in the candidate's kernels")
    ev.static.labels.append("torch_main_work")


def _compile_check(ev: Evaluation) -> ReviewResult | None:
    """On the CPU: a real ``sm_90`` compile of every kernel the interpreter launched."""
    if ev.recorder is None:
        return None
    from .compile_check import check_in_subprocess

    errors = check_in_subprocess(list(ev.recorder.launches.values()))
    ev.common["compile_check"] = {"target": "sm_90", "kernels": len(ev.recorder.launches), "errors": errors}
    ev.phase("compile_check")
    if not errors:
        return None
    first = errors[0]
    msg = first["error"].strip().splitlines()
    digest = f"sm_90 compile of kernel {first['kernel']} failed: {msg[-1] if msg else ''}"
    return failure(
        "compile_error",
        digest[:400] + " (the interpreter accepted it; a real GPU compile does not)",
        first["error"],
        ev.cid,
        **ev.common,
    )


def _correct(ev: Evaluation, **fields: Any) -> ReviewResult:
    """A ``correct`` result on this evaluation's device, with ``fields``."""
    result = ReviewResult(
        status="correct",
        candidate_id=ev.cid,
        correct=True,
        compiled=True,
        error_digest="",
        error_detail="",
        device=ev.label,
        software=ev.common["software"],
    )
    result.update(fields)  # type: ignore[typeddict-item]
    return result


def software() -> dict[str, str]:
    """The versions a review's timings depend on besides the GPU: torch, the CUDA it was built with, and Triton."""
    import torch
    import triton

    return {"torch": torch.__version__, "cuda": torch.version.cuda or "", "triton": triton.__version__}


def _passed(ev: Evaluation) -> ReviewResult:
    """The result of a candidate that passed every check so far (timings still to come)."""
    labels = ev.static.labels
    return _correct(
        ev,
        timing_kind="cuda_events" if ev.use_cuda else "interpreter",
        compile_ms=None,
        speedup_vs_eager=None,
        speedup_vs_compile=None,
        correctness=ev.correctness,
        compile_check=ev.common.get("compile_check", {}),
        metrics={},
        custom_kernel="torch_main_work" not in labels and "library_main_work" not in labels,
        labels=list(labels),
        warnings=list(ev.static.warnings),
    )


def _timing(ev: Evaluation, result: ReviewResult) -> None:
    """CUDA-event timings (GPU) or interpreter timings (CPU) of the candidate and the reference."""
    import torch

    inputs = ev.timing_inputs = ev.inputs(ev.seed + RECORD_SEED)
    if ev.use_cuda:
        _time_on_gpu(ev.req, ev, inputs, result, ev.gpu, ev.phase)
        return
    from .timing import time_interpreter

    runs = int(ev.req.get("cpu_time_runs", 1))
    _mark(ev)
    with torch.no_grad():
        t_new = time_interpreter(lambda: ev.new(*inputs), runs=runs)
    _verify(ev, "while it was timed")
    with torch.no_grad():
        t_ref = time_interpreter(lambda: ev.ref(*inputs), runs=runs)
    result["runtime_ms"], result["eager_ms"] = t_new["median_ms"], t_ref["median_ms"]
    result["timing"] = {"candidate": t_new, "eager": t_ref}
    ev.phase("timing")


def _refill(ev: Evaluation, seed: int, scale: bool = False) -> bool:
    """Write ``get_inputs()``'s values under ``seed`` into the timed input tensors, in place (same objects).

    False (nothing written) when the new inputs differ from them in number, shape or dtype. ``scale`` (for
    timing, in low-memory mode, where a second set of inputs may not fit): the floating-point inputs are
    scaled in place by a factor of the seed's instead (new values, no new memory; integer inputs keep theirs).
    """
    import torch

    if not ev.timing_inputs:
        return False
    if scale:
        floats = [x for x in ev.timing_inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        with torch.no_grad():
            for x in floats:
                x.mul_(1.0 + (seed % 61 + 1) / 256.0)
        return bool(floats)
    fresh = ev.inputs(seed)
    same = len(fresh) == len(ev.timing_inputs) and all(
        not isinstance(a, torch.Tensor) or (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype)
        for a, b in zip(fresh, ev.timing_inputs, strict=True)
    )
    if same:
        with torch.no_grad():
            for a, b in zip(fresh, ev.timing_inputs, strict=True):
                if isinstance(a, torch.Tensor):
                    b.copy_(a)
    return same


FRESH_CALLS = {"cuda": 5, "cpu": 2}  # timed calls on new input values after the timings of record
RECORD_SEED = 7  # the timings of record's inputs: get_inputs() under the review's seed plus this


class _CandidateRaised(Exception):
    """The candidate raised during the calls on new input values (its cause is the candidate's exception)."""


def _fresh_values(ev: Evaluation, result: ReviewResult) -> ReviewResult | None:
    """Timed calls on new input values: the timed figure must hold for values the candidate has not seen.

    The timings of record call the candidate again and again on one set of values (marked as written
    before each call, :func:`.timing.new_versions`). A candidate that keeps its answer under a key of the
    values themselves (a sampled fingerprint, a hash) times a lookup there, and the re-check after timing
    (new values, computed anew) passes. Here each call gets values of its own, written into the same
    tensors outside the timed window, and is followed by a call on the same values written again the same
    way, then by one on the record's values written again the same way: an honest candidate takes as long
    on all three. One that kept its answer is far faster on the second (an answer kept from the first
    call on) or on the third (kept only once values came back a few times, as the record's did). The
    calls share everything outside the window (the host's work to write the values, the GPU's idle time
    meanwhile), which a comparison with the timings of record, taken back to back, did not: a call of
    0.02 ms took 7x as long after the writing as in the record. In low-memory mode, where new values are
    the record's scaled in place, the record's values are not written back (only the pairs are timed).
    """
    import torch

    from .timing import kept_across_calls, new_versions, time_fresh

    inputs, device = ev.timing_inputs, "cuda" if ev.use_cuda else "cpu"
    if not inputs or not any(isinstance(x, torch.Tensor) and x.numel() for x in inputs):
        return None
    seeds = [ev.unseen_seed() for _ in range(FRESH_CALLS[device])]
    written: list[bool] = []

    def write(seed: int, scale: bool = False) -> Any:
        return lambda: written.append(_refill(ev, seed, scale=scale))

    if ev.low_memory:  # new values scaled in place; then the same, marked as written
        befores = [b for s in seeds for b in (write(s, scale=True), lambda: new_versions(inputs))]
    else:
        befores = [b for s in seeds for b in (write(s), write(s), write(ev.seed + RECORD_SEED))]
    group = 2 if ev.low_memory else 3

    def call() -> Any:
        try:
            return ev.new(*inputs)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # the candidate's own failure on valid inputs, not the reviewer's
            raise _CandidateRaised(e) from e

    timing = result.get("timing") or {}
    _mark(ev)
    try:
        with torch.no_grad():
            samples = time_fresh(call, befores, ev.use_cuda)
    except _CandidateRaised as e:
        err = e.__cause__
        return failure(
            "runtime_error",
            f"raised when called on new input values after timing: {type(err).__name__}: {str(err).strip()[:300]}",
            _detail(err) if err is not None else "",
            ev.cid,
            compiled=True,
            correctness=ev.correctness,
            **ev.common,
        )
    except torch.OutOfMemoryError:  # the second set of inputs did not fit beside the first: the check is skipped
        written.clear()
        if ev.use_cuda:
            torch.cuda.empty_cache()
        result.setdefault("warnings", []).append("no timing on new input values: out of memory for a second set")
        return None
    _verify(ev, "while it was timed on new input values")
    if not all(written):
        return None  # get_inputs() changes shapes with the seed: nothing to compare
    fresh, repeated = min(samples[0::group]), min(samples[1::group])
    record_ms = min(samples[2::group]) if group == 3 else None
    timing["fresh_values"] = {
        "n": len(seeds),
        "min_ms": fresh,
        "repeated_ms": repeated,
        "record_values_ms": record_ms,
        "samples_ms": samples,
    }
    ev.phase("fresh_values")
    record = timing.get("candidate") or {}
    median = float(record.get("median_ms") or 0.0)
    host_share = float(record.get("host_ms") or 0.0) / median if median > 0 else 0.0
    partners = {"the same values written again": repeated}
    if record_ms is not None:
        partners["the timed calls' values written again"] = record_ms
    which = min(partners, key=lambda k: partners[k])
    again = partners[which]
    if again <= 0 or not kept_across_calls(again, fresh, ev.use_cuda, host_share):
        return None
    return failure(
        "rejected",
        f"its calls on new input values took {fresh:.4g} ms or more, {fresh / again:.1f}x its calls on "
        f"{which} ({again:.4g} ms): an answer kept across calls (cached output?)",
        "",
        ev.cid,
        compiled=True,
        correctness=ev.correctness,
        **ev.common,
    )


def _recheck(ev: Evaluation, result: ReviewResult) -> ReviewResult | None:
    """New inputs again after timing: an answer cached from earlier calls (or state kept) shows up.

    The new values are written into the very tensors the timed calls used (same addresses, same
    objects), and the candidate is called on them: an answer kept by the inputs' address or identity
    is stale there. What this call ran is recorded too, PyTorch's profiler beside the first trial's
    record (:func:`.profiling.library_calls`): a candidate whose own kernels ran on its first call only,
    or whose library work a dispatch mode does not see (an operator of its own around ``aten::mm``),
    loses its custom-kernel label (:func:`_relabel`).
    """
    seed = ev.unseen_seed()
    given = ev.timing_inputs if _refill(ev, seed) else None
    what = "re-check after timing with new inputs (cached or stateful output?)"
    bad = _check(ev, seed, what, given=given, audit=True)
    if bad is None:
        _relabel(ev, result)
        ev.phase("recheck")
    return bad


def _relabel(ev: Evaluation, result: ReviewResult) -> None:
    """The labels again with the re-check's record: a custom-kernel success no longer, where it ran library work."""
    before = set(ev.static.labels)
    _pytorch_work(ev, ev.launched + ev.audited)
    if set(ev.static.labels) == before:
        return
    result["labels"] = list(ev.static.labels)
    result["warnings"] = list(dict.fromkeys([*result.get("warnings", []), *ev.static.warnings]))
    result["custom_kernel"] = not (NOT_CUSTOM_LABELS & set(ev.static.labels))


def _time_on_gpu(
    req: dict[str, Any], run: Evaluation, inputs: list[Any], result: ReviewResult, gpu: str, phase: Any
) -> None:
    """CUDA-event timings of the candidate and the (cached) eager / torch.compile baselines.

    The baselines run under the precision policy's numerics (``tf32``: TF32 matmuls allowed) and
    are cached under a key that names it. Under ``fp32``, torch.compile with TF32 matmuls allowed is
    timed too, for context (``speedup_vs_compile_tf32``), where the reference calls an op TF32 can
    change (:func:`.env.tf32_ops`, over the reference's recorded ops); elsewhere it is the same
    program, and its timing is the fp32 one.
    """
    import torch

    from .timing import new_versions, time_adaptive

    _mark(run)
    with torch.no_grad():
        t_new = time_adaptive(lambda: run.new(*inputs), before=lambda: new_versions(inputs))
    _verify(run, "while it was timed")
    phase("timing")
    key, base = _baselines(req, run, inputs, gpu, phase)
    eager, comp, comp_tf32 = base["eager"], base.get("compile"), base.get("compile_tf32")
    ms = t_new["median_ms"]
    result["runtime_ms"] = ms
    result["eager_ms"] = eager["median_ms"]
    result["compile_ms"] = comp["median_ms"] if comp else None
    result["speedup_vs_eager"] = eager["median_ms"] / ms
    result["speedup_vs_compile"] = comp["median_ms"] / ms if comp else None
    if comp_tf32:
        result["speedup_vs_compile_tf32"] = comp_tf32["median_ms"] / ms
    result["timing"] = {"candidate": t_new, "eager": eager, "compile": comp, "baseline_key": key}
    if comp is None and base.get("compile_error"):  # why there is no speedup vs torch.compile
        result["timing"]["compile_error"] = base["compile_error"]
    if comp_tf32:
        result["timing"]["compile_tf32"] = comp_tf32
    result["metrics"]["runtime_ms"] = ms
    if t_new.get("host_ms") and ms > 0:  # the host's time to queue one call, against the call's
        result["metrics"]["host_pct"] = 100.0 * t_new["host_ms"] / ms
    result["metrics"]["speedup_vs_eager"] = eager["median_ms"] / ms
    if comp:
        result["metrics"]["speedup_vs_compile"] = comp["median_ms"] / ms


def _baseline_key(req: dict[str, Any], gpu: str) -> str:
    """The cache key of this task's baselines on ``gpu`` under the request's precision policy."""
    import torch

    from . import cache

    return cache.baseline_key(Path(req["task_path"]).read_text(), gpu, torch.__version__, req.get("precision", "fp32"))


def _baselines(
    req: dict[str, Any], run: Evaluation, inputs: list[Any], gpu: str, phase: Any
) -> tuple[str, dict[str, Any]]:
    """The cache key and the eager / torch.compile timings of the reference, from the cache or timed now."""
    import torch

    from . import cache
    from .timing import time_adaptive

    precision = req.get("precision", "fp32")
    key = _baseline_key(req, gpu)
    base = cache.get("baselines", key) if req.get("baseline_cache", True) else None
    if base:
        phase("baselines_cached")
        return key, base
    with torch.no_grad(), tf32_matmuls(precision == "tf32"):
        base = {"eager": time_adaptive(lambda: run.ref(*inputs)), **_compiled_baseline(run.ref, inputs, "compile")}
    if precision == "fp32":
        if tf32_ops(run.ref_ops):  # recorded in its first forward (_reference_phase)
            with torch.no_grad(), tf32_matmuls(True):
                base.update(_compiled_baseline(run.ref, inputs, "compile_tf32"))
        else:  # no product TF32 could change: the same program, not compiled and timed again
            base["compile_tf32"], base["compile_tf32_same"] = base.get("compile"), True
    cache.put("baselines", key, base)
    if run.integrity is not None:  # torch.compile (the reviewer's own work) may rebind what it imports
        run.integrity.renew()
    phase("baselines")
    return key, base


def _baselines_only(ev: Evaluation) -> ReviewResult:
    """A ``baselines`` request's answer: the task's baselines timed into the cache (no candidate).

    Asked for beside the seed captures, so that the first review finds them cached: on a network
    whose ``torch.compile`` takes minutes (twice under ``fp32``: with and without TF32 matmuls), they
    would otherwise fall into the first review's time. Nothing to do on the CPU or when cached.
    """
    done = {"cached": True}
    if ev.use_cuda and not cache_has_baselines(ev.req, ev.gpu):
        _reference_phase(ev)
        _baselines(ev.req, ev, ev.inputs(ev.seed + RECORD_SEED), ev.gpu, ev.phase)  # the inputs _timing uses
        done = {"cached": False}
    return _correct(ev, metrics={}, phases=ev.phases, baselines=done)


def cache_has_baselines(req: dict[str, Any], gpu: str) -> bool:
    """True when the task's baselines on ``gpu`` under the request's policy are cached (and may be used)."""
    from . import cache

    return bool(req.get("baseline_cache", True) and cache.get("baselines", _baseline_key(req, gpu)))


def compile_default(model: Any) -> Any:
    """``torch.compile(model)`` with its defaults, whose compile gives this process's GPU share up.

    The same Inductor backend object ``torch.compile`` builds (a subclass of it, the same config), so
    the same program; only the compile itself, work on the CPU, runs under :func:`.gpu_share.released`,
    so a timing of another worker need not wait for it. The first run (and Inductor's autotuning of
    its kernels there) happens after, under the share again.
    """
    import torch

    gpu_share.tune_alone(inductor=True)

    class _CompilingAlone(torch._TorchCompileInductorWrapper):
        def __call__(self, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
            with gpu_share.released():
                return super().__call__(model_, inputs_, **kwargs)

    return torch._dynamo.optimize(backend=_CompilingAlone(None, None, None))(model)


def _compiled_baseline(model: Any, inputs: list[Any], name: str) -> dict[str, Any]:
    """``{name: timing}`` of torch.compile of ``model`` (fresh compile), or None with the error."""
    import torch

    from .timing import time_adaptive

    try:
        import torch._dynamo

        torch._dynamo.reset()  # a recompile under the current numerics flags
        compiled = compile_default(model)
        return {name: time_adaptive(lambda: compiled(*inputs))}
    except Exception as e:  # a reference torch.compile cannot handle: no compile baseline
        return {name: None, f"{name}_error": f"{type(e).__name__}: {str(e)[:300]}"}


def _profile_on_gpu(
    req: dict[str, Any], run: Evaluation, inputs: list[Any], result: ReviewResult, gpu: str, launched: list[str]
) -> None:
    """Resource usage, launch counts, speed-of-light signals and (optionally) ncu metrics."""
    import torch

    from . import roofline
    from .profiling import kernel_resources, launch_counts, ncu_available, run_ncu

    metrics = result["metrics"]
    resources = kernel_resources(run.module)
    result["kernels"] = resources
    if resources:
        heaviest = max(resources, key=lambda k: k["registers_per_thread"] or 0)
        for name in ("registers_per_thread", "spill_bytes", "shared_mem_bytes"):
            if heaviest.get(name) is not None:
                metrics[name] = float(heaviest[name])
    with torch.no_grad():
        metrics.update({k: float(v) for k, v in launch_counts(launched).items()})
        ref_out = run.ref(*inputs)
        work = roofline.task_work(run.ref, inputs, ref_out)
    ceil = roofline.ceilings(gpu)
    sol = roofline.metrics_for(result["runtime_ms"] or 0.0, work, ceil)
    metrics.update({k: v for k, v in sol.items() if k != "sol_ms"})
    result["roofline"] = {**work, **sol, "ceilings": ceil}
    if result["runtime_ms"] and result["runtime_ms"] < roofline.IMPLAUSIBLE * sol["sol_ms"]:
        result["labels"].append("implausible_speedup")
        result["warnings"].append(
            f"runtime {result['runtime_ms']:.4g} ms is below {roofline.IMPLAUSIBLE:g}x the speed-of-light floor "
            f"{sol['sol_ms']:.4g} ms: physically implausible (work skipped or cached?)"
        )
    if req.get("ncu") and ncu_available():
        prof = run_ncu(req, str(Path(req["candidate_path"]).parent))
        if "metrics" in prof:
            metrics.update(prof["metrics"])
        else:
            result["warnings"].append(f"ncu: {prof.get('error')}")


# What a compiler-seed candidate (TorchInductor's output module) imports: ~7 s on an H200 host.
WARM_IMPORTS = (
    "triton",
    "triton.language",
    "torch._inductor.async_compile",
    "torch._inductor.select_algorithm",
    "torch._inductor.runtime.triton_heuristics",
)


def main(argv: list[str]) -> int:
    """Entry point: read the request, write the result; exit 0 unless the process itself broke."""
    paths = request_paths(argv, WARM_IMPORTS)
    if paths is None:  # a spare whose parent went away
        return 0
    req_path, res_path = paths
    key = read_key()  # before the candidate is imported: it seals the result (sandbox.write_result)
    req = json.loads(Path(req_path).read_text())
    if req.get("candidate_path"):
        from . import audit

        audit.install(str(Path(req["candidate_path"]).resolve().parent))
    result = evaluate(req)
    write_result(res_path, result, key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
