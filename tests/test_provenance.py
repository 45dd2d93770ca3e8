"""Where a forward's answer came from (runner/provenance.py), on the CPU with Triton's interpreter."""

import pytest
import torch
import triton
import triton.language as tl

from kernelskill.runner.correctness import tolerances
from kernelskill.runner.provenance import AnswerTrace


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


@triton.jit
def _relu_twice(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    tl.store(dst + offs, tl.where(x > 0, x, 0.0) * 2.0, mask=mask)


@triton.jit
def _reverse(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + n - 1 - offs, tl.load(src + offs, mask=mask), mask=mask)


def reverse(x):
    out = torch.empty_like(x)
    _reverse[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def copy(x):
    out = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def relu_twice(x):
    out = torch.empty_like(x)
    _relu_twice[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def recycled_relu_twice(x):
    """relu_twice into a block that already holds its answer (an allocator's recycled block of an earlier call)."""
    from torch.utils._python_dispatch import _disable_current_modes

    out = torch.empty_like(x)
    with _disable_current_modes():  # not traced: what the block held before the call
        out.copy_(torch.relu(x) * 2)
    _relu_twice[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def answer_op(fn):
    with AnswerTrace() as trace:
        out = fn()
    return trace.answer_op(out, lambda dtype: tolerances(dtype, None, None))


X = torch.randn(3000)
W = torch.randn(30, 100)

PYTORCHS = {  # the answer computed by PyTorch from the inputs; a kernel at most copies it
    "copied after": lambda: copy(torch.where(X > 0, X, 0.0) * 2 + 1),
    "copied before": lambda: torch.clamp_min(copy(X), 0) * 2 + 1,
    "no kernel": lambda: torch.relu(X) * 2 + 1,
    "copied, reshaped": lambda: copy((torch.relu(X) * 2 + 1).reshape(30, 100)).reshape(-1),
    "a module's tensor": lambda: copy((X.reshape(30, 100) * W).sum(1)),
    "two outputs": lambda: (copy(torch.relu(X)), torch.tanh(X)),
    "reversed before": lambda: torch.clamp_min(reverse(X).flip(0), 0) * 2 + 1,
}
OWN = {  # the kernel computes, PyTorch at most adds an epilogue or prepares the input
    "own kernel": lambda: relu_twice(X),
    "PyTorch epilogue": lambda: relu_twice(X) + 1,
    "copied own result": lambda: copy(relu_twice(X) + 1),
    "PyTorch prepares": lambda: relu_twice(X.reshape(30, 100).t().contiguous()),
    "one of two outputs": lambda: (relu_twice(X), torch.tanh(X)),
    "reversed own result": lambda: reverse(relu_twice(X)).flip(0) + 1,
    "recycled block, PyTorch epilogue": lambda: recycled_relu_twice(X) + 1,
}


@pytest.mark.parametrize("name", PYTORCHS)
def test_an_answer_pytorch_computed_is_found(name):
    assert answer_op(PYTORCHS[name])


@pytest.mark.parametrize("name", OWN)
def test_an_answer_the_kernel_computed_is_not(name):
    assert answer_op(OWN[name]) is None


def test_the_op_that_computed_it_is_named():
    assert answer_op(lambda: copy(torch.clamp_min(X, 0.0))) == "clamp_min"


def test_a_near_constant_answer_is_not_judged():
    assert answer_op(lambda: copy(torch.zeros_like(X) + torch.sigmoid(X) * 0)) is None


def test_a_copy_within_tolerance_passes_the_origin_on():
    """A kernel whose output equals an argument within the dtype's tolerance copied it (a hair's scale)."""

    @triton.jit
    def scaled(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask) * 1.000001, mask=mask)

    def staged():
        out = torch.empty_like(X)
        scaled[(triton.cdiv(X.numel(), 256),)](X, out, X.numel(), BLOCK=256)
        return torch.relu(out)

    assert answer_op(staged) == "relu"


def test_a_failing_trace_judges_nothing_and_changes_nothing(monkeypatch):
    from kernelskill.runner import provenance

    def boom(*a, **k):
        raise RuntimeError("sampling failed")

    monkeypatch.setattr(provenance.AnswerTrace, "_sample", boom)
    with AnswerTrace() as trace:
        out = copy(torch.relu(X))
    assert torch.equal(out, torch.relu(X)) and trace.broken
    assert trace.answer_op(out, lambda dtype: (1e-4, 1e-4)) is None


def test_a_kernel_behind_a_heuristic_is_one_launch():
    """Triton's heuristics (and autotuner: no driver on the CPU) run the kernel inside their own ``run``: the
    record holds that one launch."""

    @triton.heuristics({"BLOCK": lambda args: 256})
    @triton.jit
    def chosen_copy(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)

    def run():
        y = torch.relu(X)
        out = torch.empty_like(y)
        chosen_copy[(triton.cdiv(X.numel(), 256),)](y, out, X.numel())
        return out

    with AnswerTrace() as trace:
        out = run()
    assert sum(type(e).__name__ == "_Launch" for e in trace.events) == 1
    assert trace.answer_op(out, lambda dtype: (1e-4, 1e-4)) == "relu"


def test_pytorch_ops_a_cuda_graph_captured_while_the_candidate_was_built_count_as_forwards():
    """Ops captured in a CUDA graph while ``ModelNew`` was built run again in each replay, which no record of
    forward's ops sees: those the capture dispatched (not the warm-up's, not a view) are counted with forward's,
    so the reference's ops replayed from such a graph label the answer PyTorch's, and the warning says where they
    ran. A kernel's answer beside a graph of PyTorch glue keeps no label. (The capture itself: on a GPU, fixture
    ``graph_replayed_ops``.)"""
    from kernelskill.runner.profiling import aten_ops
    from kernelskill.runner.static_check import StaticReport
    from kernelskill.runner.worker import Evaluation, _pytorch_work

    capturing, names = [False], []
    x = torch.randn(8)
    with aten_ops(names, only_while=lambda: capturing[0]):
        torch.relu(x) * 2.0  # the warm-up before a capture
        capturing[0] = True
        torch.relu(x).view(-1) * 2.0 + 1.0
        capturing[0] = False
        x.sin()
    assert names == ["aten::relu", "aten::mul", "aten::add"]

    def labelled(launched, captured):
        ev = Evaluation({})
        ev.static, ev.launched, ev.captured = StaticReport(), launched, captured
        ev.ref_ops = ["aten::relu", "aten::mul", "aten::add"]
        _pytorch_work(ev)
        return ev.static.labels, ev.static.warnings

    labels, warnings = labelled(["copy_kernel", "copy_kernel"], names)
    assert labels == ["torch_main_work"] and "captured while ModelNew was built" in warnings[0], warnings
    assert labelled(["copy_kernel", "aten::relu", "aten::mul", "aten::add"], [])[0] == ["torch_main_work"]
    assert "captured while" not in labelled(["copy_kernel", "aten::relu", "aten::mul", "aten::add"], names)[1][0]
    assert labelled(["scale_relu_kernel"], ["aten::add"]) == ([], [])  # a kernel's answer, PyTorch glue in a graph
    labels, warnings = labelled(["copy_kernel"], ["aten::mm"])  # a library op replayed
    assert labels == ["torch_main_work"] and "mm (in a CUDA graph" in warnings[0], warnings
