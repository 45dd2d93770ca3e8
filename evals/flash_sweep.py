"""Time ``ks_flash_attention_fwd`` over launch configurations and dot precisions on one attention shape.

Needs a CUDA GPU, torch and triton only; run from the repository root (it reads ``engine/flash_attention.py``)::

    python3 evals/flash_sweep.py Z H L D CAUSAL BUDGET_S > sweep.jsonl

One JSON line per PyTorch reference (``sdpa_default``: what eager runs; ``sdpa_math``: the math path) and per
configuration (BLOCK_M, BLOCK_N, warps, stages, precision): its time (``triton.testing.do_bench``, ms) and its
largest error on the first batch element against float64 attention, or the compile error. It stops after
BUDGET_S seconds. ``docs/data/flash-sweep-h200.jsonl`` holds its results on four shapes; ``launch_config`` was
chosen from them (docs/benchmarks.md).
"""

import importlib.util
import itertools
import json
import pathlib
import sys
import time

import torch
import torch.nn.functional as F
import triton

PRECISIONS = ("ieee", "tf32x3", "tf32")
CONFIGS = list(itertools.product((32, 64, 128), (32, 64), (4, 8), (2, 3), PRECISIONS))


def kernels() -> dict:
    """The kernel with its two products in each precision (as the dot_precision variants rewrite it)."""
    src = pathlib.Path("engine/flash_attention.py").read_text()
    kern = src[src.index("@triton.jit\ndef ks_flash_attention_fwd") : src.index("def launch_config")]
    out = {}
    for prec in PRECISIONS:
        path = pathlib.Path(f"/tmp/fa_{prec}.py")
        body = kern.replace('input_precision="ieee"', f'input_precision="{prec}"')
        path.write_text("import triton\nimport triton.language as tl\n\n" + body)
        spec = importlib.util.spec_from_file_location(f"fa_{prec}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[prec] = module.ks_flash_attention_fwd
    return out


def bench(fn) -> float:
    """Milliseconds per call (Triton's do_bench: L2 flushed before each call)."""
    return round(triton.testing.do_bench(fn, warmup=10, rep=40), 4)


def main() -> None:
    """Sweep one shape; print one JSON line per reference and configuration."""
    z, h, length, d, causal, budget = (int(a) for a in sys.argv[1:7])
    t0, shape, kern = time.time(), [z, h, length, d, causal], kernels()
    torch.manual_seed(0)
    q, k, v = (torch.randn(z, h, length, d, device="cuda") for _ in range(3))
    first = (q[:1].double(), k[:1].double(), v[:1].double())
    ref = F.scaled_dot_product_attention(*first, is_causal=bool(causal)).float()
    print(json.dumps({"shape": shape, "ref": "sdpa_default", "ms": bench(lambda: sdpa(q, k, v, causal))}), flush=True)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        print(json.dumps({"shape": shape, "ref": "sdpa_math", "ms": bench(lambda: sdpa(q, k, v, causal))}), flush=True)
    out = torch.empty_like(q)
    for bm, bn, warps, stages, prec in CONFIGS:
        if time.time() - t0 > budget:
            print(json.dumps({"stopped": "budget"}))
            break
        rec: dict = {"shape": shape, "prec": prec, "BM": bm, "BN": bn, "warps": warps, "stages": stages}

        def run(bm=bm, bn=bn, warps=warps, stages=stages, prec=prec) -> None:
            grid = (triton.cdiv(length, bm), z * h, 1)
            strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
            kern[prec][grid](
                q, k, v, out, 1.0 / d**0.5, *strides, h, 1, length, length, HEAD_DIM=d, V_DIM=d,
                BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), num_warps=warps, num_stages=stages,
            )  # fmt: skip

        try:
            run()
            torch.cuda.synchronize()
            rec["err"] = float((out[:1] - ref).abs().max())
            rec["ms"] = bench(run)
        except Exception as e:  # out of shared memory or registers
            rec["error"] = str(e).splitlines()[0][:160]
        print(json.dumps(rec), flush=True)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: int) -> torch.Tensor:
    """PyTorch's attention on the sweep's inputs."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))


if __name__ == "__main__":
    main()
