"""Known-bad candidates (the cheats peers' judges fell for) are all rejected, each for its reason.

Every file in fixtures/adversarial names its task and the expected status and message in its
first two lines (``label:NAME``: correct, labelled NAME, not a custom-kernel success). The same set
runs on a GPU in test_reviewer_gpu.py (an optional third line, ``# gpu-expect:``, gives the GPU review's
where it differs).
"""

from pathlib import Path

import pytest

from kernelskill.runner.sandbox import run_review

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "adversarial").glob("*.py"))


def expectation(path: Path, gpu: bool = False) -> tuple[Path, str, str]:
    """(task file, status, needle) of a fixture; ``gpu``: its ``# gpu-expect:`` line's where it has one."""
    lines = path.read_text().splitlines()
    task = lines[0].removeprefix("# task: ").strip()
    expect = lines[2] if gpu and lines[2].startswith("# gpu-expect: ") else lines[1]
    status, needle = expect.split(": ", 1)[1].split("|", 1)
    return FIXTURES / "tasks" / f"{task}.py", status, needle


def assert_expected(r: dict, status: str, needle: str) -> None:
    """The review ``r`` has the fixture's status and, for a rejection, its message (or, ``label:NAME``, its label)."""
    assert r["status"] == status, (r["status"], r.get("error_digest"))
    if needle.startswith("label:"):  # correct, but its main work is not the candidate's own
        assert needle[6:] in r["labels"] and r["custom_kernel"] is False, (r["labels"], r.get("warnings"))
    else:
        assert any(n in r["error_digest"] for n in needle.split("|")), r["error_digest"]


def test_at_least_ten_cheats():
    assert len(CASES) >= 10


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_rejected_for_the_right_reason(path, tmp_path):
    task, status, needle = expectation(path)
    r = run_review(task, path.read_text(), tmp_path, path.stem, device="cpu", timeout_s=120)
    assert_expected(r, status, needle)


def test_torch_ops_in_forward_are_labelled(tmp_path):
    """A kernel that runs, next to the reference's own PyTorch ops, is correct but not custom work."""
    source = (
        (FIXTURES / "candidates" / "good.py")
        .read_text()
        .replace("        return out\n", "        return torch.maximum(out, torch.relu(x) * 2.0 + 1.0)\n")
    )
    r = run_review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "mixed", device="cpu")
    assert r["status"] == "correct"
    assert r["custom_kernel"] is False and "torch_main_work" in r["labels"]
    assert any("PyTorch" in w for w in r["warnings"])


def test_the_integrity_snapshot_sees_what_a_candidate_could_change(monkeypatch):
    """Rebound functions, changed constants, the reference's weights, buffers, mode and forward calls are found;
    new attributes and the reference's own buffer updates (before a mark) are not."""
    import types

    import torch
    import torch.nn as nn

    from kernelskill.runner import correctness
    from kernelskill.runner.integrity import Integrity, Tampered

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.bn = nn.BatchNorm1d(4)
            self.unused = nn.Parameter(torch.full((2,), float("nan")))  # NaN sums still compare equal

        def forward(self, x):
            return self.bn(self.fc(x))

    task = types.ModuleType("kernelskill_reference_test")
    task.Model = Model
    guard = Integrity(task)
    ref = Model()
    guard.watch_reference(ref)
    ref(torch.randn(8, 4))  # the reference's own forward: counted, and its running statistics move
    guard.mark()
    assert guard.changes() == []
    monkeypatch.setattr(torch, "kernelskill_new_attribute", lambda: None, raising=False)  # added: allowed
    assert guard.changes() == []
    monkeypatch.setattr(correctness, "compare", lambda *a, **k: None)
    assert guard.changes() == ["kernelskill.runner.correctness.compare"]
    monkeypatch.undo()
    assert guard.changes() == []
    monkeypatch.setattr(nn.Linear, "forward", lambda self, x: x)  # the class of one of the reference's layers
    assert guard.changes() == ["reference class torch.nn.modules.linear.Linear.forward"]
    monkeypatch.undo()
    monkeypatch.setitem(correctness.DEFAULT_TOL, "float32", (1.0, 1.0))  # a constant changed in place
    assert guard.changes() == ["kernelskill.runner.correctness.DEFAULT_TOL (its value)"]
    monkeypatch.undo()
    ref(torch.randn(8, 4))  # called after the mark: counted, and its running statistics moved meanwhile
    assert guard.changes() == ["the reference's forward was called 1 time(s)", "the reference's parameters or buffers"]
    guard.mark()
    ref.bn.running_mean.zero_()  # a buffer changed in place by the candidate
    assert guard.changes() == ["the reference's parameters or buffers"]
    guard.mark()
    ref.eval()
    assert guard.changes() == ["reference (model).training", "reference fc.training", "reference bn.training"]
    ref.train()
    with torch.no_grad():
        ref.fc.weight[0, 0] += 1.0
    assert guard.changes() == ["the reference's parameters or buffers"]
    with pytest.raises(Tampered, match="reached into the reviewer's process during trial 3"):
        guard.verify("during trial 3")


def test_numpy_for_constants_is_allowed(tmp_path):
    """A task (and so a candidate copying it) may compute constants with NumPy in __init__; only tensor data moved
    to NumPy during a call is host work."""
    task = tmp_path / "np_task.py"
    task.write_text(
        "import numpy as np\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.scale = float(np.log2(8))\n\n"
        "    def forward(self, x):\n        return torch.relu(x) * self.scale\n\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    kernel = (FIXTURES / "adversarial" / "numpy_asarray.py").read_text()
    head, _, _ = kernel.partition("class ModelNew")
    source = head + (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.scale = float(np.log2(8))\n\n    def forward(self, x):\n        out = torch.empty_like(x)\n"
        "        copy_kernel[(triton.cdiv(x.numel(), 256),)](torch.relu(x), out, x.numel(), BLOCK=256)\n"
        "        return out * self.scale\n"
    )
    r = run_review(task, source, tmp_path, "np_constants", device="cpu", timeout_s=120)
    assert r["status"] == "correct", r.get("error_digest")


def test_pytorchs_own_wrappers_are_no_change_but_a_candidates_are(monkeypatch):
    """TorchDynamo wraps torch.manual_seed when imported (an Inductor seed's import does it): not a change; a
    look-alike wrapper defined anywhere else is."""
    import functools
    import types

    import torch
    import torch._dynamo  # noqa: F401 - wraps torch.manual_seed

    from kernelskill.runner.integrity import Integrity, torch_wrapper

    original = torch.manual_seed.__wrapped__
    assert torch_wrapper(torch.manual_seed, original)
    look_alike = functools.wraps(original)(lambda seed: None)
    assert not torch_wrapper(look_alike, original)
    guard = Integrity(types.ModuleType("kernelskill_reference_test"))
    monkeypatch.setattr(torch, "manual_seed", look_alike)
    assert guard.changes() == ["torch.manual_seed"]


def test_the_fingerprint_cache_is_found_in_low_memory_mode_too(tmp_path):
    """Where a second set of inputs may not fit, the timed calls get new values by scaling the inputs in place."""
    task, status, needle = expectation(FIXTURES / "adversarial" / "fingerprint_cache.py")
    source = (FIXTURES / "adversarial" / "fingerprint_cache.py").read_text()
    r = run_review(task, source, tmp_path, "low_memory", device="cpu", timeout_s=120, low_memory=True)
    assert r["status"] == status and needle in r["error_digest"], (r["status"], r.get("error_digest"))


def test_a_call_slower_after_its_inputs_are_written_is_no_kept_answer(tmp_path):
    """An honest candidate whose first call after the reviewer wrote its inputs is slower (on a GPU: the host's
    work and the GPU's idle time around the writing), whatever the values: its calls on new values are compared
    with calls on the same values written again the same way, not with calls back to back, so it passes."""
    source = (FIXTURES / "candidates" / "good.py").read_text()
    source = source.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        "        if x._version != getattr(self, 'seen', None):  # written since the last call\n"
        "            self.seen = x._version\n"
        "            time.sleep(0.2)\n",
    )
    assert "time.sleep(0.2)" in source
    r = run_review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "slow_after_write", device="cpu")
    assert r["status"] == "correct", r.get("error_digest")
    fresh = r["timing"]["fresh_values"]
    assert min(fresh["min_ms"], fresh["repeated_ms"], fresh["record_values_ms"]) >= 200, fresh  # each after a write


def test_an_answer_kept_from_the_third_call_with_given_values_is_found(tmp_path):
    """A candidate that computes on the first two calls with given values and looks its answer up from the
    third on passes a call on new values paired with one on the same values written again (two calls, both
    computed), but not the call on the timed calls' values written again: those it has kept."""
    source = (FIXTURES / "candidates" / "kept_from_third_call.py").read_text()
    r = run_review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "kept_third", device="cpu", cpu_time_runs=2)
    assert r["status"] == "rejected", (r["status"], r.get("error_digest"))
    assert "new input values" in r["error_digest"] and "timed calls' values" in r["error_digest"], r["error_digest"]


def test_a_candidate_raising_on_new_values_after_timing_is_at_fault(tmp_path):
    """An exception from the candidate during the calls on new values is its runtime error, not the reviewer's."""
    source = (FIXTURES / "candidates" / "good.py").read_text()
    source = source.replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        "        calls = getattr(self, 'calls', {})\n"
        "        self.calls = calls\n"
        "        held, n = calls.get(id(x), (x, 0))\n"
        "        calls[id(x)] = (held, n + 1)\n"
        "        if n + 1 >= 3:  # the timed call, one more on its values, then new values in the same tensor\n"
        "            raise RuntimeError('third call on one tensor')\n",
    )
    r = run_review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "raising", device="cpu", timeout_s=120)
    assert r["status"] == "runtime_error" and "new input values" in r["error_digest"], r.get("error_digest")


def test_a_library_op_captured_in_a_cuda_graph_is_labelled_wherever_the_capture_is():
    """A graph's replay dispatches no op: what a graph captures is read from the source, in ``__init__`` too."""
    from kernelskill.engine.transforms import cuda_graph_wrap
    from kernelskill.runner.static_check import check_source

    hidden = check_source((FIXTURES / "adversarial" / "graph_hidden_library.py").read_text())
    assert "torch_main_work" in hidden.labels and any("captured in a CUDA graph" in w for w in hidden.warnings)
    pad = "\n        "
    for capture in (
        pad.join(["g = torch.cuda.CUDAGraph()", "g.capture_begin()", "self.y = self.x @ self.w", "g.capture_end()"]),
        pad.join(["self.conv = nn.Conv2d(3, 8, 3)", "self.run = torch.cuda.make_graphed_callables(self.conv, (x,))"]),
    ):
        head = f"class ModelNew(nn.Module):\n    def setup(self, x):{pad}{capture}\n\n"
        source = (FIXTURES / "candidates" / "good.py").read_text().replace("class ModelNew(nn.Module):\n", head)
        assert "torch_main_work" in check_source(source).labels, capture
    own = cuda_graph_wrap((FIXTURES / "candidates" / "good.py").read_text())  # our own kernels, graphed: custom
    report = check_source(own)
    assert not report.labels and not report.strict, (report.labels, report.strict)


def test_probes_of_the_reviewers_instruments_are_rejected_in_every_form():
    """PyTorch's dispatch-mode and profiler probes and switches, named, imported, as attributes or as strings."""
    from kernelskill.runner.static_check import INSTRUMENTS, check_source

    good = (FIXTURES / "candidates" / "good.py").read_text()
    for line in (
        "watched = torch._C._len_torch_dispatch_stack",
        "from torch.utils._python_dispatch import _disable_current_modes",
        "hidden = getattr(torch._C, '_DisableTorchDispatch')",
        "on = getattr(torch.autograd.profiler, '_is_profiler_enabled')",
    ):
        report = check_source(f"{line}\n{good}")
        assert any(INSTRUMENTS in s for s in report.strict), (line, report.strict)
    assert check_source(f"name = '_len_torch_dispatch_stack is mentioned'\n{good}").ok  # a sentence, not the name


def test_pytorchs_compilers_are_rejected_in_every_form_and_a_seeds_runtime_imports_are_not():
    """torch.compile, TorchDynamo, TorchScript, export and Inductor's compile entry points, named, as a decorator,
    imported or imported from; what a compiler seed's module itself imports and calls stays allowed."""
    from kernelskill.runner.static_check import COMPILES, check_source

    good = (FIXTURES / "candidates" / "good.py").read_text()
    for line in (
        "fast = torch.compile(lambda x: x * 2)",
        "import torch._dynamo as dynamo",
        "from torch import compile as c",
        "from torch.jit import trace",
        "traced = torch.jit.script",
        "exported = torch.export.export",
        "from torch._inductor.compile_fx import compile_fx",
        "@torch.compile\ndef f(x):\n    return x",
    ):
        report = check_source(f"{line}\n{good}")
        assert any(COMPILES in s for s in report.strict), (line, report.strict)
    seed_lines = (
        "from torch._inductor.async_compile import AsyncCompile\n"
        "from torch._inductor.runtime import triton_helpers, triton_heuristics\n"
        "assert_size_stride = torch._C._dynamo.guards.assert_size_stride\n"
        "eager = not torch.compiler.is_compiling()\n"
    )
    assert not any(COMPILES in s for s in check_source(f"{seed_lines}{good}").strict)
