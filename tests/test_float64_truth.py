"""Correctness against a float64 run of the reference when float32 rounding alone breaks atol/rtol."""

import pytest
import torch

from kernelskill.runner.correctness import TRUTH_MARGIN, compare, reference_noise
from kernelskill.runner.sandbox import run_review

from conftest import FIXTURES

COPY_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def shifted_copy_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + SHIFT, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        shifted_copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, SHIFT=SHIFT_VALUE, BLOCK=1024)
        return out
"""


def reference(x):
    return (x + 4096.0) - 4096.0  # float32 rounding: up to ulp(4096) / 2 = 2.4e-4 off


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(4096)


def test_reference_noise_is_the_atol_the_reference_needs(x):
    noise = reference_noise(reference(x).double(), x.double(), 1e-4)
    assert 1e-4 < noise <= 2.5e-4
    assert torch.allclose(reference(x).double(), x.double(), atol=noise, rtol=1e-4)
    assert not torch.allclose(reference(x).double(), x.double(), atol=noise * 0.9, rtol=1e-4)


def test_exact_answer_fails_atol_but_passes_against_float64(x):
    ref = reference(x)
    assert compare(ref, x.clone(), None, None) is not None  # strict: the exact answer "fails"
    noise: list[float] = []
    assert compare(ref, x.clone(), None, None, truth=lambda: x.double(), noise=noise) is None
    assert len(noise) == 1 and noise[0] > 1e-4


def test_an_answer_further_from_float64_than_the_margin_fails(x):
    ref = reference(x)
    floor = reference_noise(ref.double(), x.double(), 1e-4)
    off = x + 3 * TRUTH_MARGIN * floor
    reason = compare(ref, off, None, None, truth=lambda: x.double())
    assert reason is not None and "float64 reference" in reason and "reference's own error" in reason


def test_float64_is_computed_once_and_only_when_needed(x):
    calls = []

    def truth():
        calls.append(1)
        return (x.double(), x.double())

    ref = reference(x)
    assert compare((ref, ref), (ref.clone(), ref.clone()), None, None, truth=truth) is None
    assert calls == []  # within atol/rtol: no float64 run
    assert compare((ref, ref), (x.clone(), x.clone()), None, None, truth=truth) is None
    assert calls == [1]


def test_no_float64_reference_keeps_the_strict_reason(x):
    def truth():
        raise RuntimeError("\"addmm_cuda\" not implemented for 'Double'")

    reason = compare(reference(x), x.clone(), None, None, truth=truth)
    assert reason is not None and "no float64 reference: RuntimeError" in reason


def test_integer_outputs_get_no_second_chance():
    ref = torch.arange(10)
    assert compare(ref, ref + 1, None, None, truth=lambda: ref.double()) is not None


@pytest.mark.parametrize("shift, ok", [(0.0, True), (0.01, False)])
def test_review_accepts_the_exact_answer_with_a_warning(tmp_path, shift, ok):
    task = FIXTURES / "tasks" / "cancellation.py"
    source = COPY_KERNEL.replace("SHIFT_VALUE", repr(shift))
    r = run_review(task, source, tmp_path, f"copy_{shift}", device="cpu")
    if ok:
        assert r["status"] == "correct", r.get("error_digest")
        assert r["correctness"]["float64_truth"] >= 1
        assert any("float64 run of the reference" in w for w in r["warnings"])
    else:
        assert r["status"] == "wrong_output" and "float64 reference" in r["error_digest"]


def test_strict_mode_turns_the_second_chance_off(tmp_path):
    task = FIXTURES / "tasks" / "cancellation.py"
    r = run_review(
        task, COPY_KERNEL.replace("SHIFT_VALUE", "0.0"), tmp_path, "strict", device="cpu", float64_truth=False
    )
    assert r["status"] == "wrong_output" and "float64" not in r["error_digest"]
