"""The one typed review result that drives the graph's edges (stdlib only)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

ReviewStatus = Literal[
    "correct",  # compiled, ran, matched the reference on every trial
    "no_code",  # the model's reply held no usable code block (never executed)
    "compile_error",  # import/definition failed, or a kernel failed to compile
    "runtime_error",  # raised while building or running the model
    "wrong_output",  # ran, but shape / dtype / values differ from the reference
    "timeout",  # exceeded the evaluation's wall-time limit (killed)
    "crashed",  # the evaluation process died (segfault, abort, OOM kill)
    "rejected",  # static checks found a forbidden construct (no kernel, fallback, timer patching...)
    "invalid_task",  # the reference task itself is unusable: fails to load, raises, NaN / inf, does not fit
    "harness_error",  # the reviewer's own code failed (e.g. out of memory comparing): not the candidate's fault
]

HELD_ELSEWHERE = "while other processes held"  # in a harness error: the device's memory was another process's
# the labels of a correct candidate whose main work is PyTorch's or a library's (not a custom-kernel success)
NOT_CUSTOM_LABELS = frozenset({"torch_main_work", "library_main_work"})
DEVICE_BUSY = "the device is busy, not the task"  # opens a run's task error when the probe met HELD_ELSEWHERE


def unusable_text(task_error: str) -> str:
    """How a run's ``task_error`` is said: an unusable task, or a device another process fills."""
    return task_error if task_error.startswith(DEVICE_BUSY) else f"unusable task: {task_error}"


FAILURE_STATUSES: frozenset[str] = frozenset(
    {"no_code", "compile_error", "runtime_error", "wrong_output", "timeout", "crashed", "rejected"}
)


class ReviewResult(TypedDict, total=False):
    """Outcome of reviewing one candidate: what happened, why, and how fast it ran.

    ``timing_kind`` says what the numbers mean: ``"cuda_events"`` timings are real GPU timings and
    the only ones from which speedups are computed; ``"interpreter"`` timings come from Triton's CPU
    interpreter, are only a smoke signal, and are never reported as speedups.
    """

    status: ReviewStatus
    candidate_id: str
    correct: bool
    compiled: bool
    error_digest: str  # one or two lines: what went wrong, for prompts and the trajectory
    error_detail: str  # the tail of the traceback or the comparison report
    device: str  # "cuda:0 (NVIDIA H200)" or "cpu (triton interpreter)"
    software: dict[str, str]  # the reviewing process's torch, CUDA (torch's build) and Triton versions
    timing_kind: Literal["cuda_events", "interpreter"] | None
    runtime_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    speedup_vs_compile_tf32: float | None  # under precision fp32: vs torch.compile with TF32 matmuls (context)
    timing: dict[str, Any]  # full statistics per timed subject
    correctness: dict[str, Any]  # trials run, worst error, tolerances
    compile_check: dict[str, Any]  # sm_90 compile check on CPU: kernels checked, errors
    metrics: dict[str, float]  # profile signals for the policy (see skills_kb.schema.METRICS)
    custom_kernel: bool  # the main work runs in the candidate's own kernels (not PyTorch / a library)
    labels: list[str]  # e.g. "torch_main_work", "library_main_work", "implausible_speedup"
    warnings: list[str]
    kernels: list[dict[str, Any]]  # per compiled Triton kernel: registers, spills, shared memory
    roofline: dict[str, Any]  # bytes, FLOPs, ceilings and the speed-of-light floor
    phases: dict[str, float]  # seconds spent per evaluation phase
    probe: dict[str, Any]  # a task probe's findings: input / output shapes and dtypes, the device
    wall_s: float
    gpu_wait_s: dict[str, float]  # seconds waited for a shared GPU's lock (shared / exclusive holds)
    need_bytes: int  # after an out-of-memory: the device memory the run needed at least (for a run alone)


def failure(status: ReviewStatus, digest: str, detail: str = "", candidate_id: str = "", **extra: Any) -> ReviewResult:
    """Build a failed result."""
    result = ReviewResult(
        status=status,
        candidate_id=candidate_id,
        correct=False,
        compiled=status not in ("no_code", "compile_error"),
        error_digest=digest,
        error_detail=detail,
        timing_kind=None,
        runtime_ms=None,
        speedup_vs_eager=None,
        metrics={},
        labels=[],
        warnings=[],
    )
    result.update(extra)  # type: ignore[typeddict-item]
    return result
