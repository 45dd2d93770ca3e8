"""Session 4, call 1: where does a candidate's import (the reviewer's ``load`` phase) spend its time?

``python docs/device/loadprof.py THREADS[,THREADS] CANDIDATE.py ...``: for each compile-thread count
and candidate, two fresh processes (empty Triton / Inductor caches, then the same caches again), each
timing: import torch, CUDA init, import triton, import Inductor's async_compile and select_algorithm
(what a compiler-seed module imports), then the module's own execution under cProfile.
"""

import cProfile
import importlib
import importlib.util
import io
import os
import pstats
import subprocess
import sys
import time


def one(path: str) -> None:
    """Time one candidate's import, step by step, in this process."""
    out: dict[str, float] = {}
    t = [time.perf_counter()]

    def mark(k: str) -> None:
        now = time.perf_counter()
        out[k], t[0] = round(now - t[0], 3), now

    import torch

    mark("import_torch")
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    mark("cuda_init")
    for name in ("triton", "triton.language"):
        importlib.import_module(name)
    mark("import_triton")
    for name in ("torch._inductor.async_compile", "torch._inductor.runtime.triton_heuristics"):
        importlib.import_module(name)
    mark("import_async_compile")
    importlib.import_module("torch._inductor.select_algorithm")
    mark("import_select_algorithm")
    spec = importlib.util.spec_from_file_location("cand", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    prof = cProfile.Profile()
    prof.enable()
    spec.loader.exec_module(mod)
    prof.disable()
    mark("exec_module")
    print(path, out, flush=True)
    for key, n in (("cumulative", 25), ("tottime", 12)):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
        print(s.getvalue()[:6000])


def main(argv: list[str]) -> None:
    """Every (thread count, candidate) twice: cold caches, then warm."""
    for threads in argv[1].split(","):
        for path in argv[2:]:
            name = os.path.basename(path)
            env = dict(
                os.environ,
                TRITON_CACHE_DIR=f"/tmp/lp_tc_{threads}_{name}",
                TORCHINDUCTOR_CACHE_DIR=f"/tmp/lp_ti_{threads}_{name}",
                TORCHINDUCTOR_COMPILE_THREADS=threads,
            )
            for rep in ("cold", "warm"):
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, __file__, "--one", path], env=env, capture_output=True, text=True)
                print(f"=== threads={threads} {rep} {name}: wall {time.perf_counter() - t0:.2f}s rc={r.returncode}")
                print(r.stdout[-9000:])
                print(r.stderr[-1500:], flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        one(sys.argv[2])
    else:
        main(sys.argv)
