"""Models are judged as built, in training mode unless their constructor says otherwise, as KernelBench's
protocol runs them: batch-statistics BatchNorm, and dropout drawing from an RNG seeded alike before each
compared forward."""

import textwrap

import pytest

from kernelskill.runner.sandbox import run_review

KERNEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + shift, mask=mask)


def affine(x, scale, shift):
    x = x.contiguous()
    out = torch.empty_like(x)
    affine_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), scale, shift, BLOCK=256)
    return out
"""

BN_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x) * 2.0


def get_inputs():
    return [3.0 + 2.0 * torch.randn(64, 16)]  # far from the running statistics (mean 0, variance 1)


def get_init_inputs():
    return [16]
"""

BN_CANDIDATES = {
    "batch_statistics": """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        mean, var = x.mean(0), x.var(0, unbiased=False)
        y = (x - mean) / torch.sqrt(var + self.bn.eps) * self.bn.weight + self.bn.bias
        return affine(y, 2.0, 0.0)
""",
    "running_statistics": """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        y = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias, False)
        return affine(y, 2.0, 0.0)
""",
}

DROPOUT_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x) + 1.0


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return [0.5]
"""

DROPOUT_CANDIDATES = {
    "same_draws": """
class ModelNew(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return affine(F.dropout(x, self.p, self.training), 1.0, 1.0)
""",
    "no_dropout": """
class ModelNew(nn.Module):
    def __init__(self, p):
        super().__init__()

    def forward(self, x):
        return affine(x, 1.0, 1.0)
""",
}


def _review(tmp_path, task, body, name):
    path = tmp_path / f"{name}_task.py"
    path.write_text(textwrap.dedent(task))
    return run_review(path, KERNEL + textwrap.dedent(body), tmp_path, name, device="cpu")


@pytest.mark.parametrize("name, status", [("batch_statistics", "correct"), ("running_statistics", "wrong_output")])
def test_batch_norm_is_judged_in_training_mode(tmp_path, name, status):
    r = _review(tmp_path, BN_TASK, BN_CANDIDATES[name], name)
    assert r["status"] == status, r.get("error_digest")


@pytest.mark.parametrize("name, status", [("same_draws", "correct"), ("no_dropout", "wrong_output")])
def test_dropout_draws_alike_in_the_reference_and_the_candidate(tmp_path, name, status):
    r = _review(tmp_path, DROPOUT_TASK, DROPOUT_CANDIDATES[name], name)
    assert r["status"] == status, r.get("error_digest")
