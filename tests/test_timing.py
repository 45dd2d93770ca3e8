import statistics
import time

import pytest

from kernelskill.runner.timing import summarize, time_interpreter


def test_summarize_matches_statistics():
    samples = [0.26, 0.27, 0.262, 0.31, 0.258, 0.264]
    s = summarize(samples)
    assert s["n"] == 6
    assert s["mean_ms"] == pytest.approx(statistics.fmean(samples))
    assert s["std_ms"] == pytest.approx(statistics.stdev(samples))
    assert s["median_ms"] == statistics.median(samples)
    lo, hi = s["ci95_ms"]
    assert lo < s["mean_ms"] < hi


def test_single_sample_and_interpreter_label():
    assert summarize([1.0])["std_ms"] == 0.0
    assert time_interpreter(lambda: None, runs=2)["kind"] == "interpreter"


def test_timed_inputs_are_marked_as_written_before_each_call():
    """A candidate keeping its answer by the inputs' version sees new inputs on every timed call."""
    import torch

    from kernelskill.runner.timing import new_versions

    x, y = torch.randn(4), torch.randn(2)
    before = (x._version, y._version)
    new_versions([x, 3, y])
    new_versions([x])
    assert (x._version, y._version) == (before[0] + 2, before[1] + 1)
    with torch.inference_mode():
        z = torch.randn(2)
    new_versions([z])  # an inference tensor has no version counter: left alone


def test_the_flush_is_queued_last_before_the_start_event(monkeypatch):
    """``before``'s host work runs ahead of the L2 flush, never between it and the start event."""
    import torch

    from kernelskill.runner import timing

    order: list[str] = []

    made: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            self.name = "end" if made else "start"
            made.append(self.name)

        def record(self) -> None:
            order.append(f"record {self.name}")

        def elapsed_time(self, other: "Event") -> float:
            return 1.0

    class Flush:
        def zero_(self) -> None:
            order.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    host: list[float] = []

    def fn() -> None:
        order.append("fn")
        time.sleep(0.01)

    ms = timing._timed_trial(fn, Flush(), lambda: order.append("before"), host)
    assert ms == 1.0
    assert order == ["before", "flush", "record start", "fn", "record end"]
    assert len(host) == 1 and 10 <= host[0] < 1000  # the host's time to queue fn, in ms


def test_tf32_matters_only_where_the_reference_calls_a_product():
    """The TF32 context baseline is compiled and timed again only where TF32 flags can change the program."""
    import torch
    from torch import nn

    from kernelskill.runner.env import tf32_ops
    from kernelskill.runner.profiling import aten_ops

    def tf32_matters(model, inputs):  # the reviewer records the reference's first forward the same way
        seen: list[str] = []
        with torch.no_grad(), aten_ops(seen):
            model(*inputs)
        return tf32_ops(seen)

    x = torch.randn(4, 8)
    assert tf32_matters(nn.Linear(8, 3), [x])
    assert tf32_matters(lambda a: a @ a.T, [x])
    assert tf32_matters(nn.Conv1d(4, 2, 3), [torch.randn(1, 4, 9)])
    assert not tf32_matters(lambda a: torch.cumsum(torch.relu(a), dim=1).amax(dim=0), [x])
    assert not tf32_matters(nn.LayerNorm(8), [x])


def test_an_answer_kept_across_calls_is_told_from_noise():
    """Calls on new values far slower than the timed ones (which reused one set of values) give a kept answer away;
    the spread of honest calls, and the interpreter's wall-clock noise, do not."""
    from kernelskill.runner.timing import kept_across_calls

    assert kept_across_calls(0.010, 0.120, cuda=True)  # a lookup timed, the work done on new values
    assert not kept_across_calls(0.010, 0.025, cuda=True)  # microseconds apart: launch noise
    assert not kept_across_calls(1.00, 1.20, cuda=True)  # value-dependent work of an honest kernel
    assert kept_across_calls(1.00, 3.00, cuda=True)
    assert not kept_across_calls(1.00, 3.00, cuda=True, host_share=0.95)  # a host-bound call on a loaded host
    assert kept_across_calls(1.00, 5.00, cuda=True, host_share=0.95)
    assert not kept_across_calls(2.0, 8.0, cuda=False)  # the interpreter on a loaded host
    assert kept_across_calls(0.05, 12.0, cuda=False)
