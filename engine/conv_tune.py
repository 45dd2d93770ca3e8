"""Per-shape launch configurations for the implicit-GEMM convolution (:func:`.conv.ks_conv_fwd`), timed on the GPU.

:func:`.conv.launch_config` picks one configuration from the channel counts alone. On a GPU,
:func:`.conv.conv` instead times a few candidates (:func:`candidates`) of each distinct convolution
(shapes, strides, groups, dtype, precision, fused epilogue; :func:`key`) on inputs of its shapes, and
keeps the fastest, in this process and in the persistent cache (``runner/cache.py``, ``conv_configs``,
under the GPU's name and Triton's version), so a later capture of the same convolution reuses it.

- The candidates: the default, smaller and larger position tiles, more warps, and, for groups of few
  input channels (where the default is the fp32 rank-1 form, ``DIRECT``), one tap per step with the
  channels in slices of 16; for one group whose channels are not a multiple of 16, the channels
  zero-padded to one (``PAD_C``: in the channels-last copy and the packed weight), so every operand load
  is a 16-byte vector; where the default finishes its tile in column slices
  (:func:`.conv.epilogue_split`), the default finishing it whole; with a step over the output channels
  (whole tiles), smaller tiles a thread; for a transposed convolution of several phases, the launch order
  with each tile's phases side by side (``PHASE_INNER``: their stores interleave in the output's rows),
  and the gather form (``GATHER``: the output in order, each position gathering every tap, masked where it
  does not reach; more products, stores of whole sectors). Each computes the same convolution (the tests
  check every one against PyTorch). Not among them,
  measured slower on an H200: the reduction over the flattened
  tap x channel index (``FLAT_K``; the slowest few-channel form on each of nine convolutions) and 64
  channels a reduction step (1.04-2.1x the 32-channel step's time, three convolutions of 64 channels).
- Timing: the candidates' kernels are compiled together on a pool of threads (:func:`compile_together`),
  each candidate runs once (a compile the pool missed happens there), then all are timed in one turn that
  holds a shared GPU alone (:func:`.gpu_share.tuning`; inside a shared hold, the share is given up for
  the turn), with Triton's ``do_bench``, twice, in opposite orders, each candidate keeping its faster
  time: another process's work on the GPU only ever adds time. A candidate that fails to compile or run
  is skipped; when every one fails, the default stays.
- Under a compile (the op traced with fake tensors) the candidates run on real tensors of the same
  shapes and strides, outside the tracing modes.
- Not on the CPU (Triton's interpreter times nothing meaningful), not with ``KERNELSKILL_CONV_TUNE=0``,
  not when an explicit ``config`` is given, and not once this process has spent its tuning budget
  (``KERNELSKILL_CONV_TUNE_BUDGET``, 120 s of compiles and timings, waits for a shared GPU not counted: a
  network of many distinct convolutions tunes the first ones) or its launch's deadline is less than two
  minutes away (``graph/deadline.py``). A choice read from the cache costs nothing; one the cache holds
  from another list of candidates (an earlier version's) is timed again.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

ENV = "KERNELSKILL_CONV_TUNE"
BUDGET_ENV = "KERNELSKILL_CONV_TUNE_BUDGET"  # seconds of tuning per process (default BUDGET_S)
THREADS_ENV = "KERNELSKILL_CONV_COMPILE_THREADS"  # threads compiling the candidates together (0 or 1: one by one)
THREADS_MAX = 8
BUDGET_S = 120.0
DEADLINE_RESERVE_S = 120.0  # no tuning with less than this left before the launch's deadline
CACHE = "conv_configs"
FEW_CHANNELS = 16  # launch_config reduces over the flattened (tap, channel) index below this
PAD_TO = 16  # a PAD_C candidate pads a group's channels to a multiple of this
SMS = 132  # multiprocessors of the GPU when it is not known (an H100 or H200 SXM)
SPLIT_MAX = 16  # split-K: at most this many ranges of the reduction
SPLIT_MIN_STEPS = 4  # and at least this many main-loop steps in each
_MEMO: dict[str, dict[str, Any]] = {}
_LAST: dict[str, Any] = {}  # the configuration :func:`tuned` returned last in this process
_SPENT: list[float] = [0.0]  # seconds this process has spent tuning


def enabled(x: torch.Tensor | str) -> bool:
    """True when ``x``'s convolution (or one on device ``x``) is tuned: CUDA, no interpreter, tuning not off."""
    if os.environ.get(ENV, "1").strip() in ("0", "false", "no", "off"):
        return False
    if os.environ.get("TRITON_INTERPRET", "0").strip() not in ("", "0"):
        return False
    return (x.device.type if isinstance(x, torch.Tensor) else torch.device(x).type) == "cuda"


def candidates(
    base: dict[str, Any],
    in_per_group: int,
    transposed: bool,
    groups: int = 1,
    epilogue: list[list[Any]] | None = None,
    work: tuple[int, int] | None = None,
    sms: int = SMS,
    phases: int = 1,
) -> list[dict[str, Any]]:
    """Launch configurations to time, ``base`` (:func:`.conv.launch_config`'s) first, each distinct.

    ``epilogue``: the fused steps (:func:`.conv.conv`'s). With a step over the output channels, which takes
    the whole tile at once (no column slices), also tiles of fewer positions a thread, which leave its
    registers room. ``work``: ``base``'s programs and main-loop steps (:func:`.conv.grid_work`); a grid of
    fewer programs than the GPU's ``sms`` multiprocessors also gets split-K candidates (:func:`split_counts`).
    ``phases``: a transposed convolution's (the product of its strides); with more than one, also the launch
    order with a tile's phases side by side (``PHASE_INNER``) and the gather form (``GATHER``: no phases).
    """
    channel_step = any(step[0] == "channels" for step in epilogue or [])
    out = [dict(base)]

    def add(**change: Any) -> None:
        cfg = {**base, **change}
        if cfg not in out:
            out.append(cfg)

    if in_per_group < FEW_CHANNELS:  # few channels: one tap per step (index arithmetic per position), and DIRECT
        add(FLAT_K=False, DIRECT=False, BLOCK_K=16)
        add(FLAT_K=False, DIRECT=False, BLOCK_K=16, BLOCK_M=64)
        add(FLAT_K=False, DIRECT=True)  # fp32 rank-1 updates, the input as it is laid out
    if groups == 1 and in_per_group % PAD_TO:  # channels zero-padded to whole 16-channel slices: vector loads
        padded = -(-in_per_group // PAD_TO) * PAD_TO
        add(FLAT_K=False, DIRECT=False, BLOCK_K=PAD_TO, PAD_C=padded)
        add(FLAT_K=False, DIRECT=False, BLOCK_K=PAD_TO, PAD_C=padded, BLOCK_M=64)
    from .conv import epilogue_split

    if epilogue_split(base) > 1 and not channel_step:  # the default's tile finished whole (timed against slices)
        add(EPI_SPLIT=1)
    add(BLOCK_M=64)
    add(num_warps=8)
    if base["BLOCK_N"] >= 64:
        add(BLOCK_M=256, num_warps=8)
    add(num_stages=4)
    if transposed and phases > 1:
        add(PHASE_INNER=True)
        add(GATHER=True)  # the output in order, every tap masked: S times the products, whole-sector stores
    if channel_step:  # 128 channels: 64 positions over eight warps (32 values a thread), 32 over four
        add(BLOCK_M=64, num_warps=8)
        add(BLOCK_M=32)
    if work:  # 64-position tiles: the finishing pass holds a partial tile beside the sum, so no more than 64 a thread
        block_m = min(64, base["BLOCK_M"])
        for split in split_counts(work[0] * (base["BLOCK_M"] // block_m), work[1], sms):
            add(SPLIT_K=split, BLOCK_M=block_m)
    return out


def split_counts(programs: int, steps: int, sms: int = SMS) -> list[int]:
    """The split-K factors worth timing for a grid of ``programs`` tiles of ``steps`` main-loop steps each.

    None when the grid already fills the ``sms`` multiprocessors or the reduction is short. Otherwise the
    smallest power of two that fills them (at most :data:`SPLIT_MAX`, each range at least
    :data:`SPLIT_MIN_STEPS` steps), and half of it: fewer partial tiles to write and add up.
    """
    if programs >= sms or steps < 2 * SPLIT_MIN_STEPS:
        return []
    split = 2
    while programs * split < sms and split * 2 <= SPLIT_MAX and steps // (split * 2) >= SPLIT_MIN_STEPS:
        split *= 2
    return [split // 2, split] if split > 2 else [split]


def key(
    x: torch.Tensor,
    weight: torch.Tensor,
    has_bias: bool,
    geometry: tuple[Any, ...],
    precision: str,
    epilogue: list[list[Any]] | None,
    vectors: list[torch.Tensor],
    reduce: str | None,
) -> str:
    """The cache key of one convolution on this GPU with this Triton (every input of the choice)."""
    import triton

    gpu = torch.cuda.get_device_name(x.device) if x.device.type == "cuda" else x.device.type
    return json.dumps(
        [
            gpu,
            triton.__version__,
            list(x.shape),
            list(x.stride()),
            str(x.dtype),
            list(weight.shape),
            has_bias,
            [list(g) if isinstance(g, (list, tuple)) else g for g in geometry],
            precision,
            epilogue or [],
            [list(v.shape) for v in vectors],
            reduce or "",
        ],
        separators=(",", ":"),
        default=str,
    )


def choose(
    cache_key: str,
    configs: list[dict[str, Any]],
    run: Callable[[dict[str, Any]], Any],
    timer: Callable[[Callable[[], Any]], float] | None = None,
    compile_all: Callable[[list[dict[str, Any]]], Any] | None = None,
) -> dict[str, Any]:
    """The fastest of ``configs`` for ``run(config)``: memoized, cached on disk, or timed now.

    ``timer`` (tests): the milliseconds of one call of a function; default Triton's ``do_bench``.
    ``compile_all(configs)``: compiles every configuration's kernels before their first runs (only when
    they are timed now), so that those runs find them compiled (:func:`compile_together`).
    """
    from kernelskill.runner import cache, gpu_share

    if cache_key in _MEMO:
        return _MEMO[cache_key]
    stored = cache.get(CACHE, cache_key)
    listing = [json.dumps(c, sort_keys=True) for c in configs]  # a choice among other candidates is made again
    if isinstance(stored, dict) and stored.get("config") in configs and stored.get("candidates") == listing:
        _MEMO[cache_key] = dict(stored["config"])
        return _MEMO[cache_key]
    time_one = timer or _do_bench
    if compile_all is not None:
        with gpu_share.released("conv-compile"):  # CPU work: no GPU share held meanwhile
            compile_all(configs)
    ready = []
    for cfg in configs:  # the compile of each, on the CPU, before the GPU is held alone
        try:
            with gpu_share.shared("conv-tune"):
                run(cfg)
                _sync()
            ready.append(cfg)
        except Exception:  # noqa: BLE001 - a configuration this GPU or shape cannot take: not a candidate
            continue
    if not ready:
        _MEMO[cache_key] = dict(configs[0])
        return _MEMO[cache_key]
    best_of: dict[int, float] = {}
    with gpu_share.released("conv-tune"), gpu_share.tuning("tuning:conv"):  # the GPU alone, even inside a share
        for order in (range(len(ready)), reversed(range(len(ready)))):
            for i in order:
                try:
                    ms = float(time_one(functools.partial(run, ready[i])))
                except Exception:  # noqa: BLE001 - see above
                    continue
                best_of[i] = min(ms, best_of.get(i, ms))
    times = [(ms, i) for i, ms in best_of.items()]
    if not times:
        _MEMO[cache_key] = dict(configs[0])
        return _MEMO[cache_key]
    best_ms, best = min(times)
    chosen = dict(ready[best])
    _MEMO[cache_key] = chosen
    timed = {json.dumps(ready[i]): t for t, i in times}
    cache.put(CACHE, cache_key, {"config": chosen, "ms": best_ms, "candidates": listing, "timed": timed})
    return chosen


def tuned(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    vectors: Any,
    geometry: tuple[Any, ...],
    precision: str,
    epilogue: list[list[Any]] | None,
    reduce: str | None,
    base: dict[str, Any],
    in_per_group: int,
    run: Callable[[dict[str, Any], tuple[Any, ...]], Any],
    timer: Callable[[Callable[[], Any]], float] | None = None,
    work: tuple[int, int] | None = None,
    phases: int = 1,
) -> dict[str, Any]:
    """:func:`.conv.conv`'s configuration for this convolution: the fastest candidate, else ``base``.

    ``run(config, (x, weight, bias, vectors))`` computes the convolution with ``config`` on real tensors
    made here of the arguments' shapes (the arguments may be fake). Anything that goes wrong (out of
    memory for the copies, say) leaves ``base``. ``timer``: see :func:`choose`. ``work``, ``phases``: see
    :func:`candidates`.
    """
    chosen = base
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.device.type == "cuda" else SMS
    configs = candidates(base, in_per_group, bool(geometry[4]), int(geometry[3]), epilogue, work, sms, phases)
    if len(configs) > 1:
        try:
            cache_key = key(x, weight, bias is not None, geometry, precision, epilogue, list(vectors), reduce)
            if cache_key in _MEMO or _time_left():
                chosen = dict(_MEMO.get(cache_key) or _timed(cache_key, configs, x, weight, bias, vectors, run, timer))
        except Exception:  # noqa: BLE001 - tuning is an optimization: the default configuration always works
            chosen = base
    _LAST.clear()
    _LAST.update(chosen)
    return chosen


def last_choice() -> dict[str, Any]:
    """The configuration the last tuned convolution of this process runs with ({} before any, or since reset)."""
    return dict(_LAST)


def start_task() -> None:
    """Start the next task of a benchmark that measures one task after another in one process.

    As its own process would: with no :func:`last_choice` and its whole tuning budget.
    """
    _LAST.clear()
    _SPENT[0] = 0.0


def _timed(
    cache_key: str,
    configs: list[dict[str, Any]],
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    vectors: Any,
    run: Callable[[dict[str, Any], tuple[Any, ...]], Any],
    timer: Callable[[Callable[[], Any]], float] | None,
) -> dict[str, Any]:
    """:func:`choose` over real tensors of the arguments' shapes, its time added to this process's budget.

    The time spent waiting for a shared GPU is not counted: on a GPU shared by many workers, the waits
    would spend the budget on the first convolutions.
    """
    from kernelskill.runner import gpu_share

    t0, waits0 = time.perf_counter(), sum((gpu_share.waited() or {}).values())
    try:

        def copies(make: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Any, ...]:
            return (make(x), make(weight), make(bias) if bias is not None else None, [make(v) for v in vectors])

        @functools.cache
        def real() -> tuple[Any, ...]:  # made at the first timed run (not on a choice read from the cache)
            gen = torch.Generator(device=x.device).manual_seed(0)
            return copies(lambda t: real_like(t, gen))

        @functools.cache
        def meta() -> tuple[Any, ...]:  # made when the candidates are compiled together
            return copies(meta_like)

        with outside_tracing():
            return choose(
                cache_key,
                configs,
                lambda cfg: run(cfg, real()),
                timer,
                compile_all=lambda cfgs: compile_together(cfgs, lambda cfg: run(cfg, meta())),
            )
    finally:
        waits = sum((gpu_share.waited() or {}).values()) - waits0
        _SPENT[0] += max(0.0, time.perf_counter() - t0 - waits)


def compile_together(configs: list[dict[str, Any]], run: Callable[[dict[str, Any]], Any]) -> int:
    """Compile the kernels ``run(config)`` launches, for every one of ``configs``, on a pool of threads.

    ``run`` runs under :func:`.conv.compile_only` (each launch compiles, nothing runs: ``run`` may take meta
    tensors of the real arguments' shapes and strides, which Triton specializes alike) and inside Triton's
    ``AsyncCompileMode``, which hands each compile to the pool. Triton's compile spends most of its time
    outside the GIL (MLIR passes, LLVM, ptxas), so the candidates compile side by side instead of one after
    another: on two cores, six candidates of a 2-D convolution compiled for sm_90 in 5.6 s instead of
    10.8 s. A later launch with the same specialization finds its kernel compiled. Python's AST builder is
    not thread-safe before 3.13 (``SystemError: AST constructor recursion depth mismatch``): the threads'
    and this one's ``ast.parse`` calls take turns (:func:`_parse_in_turn`).

    Best effort, returns the number of compiles handed to the pool: 0 with no such mode in this Triton,
    with one thread (``KERNELSKILL_CONV_COMPILE_THREADS``, default the CPUs, at most 8), or when a mode is
    already active; a configuration that fails here fails again, and is skipped, at its first real run.
    """
    try:
        from triton.runtime import _async_compile
    except ImportError:
        return 0
    from concurrent.futures import ThreadPoolExecutor

    from .conv import compile_only

    threads = compile_threads()
    if threads < 2 or len(configs) < 2:
        return 0
    mode = None
    try:
        with (
            _parse_in_turn(),
            ThreadPoolExecutor(min(threads, len(configs)), thread_name_prefix="conv-compile") as pool,
        ):
            mode = _async_compile.AsyncCompileMode(pool, ignore_errors=True)
            with mode, compile_only():
                for cfg in configs:
                    with contextlib.suppress(Exception):  # a configuration this shape cannot take: see above
                        run(cfg)
            return len(mode.raw_futures)
    except Exception:  # noqa: BLE001 - e.g. another AsyncCompileMode active: the first runs compile, one by one
        return 0
    finally:  # the mode never stays on (Triton 3.6 turns it off once all compiles are finalized): no launch would run
        if mode is not None and _async_compile.active_mode.get() is mode:
            _async_compile.active_mode.set(None)


def compile_threads() -> int:
    """Threads :func:`compile_together` compiles on: ``KERNELSKILL_CONV_COMPILE_THREADS``, else the CPUs (at most 8)."""
    default = min(os.cpu_count() or 1, THREADS_MAX)
    try:
        return int(os.environ.get(THREADS_ENV, "").strip() or default)
    except ValueError:
        return default


_PARSE_LOCK = threading.Lock()


@contextlib.contextmanager
def _parse_in_turn() -> Iterator[None]:
    """Within it, ``ast.parse`` (Triton's JIT parses each kernel's source) runs in one thread at a time."""
    real = ast.parse

    @functools.wraps(real)
    def parse(*args: Any, **kwargs: Any) -> Any:
        with _PARSE_LOCK:
            return real(*args, **kwargs)

    ast.parse = parse
    try:
        yield
    finally:
        ast.parse = real


def _time_left() -> bool:
    """True while this process may tune: its budget not spent, the launch's deadline not near."""
    from kernelskill.graph import deadline

    try:
        budget = float(os.environ.get(BUDGET_ENV, "").strip() or BUDGET_S)
    except ValueError:
        budget = BUDGET_S
    if _SPENT[0] >= budget:
        return False
    remaining = deadline.left()
    return remaining is None or remaining > DEADLINE_RESERVE_S


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _do_bench(fn: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=30, return_mode="median"))


def real_like(t: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A real tensor of ``t``'s shape, strides, dtype and device, filled with normal values (``t`` may be fake)."""
    out = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)
    if out.is_floating_point():
        out.normal_(generator=generator)
    else:
        out.zero_()
    return out


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor on the meta device of ``t``'s shape, strides and dtype (no memory, nothing to compute)."""
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def outside_tracing() -> Any:
    """A context with no dispatch mode (fake tensors, tracing, functionalization) active: real kernels run."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def is_fake(t: torch.Tensor) -> bool:
    """True for a fake tensor (a traced call)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)
