"""Workers sharing one GPU: shared holds overlap, an exclusive hold (a timing) overlaps nothing."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelskill.runner import gpu_share

CTX = mp.get_context("spawn")  # a fresh interpreter per process, as the eval's task workers are


def _hold(lock_dir: str, log: str, name: str, kind: str, start_after: float, hold_s: float, t0: float) -> None:
    """Wait until ``t0 + start_after``, hold the lock for ``hold_s``, log when the hold began and ended."""
    os.environ[gpu_share.ENV] = lock_dir
    time.sleep(max(0.0, t0 + start_after - time.time()))
    asked = time.time()
    if kind == "upgrade":  # holds shared, then times (exclusive) inside, as a review does
        with gpu_share.shared():
            time.sleep(hold_s)
            with gpu_share.exclusive():
                began = time.time()
                time.sleep(hold_s)
                ended = time.time()
    elif kind == "compile":  # holds shared, compiles (the CPU alone) with the share given up, then runs again
        with gpu_share.shared():
            with gpu_share.released():
                began = time.time()  # the compile
                time.sleep(hold_s)
                ended = time.time()
            back = time.time()
            time.sleep(0.2)
        with open(log, "a") as f:
            f.write(json.dumps({"name": name + "-back", "began": back, "ended": back + 0.2}) + "\n")
    elif kind == "yielding":  # a long shared hold that yields to queued timings between its steps
        away = 0.0
        with gpu_share.shared():
            began = time.time()
            while time.time() < began + hold_s:
                time.sleep(0.05)
                away += gpu_share.yield_to_timing()
            ended = time.time()
        with open(log, "a") as f:
            f.write(json.dumps({"name": name + "-away", "away": away}) + "\n")
    else:
        with gpu_share.shared() if kind == "shared" else gpu_share.exclusive():
            began = time.time()
            time.sleep(hold_s)
            ended = time.time()
    row = {"name": name, "kind": kind, "asked": asked, "began": began, "ended": ended, "waited": gpu_share.waited()}
    with open(log, "a") as f:
        f.write(json.dumps(row) + "\n")


def _run(tmp_path: Path, plan: list[tuple[str, str, float, float]], limit_s: float = 30.0) -> dict[str, dict]:
    log = tmp_path / "log.jsonl"
    t0 = time.time() + 1.5  # every process is up before the first hold
    procs = [
        CTX.Process(target=_hold, args=(str(tmp_path / "locks"), str(log), name, kind, after, hold, t0))
        for name, kind, after, hold in plan
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(limit_s)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a process never got the lock (deadlock?)"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return {r["name"]: r for r in rows}


def _overlap(a: dict, b: dict) -> bool:
    return a["began"] < b["ended"] and b["began"] < a["ended"]


def test_a_relative_lock_directory_is_refused(monkeypatch):
    monkeypatch.setenv(gpu_share.ENV, "relative/locks")
    with pytest.raises(ValueError, match="absolute"), gpu_share.shared():
        pass


def test_without_the_variable_nothing_is_locked(monkeypatch):
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    with gpu_share.shared(), gpu_share.exclusive(), gpu_share.exclusive():
        pass
    assert gpu_share.waited() is None
    assert gpu_share.without_share({"A": "1", gpu_share.ENV: "x"}) == {"A": "1"}


def test_shared_holds_overlap_and_an_exclusive_one_overlaps_nothing(tmp_path):
    rows = _run(
        tmp_path,
        [
            ("s1", "shared", 0.0, 0.8),
            ("s2", "shared", 0.1, 0.8),
            ("x", "exclusive", 0.3, 0.4),
            ("s3", "shared", 0.5, 0.3),
        ],
    )
    assert _overlap(rows["s1"], rows["s2"])  # readers run together
    for reader in ("s1", "s2", "s3"):
        assert not _overlap(rows["x"], rows[reader]), reader
    # the timing asked while s1 and s2 held: it waited for them, not for s3, which asked after it
    assert rows["x"]["began"] >= max(rows["s1"]["ended"], rows["s2"]["ended"]) - 0.01
    assert rows["s3"]["began"] >= rows["x"]["ended"] - 0.01
    assert rows["x"]["waited"]["exclusive"] > 0.2


def test_two_holders_that_both_start_timing_do_not_deadlock(tmp_path):
    rows = _run(tmp_path, [("a", "upgrade", 0.0, 0.5), ("b", "upgrade", 0.05, 0.5), ("s", "shared", 0.2, 0.5)])
    assert not _overlap(rows["a"], rows["b"])
    assert not _overlap(rows["a"], rows["s"]) and not _overlap(rows["b"], rows["s"])


def test_a_killed_holder_frees_the_gpu(tmp_path):
    lock_dir = str(tmp_path / "locks")
    p = CTX.Process(
        target=_hold, args=(lock_dir, str(tmp_path / "dead.jsonl"), "dead", "exclusive", 0.0, 60.0, time.time())
    )
    p.start()
    time.sleep(2.0)
    p.kill()
    p.join()
    rows = _run(tmp_path, [("after", "exclusive", 0.0, 0.1)])
    assert rows["after"]["waited"]["exclusive"] < 5


@pytest.mark.parametrize("gpus, shared", [("0,1", False), ("0,0", True)])
def test_eval_shares_a_gpu_named_twice(tmp_path, monkeypatch, gpus, shared):
    from test_evals import FakeLauncher, make_task, quiet

    from kernelskill.evals.runner import run_eval
    from kernelskill.graph.context import Context

    tasks = tmp_path / "tasks"
    for name in ("a", "b", "c"):
        make_task(tasks, name)
    launcher = FakeLauncher()
    monkeypatch.chdir(tmp_path)  # a relative --out: every process must still find the same lock
    run_eval([1], tasks, 0, gpus, Path("eval"), Context(scripted="s.json"), quiet(), launch=launcher)
    assert len(launcher.jobs) == 3
    for job in launcher.jobs:
        share = job.env.get(gpu_share.ENV)
        if shared:
            assert share == str(tmp_path / "eval" / "gpu-share" / "gpu0") and job.env["CUDA_VISIBLE_DEVICES"] == "0"
        else:
            assert share is None


def test_evals_running_at_once_share_one_gpus_locks_through_gpu_locks(tmp_path, monkeypatch):
    from test_evals import FakeLauncher, make_task, quiet

    from kernelskill.evals.report import build_summary
    from kernelskill.evals.runner import run_eval
    from kernelskill.graph.context import Context

    tasks = tmp_path / "tasks"
    make_task(tasks, "a")
    monkeypatch.chdir(tmp_path)
    envs = []
    for out in ("one", "two"):  # one worker each: without --gpu-locks neither would lock at all
        launcher = FakeLauncher()
        run_eval(
            [1], tasks, 0, "0", Path(out), Context(scripted="s.json"), quiet(), launch=launcher, gpu_locks=Path("locks")
        )
        envs += [job.env for job in launcher.jobs]
        summary = build_summary(Path(out))
        assert "GPU locks shared with other evals" in summary["workers"]
    assert [e.get(gpu_share.ENV) for e in envs] == [str(tmp_path / "locks" / "gpu0")] * 2
    with pytest.raises(ValueError, match="--gpu-locks shares the GPUs named by --gpus"):
        run_eval(
            [1],
            tasks,
            0,
            "",
            Path("three"),
            Context(scripted="s.json"),
            quiet(),
            launch=FakeLauncher(),
            gpu_locks=Path("locks"),
        )


def test_the_summary_says_how_workers_shared_gpus():
    from kernelskill.evals.report import workers_line

    assert workers_line([]) == ""
    assert workers_line(["", ""]) == "one worker, default device"
    assert workers_line(["0,1"]) == "1 on GPU 0, 1 on GPU 1"
    assert workers_line(["0", "0,0,0"]) == "1 on GPU 0; then 3 on GPU 0 (a shared GPU's timings held it alone)"


OOM_CANDIDATE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        if x.numel() > 0:  # as a kernel asking for too much memory would
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        _relu[(1,)](x, x.numel(), BLOCK=128)
        return x
"""


def test_on_a_shared_gpu_an_out_of_memory_is_reviewed_again_holding_it_alone(tmp_path, monkeypatch):
    from kernelskill.runner.sandbox import run_review

    task = Path(__file__).parent / "fixtures" / "tasks" / "scale_relu.py"
    alone = run_review(task, OOM_CANDIDATE, tmp_path / "alone", "oom", device="cpu", timeout_s=120)
    assert alone["status"] == "runtime_error" and not any("alone" in w for w in alone.get("warnings", []))
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    shared = run_review(task, OOM_CANDIDATE, tmp_path / "shared", "oom", device="cpu", timeout_s=120)
    assert shared["status"] == "runtime_error"  # still the candidate's own, once the GPU was its alone
    assert shared["warnings"][0].startswith("reviewed again holding the shared GPU alone after:")


def test_on_a_shared_gpu_a_capture_out_of_memory_is_tried_again_holding_it_alone(tmp_path, monkeypatch):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context
    from kernelskill.runner.sandbox import ChildResult

    calls = []

    def fake_child(module, req, workdir, name, limit, **kw):
        calls.append(dict(req))
        if req.get("gpu_alone"):
            return ChildResult({"ok": True, "source": "class ModelNew: ...", "capture": {}}, 1.0)
        return ChildResult({"ok": False, "error": "torch.compile failed: OutOfMemoryError: CUDA out of memory."}, 1.0)

    monkeypatch.setattr(compiler, "run_child", fake_child)
    task = str(Path(__file__).parent / "fixtures" / "tasks" / "scale_relu.py")
    alone = compiler.capture_variant(Context(), task, "default", tmp_path)
    assert not alone.ok and len(calls) == 1  # a GPU of its own: the out-of-memory is the answer
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    shared = compiler.capture_variant(Context(), task, "default", tmp_path)
    assert shared.ok and [c.get("gpu_alone") for c in calls[1:]] == [None, True]


def test_waits_are_logged_summed_and_capped(tmp_path, monkeypatch):
    from kernelskill.graph import deadline

    log = tmp_path / "waits.txt"
    monkeypatch.setenv(gpu_share.WAIT_LOG_ENV, str(log))
    rows = _run(tmp_path, [("s1", "shared", 0.0, 0.8), ("x", "exclusive", 0.2, 0.1)])
    assert rows["x"]["waited"]["exclusive"] > 0.3
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    assert gpu_share.credited() == pytest.approx(rows["x"]["waited"]["exclusive"], abs=0.05)
    log.write_text("2.5\n1.5\n")
    assert gpu_share.credited() == 4.0
    monkeypatch.setenv(gpu_share.WAIT_MAX_ENV, "3")
    assert gpu_share.credited() == 3.0
    monkeypatch.setenv(deadline.ENV, "1000")
    assert deadline.left(now=990.0) == pytest.approx(13.0)  # 10 s left, plus 3 s of waiting credited


@pytest.mark.parametrize("sleep_s, timed_out", [(3.0, False), (6.0, True)])
def test_a_launch_on_a_shared_gpu_gets_its_waits_added_to_its_limit(tmp_path, sleep_s, timed_out):
    import sys

    from kernelskill.evals.runner import SubprocessLauncher, TaskJob
    from kernelskill.evals.suite import TaskSpec

    code = f"import os, time; open(os.environ['KERNELSKILL_GPU_WAIT_LOG'], 'a').write('9.0\\n'); time.sleep({sleep_s})"
    env = {**os.environ, gpu_share.ENV: str(tmp_path / "locks")}
    job = TaskJob(TaskSpec(1, tmp_path / "t.py"), tmp_path / "run", [sys.executable, "-c", code], env, 2.0)
    result = SubprocessLauncher()(job)
    assert result.timed_out is timed_out  # the limit: 2 s + min(9 s waited, 2 s cap) = 4 s
    assert result.gpu_wait_s == 2.0


@pytest.mark.parametrize(
    "waited, sleep_s, limit",
    [
        ("2.0", 2.0, None),
        ("", 2.0, "exceeded 1 s and"),
        ("1.0", 4.0, "exceeded 2 s (1 s + 1 s waited for the shared GPU)"),
    ],
)
def test_a_child_on_a_shared_gpu_gets_the_launchs_waits_added(monkeypatch, tmp_path, waited, sleep_s, limit):
    """A capture or review child is not killed for the time its launch waited for the shared GPU meanwhile.

    Its limit is 1 s: it gets 1 s more for each second waited once it started, none for earlier waits.
    """
    from kernelskill.runner.sandbox import ChildFailure, run_child

    log = tmp_path / "waits.txt"
    log.write_text("5.0\n")  # waits of the launch before the child started: no credit for them
    monkeypatch.setenv(gpu_share.WAIT_LOG_ENV, str(log))
    monkeypatch.delenv(gpu_share.WAIT_MAX_ENV, raising=False)
    (tmp_path / "waiting_child.py").write_text(
        "import os, time\n"
        f"open(os.environ['{gpu_share.WAIT_LOG_ENV}'], 'a').write('{waited}\\n' if '{waited}' else '')\n"
        f"time.sleep({sleep_s})\n"
    )
    out = run_child("waiting_child", {}, tmp_path, "w", 1.0)
    assert isinstance(out, ChildFailure)  # it writes no result either way
    if limit is None:  # ran its 2 s: 1 s + 2 s waited
        assert out.status == "crashed" and out.wall_s >= 2.0
    else:
        assert out.status == "timeout" and limit in out.digest


def test_a_compile_gives_its_share_up_and_a_timing_runs_meanwhile(tmp_path):
    """A shared holder that compiles under released(): a timing asked meanwhile runs at once, not after the
    compile, and the compiler's share comes back only once the timing is done."""
    rows = _run(tmp_path, [("compiler", "compile", 0.0, 3.0), ("timing", "exclusive", 0.5, 1.0)])
    compile_, timing, back = rows["compiler"], rows["timing"], rows["compiler-back"]
    assert timing["began"] - timing["asked"] < 1.0  # did not wait for the 3 s compile
    assert _overlap(compile_, timing)
    assert back["began"] >= timing["ended"] - 0.05  # the share is taken back through the turnstile


def test_a_long_shared_hold_yields_to_a_queued_timing_between_its_steps(tmp_path):
    """A review's shared hold of 3 s that yields between steps: a timing asked meanwhile runs within a step,
    not after the whole hold; without a queued timing, yielding gives nothing up."""
    rows = _run(tmp_path, [("review", "yielding", 0.0, 3.0), ("timing", "exclusive", 0.5, 0.5)])
    assert rows["timing"]["began"] - rows["timing"]["asked"] < 0.5
    assert rows["review-away"]["away"] >= 0.4  # the share was given up while the timing ran
    assert rows["review"]["ended"] > rows["timing"]["ended"]  # and taken back after
    rows = _run(tmp_path / "alone", [("review", "yielding", 0.0, 1.0)])
    assert rows["review-away"]["away"] == 0.0


def test_a_triton_compile_gives_the_share_up(tmp_path, monkeypatch):
    """compile_released: the wrapped compile runs with this process's share given up, and it comes back."""
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    seen = []

    class Jit:
        def _do_compile(self, key):
            seen.append((key, gpu_share._holder().shared))
            return key

    assert gpu_share.compile_released(Jit, "_do_compile") and not gpu_share.compile_released(Jit, "missing")
    with gpu_share.shared():
        assert Jit()._do_compile("k") == "k"
        assert gpu_share._holder().shared == 1
    assert seen == [("k", 0)]
    assert gpu_share.yield_to_timing() == 0.0  # no shared hold: nothing to give up


def test_released_without_a_share_or_inside_a_timing_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    with gpu_share.released():
        pass
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    with gpu_share.exclusive(), gpu_share.released():  # a timing keeps the GPU alone
        h = gpu_share._holder()
        assert h.exclusive == 1
    with gpu_share.shared(), gpu_share.shared():
        with gpu_share.released():
            assert gpu_share._holder().shared == 0
            with gpu_share.shared():  # a hold of its own inside: taken and given back
                assert gpu_share._holder().shared == 1
        assert gpu_share._holder().shared == 2


def test_the_compile_baseline_is_torch_compiles_own_program(monkeypatch, tmp_path):
    """compile_default gives the GPU share up while it compiles, and compiles what torch.compile does."""
    import torch
    import torch._dynamo
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    from kernelskill.runner import worker

    released = []
    real = gpu_share.released

    def counting():
        released.append(1)
        return real()

    monkeypatch.setattr(gpu_share, "released", counting)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    x = torch.randn(8, 16)
    with torch.no_grad(), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        want_out, want = run_and_get_code(torch.compile(model), x)
        torch._dynamo.reset()
        got_out, got = run_and_get_code(worker.compile_default(model), x)
    import re

    def same(code: list[str]) -> list[str]:  # the compile's serial number aside
        return [re.sub(r"AOT ID: \['\d+_", "AOT ID: ['N_", c) for c in code]

    assert released == [1] and len(got) == 1 and same(got) == same(want) and torch.equal(got_out, want_out)


@pytest.mark.parametrize("variant", ["default", "triton"])  # the second autotunes (max-autotune)
def test_a_seed_capture_compiles_with_its_share_given_up(monkeypatch, tmp_path, variant):
    from kernelskill.engine import inductor_seed

    task = tmp_path / "t.py"
    task.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x) * 2.0\n\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    released = []
    real = gpu_share.released

    def counting():
        released.append(gpu_share._holder().shared)
        return real()

    monkeypatch.setattr(gpu_share, "released", counting)
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    monkeypatch.setenv(gpu_share.HOLD_LOG_ENV, str(tmp_path / "holds.txt"))
    with gpu_share.shared():
        inductor_seed.capture(str(task), variant, device="cpu")
        assert gpu_share._holder().shared == 1  # the share is back for the self-check
    # the first call (TorchDynamo's trace, the compile) given up, the compile inside it already so, and the
    # compiled program's run in a share of its own
    assert released == [1, 0]
    holds = [line.split()[2::3] for line in (tmp_path / "holds.txt").read_text().splitlines()]
    assert holds == [["shared", f"seed-run:{variant}"], ["released", "compile"], ["shared", "-"]]


def test_autotuning_benchmarks_hold_the_gpu_alone(monkeypatch, tmp_path):
    """tune_alone: inside a compile that gave its share up, a tuning loop takes the GPU alone in one turn for all its
    configs, and a lone benchmark in one of its own; inside a hold (a kernel tuned at its first run) a benchmark runs
    there, with no turn of its own. A module is wrapped once it is imported."""
    import sys
    import types

    import triton.testing

    seen, turns = [], []
    real_exclusive = gpu_share.exclusive

    def counted(label=""):
        turns.append(label)
        return real_exclusive(label)

    def state(what):
        h = gpu_share._holder()
        seen.append((what, h.exclusive, h.shared))
        return 1.0

    class Selector:  # stands for Inductor's AlgorithmSelectorCache / CachingAutotuner
        @classmethod
        def loop(cls, configs):
            return [cls.__name__] + [bench.benchmark_gpu(c) for c in configs]

        def tune(self):
            return state("tune")

    bench = types.SimpleNamespace(benchmark_gpu=lambda c: state(f"bench {c}"))
    inductor = types.ModuleType("fake_inductor")
    inductor.Selector = Selector
    monkeypatch.setattr(gpu_share, "exclusive", counted)
    monkeypatch.setattr(gpu_share, "_TUNED_ALONE", set())
    loops = (("fake_inductor", "Selector", "loop"), ("fake_inductor", "Selector", "tune"))
    monkeypatch.setattr(gpu_share, "_TUNING_LOOPS", loops)
    monkeypatch.setattr(gpu_share, "_BENCHMARKER", "fake_inductor")
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn: state("do_bench"))
    from triton.runtime.jit import JITFunction

    monkeypatch.setattr(JITFunction, "_do_compile", JITFunction._do_compile)  # restored after the test
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    gpu_share.tune_alone()  # not shared: nothing wrapped
    assert gpu_share._TUNED_ALONE == set()
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    gpu_share.tune_alone()  # Inductor not imported yet: Triton's do_bench and its kernel compiles only
    assert gpu_share._TUNED_ALONE == {"triton.testing.do_bench", "triton.JITFunction._do_compile"}
    monkeypatch.setitem(sys.modules, "fake_inductor", inductor)
    inductor.benchmarker = bench
    gpu_share.tune_alone()
    gpu_share.tune_alone()  # once: not wrapped twice
    with gpu_share.shared():
        with gpu_share.released():
            triton.testing.do_bench(lambda: None)
            assert Selector.loop([1, 2]) == ["Selector", 1.0, 1.0]  # still a classmethod
        assert turns == ["tuning:<lambda>", "tuning:Selector.loop"]  # one for do_bench, one for the whole loop
        Selector().tune()
        bench.benchmark_gpu(3)
        assert len(turns) == 2 and gpu_share._holder().shared == 1
    assert seen == [("do_bench", 1, 0), ("bench 1", 1, 0), ("bench 2", 1, 0), ("tune", 0, 1), ("bench 3", 0, 1)]


def test_every_hold_is_logged_with_its_kind_and_label(tmp_path, monkeypatch):
    log = tmp_path / "holds.txt"
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    monkeypatch.setenv(gpu_share.HOLD_LOG_ENV, str(log))
    with gpu_share.hold(False, "review"):
        with gpu_share.shared("inner"):  # nested: part of the outer hold, not a line of its own
            time.sleep(0.03)
        with gpu_share.released():
            time.sleep(0.05)
        with gpu_share.exclusive("timing"):
            time.sleep(0.05)
    with gpu_share.tuning():  # holding nothing: a turn alone
        pass
    rows = [line.split() for line in log.read_text().splitlines()]
    assert [(r[2], r[5]) for r in rows] == [
        ("released", "compile"),
        ("exclusive", "timing"),
        ("shared", "review"),
        ("exclusive", "tuning"),
    ]
    assert all(int(r[1]) == os.getpid() and float(r[0]) > 1e9 for r in rows)
    assert float(rows[0][3]) >= 0.05 and float(rows[1][3]) >= 0.05
    assert 0.03 <= float(rows[2][3]) < 0.08  # the shared hold without the 0.1 s it was given up
    monkeypatch.delenv(gpu_share.HOLD_LOG_ENV)
    with gpu_share.shared("x"):
        pass
    assert len(log.read_text().splitlines()) == 4  # no log without the variable


class _FakeCuda:
    """``torch.cuda``'s memory queries on a device where other processes come and go."""

    def __init__(self, frees: list[int], total: int = 100 << 30, reserved: int = 2 << 30) -> None:
        self.frees, self.total, self.reserved = list(frees), total, reserved

    def mem_get_info(self) -> tuple[int, int]:
        return (self.frees.pop(0) if len(self.frees) > 1 else self.frees[0]), self.total

    def memory_reserved(self) -> int:
        return self.reserved

    def max_memory_reserved(self) -> int:
        return self.reserved


def test_memory_held_elsewhere_and_what_an_out_of_memory_needed(monkeypatch):
    import torch

    fake = _FakeCuda([60 << 30])
    for name in ("mem_get_info", "memory_reserved", "max_memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    assert gpu_share.elsewhere_bytes() == (100 - 60 - 2) << 30  # total less free less this process's reserve
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity ...")
    assert gpu_share.need_after_oom(oom) == 4 << 30
    assert gpu_share.need_after_oom(RuntimeError("no figure")) == 0  # CUDA not started in this process: nothing held
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert gpu_share.need_after_oom("CUDA driver error: out of memory") == 2 << 30


def test_an_out_of_memory_is_recognised_from_the_runtime_and_the_libraries_too():
    """A launch or a library that cannot allocate raises no OutOfMemoryError (an AcceleratorError, a RuntimeError):
    on a shared GPU such a reference failure is the other processes' memory, not an unusable task."""
    for text in (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in ...",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
        "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED",
    ):
        assert gpu_share.out_of_memory(text), text
    for text in ("RuntimeError: shape '[2, 3]' is invalid", "AcceleratorError: CUDA error: an illegal memory access"):
        assert not gpu_share.out_of_memory(text), text


def test_a_reference_the_runtime_cannot_allocate_for_is_reported_as_out_of_memory(tmp_path):
    from kernelskill.runner.sandbox import probe_task

    task = tmp_path / "runtime_oom.py"
    task.write_text(RUNTIME_OOM_TASK)
    probe = probe_task(task, tmp_path / "probe", device="cpu")
    # on the CPU no other process holds the memory: the task's own size (on a shared GPU: a harness error)
    assert probe["status"] == "invalid_task" and "does not fit in memory" in probe["error_digest"], probe


RUNTIME_OOM_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("CUDA error: out of memory")


def get_inputs():
    return [torch.rand(4)]


def get_init_inputs():
    return []
"""


def test_a_run_alone_waits_for_room_and_logs_the_wait(monkeypatch, tmp_path):
    import torch

    fake = _FakeCuda([1 << 30, 3 << 30, 9 << 30])  # another worker's process ends on the third look
    monkeypatch.setattr(torch.cuda, "mem_get_info", fake.mem_get_info)
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()
    monkeypatch.setenv(gpu_share.WAIT_LOG_ENV, str(tmp_path / "waits.txt"))
    waited = gpu_share.wait_for_room(6 << 30, max_s=30, poll_s=0.05)
    assert 0.08 <= waited < 5 and fake.frees == [9 << 30]
    assert gpu_share.credited(str(tmp_path / "waits.txt")) == pytest.approx(waited, abs=0.01)
    never = _FakeCuda([1 << 30])
    monkeypatch.setattr(torch.cuda, "mem_get_info", never.mem_get_info)
    assert 0.2 <= gpu_share.wait_for_room(6 << 30, max_s=0.2, poll_s=0.05) < 2  # bounded: then it runs anyway
    assert gpu_share.wait_for_room(0, max_s=30) == 0.0  # nothing known to wait for


def test_a_wait_for_room_asks_the_other_processes_for_their_cached_memory(monkeypatch, tmp_path):
    """While a run alone waits for room, its mark in the lock directory makes every other process of the GPU
    give its allocator's cache back at the end of a hold and as it gives its share up for a compile; its own
    mark asks nothing of itself, and the mark goes with the wait."""
    import torch

    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setenv(gpu_share.ENV, str(locks))
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    with gpu_share.shared(), gpu_share.released():
        pass
    assert emptied == [] and not gpu_share.give_room()  # nobody waits: the cache stays
    seen = []

    class Cuda(_FakeCuda):
        def mem_get_info(self):
            seen.append(sorted(p.name for p in locks.glob(gpu_share.ROOM_WANTED + "*")))
            return super().mem_get_info()

    fake = Cuda([1 << 30, 1 << 30, 9 << 30])
    monkeypatch.setattr(torch.cuda, "mem_get_info", fake.mem_get_info)
    gpu_share.wait_for_room(6 << 30, max_s=30, poll_s=0.01)
    mark = f"{gpu_share.ROOM_WANTED}{os.getpid()}"
    assert seen[1:] == [[mark], [mark]] and not list(locks.glob(gpu_share.ROOM_WANTED + "*"))
    (locks / mark).touch()  # this process's own wait
    assert not gpu_share.give_room() and emptied == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = locks / f"{gpu_share.ROOM_WANTED}{int(dead.stdout)}"
    stale.touch()  # a process killed while it waited
    assert not gpu_share.give_room() and not stale.exists() and emptied == []  # its mark is cleared
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (locks / f"{gpu_share.ROOM_WANTED}{helper.pid}").touch()  # a live process's
        with gpu_share.shared():
            with gpu_share.released():  # a compile: the share given up, the cache with it
                assert len(emptied) == 1
        assert len(emptied) == 2  # the end of the hold
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        assert not gpu_share.give_room()  # never inside a CUDA graph's capture
    finally:
        helper.kill()
        helper.wait()


def test_a_float64_run_skipped_for_other_processes_memory_is_run_again_alone(monkeypatch, tmp_path):
    from kernelskill.runner.result import failure
    from kernelskill.runner.sandbox import alone_request, needs_gpu_alone

    skipped = failure(
        "wrong_output",
        "28/2147483648 elements exceed atol=0.0001 rtol=0.0001 (no float64 reference: NoRoom: the float64 run needs "
        "about 32.0 GiB: it fits neither on the device (while other processes held 90.5 GiB of it) nor, in time, "
        "on the CPU)",
    )
    own = failure("wrong_output", "(no float64 reference: NoRoom: the float64 run needs about 300.0 GiB: ...)")
    capture = {"ok": False, "error": "self-check failed: " + skipped["error_digest"]}
    assert not needs_gpu_alone(skipped, {})  # a GPU of its own: nobody else's memory to wait for
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    assert needs_gpu_alone(skipped, {}) and needs_gpu_alone(capture, {})
    assert not needs_gpu_alone(own, {})  # too large for the device whoever holds it: the answer stands
    assert not needs_gpu_alone(skipped, {"gpu_alone": True})  # once
    assert alone_request(skipped) == {"gpu_alone": True, "need_bytes": 32.0 * 2**30}
    assert alone_request(capture)["need_bytes"] == 32.0 * 2**30
    assert alone_request({**skipped, "need_bytes": 5}) == {"gpu_alone": True, "need_bytes": 5.0}
    held = "the reference ran out of memory on cuda:0 while other processes held 57.9 GiB of it"
    oom = failure("harness_error", f"{held}: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has 79.18 GiB")
    assert alone_request(oom)["need_bytes"] == 8.0 * 2**30  # no estimate: at least the allocation that failed
    assert alone_request(failure("crashed", "killed"))["need_bytes"] == 0.0  # nothing known to wait for
