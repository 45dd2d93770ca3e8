"""Per-shape launch configurations of our convolution kernel (``engine/conv_tune.py``).

On the CPU: every candidate configuration computes the convolution (Triton's interpreter against
PyTorch in float64), the fastest is chosen by the timer and cached, a failing one is skipped, and under a
trace (fake tensors) the candidates run on real tensors of the same shapes. On the GPU: a tuned
convolution is right and its choice is cached.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from kernelskill.engine import conv_tune
from kernelskill.engine.conv import conv, launch_config

# (dims, in channels, out channels, kernel, stride, padding, dilation, groups, spatial size, transposed)
CASES = {
    "2d-3-channels": (2, 3, 8, (3, 3), 1, 1, 1, 1, (7, 6), False),
    "1d-5-channels-strided": (1, 5, 7, (3,), 2, 2, 2, 1, (13,), False),
    "2d-grouped-few": (2, 8, 12, (3, 3), 1, 1, 1, 4, (6, 6), False),
    "3d-asymmetric": (3, 3, 4, (2, 3, 3), (1, 2, 1), (0, 1, 1), 1, 1, (4, 6, 5), False),
    "2d-many-channels": (2, 40, 20, (1, 1), 1, 0, 1, 1, (5, 5), False),
    "2d-transposed": (2, 5, 3, (3, 3), 2, 1, 1, 1, (5, 6), True),
    "2d-transposed-grouped-dilated": (2, 4, 6, (3, 2), (3, 2), 1, 2, 2, (4, 5), True),
}
FORWARD = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSKILL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(conv_tune, "_MEMO", {})


def _case(name):
    dims, cin, cout, k, s, p, d, g, space, transposed = CASES[name]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, cin, *space, generator=gen)
    shape = (cin, cout // g, *k) if transposed else (cout, cin // g, *k)
    w = torch.randn(*shape, generator=gen) / (cin * len(k)) ** 0.5
    b = torch.randn(cout, generator=gen)
    if transposed:
        want = F.conv_transpose2d(x.double(), w.double(), b.double(), s, p, 1, g, d)
    else:
        want = FORWARD[dims](x.double(), w.double(), b.double(), s, p, d, g)
    taps = 1
    for n in k:
        taps *= n
    base = launch_config(cin // g, w.shape[1] if transposed else cout // g, taps)
    phases = 1
    for n in [s] * dims if isinstance(s, int) else s:
        phases *= n if transposed else 1
    configs = conv_tune.candidates(base, cin // g, transposed, g, phases=phases)
    return x, w, b, (s, p, d, g, transposed), want, configs, base


def test_the_candidates_start_with_the_default_and_differ():
    few = launch_config(3, 8, 9)
    assert few["DIRECT"] and not few["FLAT_K"]  # few channels, forward: the rank-1 form by default
    got = conv_tune.candidates(few, 3, False)
    assert got[0] == few and len(got) == len({json.dumps(c, sort_keys=True) for c in got}) >= 5
    assert {"DIRECT": False, "BLOCK_K": 16}.items() <= got[1].items() and any(c.get("PAD_C") == 16 for c in got)
    assert not any(c["FLAT_K"] for c in got)  # the flattened reduction: measured the slowest, not timed
    many = launch_config(64, 64, 9)
    assert not any(c.get("DIRECT") or c["BLOCK_K"] != many["BLOCK_K"] for c in conv_tune.candidates(many, 64, False))
    back = launch_config(3, 8, 9, transposed=True)  # transposed: one-tap slices by default, the rank-1 form timed
    assert not back["DIRECT"] and any(c["DIRECT"] for c in conv_tune.candidates(back, 3, True))
    wide = launch_config(64, 128, 9)  # the default tile is finished in slices: also timed whole
    assert {"EPI_SPLIT": 1}.items() <= conv_tune.candidates(wide, 64, False)[1].items()
    assert not any(c["BLOCK_K"] == 64 for c in conv_tune.candidates(wide, 64, False))  # measured slower
    stepped = conv_tune.candidates(wide, 64, False, epilogue=[["relu"], ["channels", "softmax"]])  # whole tiles
    assert stepped[:-2] == [c for c in conv_tune.candidates(wide, 64, False) if "EPI_SPLIT" not in c]
    assert [(c["BLOCK_M"], c["num_warps"]) for c in stepped[-2:]] == [(64, 8), (32, 4)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_candidate_computes_the_convolution(name):
    x, w, b, (s, p, d, g, transposed), want, configs, _ = _case(name)
    for cfg in configs:
        if transposed:
            got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=1, config=cfg)
        else:
            got = conv(x, w, b, s, p, d, g, config=cfg)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=lambda m, cfg=cfg: f"{cfg}: {m}")


def test_a_transposed_convolution_of_several_phases_is_also_timed_phases_side_by_side_and_in_the_gather_form():
    back = launch_config(8, 8, 9, transposed=True)
    several = conv_tune.candidates(back, 8, True, phases=4)
    assert {"PHASE_INNER": True}.items() <= several[-2].items() and {"GATHER": True}.items() <= several[-1].items()
    for key in ("PHASE_INNER", "GATHER"):
        assert not any(c.get(key) for c in conv_tune.candidates(back, 8, True, phases=1))  # stride 1
        assert not any(c.get(key) for c in conv_tune.candidates(launch_config(8, 8, 9), 8, False, phases=4))
    x, w, b, (s, p, d, g, _), want, configs, base = _case("2d-transposed-grouped-dilated")
    assert any(c.get("PHASE_INNER") for c in configs) and any(c.get("GATHER") for c in configs)
    for extra in ({"SPLIT_K": 2, "BLOCK_M": 64}, {"PHASE_INNER": False}, {"GATHER": True, "SPLIT_K": 2}):
        cfg = {**base, "PHASE_INNER": True, **extra}  # with split-K; the other order; the gather form
        got = conv(x, w, b, s, p, d, g, transposed=True, output_padding=1, config=cfg)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_the_fastest_is_chosen_cached_and_reused():
    from kernelskill.runner import cache

    configs = [{"BLOCK_M": 128}, {"BLOCK_M": 64}, {"BLOCK_M": 256}, {"BLOCK_M": 32}]
    ran, timed = [], []

    def run(cfg):
        ran.append(cfg["BLOCK_M"])
        if cfg["BLOCK_M"] == 32:
            raise RuntimeError("out of resources")  # a configuration this GPU cannot take
        return cfg["BLOCK_M"]

    def timer(fn):
        m = fn()
        timed.append(m)
        if m == 64 and timed.count(64) == 1:
            return 9.0  # another process's work on the GPU during its first timing
        return {128: 2.0, 64: 1.5, 256: 3.0}[m]

    assert conv_tune.choose("k1", configs, run, timer) == {"BLOCK_M": 64}
    assert timed == [128, 64, 256, 256, 64, 128] and 32 in ran  # two passes, opposite orders; 32 failed, not timed
    stored = cache.get(conv_tune.CACHE, "k1")
    assert stored["config"] == {"BLOCK_M": 64} and stored["ms"] == 1.5 and len(stored["timed"]) == 3
    ran.clear()
    assert conv_tune.choose("k1", configs, run, timer) == {"BLOCK_M": 64} and not ran  # this process: memoized
    conv_tune._MEMO.clear()
    assert conv_tune.choose("k1", configs, run, timer) == {"BLOCK_M": 64} and not ran  # another: from the cache
    conv_tune._MEMO.clear()
    more = [*configs, {"BLOCK_M": 64, "PHASE_INNER": True}]  # a candidate the stored choice was not made against
    timed.clear()
    assert conv_tune.choose("k1", more, run, timer) == {"BLOCK_M": 64} and timed.count(64) == 4  # timed again
    conv_tune._MEMO.clear()
    assert conv_tune.choose("k2", [{"BLOCK_M": 32}, {"BLOCK_M": 32, "x": 1}], run, timer) == {"BLOCK_M": 32}


def test_inside_a_shared_hold_the_candidates_are_timed_with_the_gpu_alone(tmp_path, monkeypatch):
    """A convolution tuned at its first run inside a shared hold (a review's correctness check) gives the share
    up and takes a turn alone for its timings: timed beside other processes' work, the choice (cached for
    every later run) would be the noise's."""
    from kernelskill.runner import gpu_share

    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    states = []

    def timer(fn):
        h = gpu_share._holder()
        states.append((h.shared, h.exclusive))
        return 1.0

    with gpu_share.shared("review"):
        conv_tune.choose("k-shared", [{"BLOCK_M": 128}, {"BLOCK_M": 64}], lambda cfg: None, timer)
        assert gpu_share._holder().shared == 1  # the share is back after the turn
    assert states == [(0, 1)] * 4


def test_under_a_trace_the_candidates_run_on_real_tensors_of_the_same_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen = []

    def run(cfg, args):
        rx, rw, rb, rv = args
        seen.append((cfg["BLOCK_M"], conv_tune.is_fake(rx), tuple(rx.shape), rx.stride(), tuple(rw.shape), rb, rv))
        return rx

    base = {**launch_config(16, 32, 9), "BLOCK_M": 128}
    with FakeTensorMode():
        x = torch.empty(2, 16, 6, 6).to(memory_format=torch.channels_last)
        w = torch.empty(32, 16, 3, 3)
        assert conv_tune.is_fake(x)
        got = conv_tune.tuned(x, w, None, [], (1, 1, 1, 1, False, 0, None), "ieee", None, None, base, 16, run,
                              timer=lambda fn: 1.0 if fn() is not None and seen[-1][0] == 64 else 2.0)  # fmt: skip
    assert got["BLOCK_M"] == 64
    assert {(fake, shape, stride, w_shape) for _, fake, shape, stride, w_shape, _, _ in seen} == {
        (False, (2, 16, 6, 6), x.stride(), (32, 16, 3, 3))  # real, channels-last like the traced input
    }


def test_a_choice_cached_on_disk_makes_no_copies_of_the_arguments(monkeypatch):
    """Another process's choice, read from the cache: the real copies (GPU memory of the arguments' size)
    and the meta ones are made only when the candidates are compiled and timed."""
    made = []
    monkeypatch.setattr(conv_tune, "real_like", lambda t, gen: made.append("real") or t)
    monkeypatch.setattr(conv_tune, "meta_like", lambda t: made.append("meta") or t)
    x, w = torch.empty(2, 16, 6, 6), torch.empty(32, 16, 3, 3)
    geometry = (1, 1, 1, 1, False, 0, None)

    def tune():
        return conv_tune.tuned(x, w, None, [], geometry, "ieee", None, None, launch_config(16, 32, 9), 16,
                               lambda cfg, a: a[0], timer=lambda fn: 1.0 if fn() is not None else 2.0)  # fmt: skip

    first = tune()
    assert "real" in made
    conv_tune._MEMO.clear()
    made.clear()
    assert tune() == first and made == []


def test_no_tuning_on_the_cpu_or_when_turned_off(monkeypatch):
    assert not conv_tune.enabled(torch.empty(1))
    monkeypatch.setenv(conv_tune.ENV, "0")
    assert not conv_tune.enabled(torch.empty(1))


def test_a_failure_while_tuning_leaves_the_default():
    base = launch_config(3, 8, 9)

    def run(cfg, args):
        raise AssertionError("never reached")

    x = torch.empty(2, 3, 7, 6)
    # a bias of an odd kind: making its copy fails, and the default configuration stays
    assert conv_tune.tuned(x, torch.empty(8, 3, 3, 3), object(), [], (1, 1, 1, 1, False, 0, None), "ieee", None,
                           None, base, 3, run) == base  # fmt: skip


@pytest.mark.gpu
def test_a_tuned_convolution_on_the_gpu_is_right_and_its_choice_cached(monkeypatch):
    from kernelskill.runner import cache

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(8, 8, 32, 32, generator=gen).cuda()
    w = (torch.randn(64, 8, 3, 3, generator=gen) / 8).cuda()
    b = torch.randn(64, generator=gen).cuda()
    got = conv(x, w, b, 1, 1, 1, 1, precision="tf32x3")
    want = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    entries = cache.load(conv_tune.CACHE)
    assert len(entries) == 1
    (entry,) = entries.values()
    assert entry["config"] in conv_tune.candidates(launch_config(8, 64, 9), 8, False) and len(entry["timed"]) >= 2


@pytest.mark.gpu
def test_under_torch_compile_the_traced_convolution_is_tuned_on_real_tensors():
    from kernelskill.engine.conv import conv_nd
    from kernelskill.runner import cache

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, 20, 20, generator=gen).cuda()
    w = (torch.randn(32, 6, 3, 3, generator=gen) / 7).cuda()
    compiled = torch.compile(lambda a, b: torch.relu(conv_nd(a, b, None, 1, 1, 1, 1, "ieee")), fullgraph=True)
    got = compiled(x, w)
    want = torch.relu(F.conv2d(x.double(), w.double(), None, 1, 1))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    entries = cache.load(conv_tune.CACHE)
    assert len(entries) == 1 and '"torch.float32"' in next(iter(entries))


def test_no_tuning_past_the_budget_or_near_the_deadline(monkeypatch):
    import time

    from kernelskill.graph import deadline

    base = launch_config(16, 32, 9)
    calls = []

    def run(cfg, args):
        calls.append(cfg)

    def tune(name):
        x = torch.empty(2, 16, 6, 6)
        return conv_tune.tuned(x, torch.empty(32, 16, 3, 3), None, [], (1, 1, 1, 1, False, 0, None), name, None,
                               None, base, 16, run, timer=lambda fn: 1.0)  # fmt: skip

    monkeypatch.setattr(conv_tune, "_SPENT", [0.0])
    monkeypatch.setenv(deadline.ENV, str(time.time() + 60))  # a minute left: not worth tuning
    assert tune("ieee") == base and not calls
    monkeypatch.setenv(deadline.ENV, str(time.time() + 600))
    tune("ieee")
    assert calls  # tuned
    monkeypatch.setenv(conv_tune.BUDGET_ENV, "0")
    calls.clear()
    assert tune("tf32x3") == base and not calls  # the budget is spent


def test_each_task_starts_with_no_last_choice_and_its_whole_budget(monkeypatch):
    """last_choice (each bench_conv row's ``config``) is what tuned() returned last; start_task clears it, so a
    task measured after another records no choice of the earlier task's, and gives the next task the whole
    tuning budget (one process measuring many tasks tuned only its first few)."""
    monkeypatch.setattr(conv_tune, "_SPENT", [0.0])
    x, w = torch.randn(1, 3, 6, 6), torch.randn(8, 3, 3, 3)
    base = launch_config(3, 8, 9)
    cands = conv_tune.candidates(base, 3, False)
    got = conv_tune.tuned(x, w, None, [], (1, 0, 1, 1, False, 0, None), "ieee", None, None, base, 3,
                          lambda cfg, a: None, timer=lambda fn: 100.0 - cands.index(fn.args[0]))  # fmt: skip
    assert got == cands[-1] and conv_tune.last_choice() == got
    conv_tune._SPENT[0] = conv_tune.BUDGET_S  # the budget spent
    assert not conv_tune._time_left()
    conv_tune.start_task()
    assert conv_tune.last_choice() == {} and conv_tune._time_left()


def test_waiting_for_a_shared_gpu_does_not_spend_the_tuning_budget(monkeypatch):
    """The budget bounds this process's compiles and timings; on a GPU many workers share, the waits for it
    would otherwise spend the budget on the first convolutions and leave the rest untuned."""
    import time

    from kernelskill.runner import gpu_share

    monkeypatch.setattr(conv_tune, "_SPENT", [0.0])
    waited = [0.0]
    monkeypatch.setattr(gpu_share, "waited", lambda: {"shared": 0.0, "exclusive": waited[0]})

    def timer(fn):  # each timing first waits 50 ms for its turn
        time.sleep(0.05)
        waited[0] += 0.05
        return 1.0

    x = torch.empty(2, 16, 6, 6)
    conv_tune.tuned(x, torch.empty(32, 16, 3, 3), None, [], (1, 1, 1, 1, False, 0, None), "wait-test", None, None,
                    launch_config(16, 32, 9), 16, lambda cfg, a: None, timer=timer)  # fmt: skip
    assert waited[0] >= 0.2 and conv_tune._SPENT[0] < 0.1, (waited, conv_tune._SPENT)


def test_a_convolution_that_sums_statistics_is_tuned_with_them_and_cached_apart(monkeypatch):
    """The statistics a normalization takes from the kernel change its fastest configuration: the candidates are
    timed summing them, under a key of their own, and a split-K candidate is offered for a grid that leaves the
    multiprocessors idle."""
    from kernelskill.engine import conv as K

    calls = []

    def tuned(x, weight, bias, vectors, geometry, precision, epilogue, reduce, base, in_per_group, run, **kw):
        calls.append((geometry, kw["work"], run(base, (x, weight, bias, vectors))))
        return base

    monkeypatch.setattr(conv_tune, "enabled", lambda x: True)
    monkeypatch.setattr(conv_tune, "tuned", tuned)
    x, w = torch.randn(2, 16, 6, 6), torch.randn(32, 16, 3, 3)
    K.conv(x, w, padding=1)
    out, sums = K.conv(x, w, padding=1, stats=True)
    (plain, work, _), (with_stats, _, timed) = calls
    assert with_stats == (*plain, "stats")  # a key of its own
    assert isinstance(timed, tuple) and torch.equal(timed[1], sums)  # the timed run summed them too
    assert work == (1, 9) and conv_tune.split_counts(*work) == [2]  # 72 positions: one tile of 9 steps


def test_the_candidates_are_compiled_together_before_their_first_runs_and_only_when_timed():
    events = []

    def compile_all(cfgs):
        events.append(("compile", [c["BLOCK_M"] for c in cfgs]))

    def run(cfg):
        events.append(("run", cfg["BLOCK_M"]))

    configs = [{"BLOCK_M": 128}, {"BLOCK_M": 64}]
    conv_tune.choose("k-together", configs, run, lambda fn: 1.0, compile_all=compile_all)
    assert events[:3] == [("compile", [128, 64]), ("run", 128), ("run", 64)]
    events.clear()
    conv_tune._MEMO.clear()
    conv_tune.choose("k-together", configs, run, lambda fn: 1.0, compile_all=compile_all)  # read from the cache
    assert events == []


def test_ast_parse_takes_turns_while_candidates_compile_together(monkeypatch):
    """Python's AST builder keeps its recursion depth in state all threads share before 3.13; two threads
    parsing at once raised ``SystemError: AST constructor recursion depth mismatch`` in a compile of the
    candidates on a pool of threads. Inside ``_parse_in_turn`` one ``ast.parse`` runs at a time."""
    import ast
    import threading
    import time

    inside, most = [0], [0]
    lock = threading.Lock()

    def slow_parse(*args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1
        return "parsed"

    monkeypatch.setattr(ast, "parse", slow_parse)
    with conv_tune._parse_in_turn():
        threads = [threading.Thread(target=ast.parse, args=("x = 1",)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert most[0] == 1 and ast.parse is slow_parse


COMPILE_TOGETHER = textwrap.dedent(
    """
    import os, threading, tempfile
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    os.environ["KERNELSKILL_CONV_COMPILE_THREADS"] = "3"
    import torch
    import triton.compiler
    from triton.runtime.jit import JITFunction
    from kernelskill.runner.compile_check import sm90_driver

    sm90_driver()  # compiles for sm_90, no GPU
    threads = set()
    real_compile = triton.compiler.compile
    def compile(*args, **kwargs):
        threads.add(threading.current_thread().name.split("_")[0])
        return real_compile(*args, **kwargs)
    triton.compiler.compile = compile

    from kernelskill.engine import conv_tune
    from kernelskill.engine.conv import compile_only, conv, launch_config

    x, w, b = torch.randn(2, 16, 9, 9), torch.randn(32, 16, 3, 3), torch.randn(32)
    v = [torch.randn(32)]
    epi = [["mish"], ["mul", "E0"]]
    base = launch_config(16, 32, 9)
    configs = conv_tune.candidates(base, 16, False, 1, epi)
    def run(cfg, a):
        return conv(a[0], a[1], a[2], 1, 1, precision="tf32r", epilogue=epi, vectors=a[3], config=cfg)
    meta = [conv_tune.meta_like(t) for t in (x, w, b)] + [[conv_tune.meta_like(v[0])]]
    bad = {**base, "BLOCK_K": 4, "BLOCK_N": 8}  # tl.dot takes no K below 16: its compile fails on its thread
    n = conv_tune.compile_together(configs + [bad], lambda cfg: run(cfg, meta))
    print("handed", n, "configs", len(configs), "threads", sorted(threads))
    count = [0]
    raw = JITFunction._do_compile
    def counting(*args, **kwargs):
        count[0] += 1
        return raw(*args, **kwargs)
    JITFunction._do_compile = counting
    with compile_only():  # the same launches with tensors in memory: every kernel is found compiled
        for cfg in configs:
            run(cfg, (x, w, b, v))
    print("compiled again", count[0])
    raw_run = JITFunction.run
    def lookup(self, *args, grid, warmup, **kwargs):  # a launch's key and cache lookup, nothing launched
        return raw_run(self, *args, grid=grid, warmup=True, **kwargs)
    JITFunction.run = lookup
    count[0] = 0
    for cfg in configs:  # the real launches, through wrap_triton: they find every kernel compiled too
        run(cfg, (x, w, b, v))
    print("launched compiled", count[0])
    """
)


def test_the_candidates_compile_on_a_pool_of_threads_as_their_real_launches_are_specialized():
    """Compiled for sm_90 without a GPU (a stand-in driver): each candidate of a convolution with a fused
    epilogue, launched on meta tensors under ``compile_only``, compiles on the pool's threads, one that fails to
    compile among them stops none of the others, and the same launches on tensors in memory find every kernel
    compiled (meta tensors specialize alike), both compile-only and through ``wrap_triton``'s launch, which adds
    the launch options' defaults that Triton's cache key includes."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", COMPILE_TOGETHER], capture_output=True, text=True, timeout=600,
                         env=env)  # fmt: skip
    lines = [line.split() for line in out.stdout.splitlines()]
    assert len(lines) == 3, out.stdout[-2000:] + out.stderr[-3000:]
    handed, configs, threads = int(lines[0][1]), int(lines[0][3]), lines[0][5:]
    assert configs >= 4 and handed >= configs + 1, out.stdout  # each candidate's kernel, the bad one's, the layout's
    assert threads == ["['conv-compile']"], out.stdout  # none on this thread
    assert lines[1] == ["compiled", "again", "0"], out.stdout
    assert lines[2] == ["launched", "compiled", "0"], out.stdout  # wrap_triton's launch options: the same key


@pytest.mark.gpu
def test_on_the_gpu_the_candidates_first_runs_find_their_kernels_compiled(monkeypatch):
    """The tuning compiles every candidate together on meta tensors; its runs on the GPU's tensors then compile
    nothing more (a specialization that differed would compile again, one by one, and this would fail)."""
    from triton.runtime.jit import JITFunction

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    handed, compiled_after = [], []
    real_together = conv_tune.compile_together

    def together(cfgs, run):
        n = real_together(cfgs, run)
        handed.append((n, len(cfgs)))
        raw = JITFunction._do_compile

        def counting(self, *args, **kwargs):
            compiled_after.append(self.fn.__name__)
            return raw(self, *args, **kwargs)

        monkeypatch.setattr(JITFunction, "_do_compile", counting)
        return n

    monkeypatch.setattr(conv_tune, "compile_together", together)
    monkeypatch.setenv(conv_tune.THREADS_ENV, "4")
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(4, 24, 30, 30, generator=gen).cuda()
    w = (torch.randn(48, 24, 3, 3, generator=gen) / 15).cuda()
    e0 = torch.randn(48, generator=gen).cuda()
    got = conv(x, w, None, 1, 1, precision="tf32x3", epilogue=[["mish"], ["add", "E0"]], vectors=[e0])
    want = F.mish(F.conv2d(x.double(), w.double(), None, 1, 1)) + e0.double()[:, None, None]
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    assert len(handed) == 1 and handed[0][0] >= handed[0][1] >= 2, handed
    assert compiled_after == [], compiled_after


def _random_convolution(rng):
    """A convolution of random form (1-3-D, transposed or not, strides, padding, dilation, groups, output padding)."""
    dims, transposed = rng.choice([1, 2, 2, 3]), rng.random() < 0.4
    groups = rng.choice([1, 1, 2, 3])
    cin = groups * rng.choice([1, 2, 3, 5, 16, 17, 20])
    cout = groups * rng.choice([1, 2, 7, 16, 19, 40])
    k = [rng.choice([1, 2, 3, 4] if dims < 3 else [1, 2, 3]) for _ in range(dims)]
    s = [rng.choice([1, 1, 2, 3]) for _ in range(dims)]
    d = [rng.choice([1, 1, 2]) for _ in range(dims)]
    if transposed:
        p = [rng.randint(0, d[i] * (k[i] - 1)) for i in range(dims)]
        op = [rng.randint(0, max(s[i], d[i]) - 1) for i in range(dims)]
        size = [rng.randint(1, 6) for _ in range(dims)]
        for i in range(dims):  # an output of at least one position
            while (size[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] < 0:
                size[i] += 1
    else:
        p, op = [rng.randint(0, k[i]) for i in range(dims)], [0] * dims
        size = [max(rng.randint(1, 7), d[i] * (k[i] - 1) + 1 - 2 * p[i]) for i in range(dims)]
    return dims, transposed, groups, cin, cout, k, s, p, d, op, size


def test_random_convolutions_equal_pytorch_under_every_tuning_candidate():
    """Seeded random forms, each under every configuration its tuning may time (one of them picked by a GPU's
    timings, unchecked): the interpreter against PyTorch in float64. (Found: a transposed convolution of one
    input and one output channel was wrong under the channel-padded candidate.)"""
    import math
    import random

    rng = random.Random(20261205)
    for case in range(14):
        dims, transposed, groups, cin, cout, k, s, p, d, op, size = _random_convolution(rng)
        gen = torch.Generator().manual_seed(case)
        x = torch.randn(rng.choice([1, 2]), cin, *size, generator=gen)
        shape = (cin, cout // groups, *k) if transposed else (cout, cin // groups, *k)
        w = torch.randn(*shape, generator=gen) / math.sqrt(cin * math.prod(k))
        b = torch.randn(cout, generator=gen) if rng.random() < 0.7 else None
        bd = None if b is None else b.double()
        if transposed:
            want = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][dims - 1](
                x.double(), w.double(), bd, s, p, op, groups, d
            )
        else:
            want = [F.conv1d, F.conv2d, F.conv3d][dims - 1](x.double(), w.double(), bd, s, p, d, groups)
        c_g, out_g = cin // groups, cout // groups
        base = launch_config(c_g, out_g, math.prod(k), transposed)
        for cfg in [None, *conv_tune.candidates(base, c_g, transposed, groups, None, (1, 64))]:
            got = conv(x, w, b, s, p, d, groups, transposed=transposed, output_padding=op, config=cfg)
            where = (dims, transposed, groups, cin, cout, k, s, p, d, op, size, cfg)
            assert got.shape == want.shape, where
            torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4, msg=lambda m, w=where: f"{w}: {m}")
