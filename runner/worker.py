"""The evaluation process: load reference and candidate, check correctness, time both.

Run as ``python -m kernelskill.runner.worker REQUEST.json RESULT.json``; :mod:`.sandbox` starts it in
a fresh process with a timeout. Top-level imports are stdlib only: on a machine without CUDA the
interpreter flag must be set before triton is first imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .result import ReviewResult, failure

DEFAULT_TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}


def _digest(exc: BaseException, candidate_file: str) -> str:
    """``Type: message`` plus the candidate's own line where it was raised, when there is one."""
    msg = str(exc).strip().splitlines()
    head = f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == candidate_file:
            return f"{head} (candidate line {frame.lineno}: {(frame.line or '').strip()[:120]})"
    return head


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


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    return [out]


def _to(obj: Any, device: str) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def _clone(objs: list[Any]) -> list[Any]:
    import torch

    return [o.clone() if isinstance(o, torch.Tensor) else o for o in objs]


def compare(ref_out: Any, new_out: Any, atol: float | None, rtol: float | None) -> str | None:
    """None when outputs match; otherwise a one-line reason naming the worst element."""
    import torch

    refs, news = _flatten(ref_out), _flatten(new_out)
    if len(refs) != len(news):
        return f"returned {len(news)} outputs, reference returns {len(refs)}"
    for i, (r, n) in enumerate(zip(refs, news, strict=True)):
        tag = f"output {i}: " if len(refs) > 1 else ""
        if not isinstance(n, torch.Tensor):
            return f"{tag}returned {type(n).__name__}, expected a tensor"
        if n.shape != r.shape:
            return f"{tag}shape {tuple(n.shape)} != reference {tuple(r.shape)}"
        if n.dtype != r.dtype:
            return f"{tag}dtype {n.dtype} != reference {r.dtype}"
        a_def, r_def = DEFAULT_TOL.get(str(r.dtype).replace("torch.", ""), (1e-4, 1e-4))
        a, rt = atol if atol is not None else a_def, rtol if rtol is not None else r_def
        rf, nf = r.detach().double().cpu(), n.detach().double().cpu()
        if torch.isnan(nf).any() and not torch.isnan(rf).any():
            return f"{tag}NaN in output ({int(torch.isnan(nf).sum())} elements)"
        if not torch.allclose(nf, rf, atol=a, rtol=rt, equal_nan=True):
            err = (nf - rf).abs().nan_to_num(float("inf"))
            excess = err - (a + rt * rf.abs())
            idx = int(excess.flatten().argmax())
            where = tuple(int(x) for x in torch.unravel_index(torch.tensor(idx), r.shape))
            bad = int((excess > 0).sum())
            return (
                f"{tag}{bad}/{r.numel()} elements exceed atol={a:g} rtol={rt:g}; worst at "
                f"{where}: got {nf.flatten()[idx].item():.6g}, expected {rf.flatten()[idx].item():.6g}"
            )
    return None


def evaluate(req: dict[str, Any]) -> ReviewResult:
    """Review one candidate against the task's reference (see module docstring)."""
    t_start = time.perf_counter()
    cid = req.get("candidate_id", "")
    want = req.get("device", "auto")
    if want == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    use_cuda = want != "cpu" and torch.cuda.is_available()
    if not use_cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    device = "cuda" if use_cuda else "cpu"
    label = f"cuda:0 ({torch.cuda.get_device_name(0)})" if use_cuda else "cpu (triton interpreter)"

    from .taskfile import TaskFileError, load_task_module

    try:
        task = load_task_module(req["task_path"], cpu=not use_cuda, name="kernelskill_reference")
    except TaskFileError as e:
        return failure("invalid_task", str(e), candidate_id=cid, device=label)

    cand_file = str(Path(req["candidate_path"]).resolve())
    sys.path.insert(0, str(Path(cand_file).parent))

    def fail(status: Any, exc: BaseException, **extra: Any) -> ReviewResult:
        return failure(status, _digest(exc, cand_file), _detail(exc), cid, device=label, **extra)

    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("kernelskill_candidate", cand_file)
        assert spec and spec.loader
        cand = importlib.util.module_from_spec(spec)
        sys.modules["kernelskill_candidate"] = cand
        spec.loader.exec_module(cand)
    except BaseException as e:  # noqa: BLE001 - SyntaxError, NameError, SystemExit...
        return fail("compile_error", e)
    if not hasattr(cand, "ModelNew"):
        return failure("compile_error", "candidate defines no class ModelNew", "", cid, device=label)

    seed = int(req.get("seed", 42))
    init_inputs = task.get_init_inputs()
    try:
        torch.manual_seed(seed)
        ref = task.Model(*init_inputs).to(device).eval()
    except Exception as e:
        return failure("invalid_task", f"reference Model failed to build: {e}", cid, device=label)
    try:
        torch.manual_seed(seed)
        new = cand.ModelNew(*_clone(list(init_inputs))).to(device).eval()
    except BaseException as e:  # noqa: BLE001
        return fail("runtime_error", e)

    recorder = None
    if not use_cuda:
        from .compile_check import LaunchRecorder

        recorder = LaunchRecorder()
    trials = int(req.get("trials", 3))
    atol, rtol = req.get("atol"), req.get("rtol")
    worst: dict[str, Any] = {"trials": 0}
    inputs: list[Any] = []
    for trial in range(trials):
        torch.manual_seed(seed + 1000 * (trial + 1))
        inputs = _to(list(task.get_inputs()), device)
        with torch.no_grad():
            ref_out = ref(*_clone(inputs))
            try:
                if recorder is not None and trial == 0:
                    with recorder:
                        new_out = new(*_clone(inputs))
                else:
                    new_out = new(*_clone(inputs))
                if use_cuda:
                    torch.cuda.synchronize()
            except BaseException as e:  # noqa: BLE001
                return fail(_classify(e), e, correctness={"trials": trial})
        reason = compare(ref_out, new_out, atol, rtol)
        worst["trials"] = trial + 1
        if reason:
            return failure(
                "wrong_output",
                f"trial {trial} (seed {seed + 1000 * (trial + 1)}): {reason}",
                reason,
                cid,
                device=label,
                correctness=worst,
                compiled=True,
            )

    compile_info: dict[str, Any] = {}
    if recorder is not None:
        from .compile_check import check_in_subprocess

        errors = check_in_subprocess(list(recorder.launches.values()))
        compile_info = {"target": "sm_90", "kernels": len(recorder.launches), "errors": errors}
        if errors:
            first = errors[0]
            msg = first["error"].strip().splitlines()
            digest = f"sm_90 compile of kernel {first['kernel']} failed: {msg[-1] if msg else ''}"
            return failure(
                "compile_error",
                digest[:400] + " (the interpreter accepted it; a real GPU compile does not)",
                first["error"],
                cid,
                device=label,
                compile_check=compile_info,
            )

    from .timing import time_cuda, time_interpreter

    with torch.no_grad():
        if use_cuda:
            n = int(req.get("time_trials", 50))
            t_new = time_cuda(lambda: new(*inputs), trials=n)
            t_ref = time_cuda(lambda: ref(*inputs), trials=n)
        else:
            t_new = time_interpreter(lambda: new(*inputs), runs=int(req.get("cpu_time_runs", 1)))
            t_ref = time_interpreter(lambda: ref(*inputs), runs=int(req.get("cpu_time_runs", 1)))
    speedup = t_ref["median_ms"] / t_new["median_ms"] if use_cuda else None
    result = ReviewResult(
        status="correct",
        candidate_id=cid,
        correct=True,
        compiled=True,
        error_digest="",
        error_detail="",
        device=label,
        timing_kind="cuda_events" if use_cuda else "interpreter",
        runtime_ms=t_new["median_ms"],
        eager_ms=t_ref["median_ms"],
        compile_ms=None,
        speedup_vs_eager=speedup,
        speedup_vs_compile=None,
        timing={"candidate": t_new, "eager": t_ref},
        correctness={**worst, "atol": atol, "rtol": rtol},
        compile_check=compile_info,
        metrics={"runtime_ms": t_new["median_ms"]} if use_cuda else {},
        warnings=[],
    )
    if speedup is not None:
        result["metrics"]["speedup_vs_eager"] = speedup
    result["wall_s"] = time.perf_counter() - t_start
    return result


def main(argv: list[str]) -> int:
    """Entry point: read the request, write the result; exit 0 unless the process itself broke."""
    req_path, res_path = argv[1], argv[2]
    req = json.loads(Path(req_path).read_text())
    result = evaluate(req)
    Path(res_path).write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
