"""The precision policies on a real GPU (marked gpu: skipped without CUDA; run with `make test-gpu`)."""

import pytest
from test_policies import FLAG_READER

from kernelskill.runner.sandbox import run_review

pytestmark = pytest.mark.gpu

BIG_MATMUL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
"""


def test_a_cublas_candidate_runs_under_the_numerics_its_baselines_were_timed_with(tmp_path):
    # The candidate's product is cuBLAS's, like eager's: under either policy it must time like eager. Under
    # tf32 that holds only if its process allows TF32 matmuls as the baselines' did (a candidate may not
    # set the flag itself); TF32 itself is several times faster than fp32 on this product.
    task = tmp_path / "big_matmul.py"
    task.write_text(BIG_MATMUL)
    source = FLAG_READER.replace("s = 1.0 if torch.backends.cuda.matmul.allow_tf32 else 2.0", "s = 1.0")
    eager = {}
    for precision in ("fp32", "tf32"):
        r = run_review(task, source, tmp_path / precision, "mm", device="cuda", precision=precision, timeout_s=300)
        assert r["status"] == "correct", r.get("error_digest")
        assert 0.7 < r["speedup_vs_eager"] < 1.3, (precision, r["runtime_ms"], r["eager_ms"])
        eager[precision] = r["eager_ms"]
    assert eager["fp32"] > 2 * eager["tf32"], eager
