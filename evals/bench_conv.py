"""Our convolution kernel against cuDNN and torch.compile, on every convolution of a set of tasks.

    python -m kernelskill.evals.bench_conv [--tasks DIR ...] [--out DIR] [--precision tf32r]
    python -m kernelskill.evals.bench_conv --tasks DIR --fusions   # what each convolution fuses (CPU)
    python -m kernelskill.evals.bench_conv --tasks DIR --whole --out DIR   # whole tasks, epilogues fused
    python -m kernelskill.evals.bench_conv --tasks DIR --static --out DIR  # registers, spills, MMA (CPU, sm_90)
    python -m kernelskill.evals.bench_conv --tuning --out DIR   # what the per-shape tuning timed (its cache)
    python -m kernelskill.evals.bench_conv --tasks DIR --compile-time --out DIR  # the tuning's compile time
    python -m kernelskill.evals.bench_conv --tasks DIR --compare '{}' '{"TMA_B": true}'  # configurations A/B

Every task file of the folders (default: the bundled suite's levels) is traced on the meta device
(no memory, no compute), and each distinct convolution its reference calls (``torch.conv{1,2,3}d``,
``torch.conv_transpose{1,2,3}d``, so ``nn.Conv*`` modules and ``F.conv*`` alike) becomes one row.
On a CUDA GPU, each row is timed three ways in the same process by the reviewer's protocol
(``runner/timing.py``): cuDNN (eager ``F.conv*`` at PyTorch's defaults, TF32 convolutions on),
``torch.compile`` of the same call, and :func:`kernelskill.engine.conv.conv` in ``--precision``.
Each row reports TFLOP/s, the percentage of the TF32 GEMM rate cuBLAS reaches on this GPU
(``runner/roofline.py``), and our output's largest error against an fp64 run, next to cuDNN's.
Results: ``bench_conv.jsonl`` (one line per convolution) and ``bench_conv.md`` (the table, with
geometric means per task folder). A second run into the same ``--out`` keeps the rows measured in the
same precision, ``--config`` and tuning and measures the rest. Without ``--config`` our kernel runs the
launch configuration it tunes per convolution (``engine/conv_tune.py``; each row records it;
``KERNELSKILL_CONV_TUNE=0``: the default configuration).

``--whole`` times each task with a convolution whole instead: its reference's forward eager, under
``torch.compile``, and under ``torch.compile`` with every convolution rewritten onto our kernel first,
with what follows it fused (``engine/reformulate.py: conv_kernel_forms``, the offline engine's
``conv_kernel`` recapture without the capture), in the same process; each row gives both speedups, what
was fused, and the largest error against eager's output. Results: ``bench_whole.jsonl`` and
``bench_whole.md``, resumed the same way. ``--shard K/N`` takes every N-th task from the K-th (0-based):
N processes, each with its own ``K`` and the same ``--out``, share the work; with ``KERNELSKILL_GPU_SHARE``
set to one lock folder per GPU (``runner/gpu_share.py``), processes on one GPU compile side by side
while every timing of record holds the GPU alone. The table is written from every row in the folder.
Each row records the tuned launch configuration of the task's last convolution (``config``); with
``--profile``, also each program's longest kernels over five calls (``kernels``: name, ms and launches per
call; ``torch.profiler``, holding the GPU alone), printed as the row is measured.

``--static`` needs no GPU (:func:`static_rows`): every launch configuration the tuning would time for
each convolution of each task's rewritten forward, compiled for sm_90 as launched, with ptxas's registers
per thread, bytes spilled to local memory and the matrix instructions of its PTX (Hopper's ``wgmma``,
Ampere's ``mma.sync`` or neither) (``bench_static.jsonl``, ``bench_static.md``); ``--config``
is merged into each (``'{"EPI_SPLIT": 1}'``: every tile finished whole). It is redone whole on each run.

``--compile-time`` needs no GPU either (:func:`compile_time_rows`): per convolution, the wall time of
compiling its tuning candidates' kernels one by one (as their first runs would) and together on a pool of
threads (``engine/conv_tune.py: compile_together``), each way in a fresh process with an empty Triton
cache, for this GPU or, without one, for sm_90 (``compile_time.jsonl``, ``compile_time.md``).

``--compare CONFIG ...`` times only our kernel, on each convolution, under each launch configuration given
(JSON, merged over the default one, no tuning; ``'{}'`` is the default itself), in the order given and then
in the reverse order, in the same process: each one's mean of its two median ms, its speedup over the
first, and its error against fp64
(``bench_compare.jsonl``, ``bench_compare.md`` with geometric means per folder), resumed the same way.

``--tuning`` needs no GPU either: it writes ``tuning.md`` from this machine's tuning cache (the
``conv_configs`` entries under ``KERNELSKILL_CACHE_DIR``): per convolution tuned, every candidate's time as
a multiple of the fastest's, the default marked.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CONV_OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def _shape(t: Any) -> list[int] | None:
    import torch

    return list(t.shape) if isinstance(t, torch.Tensor) else None


def _on_meta(task_path: Path, name: str, eval_mode: bool) -> tuple[Any, list[Any]]:
    """``task_path``'s model and inputs on the meta device (no memory, no compute); in eval mode if asked."""
    import torch

    from kernelskill.runner.taskfile import load_task_module

    task = load_task_module(str(task_path), cpu=False, name=name)
    with torch.device("meta"):
        model = task.Model(*task.get_init_inputs())
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    return (model.eval() if eval_mode else model), inputs


def _numbered(folder: Path) -> list[Path]:
    """A folder's task files in the order of their numbers (``2_x.py`` before ``10_y.py``)."""
    return sorted(folder.glob("*.py"), key=lambda f: (len(f.name.split("_")[0]), f.name))


def trace_convs(task_path: Path) -> list[dict[str, Any]]:
    """The convolutions ``task_path``'s reference calls in one forward, traced on the meta device."""
    import torch
    from torch.overrides import TorchFunctionMode

    found: list[dict[str, Any]] = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            name = getattr(func, "__name__", "")
            if name in CONV_OPS:
                found.append(_conv_record(name, list(args), dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    model, inputs = _on_meta(task_path, "bench_conv_task", eval_mode=True)
    with torch.no_grad(), Spy():
        model(*inputs)
    return found


def fusions(task_path: Path, precision: str = "tf32r") -> list[str]:
    """What the offline engine's ``conv_kernel`` rewrite does to each convolution of ``task_path``'s forward.

    One line per convolution (``engine/reformulate.py: conv_kernel_forms``: the epilogue, channel step,
    pooling and spatial mean fused into our kernel), from TorchDynamo's graph of the reference traced on
    the meta device: no memory, no compute, no GPU.
    """
    return _rewritten_on_meta(task_path, precision, run=False)


def _rewritten_on_meta(task_path: Path, precision: str, run: bool) -> list[str]:
    """:func:`fusions`' lines; with ``run``, each rewritten graph also runs on the meta device.

    Run, every convolution calls :func:`kernelskill.engine.conv.conv` with its fused steps, and launches
    nothing real.
    """
    import torch

    from kernelskill.engine.reformulate import conv_kernel_forms

    # in its own mode (training or eval), as the reviewer runs it
    model, inputs = _on_meta(task_path, "bench_conv_fusions_task", eval_mode=False)
    seen: list[str] = []

    class Traced(Exception):
        pass

    def backend(gm: Any, example_inputs: Any) -> Any:
        seen.extend(conv_kernel_forms(gm, precision))
        if not run:
            raise Traced  # the rewritten graph is not run
        return gm

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=backend)(*inputs)
    except Exception as e:  # noqa: BLE001 - Dynamo wraps the backend's exception
        if not any(isinstance(x, Traced) for x in (e, e.__cause__, e.__context__)) and not seen:
            raise
    finally:
        torch._dynamo.reset()
    return seen


@contextlib.contextmanager
def _launches_recorded() -> Iterator[list[tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]]]:
    """Kernel launches through ``torch.library.wrap_triton`` recorded, not run (how our conv kernels launch).

    Each is ``(kernel, values, constexprs, options)``, the values as
    :func:`~kernelskill.runner.compile_check.compile_as_launched` takes them (a tensor as its pointer type).
    """
    import torch
    import torch.library

    from kernelskill.runner.compile_check import arg_type

    launches: list[tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]] = []

    class Recorded:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

        def __getitem__(self, grid: Any) -> Any:
            def launch(*args: Any, **kwargs: Any) -> None:
                names = self.kernel.arg_names
                pairs = zip(names, args, strict=False)
                values: dict[str, Any] = {n: arg_type(a) if isinstance(a, torch.Tensor) else a for n, a in pairs}
                options: dict[str, Any] = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
                launches.append((self.kernel, values, kwargs, options))

            return launch

    real = torch.library.wrap_triton
    torch.library.wrap_triton = Recorded
    try:
        yield launches
    finally:
        torch.library.wrap_triton = real


def conv_calls(task_path: Path, precision: str = "tf32r") -> list[dict[str, Any]]:
    """Every call of :func:`~kernelskill.engine.conv.conv` that ``task_path``'s ``conv_kernel`` rewrite makes.

    With its fused steps, traced on the meta device (:func:`fusions`; the kernels' launches recorded, not run).
    No GPU.
    """
    from kernelskill.engine import conv as conv_module

    real_conv = conv_module.conv
    calls: list[dict[str, Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(dict(inspect.signature(real_conv).bind(*args, **kwargs).arguments))
        return real_conv(*args, **kwargs)

    conv_module.conv = spy
    try:
        with _launches_recorded():
            _rewritten_on_meta(task_path, precision, run=True)
    finally:
        conv_module.conv = real_conv
    return calls


def tuning_candidates(
    calls: list[dict[str, Any]],
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """Each distinct call of ``calls`` (:func:`conv_calls`), with what its tuning would time.

    Its description, the launch configurations (``conv_tune.candidates``; a depthwise convolution: its one
    configuration), and the call.
    """
    from kernelskill.engine import conv as conv_module
    from kernelskill.engine import conv_tune

    seen: set[str] = set()
    for call in calls:
        x, weight = call["x"], call["weight"]
        groups, transposed = int(call.get("groups", 1)), bool(call.get("transposed", False))
        c_g = x.shape[1] // groups
        out_g = weight.shape[1] if transposed else weight.shape[0] // groups
        desc = {"input": list(x.shape), "weight": list(weight.shape), "groups": groups, "transposed": transposed,
                "epilogue": call.get("epilogue") or [], "reduce": call.get("reduce"),
                "stats": call.get("stats", False)}  # fmt: skip
        key = json.dumps(desc, default=str)
        if key in seen:
            continue
        seen.add(key)
        taps = math.prod(weight.shape[2:])
        base = conv_module.launch_config(c_g, out_g, taps, transposed)
        depthwise = c_g == 1 and not transposed
        positions, phases = _positions_phases(call)
        work = conv_module.grid_work(positions, out_g, groups, phases, taps, c_g, base)
        configs = (
            [base]
            if depthwise
            else conv_tune.candidates(base, c_g, transposed, groups, desc["epilogue"], work, phases=phases)
        )
        yield desc, configs, call


def static_rows(
    task_path: Path, precision: str = "tf32r", config: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``--static``: each tuning candidate of each convolution ``task_path``'s rewrite calls, compiled for sm_90.

    For each distinct call of the rewrite (:func:`conv_calls`) and each launch configuration its tuning would time
    (:func:`tuning_candidates`; ``config`` merged into each), the convolution kernel's launch is compiled as
    Triton would compile it for those shapes (``runner/compile_check.py: compile_as_launched``) and ptxas
    reports its registers per thread, the bytes it spills to local memory, and Triton its shared memory. No GPU.
    """
    from kernelskill.engine import conv as conv_module
    from kernelskill.runner.compile_check import compile_as_launched, resource_usage

    calls = conv_calls(task_path, precision)
    rows: list[dict[str, Any]] = []
    for desc, configs, call in tuning_candidates(calls):
        for cand in configs:
            row = {**desc, "config": {**cand, **(config or {})}}
            try:
                with _launches_recorded() as launches:
                    conv_module.conv(**{**call, "config": row["config"]})
                kernels = [rec for rec in launches if rec[0].fn.__name__.startswith("ks_conv")]
                row["kernel"] = kernels[-1][0].fn.__name__
                row["EPI_SPLIT"] = kernels[-1][2].get("EPI_SPLIT")
                usage = [resource_usage(compile_as_launched(*rec)) for rec in kernels]  # split-K: both passes
                row |= {k: max(u[k] for u in usage) for k in usage[0]}
            except Exception as e:  # noqa: BLE001 - one configuration that does not compile is a row
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
    return rows


COMPILE_TIME_CHILD = """
import json, os, sys, tempfile, time
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="ks-compile-time-")  # nothing compiled yet
import torch
if not torch.cuda.is_available():  # compiles for sm_90 without a GPU
    from kernelskill.runner.compile_check import sm90_driver

    sm90_driver()
from pathlib import Path
from kernelskill.engine import conv as conv_module
from kernelskill.engine import conv_tune
from kernelskill.evals.bench_conv import conv_calls, tuning_candidates

task, precision, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
for desc, configs, call in tuning_candidates(conv_calls(task, precision)):
    if len(configs) < 2:
        continue
    run = lambda cfg: conv_module.conv(**{**call, "config": cfg})
    t0 = time.perf_counter()
    if mode == "together":
        conv_tune.compile_together(configs, run)
    else:
        with conv_module.compile_only():
            for cfg in configs:
                try:
                    run(cfg)
                except Exception:
                    pass
    print(json.dumps({**desc, "candidates": len(configs), "s": round(time.perf_counter() - t0, 3)}), flush=True)
"""


def compile_time_rows(task_path: Path, precision: str = "tf32r") -> list[dict[str, Any]]:
    """``--compile-time``: per distinct convolution of ``task_path``'s rewrite, its tuning candidates' compile time.

    Their kernels compiled one by one (as the first runs would compile them) and together
    (``conv_tune.compile_together``), each way in a fresh process with an empty Triton cache, on the meta
    device (no memory, nothing run). Without a GPU, for an sm_90 target. Depthwise convolutions (one
    configuration) are left out.
    """
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rows: dict[str, dict[str, Any]] = {}
    for mode in ("one by one", "together"):
        done = subprocess.run(
            [sys.executable, "-c", COMPILE_TIME_CHILD, str(task_path), precision, mode],
            capture_output=True, text=True, timeout=3600, env=env,
        )  # fmt: skip
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 and not lines:
            last = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise RuntimeError(f"{mode}: {last[0]}")
        for row in lines:
            seconds = row.pop("s")
            rows.setdefault(json.dumps(row, default=str), row)[mode] = seconds
    return list(rows.values())


def compile_time_markdown(rows: list[dict[str, Any]], target: str, threads: int) -> str:
    """``--compile-time``'s table: per convolution, its candidates' compile one by one and together, and totals."""
    lines = [
        f"Compile time of each convolution's tuning candidates ({target}; {threads} threads together, "
        f"{os.cpu_count()} CPUs)",
        "",
        "| task | input | weight | candidates | one by one (s) | together (s) | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | | | | | | {r['error']} |")
            continue
        ratio = r["one by one"] / r["together"] if r.get("together") else float("nan")
        lines.append(
            f"| {r['task']} | {r['input']} | {r['weight']} | {r['candidates']} | {r['one by one']:.1f} "
            f"| {r['together']:.1f} | {ratio:.2f} |"
        )
    timed = [r for r in rows if "error" not in r and r.get("together")]
    one, together = sum(r["one by one"] for r in timed), sum(r["together"] for r in timed)
    if timed:
        total = f"{one:.1f} s one by one, {together:.1f} s together ({one / together:.2f}x)"
        lines += ["", f"{len(timed)} convolutions: {total}."]
    return "\n".join(lines) + "\n"


def compile_time(folders: list[Path], out: Path, precision: str) -> int:
    """``--compile-time``: :func:`compile_time_rows` for each task of ``folders`` with a convolution, into ``out``."""
    import torch

    from kernelskill.engine import conv_tune

    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for task, found in _task_rows(folders, out / "compile_time.jsonl", lambda p: compile_time_rows(p, precision), {}):
        rows += found
        for row in found:
            print(task, row.get("candidates"), row.get("one by one"), row.get("together"), row.get("error", ""),
                  flush=True)  # fmt: skip
    target = torch.cuda.get_device_name() if torch.cuda.is_available() else "sm_90 compiles on the CPU, no GPU"
    (out / "compile_time.md").write_text(compile_time_markdown(rows, target, conv_tune.compile_threads()))
    print(f"table: {out / 'compile_time.md'}")
    return 0


def _positions_phases(call: dict[str, Any]) -> tuple[int, int]:
    """A recorded :func:`~kernelskill.engine.conv.conv` call's output positions (per phase) and its phases."""
    from kernelskill.engine.conv import _triple, output_size

    x, weight = call["x"], call["weight"]
    dims, transposed = x.dim() - 2, bool(call.get("transposed", False))
    stride, padding, dilation, out_pad = (
        _triple(call.get(name, fill), dims, fill)
        for name, fill in (("stride", 1), ("padding", 0), ("dilation", 1), ("output_padding", 0))
    )
    k = (1,) * (3 - dims) + tuple(weight.shape[2:])
    size = (1,) * (3 - dims) + tuple(x.shape[2:])
    space = [output_size(size[i], k[i], stride[i], padding[i], dilation[i], transposed, out_pad[i]) for i in range(3)]
    if not transposed:
        return x.shape[0] * math.prod(space), 1
    return x.shape[0] * math.prod(-(-space[i] // stride[i]) for i in range(3)), math.prod(stride)


def static_markdown(rows: list[dict[str, Any]], precision: str) -> str:
    """``--static``'s table: per task folder, how many candidates spill; then every spilling candidate.

    A convolution's first row is its default configuration (the one used untuned).
    """
    lines = [
        f"Our convolution kernel's tuning candidates compiled for sm_90 as launched (`{precision}`; ptxas)",
        "",
        "| folder | convolutions | candidates | spilling | convolutions whose default spills "
        "| convolutions with no candidate free of spills | most bytes spilled (stores) "
        "| candidates on `wgmma` / `mma.sync` / neither | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for folder in sorted({r["task"].split("/")[0] for r in rows}):
        convs: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            if r["task"].startswith(folder + "/"):
                key = json.dumps([r["task"], r["input"], r["weight"], r["epilogue"], r.get("reduce"), r.get("stats")])
                convs.setdefault(key, []).append(r)
        sel = [r for rs in convs.values() for r in rs]
        spilling = [r for r in sel if r.get("spill_stores", 0) > 0]
        default = sum(rs[0].get("spill_stores", 0) > 0 for rs in convs.values())
        every = sum(all(r.get("spill_stores", 0) > 0 or "error" in r for r in rs) for rs in convs.values())
        most = max((r["spill_stores"] for r in spilling), default=0)
        errors = sum("error" in r for r in sel)
        built = [r for r in sel if "error" not in r]
        wgmma = sum(r.get("wgmma", 0) > 0 for r in built)
        sync = sum(r.get("wgmma", 0) == 0 and r.get("mma_sync", 0) > 0 for r in built)
        mma = f"{wgmma} / {sync} / {len(built) - wgmma - sync}"
        lines.append(
            f"| {folder} | {len(convs)} | {len(sel)} | {len(spilling)} | {default} | {every} | {most} | {mma} "
            f"| {errors} |"
        )
    lines += ["", "| task | input | weight | epilogue | configuration | split | registers | spill stores / loads |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if r.get("spill_stores", 0) > 0 or "error" in r:
            cfg = {k: v for k, v in r["config"].items() if k not in ("FLAT_K", "DIRECT") or v}
            lines.append(
                f"| {r['task']} | {r['input']} | {r['weight']} | {json.dumps(r['epilogue'])[:60]} | {json.dumps(cfg)} "
                f"| {r.get('EPI_SPLIT')} | {r.get('registers', '-')} "
                f"| {r.get('spill_stores', '-')} / {r.get('spill_loads', '-')} {r.get('error', '')[:60]} |"
            )
    return "\n".join(lines) + "\n"


def short_config(cfg: dict[str, Any]) -> str:
    """A launch configuration in a few characters: ``m128 n64 k32 w4 s3``, then its forms and flags."""
    sizes = (("m", "BLOCK_M"), ("n", "BLOCK_N"), ("k", "BLOCK_K"), ("w", "num_warps"), ("s", "num_stages"))
    text = " ".join(f"{short}{cfg.get(name)}" for short, name in sizes)
    forms = [name for name in ("FLAT_K", "DIRECT", "PHASE_INNER", "GATHER") if cfg.get(name)]
    flags = [f"{name}={cfg[name]}" for name in ("PAD_C", "EPI_SPLIT", "SPLIT_K") if name in cfg]
    return " ".join([text, *forms, *flags])


def tuning_markdown(entries: dict[str, Any]) -> str:
    """``--tuning``'s table: every convolution the per-shape tuning timed (the ``conv_configs`` cache).

    Each candidate's milliseconds as a multiple of the fastest's, the default (the first one timed) marked.
    """
    lines = [
        "What the per-shape tuning of our convolution kernel timed (`engine/conv_tune.py`; the cache's "
        "`conv_configs`): each candidate's time as a multiple of the fastest's, the default marked *",
        "",
        "| GPU, Triton | input (stride) | weight | products | fused | fastest, ms | default "
        "| candidates, fastest first |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, entry in entries.items():
        try:
            fields = json.loads(key)
            gpu, triton_version, shape, stride, _dtype, weight, _bias, _geometry, precision, epilogue = fields[:10]
            timed = {k: float(v) for k, v in entry["timed"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # an entry of another layout: not this table's
        if not timed:
            continue
        best = min(timed.values())
        default = next(iter(timed))  # the base configuration is timed first
        ranked = sorted(timed.items(), key=lambda kv: kv[1])
        cells = "; ".join(
            f"{'*' if c == default else ''}{short_config(json.loads(c))} {ms / best:.2f}" for c, ms in ranked
        )
        fused = " / ".join(step[0] for step in epilogue) or "-"
        lines.append(
            f"| {gpu}, {triton_version} | {shape} ({stride}) | {weight} | {precision} "
            f"| {fused} | {best:.3f} | {timed[default] / best:.2f} | {cells} |"
        )
    return "\n".join(lines) + "\n"


def _task_rows(
    folders: list[Path], log_path: Path, rows_of: Callable[[Path], list[dict[str, Any]]], blank: dict[str, Any]
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """For each task of ``folders`` with a convolution: its name and ``rows_of(path)``, each row added to ``log_path``.

    A task that does not trace, or whose rows fail, is one row: ``blank`` with its ``error``.
    """
    with open(log_path, "w") as log:
        for folder in folders:
            for task_path in _numbered(folder):
                task = f"{folder.name}/{task_path.stem}"
                try:
                    if not trace_convs(task_path):
                        continue
                    found = [{"task": task, **r} for r in rows_of(task_path)]
                except Exception as e:  # noqa: BLE001 - one task that does not trace is a row
                    found = [{"task": task, **blank, "error": f"{type(e).__name__}: {str(e)[:200]}"}]
                for row in found:
                    log.write(json.dumps(row, default=str) + "\n")
                    log.flush()
                yield task, found


def static(folders: list[Path], out: Path, precision: str, config: dict[str, Any]) -> int:
    """``--static``: :func:`static_rows` for each task of ``folders`` with a convolution; jsonl and table in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    blank: dict[str, Any] = {"input": [], "weight": [], "epilogue": [], "config": {}}
    rows_of = functools.partial(static_rows, precision=precision, config=config)
    for task, found in _task_rows(folders, out / "bench_static.jsonl", rows_of, blank):
        rows += found
        spill = [r for r in found if r.get("spill_stores", 0) > 0]
        print(f"{task}: {len(found)} candidates, {len(spill)} spilling", flush=True)
    label = precision + (f", {json.dumps(config)}" if config else "")
    (out / "bench_static.md").write_text(static_markdown(rows, label))
    print(f"table: {out / 'bench_static.md'}")
    return 0


def _conv_record(op: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """One call's shapes and parameters, named as :func:`kernelskill.engine.conv.conv` takes them."""
    from kernelskill.engine.conv import per_dim

    transposed = "transpose" in op
    names = ["input", "weight", "bias", "stride", "padding"]
    names += ["output_padding", "groups", "dilation"] if transposed else ["dilation", "groups"]
    values = dict(zip(names, args, strict=False)) | kwargs
    dims = int(op[-2])

    def tup(v: Any, fill: int) -> list[int]:
        return per_dim(fill if v is None else v, dims)

    if isinstance(values.get("padding"), str):
        raise ValueError(f"{op} with padding={values['padding']!r} is not taken")
    return {
        "op": op,
        "input": _shape(values["input"]),
        "weight": _shape(values["weight"]),
        "bias": values.get("bias") is not None,
        "stride": tup(values.get("stride"), 1),
        "padding": tup(values.get("padding"), 0),
        "dilation": tup(values.get("dilation"), 1),
        "groups": int(values.get("groups") or 1),
        "output_padding": tup(values.get("output_padding"), 0) if transposed else [0] * dims,
        "transposed": transposed,
        "dtype": str(values["input"].dtype).replace("torch.", ""),
    }


def flops(rec: dict[str, Any], out_shape: list[int]) -> float:
    """Multiply-adds x 2 of one convolution (the taps that land outside the input counted too)."""
    taps = math.prod(rec["weight"][2:])
    if rec["transposed"]:  # every input element meets every tap and every output channel of its group
        c_in = rec["input"][1]
        return 2.0 * rec["input"][0] * math.prod(rec["input"][2:]) * c_in * rec["weight"][1] * taps
    per_group_in = rec["weight"][1]
    return 2.0 * out_shape[0] * math.prod(out_shape[1:]) * per_group_in * taps


def task_convs(folders: list[Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(task, record)`` for each distinct convolution of each task file (tasks that do not trace are skipped)."""
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                records = trace_convs(path)
            except Exception as e:  # noqa: BLE001 - a task our tracer cannot take: said, not fatal
                yield f"{folder.name}/{path.stem}", {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                continue
            seen: set[str] = set()
            for rec in records:
                key = json.dumps(rec, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    yield f"{folder.name}/{path.stem}", rec


def _operands(rec: dict[str, Any]) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """Seeded input, weight and bias of convolution ``rec`` on the GPU, PyTorch's function and its arguments."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, rec["dtype"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rec["input"], device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(rec["weight"], device="cuda", dtype=dtype, generator=gen) / math.sqrt(math.prod(rec["weight"][1:]))
    out_ch = rec["weight"][1] * rec["groups"] if rec["transposed"] else rec["weight"][0]
    b = torch.randn(out_ch, device="cuda", dtype=dtype, generator=gen) if rec["bias"] else None
    fn = getattr(F, rec["op"])
    args = dict(stride=rec["stride"], padding=rec["padding"], dilation=rec["dilation"], groups=rec["groups"])
    if rec["transposed"]:
        args["output_padding"] = rec["output_padding"]

    return x, w, b, fn, args


def _our_call(
    rec: dict[str, Any], operands: tuple[Any, Any, Any], args: dict[str, Any], precision: str, config: Any
) -> Callable[[], Any]:
    """Convolution ``rec`` on ``operands`` (input, weight, bias) through our kernel: a call of no arguments.

    ``args``: :func:`_operands`' arguments of PyTorch's function; ``config``: :func:`~kernelskill.engine.conv.conv`'s
    (``None``: tuned per shape).
    """
    from kernelskill.engine.conv import conv

    kw = {k: v for k, v in args.items() if k != "output_padding"}
    x, w, b = operands
    return functools.partial(conv, x, w, b, transposed=rec["transposed"], output_padding=rec["output_padding"],
                             precision=precision, config=config, **kw)  # fmt: skip


def measure(rec: dict[str, Any], precision: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Time cuDNN, torch.compile and our kernel on one convolution (CUDA); errors against fp64.

    ``config``: launch parameters for our kernel instead of its defaults (``engine/conv.py: conv``).
    """
    import torch

    from kernelskill.engine import conv_tune
    from kernelskill.runner.roofline import ceilings
    from kernelskill.runner.timing import time_adaptive

    x, w, b, fn, args = _operands(rec)

    def cudnn() -> Any:
        return fn(x, w, b, **args)

    compiled = torch.compile(lambda: fn(x, w, b, **args))
    ours = _our_call(rec, (x, w, b), args, precision, config)

    with torch.no_grad():
        ref = cudnn()
        exact = fn(x.double(), w.double(), b.double() if b is not None else None, **args)
        got = ours()  # tunes its launch configuration first, without ``config`` (engine/conv_tune.py)
        tuned = conv_tune.last_choice() if config is None and conv_tune.enabled(x) else None
        scale = exact.abs().max().item() or 1.0
        row: dict[str, Any] = {
            "out": list(ref.shape),
            "err_ours": (got.double() - exact).abs().max().item() / scale,
            "err_cudnn": (ref.double() - exact).abs().max().item() / scale,
        }
        del exact
        times = {"cudnn": time_adaptive(cudnn), "compile": time_adaptive(compiled), "ours": time_adaptive(ours)}
    work = flops(rec, row["out"])
    peak = ceilings(torch.cuda.get_device_name(0)).get("tf32_tflops")
    for name, t in times.items():
        row[f"{name}_ms"] = t["median_ms"]
        row[f"{name}_tflops"] = work / t["median_ms"] / 1e9
        if peak:
            row[f"{name}_pct_tf32_peak"] = 100.0 * row[f"{name}_tflops"] / peak
    row["vs_cudnn"] = times["cudnn"]["median_ms"] / times["ours"]["median_ms"]
    row["vs_compile"] = times["compile"]["median_ms"] / times["ours"]["median_ms"]
    if tuned is not None:
        row["tuned_config"] = tuned
    return row


def kernel_table(events: Any, calls: int, top: int = 6) -> list[list[Any]]:
    """The ``top`` kernels of a profile by GPU time: ``[name, ms per call, launches per call]``, longest first.

    ``events``: ``torch.profiler``'s ``key_averages()`` (or anything with ``key``, ``device_time_total`` in
    microseconds and ``count``) over ``calls`` calls of one program.
    """
    rows = [(e.key, e.device_time_total / 1000.0 / calls, e.count / calls) for e in events if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    return [[name[:120], round(ms, 4), round(n, 2)] for name, ms, n in rows[:top]]


def measure_task(
    task_path: Path, precision: str, profile: bool = False, alone: bool = False, need_bytes: float = 0.0
) -> dict[str, Any]:
    """Time one task's forward eager, under ``torch.compile``, and compiled with its convolutions on our kernel.

    CUDA only. The three share the model's weights and inputs (seeded); a model with state (a batch norm's
    running statistics) runs each from its own copy. ``config``: the launch configuration of the last
    convolution compiled (the tuned one, :mod:`.conv_tune`). ``profile``: also ``kernels``, each program's
    longest kernels over five calls (:func:`kernel_table`), profiled holding the GPU alone. On a shared GPU
    the task runs in a shared hold; ``alone``: holding the GPU alone, once ``need_bytes`` of its memory are
    free (the retry after an out-of-memory, :func:`_measure_or_alone`).
    """
    import copy

    import torch
    from torch._inductor.compile_fx import compile_fx

    from kernelskill.engine import conv_tune
    from kernelskill.engine.reformulate import conv_kernel_forms
    from kernelskill.runner import gpu_share
    from kernelskill.runner.correctness import tensors_in
    from kernelskill.runner.taskfile import load_task_module
    from kernelskill.runner.timing import time_adaptive
    from kernelskill.runner.worker import compile_default

    task = load_task_module(str(task_path), cpu=False, name="bench_conv_whole_task")
    conv_tune.start_task()  # no earlier task's choice recorded, and a whole tuning budget, as a process of its own
    forms: list[str] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        forms.extend(conv_kernel_forms(gm, precision))
        with gpu_share.released():  # the compile, work on the CPU, gives the GPU share up (as compile_default)
            return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad(), gpu_share.hold(alone, "bench-whole", need_bytes):
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).cuda()
        torch.manual_seed(1)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        eager = copy.deepcopy(model)
        compiled = compile_default(copy.deepcopy(model))  # the reviewer's torch.compile baseline
        ours = torch.compile(copy.deepcopy(model), backend=backend)
        want, got = eager(*inputs), ours(*inputs)
        compiled(*inputs)
        flat = [(g, w) for g, w in zip(tensors_in(got), tensors_in(want), strict=True)]
        scale = max((w.abs().max().item() for _, w in flat), default=1.0) or 1.0
        err = max(((g.double() - w.double()).abs().max().item() for g, w in flat), default=0.0) / scale
        programs = (("eager", eager), ("compile", compiled), ("ours", ours))
        times = {name: time_adaptive(lambda fn=fn: fn(*inputs)) for name, fn in programs}
        kernels = {}
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as profiler

            with gpu_share.exclusive("profile"):
                for name, fn in programs:
                    with profiler(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(5):
                            fn(*inputs)
                        torch.cuda.synchronize()
                    kernels[name] = kernel_table(prof.key_averages(), 5)
    row: dict[str, Any] = {f"{name}_ms": t["median_ms"] for name, t in times.items()}
    row["config"] = conv_tune.last_choice()
    if kernels:
        row["kernels"] = kernels
    row["vs_eager"] = row["eager_ms"] / row["ours_ms"]
    row["vs_compile"] = row["compile_ms"] / row["ours_ms"]
    row["err_vs_eager"] = err
    row["fused"] = [f.partition(f"({precision})")[2].strip(", ") for f in forms]
    return row


def _by_folder(rows: list[dict[str, Any]], key: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The rows that have ``key``, grouped by their task's folder (the part of ``task`` before the ``/``)."""
    have = [r for r in rows if key in r]
    return [
        (f, [r for r in have if r["task"].split("/")[0] == f]) for f in sorted({r["task"].split("/")[0] for r in have})
    ]


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def whole_markdown(rows: list[dict[str, Any]], precision: str) -> str:
    """The whole-task table: one line per task, then arithmetic and geometric means per task folder."""
    lines = [
        f"Whole tasks, median ms: eager, torch.compile, and torch.compile with the convolutions on our kernel "
        f"(`{precision}`) and what follows them fused",
        "",
        "| task | eager ms | compile ms | ours ms | vs eager | vs compile | err vs eager | fused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | - | - | - | - | - | - | {r['error'][:80]} |")
            continue
        fused = "; ".join(f for f in r["fused"] if f) or "-"
        lines.append(
            f"| {r['task']} | {r['eager_ms']:.4g} | {r['compile_ms']:.4g} | {r['ours_ms']:.4g} | {r['vs_eager']:.3f} "
            f"| {r['vs_compile']:.3f} | {r['err_vs_eager']:.1e} | {fused} |"
        )
    lines += [
        "",
        "| folder | tasks | vs eager arith / geo | vs compile arith / geo | at least 0.9x compile |",
        "|---|---|---|---|---|",
    ]
    for folder, sel in _by_folder(rows, "vs_compile"):
        means = {k: (sum(r[k] for r in sel) / len(sel), _geo([r[k] for r in sel])) for k in ("vs_eager", "vs_compile")}
        good = sum(r["vs_compile"] >= 0.9 for r in sel)
        lines.append(
            f"| {folder} | {len(sel)} | {means['vs_eager'][0]:.3f} / {means['vs_eager'][1]:.3f} "
            f"| {means['vs_compile'][0]:.3f} / {means['vs_compile'][1]:.3f} | {good} |"
        )
    return "\n".join(lines) + "\n"


def _whole_rows(path: Path, precision: str) -> dict[str, dict[str, Any]]:
    """The rows of ``bench_whole.jsonl`` in ``precision``, one per task: its last measured one, else its last error."""
    rows: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("precision") == precision and ("error" not in row or "error" in rows.get(row["task"], row)):
                rows[row["task"]] = row
    return rows


def _measure_or_alone(task_path: Path, precision: str, profile: bool) -> dict[str, Any]:
    """:func:`measure_task`; on a shared GPU, a task that ran out of memory is measured again holding it alone.

    Shards on one GPU run side by side; a task too large to fit beside the others' gets the device to itself
    once their memory has left (``alone`` in its row), instead of an error row left for a later run.
    """
    from kernelskill.runner import gpu_share

    try:
        return measure_task(task_path, precision, profile)
    except Exception as e:
        if not gpu_share.active() or not gpu_share.out_of_memory(f"{type(e).__name__}: {e}"):
            raise
        need = gpu_share.need_after_oom(e)
    gpu_share.free_device_memory()
    return {**measure_task(task_path, precision, profile, alone=True, need_bytes=need), "alone": True}


def whole(
    folders: list[Path], out: Path, precision: str, shard: tuple[int, int] = (0, 1), profile: bool = False
) -> int:
    """``--whole``: every task of ``folders`` with a convolution, timed by :func:`measure_task`; resumable.

    ``shard`` ``(k, n)``: only every ``n``-th task from the ``k``-th; the table still gets every row in ``out``.
    ``profile``: each row also gets its programs' longest kernels, which are printed.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_whole.jsonl"
    done = {t for t, r in _whole_rows(path, precision).items() if "error" not in r}
    order: list[str] = []
    with open(path, "a") as log:
        for folder in folders:
            for task_path in _numbered(folder):
                task = f"{folder.name}/{task_path.stem}"
                order.append(task)
                if task in done or (len(order) - 1) % shard[1] != shard[0]:
                    continue
                try:
                    if not trace_convs(task_path):
                        continue
                    row = {"task": task, "precision": precision, **_measure_or_alone(task_path, precision, profile)}
                except Exception as e:  # noqa: BLE001 - one task that fails is a row, not the end of the run
                    row = {"task": task, "precision": precision, "error": f"{type(e).__name__}: {str(e)[:200]}"}
                log.write(json.dumps(row) + "\n")  # one write per line: shards append to one file
                log.flush()
                print(task, row.get("vs_compile"), row.get("error", ""), flush=True)
                for name, table in row.get("kernels", {}).items():
                    print(f"  {name}: " + "; ".join(f"{ms:.3f} ms x{n:g} {k[:70]}" for k, ms, n in table), flush=True)
    rows = _whole_rows(path, precision)
    (out / "bench_whole.md").write_text(whole_markdown([rows[t] for t in order if t in rows], precision))
    print(f"table: {out / 'bench_whole.md'}")
    return 0


def markdown(rows: list[dict[str, Any]], precision: str) -> str:
    """The table: one line per convolution, then geometric means per task folder."""
    lines = [
        f"Our kernel in `{precision}` vs cuDNN and torch.compile (median ms; TFLOP/s; % of cuBLAS's TF32 rate)",
        "",
        "| task | op | input | weight | cuDNN ms | compile ms | ours ms | ours TFLOP/s | % TF32 | vs cuDNN "
        "| vs compile | err ours / cuDNN |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | - | - | - | - | - | - | - | - | - | - | {r['error'][:80]} |")
            continue
        lines.append(
            f"| {r['task']} | {r['op']} | {r['input']} | {r['weight']} | {r['cudnn_ms']:.4g} | {r['compile_ms']:.4g} "
            f"| {r['ours_ms']:.4g} | {r['ours_tflops']:.1f} | {r.get('ours_pct_tf32_peak', float('nan')):.0f} "
            f"| {r['vs_cudnn']:.3f} | {r['vs_compile']:.3f} | {r['err_ours']:.1e} / {r['err_cudnn']:.1e} |"
        )
    lines += ["", "| folder | convolutions | geo mean vs cuDNN | geo mean vs compile |", "|---|---|---|---|"]
    for folder, sel in _by_folder(rows, "vs_cudnn"):
        geo = {k: _geo([r[k] for r in sel]) for k in ("vs_cudnn", "vs_compile")}
        lines.append(f"| {folder} | {len(sel)} | {geo['vs_cudnn']:.3f} | {geo['vs_compile']:.3f} |")
    return "\n".join(lines) + "\n"


def compare_one(rec: dict[str, Any], precision: str, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Our kernel alone on one convolution (CUDA) under each launch configuration of ``configs``.

    Each is merged over the default configuration (no tuning). The configurations are timed in the order
    given, then again in the reverse order (a drift of the GPU's clocks over the row, or what the first
    timing pays for the ones after it, then falls on every configuration alike); per configuration the mean
    of its two medians (``ms``; or its error), both (``passes``), its output's largest error against fp64
    (``err``), and its speedup over the first (``speedup``).
    """
    import torch

    from kernelskill.runner.timing import time_adaptive

    x, w, b, fn, args = _operands(rec)
    row: dict[str, Any] = {"err": [], "passes": [[], []]}
    failed: dict[int, str] = {}
    with torch.no_grad():
        exact = fn(x.double(), w.double(), b.double() if b is not None else None, **args)
        scale = exact.abs().max().item() or 1.0
        calls = []
        for i, cfg in enumerate(configs):
            ours = _our_call(rec, (x, w, b), args, precision, dict(cfg))
            calls.append(ours)
            try:
                row["err"].append((ours().double() - exact).abs().max().item() / scale)
            except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a cell, not the row
                row["err"].append(None)
                failed[i] = f"{type(e).__name__}: {str(e)[:160]}"
        del exact
        for p, order in enumerate((range(len(configs)), reversed(range(len(configs))))):
            times = {i: time_adaptive(calls[i])["median_ms"] for i in order if i not in failed}
            row["passes"][p] = [times.get(i) for i in range(len(configs))]
    row["ms"] = [failed[i] if i in failed else sum(t[i] for t in row["passes"]) / 2 for i in range(len(configs))]
    first = row["ms"][0]
    row["speedup"] = [first / t if isinstance(t, float) and isinstance(first, float) else None for t in row["ms"]]
    return row


def compare_markdown(rows: list[dict[str, Any]], precision: str, configs: list[dict[str, Any]]) -> str:
    """``--compare``'s table: per convolution each configuration's ms and speedup over the first; geo means."""
    names = [json.dumps(c) for c in configs]
    lines = [
        f"Our kernel in `{precision}` under {len(configs)} launch configurations, each merged over the default "
        "(median ms; speedup over the first)",
        "",
        "| task | op | input | weight | " + " | ".join(f"`{n}` ms" for n in names) + " | "
        + " | ".join(f"speedup `{n}`" for n in names[1:]) + " |",
        "|---|---|---|---|" + "---|" * (2 * len(names) - 1),
    ]  # fmt: skip
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['task']} | - | - | - | {r['error'][:80]} |")
            continue
        ms = [f"{t:.4g}" if isinstance(t, float) else str(t)[:60] for t in r["ms"]]
        up = [f"{v:.3f}" if v else "-" for v in r["speedup"][1:]]
        lines.append(f"| {r['task']} | {r['op']} | {r['input']} | {r['weight']} | " + " | ".join(ms + up) + " |")
    lines += [
        "",
        "| folder | configuration | convolutions timed | geo mean speedup | min | max |",
        "|---|---|---|---|---|---|",
    ]
    for folder, sel in _by_folder(rows, "speedup"):
        for i, name in enumerate(names[1:], start=1):
            ups = [r["speedup"][i] for r in sel if r["speedup"][i]]
            if ups:
                geo = _geo(ups)
                lines.append(f"| {folder} | `{name}` | {len(ups)} | {geo:.3f} | {min(ups):.3f} | {max(ups):.3f} |")
    return "\n".join(lines) + "\n"


def _rows_resumed(
    found: list[tuple[str, dict[str, Any]]],
    done: list[dict[str, Any]],
    path: Path,
    head: dict[str, Any],
    measure_one: Callable[[dict[str, Any]], dict[str, Any]],
    shown: str,
) -> list[dict[str, Any]]:
    """One row per convolution ``found``, each appended to ``path`` and printed (its ``shown`` value) as it comes.

    The row an earlier run into the same folder measured (in ``done``) is kept; otherwise ``head`` and what
    ``measure_one`` returns (its exception: the row's ``error``).
    """
    rows = []
    with open(path, "a") as log:
        for task, rec in found:
            same = [r for r in done if all(r.get(k) == v for k, v in {"task": task, **rec}.items())]
            if same:  # measured by an earlier run into the same --out: kept
                rows.append(same[-1])
                continue
            row = {"task": task, **rec, **head}
            if "error" not in rec:
                try:
                    row |= measure_one(rec)
                except Exception as e:  # noqa: BLE001 - one failing shape is a row, not the end of the run
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(task, rec.get("op"), row.get(shown), row.get("error", ""), flush=True)
    return rows


def compare(found: list[tuple[str, dict[str, Any]]], out: Path, precision: str, configs: list[dict[str, Any]]) -> int:
    """``--compare``: :func:`compare_one` on every convolution found; resumed (rows of the same configurations kept)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_compare.jsonl"
    done = _earlier_rows(path, lambda r: r.get("precision") == precision and r.get("configs") == configs)
    head = {"precision": precision, "configs": configs}
    rows = _rows_resumed(found, done, path, head, lambda rec: compare_one(rec, precision, configs), "speedup")
    (out / "bench_compare.md").write_text(compare_markdown(rows, precision, configs))
    print(f"table: {out / 'bench_compare.md'}")
    return 0


def _measured(path: Path, precision: str, config: dict[str, Any], tuned: bool = False) -> list[dict[str, Any]]:
    """Rows an earlier run wrote to ``path`` in ``precision``, ``config`` and tuning; rows with an error are redone."""
    return _earlier_rows(
        path,
        lambda r: (
            r.get("precision", "tf32r") == precision
            and r.get("config", {}) == config
            and bool(r.get("tuned", False)) == tuned
        ),
    )


def _earlier_rows(path: Path, same: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The rows of ``path`` (JSON lines an earlier run wrote) that ``same`` accepts, but those with an error."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if same(r) and "error" not in r]


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    import torch

    from kernelskill.engine import conv_tune
    from kernelskill.evals.suite import TASKS_DIR

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=Path, nargs="*", help="task folders (default: the bundled suite's levels)")
    ap.add_argument("--out", type=Path, default=Path("bench-conv"))
    ap.add_argument("--precision", default="tf32r", help="our kernel's products: ieee, tf32x3, tf32 or tf32r")
    ap.add_argument("--config", default="{}", help="our kernel's launch parameters as JSON, e.g. '{\"DIRECT\": true}'")
    ap.add_argument("--list", action="store_true", help="only list the convolutions found (no GPU needed)")
    ap.add_argument("--fusions", action="store_true",
                    help="only list what each task's convolutions fuse in our kernel (no GPU needed)")  # fmt: skip
    ap.add_argument("--whole", action="store_true",
                    help="time whole tasks: eager, torch.compile, and with our kernel and its fusions")  # fmt: skip
    ap.add_argument("--static", action="store_true",
                    help="compile each convolution's tuning candidates for sm_90 and report registers, spills and "
                    "matrix instructions (no GPU needed)")  # fmt: skip
    ap.add_argument("--compile-time", action="store_true",
                    help="time the compile of each convolution's tuning candidates, one by one and together "
                    "(no GPU needed: sm_90)")  # fmt: skip
    ap.add_argument("--tuning", action="store_true",
                    help="write what the per-shape tuning timed, from this cache (no GPU needed)")  # fmt: skip
    ap.add_argument("--compare", nargs="+", metavar="CONFIG",
                    help="time only our kernel, under each of these launch configurations (JSON, each merged over "
                    "the default), e.g. '{}' '{\"TMA_B\": true}'")  # fmt: skip
    ap.add_argument("--shard", default="0/1", help="with --whole: K/N, every N-th task from the K-th (0-based)")
    ap.add_argument("--profile", action="store_true",
                    help="with --whole: also each program's longest kernels (torch.profiler, five calls)")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        shard = tuple(int(v) for v in args.shard.split("/"))
        if len(shard) != 2 or not 0 <= shard[0] < shard[1]:
            raise ValueError
    except ValueError:
        ap.error(f"--shard takes K/N with 0 <= K < N, not {args.shard!r}")
    folders = args.tasks or sorted(TASKS_DIR.glob("level*"))
    if args.fusions:
        for folder in folders:
            for path in _numbered(folder):
                try:
                    lines = fusions(path, args.precision)
                except Exception as e:  # noqa: BLE001 - one task that does not trace is a line, not the end
                    lines = [f"not traced: {type(e).__name__}: {str(e)[:160]}"]
                for line in lines:
                    print(f"{folder.name}/{path.name}: {line}", flush=True)
        return 0
    if args.tuning:
        from kernelskill.runner import cache

        args.out.mkdir(parents=True, exist_ok=True)
        text = tuning_markdown(cache.load(conv_tune.CACHE))
        (args.out / "tuning.md").write_text(text)
        print(text, end="")
        return 0
    if args.static:
        return static(folders, args.out, args.precision, json.loads(args.config))
    if args.compile_time:
        return compile_time(folders, args.out, args.precision)
    found = list(task_convs(folders))
    if args.list:
        for task, rec in found:
            print(task, json.dumps(rec))
        return 0
    if not torch.cuda.is_available():
        print("bench_conv times on a CUDA GPU (use --list or --fusions to see the convolutions without one)")
        return 2
    if args.whole:
        return whole(folders, args.out, args.precision, (shard[0], shard[1]), args.profile)
    if args.compare:
        return compare(found, args.out, args.precision, [json.loads(c) for c in args.compare])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench_conv.jsonl"
    config = json.loads(args.config)
    tuning = not config and conv_tune.enabled("cuda")
    done = _measured(path, args.precision, config, tuning)
    head = {"precision": args.precision, **({"config": config} if config else {}), "tuned": tuning}
    rows = _rows_resumed(found, done, path, head, lambda rec: measure(rec, args.precision, config or None), "vs_cudnn")
    label = args.precision + (f", {json.dumps(config)}" if config else ", tuned per shape" if tuning else "")
    (args.out / "bench_conv.md").write_text(markdown(rows, label))
    print(f"table: {args.out / 'bench_conv.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
