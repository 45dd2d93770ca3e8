"""KernelBench-scale outputs on a real GPU (marked gpu: skipped without CUDA; run with `make test-gpu`).

A multi-GB output is compared in chunks within the comparison's memory budget, and an output whose
float64 run of the reference cannot fit is reviewed without it (a warning-free pass when within
atol, a clear reason otherwise), never a crash.
"""

import pytest

from kernelskill.runner.correctness import chunk_budget
from kernelskill.runner.sandbox import run_review

pytestmark = pytest.mark.gpu

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return (x + SHIFT) - SHIFT


n = N


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""

KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, EXACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x if EXACT else (x + SHIFT) - SHIFT
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        shift_kernel[(triton.cdiv(n, 4096),)](x, out, n, SHIFT=SHIFT_VALUE, EXACT=EXACT_VALUE, BLOCK=4096)
        return out
"""


def task(tmp_path, n, shift):
    path = tmp_path / f"shift_{n}.py"
    path.write_text(TASK.replace("SHIFT", repr(shift)).replace("N", str(n)))
    return path


def kernel(shift, exact):
    return KERNEL.replace("SHIFT_VALUE", repr(shift)).replace("EXACT_VALUE", str(exact))


def test_a_multi_gb_output_is_compared_within_its_memory_budget(tmp_path):
    n = 3 << 30  # 12 GiB of float32 output
    r = run_review(task(tmp_path, n, 0.0), kernel(0.0, False), tmp_path, "big", device="cuda", timeout_s=580)
    assert r["status"] == "correct", r.get("error_digest")
    extra = r["correctness"]["compare_extra_bytes"]
    assert 0 < extra <= chunk_budget(4 * n) + (64 << 20), extra
    print(f"12 GiB output: comparison took {extra / 2**30:.2f} GiB extra (budget {chunk_budget(4 * n) / 2**30:.2f})")


def test_an_output_whose_float64_run_cannot_fit_is_reviewed_without_it(tmp_path):
    n = 4 << 30  # 16 GiB in, 16 GiB out: a float64 run needs ~128 GiB beside what the review holds
    path = task(tmp_path, n, 4096.0)  # float32 rounding of (x + 4096) - 4096: up to 2.4e-4 off
    same = run_review(path, kernel(4096.0, False), tmp_path, "same", device="cuda", timeout_s=580)
    assert same["status"] == "correct", same.get("error_digest")
    exact = run_review(path, kernel(4096.0, True), tmp_path, "exact", device="cuda", timeout_s=580)
    assert exact["status"] == "wrong_output", exact.get("error_digest")
    assert "no float64 reference: NoRoom" in exact["error_digest"]
    print(f"float64 run skipped: {exact['error_digest'][-160:]}")
