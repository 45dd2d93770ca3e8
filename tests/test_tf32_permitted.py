"""The TF32 products the precision policy permits the reference count in its own error (correctness.py).

cuDNN picks a TF32 or an exact algorithm by shape and layout, so a convolution can be exact in eager
mode and TF32 in a compiled program of the same task. Under ``fp32`` a candidate is allowed the
error the reference would have with TF32 convolutions (PyTorch's default), never more, and a wrong
answer still fails. The TF32 runs here are emulated on the CPU by rounding the operands.
"""

import torch
import torch.nn.functional as F

from kernelskill.runner.correctness import (
    CONV_OPS,
    MATMUL_OPS,
    TRUTH_MARGIN,
    compare,
    permitted_ops,
    tf32_operands,
    tf32_round,
)


def test_tf32_round_keeps_ten_mantissa_bits_rounding_to_nearest_even():
    exact = torch.tensor([1.0, -2.5, 1 + 2**-10, 3.0 * 2**-20, 0.0])
    assert torch.equal(tf32_round(exact), exact)  # already TF32: unchanged
    halfway = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)])  # ties go to the even mantissa
    assert torch.equal(tf32_round(halfway), torch.tensor([1.0, 1 + 2**-9, -1.0]))
    assert tf32_round(torch.tensor([1 + 2**-11 + 2**-20])).item() == 1 + 2**-10  # above the tie: up
    x = torch.randn(10000) * 100
    rel = ((tf32_round(x) - x).abs() / x.abs()).max().item()
    assert 2**-13 < rel <= 2**-11  # at most half a unit of the 10-bit mantissa
    odd = torch.tensor([float("inf"), -float("inf"), float("nan")])
    out = tf32_round(odd)
    assert out[0] == float("inf") and out[1] == -float("inf") and out[2].isnan()
    assert tf32_round(torch.randn(6, 4).t()).shape == (4, 6)  # strided input: same shape back


def conv_data():
    torch.manual_seed(0)
    return torch.randn(2, 64, 12, 12), torch.randn(32, 64, 3, 3), torch.randn(32)


def test_mode_rounds_convolution_operands_and_counts_calls():
    x, w, b = conv_data()
    mode = tf32_operands(CONV_OPS)
    with mode:
        got = F.conv2d(x, w, b, padding=1)
        a, m = x.flatten(1)[:, :64], w.flatten(1)[:, :64]
        same = a @ m.t()  # a matmul: not a convolution, not rounded
    assert mode.calls == 1
    assert torch.allclose(got, F.conv2d(tf32_round(x), tf32_round(w), b, padding=1), atol=1e-5, rtol=0)
    assert not torch.allclose(got, F.conv2d(x, w, b, padding=1), atol=1e-4, rtol=1e-4)
    assert torch.equal(same, a @ m.t())
    with tf32_operands(MATMUL_OPS) as mm:
        lin = F.linear(a, m, b)  # addmm: its bias is not an operand of the products
    assert mm.calls == 1
    assert torch.allclose(lin, F.linear(tf32_round(a), tf32_round(m), b), atol=1e-5, rtol=0)
    assert not torch.allclose(lin, F.linear(a, m, b), atol=1e-4, rtol=1e-4)
    with tf32_operands(CONV_OPS) as wide:
        F.conv2d(x.double(), w.double(), padding=1)
    assert wide.calls == 0  # only float32 operands are TF32's


def test_policy_permits_tf32_convolutions_on_cuda_only():
    assert permitted_ops("fp32", on_cuda=False) == ()
    assert permitted_ops("tf32", on_cuda=False) == ()
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
        assert permitted_ops("fp32", on_cuda=True) == CONV_OPS
        assert permitted_ops("tf32", on_cuda=True) == CONV_OPS + MATMUL_OPS
        torch.backends.cudnn.allow_tf32 = False  # a user who turned it off gets exact convolutions
        assert permitted_ops("fp32", on_cuda=True) == ()
    finally:
        torch.backends.cudnn.allow_tf32 = before


def test_tf32_convolution_passes_only_where_the_reference_is_permitted_it():
    x, w, b = conv_data()
    ref = F.conv2d(x, w, b, padding=1)  # the algorithm cuDNN happened to pick: exact

    def truth():
        return F.conv2d(x.double(), w.double(), b.double(), padding=1)

    def permitted():
        with tf32_operands(CONV_OPS) as mode:
            out = F.conv2d(x, w, b, padding=1)
        return out if mode.calls else None

    tf32_candidate = F.conv2d(tf32_round(x), tf32_round(w), b, padding=1)  # a TF32 algorithm's result
    reason = compare(ref, tf32_candidate, None, None, truth=truth)
    assert reason is not None and "float64" in reason  # the exact reference's own error is too small
    notes: list[str] = []
    assert compare(ref, tf32_candidate, None, None, truth=truth, notes=notes, permitted=permitted) is None
    assert len(notes) == 1 and "TF32" in notes[0]
    # what is allowed is TF32's error, not more: a result off by 3x that error fails, with the reason
    off = ref + 3 * TRUTH_MARGIN * (tf32_candidate - ref)
    reason = compare(ref, off, None, None, truth=truth, permitted=permitted)
    assert reason is not None and "TF32 as the precision policy allows" in reason
    for cheat in (torch.zeros_like(ref), torch.full_like(ref, ref.mean().item())):
        assert compare(ref, cheat, None, None, truth=truth, permitted=permitted) is not None
    # an exact candidate needs no allowance and gets no note
    notes = []
    assert compare(ref, ref.clone(), None, None, truth=truth, notes=notes, permitted=permitted) is None
    assert notes == []


def test_permitted_run_that_fails_or_is_the_reference_changes_nothing():
    x, w, b = conv_data()
    ref = F.conv2d(x, w, b, padding=1)
    tf32_candidate = F.conv2d(tf32_round(x), tf32_round(w), b, padding=1)

    def truth():
        return F.conv2d(x.double(), w.double(), b.double(), padding=1)

    def broken():
        raise torch.OutOfMemoryError("no room")

    assert compare(ref, tf32_candidate, None, None, truth=truth, permitted=broken) is not None
    assert compare(ref, tf32_candidate, None, None, truth=truth, permitted=lambda: None) is not None


def test_the_seed_self_check_gets_the_runs_policy_not_a_product_precision(monkeypatch, tmp_path):
    from kernelskill.engine import compiler
    from kernelskill.graph.context import Context
    from kernelskill.runner.sandbox import ChildFailure

    reqs = []

    def fake_run_child(module, req, workdir, name, timeout_s, **kw):
        reqs.append(req)
        return ChildFailure("crashed", "no GPU here", "", 0.0)

    monkeypatch.setattr(compiler, "run_child", fake_run_child)
    compiler.capture_variant(Context(precision="tf32"), "t.py", "triton", tmp_path, precision="tf32x3")
    assert reqs[0]["precision_policy"] == "tf32" and reqs[0]["precision"] == "tf32x3"
