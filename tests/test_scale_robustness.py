"""KernelBench-scale robustness: one correctness rule in chunks, near-constant outputs, broken tasks,
the reviewer's own failures, and the last-resort answer."""

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.runner import correctness, sandbox, worker
from kernelskill.runner.correctness import MAGNITUDE_GUARD, blocks, compare, scan
from kernelskill.runner.result import failure
from kernelskill.runner.sandbox import probe_task, run_review

from conftest import FIXTURES

NEAR_CONSTANT = FIXTURES / "tasks" / "near_constant_mean.py"

ROW_NORM_MEAN = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_norm_mean_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    c = tl.where(mask, x - mean, 0.0)
    var = tl.sum(c * c, axis=0) / cols
    normed = c / tl.sqrt(var + 1e-5)
    tl.store(out_ptr + row, tl.sum(normed, axis=0) / cols)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_norm_mean_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out
"""


# ---- chunked comparison ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, step", [((7, 5, 3), 4), ((3, 100), 64), ((1000,), 10), ((), 1), ((4, 1, 9), 9), ((2, 1000), 7)]
)
def test_blocks_cover_every_element_once_in_row_major_order(shape, step):
    t = torch.arange(math.prod(shape)).reshape(shape)
    assert all(t[idx].numel() <= step for idx in blocks(shape, step))  # a long row is cut too
    seen = torch.cat([t[idx].reshape(-1) for idx in blocks(shape, step)]) if shape else t.reshape(-1)
    assert torch.equal(seen, torch.arange(math.prod(shape)))


def test_a_chunked_scan_finds_what_a_whole_scan_finds_on_strided_outputs():
    torch.manual_seed(0)
    want = torch.randn(64, 48).t()  # non-contiguous
    got = want.clone()
    got[5, 7] += 1.0
    got[30, 2] -= 0.5
    whole = scan(got, want, 1e-4, 1e-4, budget=1 << 30)
    tiny = scan(got, want, 1e-4, 1e-4, budget=8 * correctness.TEMPORARIES * 16)  # 16-element chunks...
    assert whole.bad == tiny.bad == 2
    assert whole.worst_index == tiny.worst_index == 5 * 64 + 7
    assert "worst at (5, 7)" in tiny.worst(tuple(want.shape), 1e-4, 1e-4)
    assert math.isclose(whole.rel_l2, tiny.rel_l2, rel_tol=1e-9)


def test_budget_is_max_of_one_gib_and_a_tenth_of_the_output():
    assert correctness.chunk_budget(100) == 1 << 30
    assert correctness.chunk_budget(40 << 30) == 4 << 30
    assert correctness.chunk_budget(40 << 30, low_memory=True) == 1 << 30


# ---- one rule for near-constant outputs ----------------------------------------------------------


def _noisy(truth, scale, seed):
    g = torch.Generator().manual_seed(seed)
    return (truth + scale * torch.randn(truth.shape, generator=g, dtype=torch.float64)).float()


def test_output_at_its_own_noise_is_judged_against_float64():
    truth = torch.zeros(4096, dtype=torch.float64)  # exact answer 0; float32 programs give noise
    ref, exact = _noisy(truth, 1e-8, 1), _noisy(truth, 1.5e-8, 2)
    assert compare(ref, exact, None, None) is not None  # the relative guard alone rejects it
    notes: list[str] = []
    assert compare(ref, exact, None, None, truth=lambda: truth, notes=notes) is None
    assert notes and "float64" in notes[0]
    far = _noisy(truth, 5e-8, 3)  # within atol, but farther from float64 than 2x the reference
    reason = compare(ref, far, None, None, truth=lambda: truth)
    assert reason is not None and "against the float64 reference" in reason


def test_small_but_real_outputs_keep_the_guard_against_zeros_and_constants():
    torch.manual_seed(0)
    x = torch.randn(4096)
    ref = x * 1e-5
    truth = x.double() * 1e-5
    for cheat in (torch.zeros_like(ref), torch.full_like(ref, float(ref.mean()))):
        reason = compare(ref, cheat, None, None, truth=lambda: truth)
        assert reason is not None and f"> {MAGNITUDE_GUARD}" in reason and "float64" in reason


def test_exact_kernel_on_a_near_constant_output_passes_review(tmp_path):
    r = run_review(NEAR_CONSTANT, ROW_NORM_MEAN, tmp_path, "row_norm_mean", device="cpu")
    assert r["status"] == "correct", r.get("error_digest")
    assert any("own rounding noise" in w for w in r["warnings"])


def test_the_capture_self_check_uses_the_same_rule(tmp_path):
    from kernelskill.engine.inductor_seed import self_check

    assert self_check(str(NEAR_CONSTANT), ROW_NORM_MEAN, device="cpu") is None
    wrong = ROW_NORM_MEAN.replace("/ cols)\n", "/ cols + 1e-3)\n")
    assert "elements exceed" in (self_check(str(NEAR_CONSTANT), wrong, device="cpu") or "")


# ---- a broken task is unusable, never a failed candidate ---------------------------------------


@pytest.mark.parametrize(
    "task, words", [("raising_reference.py", "the reference raised RuntimeError"), ("nan_reference.py", "returns NaN")]
)
def test_a_broken_reference_is_an_invalid_task(tmp_path, candidate, task, words):
    r = run_review(FIXTURES / "tasks" / task, candidate("good"), tmp_path, "x", device="cpu")
    assert r["status"] == "invalid_task" and words in r["error_digest"]
    probe = probe_task(FIXTURES / "tasks" / task, tmp_path / "probe", device="cpu")
    assert probe["status"] == "invalid_task" and words in probe["error_digest"]


def test_a_usable_task_probes_correct(tmp_path, task_path):
    probe = probe_task(task_path, tmp_path, device="cpu")
    assert probe["status"] == "correct" and "reference_s" in probe["metrics"]


def test_review_cli_exits_2_on_a_raising_reference(tmp_path):
    cand = tmp_path / "c.py"
    cand.write_text((FIXTURES / "candidates" / "good.py").read_text())
    out = CliRunner().invoke(
        app, ["review", str(FIXTURES / "tasks" / "raising_reference.py"), str(cand), "--device", "cpu"]
    )
    assert out.exit_code == 2, out.output
    assert "unusable task" in out.output and "raised" in out.output


def test_optimize_stops_before_any_model_call_on_a_raising_reference(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"label": "t", "rules": [{"role": "generator", "reply": "never asked"}]}))
    args = ["optimize", str(FIXTURES / "tasks" / "raising_reference.py"), "--scripted", str(script)]
    out = CliRunner().invoke(app, [*args, "--device", "cpu", "--runs-dir", str(tmp_path / "runs")])
    assert out.exit_code == 2, out.output
    assert "unusable task" in out.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert "raised" in report["task_error"] and report["attempts"][0]["status"] == "invalid_task"
    assert not (report["tokens"].get("total") or {}).get("input_tokens")  # no model call was paid


BUSY_PROBE = failure(
    "harness_error",
    "the reference ran out of memory on cuda:0 (a GPU) while other processes held 120.0 GiB of it: out of memory",
    candidate_id="probe",
)


def test_optimize_stops_before_any_model_call_on_a_device_another_process_fills(tmp_path, task_path, monkeypatch):
    from kernelskill.nodes import generator
    from kernelskill.runner import gpu_share

    monkeypatch.setattr(generator, "probe_task", lambda *a, **k: dict(BUSY_PROBE))
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"label": "t", "rules": [{"role": "generator", "reply": "never asked"}]}))
    args = ["optimize", str(task_path), "--scripted", str(script), "--device", "cpu"]
    out = CliRunner().invoke(app, [*args, "--runs-dir", str(tmp_path / "runs")])
    assert out.exit_code == 2, out.output
    assert "the device is busy, not the task" in out.output and "unusable task" not in out.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert report["task_error"].startswith("the device is busy") and "120.0 GiB" in report["task_error"]
    assert not report["stop_reason"].startswith("the reference task is unusable")
    assert not (report["tokens"].get("total") or {}).get("input_tokens")  # no model call was paid
    row_dir = tmp_path / "row"
    row_dir.mkdir()
    (row_dir / "report.json").write_text(json.dumps(report))
    from kernelskill.evals.metrics import task_row
    from kernelskill.evals.suite import TaskSpec

    row = task_row(TaskSpec(1, task_path), row_dir)
    assert row["status"] == "error" and row["reason"].startswith("the device is busy")
    # shared through the eval's locks the probe has waited for the room already: the run goes on
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    assert not generator.device_busy(dict(BUSY_PROBE))
    monkeypatch.delenv(gpu_share.ENV)
    assert generator.device_busy(dict(BUSY_PROBE))
    assert not generator.device_busy(failure("harness_error", "the reviewer itself hit out of memory (comparing)"))


def test_review_cli_exits_2_when_the_reviewer_itself_fails(tmp_path, monkeypatch):
    broke = failure("harness_error", "the reviewer itself hit an error")
    monkeypatch.setattr(sandbox, "run_review", lambda *a, **k: broke)
    cand = tmp_path / "c.py"
    cand.write_text((FIXTURES / "candidates" / "good.py").read_text())
    out = CliRunner().invoke(app, ["review", str(FIXTURES / "tasks" / "scale_relu.py"), str(cand), "--device", "cpu"])
    assert out.exit_code == 2, out.output
    assert "not judged" in out.output and "REJECTED" not in out.output


# ---- the reviewer's own failure ---------------------------------------------------------------------


def test_an_exception_in_harness_code_is_a_harness_error(tmp_path, task_path, candidate, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 63.75 GiB")

    monkeypatch.setattr(correctness, "compare", out_of_memory)
    cand = tmp_path / "cand.py"
    cand.write_text(candidate("good"))
    r = worker.evaluate({"task_path": str(task_path), "candidate_path": str(cand), "device": "cpu", "trials": 1})
    assert r["status"] == "harness_error" and "out of memory" in r["error_digest"]


def test_a_harness_error_is_retried_once_in_low_memory_mode(tmp_path, task_path, monkeypatch):
    calls = []

    def fake_child(module, req, *args, **kwargs):
        calls.append(req.get("low_memory", False))
        status = "harness_error" if len(calls) == 1 else "correct"
        return sandbox.ChildResult(failure(status, "the reviewer itself hit out of memory"), 1.0)

    monkeypatch.setattr(sandbox, "run_child", fake_child)
    r = run_review(task_path, "x = 1", tmp_path, "c", device="cpu")
    assert calls == [False, True]
    assert r["status"] == "correct" and "low-memory mode" in r["warnings"][0]


def test_a_harness_error_goes_to_no_repair_and_closes_its_round():
    from kernelskill.graph.routing import decide_after_review, round_finished

    state = {
        "review": failure("harness_error", "the reviewer itself hit out of memory"),
        "budget": {"max_rounds": 3, "max_repairs": 3},
        "round": 1,
        "repairs": 0,
        "best": {"candidate": {}, "review": {"metrics": {}}},
        "trajectory": [],
    }
    assert round_finished(state)
    assert decide_after_review(state)[0] == "feature_extractor"


# ---- never end without an answer ---------------------------------------------------------------


def test_a_seed_round_with_nothing_correct_ends_with_the_reference_fallback(tmp_path, task_path):
    from kernelskill.graph.context import Context
    from kernelskill.runs import execute, new_run

    from scripts_util import write_script

    rules = [{"role": "generator", "reply": "no code here"}, {"role": "diagnoser", "reply": "still none"}]
    script = write_script(tmp_path / "script", rules)
    run = new_run(task_path, Context(scripted=str(script), device="cpu", max_repairs=1, max_rounds=0), root=tmp_path)
    state = execute(run)
    assert [a["status"] for a in state["attempts"]] == ["no_code", "no_code", "correct"]
    best = state["best"]
    assert best["candidate"]["origin"] == "reference"
    assert "torch_main_work" in best["review"]["labels"] and not best["review"]["custom_kernel"]
    assert "no_code" in best["candidate"]["note"]  # why each better option failed
    assert state["trajectory"][0]["candidate_id"] == best["candidate"]["id"]


def test_an_eval_counts_an_unusable_task_as_an_error(tmp_path):
    from kernelskill.evals.metrics import task_row
    from kernelskill.evals.suite import REPORT, TaskSpec

    report = {"task_error": "the reference raised RuntimeError: shapes", "stop_reason": "the task is unusable"}
    (tmp_path / REPORT).write_text(json.dumps({**report, "best_review": None, "trajectory": []}))
    row = task_row(TaskSpec(2, FIXTURES / "tasks" / "raising_reference.py"), tmp_path)
    assert row["status"] == "error" and "unusable task: the reference raised" in row["reason"]


def _timed(cid: str, ms: float, eager_ms: float, custom: bool = True) -> dict:
    labels = [] if custom else ["torch_main_work"]
    review = failure("correct", "", candidate_id=cid)
    review.update(correct=True, timing_kind="cuda_events", runtime_ms=ms, speedup_vs_eager=eager_ms / ms)
    review.update(custom_kernel=custom, labels=labels)
    return review


@pytest.mark.parametrize(
    ("kernels", "best_ms", "reviewed_reference"),
    [("any", 25.0, True), ("custom", 25.0, False), ("any", 10.1, False)],
)
def test_a_run_ending_slower_than_eager_keeps_the_reference_under_kernels_any(
    tmp_path, monkeypatch, kernels, best_ms, reviewed_reference
):
    """Under ``any`` the fastest correct answer may be the reference's own ops: reviewed before the run ends
    when the best is clearly slower than eager (10 ms here), labelled torch_main_work; never under
    ``custom``, nor when the best is within 2 % of eager."""
    from types import SimpleNamespace

    from kernelskill.graph.context import Context
    from kernelskill.graph.state import Candidate
    from kernelskill.nodes import reviewer as node

    reviewed: list[str] = []

    def fake_review(ctx, state, cand):
        reviewed.append(cand["origin"])
        if cand["origin"] == "reference":
            assert "ran at 0.40x eager" in cand["source"].splitlines()[0]
            return _timed(cand["id"], 10.0, 10.0, custom=False)
        return _timed(cand["id"], best_ms * 1.5, 10.0)  # this round's candidate: correct, slower than the best

    monkeypatch.setattr(node, "_review", fake_review)
    monkeypatch.setattr(node, "decide_after_review", lambda state: (node.END, "round budget spent"))
    seed = Candidate(id="r0-compiler-0", source="s", origin="compiler", parent_id=None, round=0, note="seed")
    cand = Candidate(id="r1-optimizer-1", source="c", origin="optimizer", parent_id=seed["id"], round=1, note="")
    task = {"name": "t", "path": "t.py", "source": "class Model: pass\n"}
    state = {
        "task": task,
        "task_path": "t.py",
        "budget": {"max_rounds": 1, "max_repairs": 1},
        "round": 1,
        "repairs": 0,
        "current": cand,
        "candidates": [seed, cand],
        "best": {"candidate": seed, "review": _timed(seed["id"], best_ms, 10.0)},
        "attempts": [],
        "trajectory": [],
    }
    update = node.reviewer(state, SimpleNamespace(context=Context(kernels=kernels, device="cpu")))
    assert reviewed == ["optimizer", "reference"] if reviewed_reference else ["optimizer"]
    if reviewed_reference:
        assert update["best"]["candidate"]["origin"] == "reference"
        assert "torch_main_work" in update["best"]["review"]["labels"]
        assert "kept the reference's own ops" in update["stop_reason"]
    else:
        assert "best" not in update and update["stop_reason"] == "round budget spent"


# ---- what counts as the candidate's own kernel ---------------------------------------------------------------

CONV_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x)
"""

DUMMY_TRITON = """
import triton
import triton.language as tl


@triton.jit
def touch_kernel(p):
    tl.store(p, tl.load(p))
"""


def test_the_reference_fallback_is_labelled_even_when_its_header_quotes_a_cuda_error():
    """The fallback's header quotes why the better candidates failed; a quoted "no custom kernel: ... load_inline
    ... __global__" must not make it count as a CUDA candidate (which would pass as a custom-kernel success)."""
    from kernelskill.nodes.reviewer import reference_fallback
    from kernelskill.runner.static_check import check_source

    digest = (
        "static check: no custom kernel: neither a @triton.jit kernel using tl.* nor CUDA __global__ code via "
        "load_inline"
    )
    attempt = {"candidate_id": "r0-compiler-0", "status": "rejected", "error_digest": digest}
    state = {"task": {"source": CONV_TASK}, "attempts": [attempt], "candidates": []}
    report = check_source(reference_fallback(state, {})["source"], CONV_TASK)
    assert report.ok and report.cuda_names == [] and report.kernels == 0
    assert "torch_main_work" in report.labels


def test_cuda_is_read_from_the_code_not_from_comments():
    from kernelskill.runner.static_check import check_source

    comment = "\n# built with load_inline: __global__ void k(float* x)\n"
    commented = CONV_TASK + comment + "class ModelNew(Model):\n    pass\n"
    report = check_source(commented, CONV_TASK)
    assert not report.ok and report.strict[0].startswith("no custom kernel")
    built = (
        "from torch.utils.cpp_extension import load_inline\n"
        'SRC = """\ntemplate <int N>\n__global__ void __launch_bounds__(256) scale_kernel(float* x) {}\n"""\n'
        'OTHER = """extern "C" __global__ void\nadd_kernel (float* x) {}"""\n'
    )
    assert check_source(built).cuda_names == ["scale_kernel", "add_kernel"]


@pytest.mark.parametrize(
    "model_new",
    [
        "class ModelNew(Model):\n    pass\n",  # Model's forward, inherited
        "class ModelNew(Model):\n    def forward(self, x):\n        return super().forward(x)\n",
        "class ModelNew(Model):\n    def forward(self, x):\n        return Model.forward(self, x)\n",
    ],
)
def test_an_inherited_forward_is_the_reference_main_work(model_new):
    """A dummy kernel beside the reference's own forward (inherited, or called through super()) is PyTorch's
    main work, labelled as such, never a custom-kernel success."""
    from kernelskill.runner.static_check import check_source

    report = check_source(CONV_TASK + DUMMY_TRITON + "\n\n" + model_new, CONV_TASK)
    assert "torch_main_work" in report.labels
    assert any("submodule self.conv" in w for w in report.warnings)


COPY_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
"""

HIDDEN_MATMUL = COPY_KERNEL + """

class ModelNew(nn.Module):
    def forward(self, a, b):
        product = getattr(torch, "mat" + "mul")(a, b)
        out = torch.empty_like(product)
        n = product.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](product, out, n, BLOCK=1024)
        return out
"""


def test_a_heavy_op_the_source_hides_is_labelled_by_what_forward_ran(tmp_path):
    """The static checks see a kernel and no PyTorch product; the first trial's record sees aten::mm."""
    from kernelskill.runner.static_check import check_source

    task = FIXTURES / "tasks" / "small_matmul.py"
    assert check_source(HIDDEN_MATMUL, task.read_text()).labels == []
    r = run_review(task, HIDDEN_MATMUL, tmp_path, "hidden_mm", device="cpu", timeout_s=120)
    assert r["status"] == "correct", r.get("error_digest")
    assert r["custom_kernel"] is False and "torch_main_work" in r["labels"]
    assert any("forward ran PyTorch's mm" in w for w in r["warnings"]), r["warnings"]


def test_library_ops_are_the_heavy_aten_ops_recorded():
    from kernelskill.runner.profiling import library_ops

    names = ["copy_kernel", "aten::addmm", "aten::relu", "aten::convolution", "aten::addmm", "aten::clone"]
    assert library_ops(names) == ["addmm", "convolution"]
    assert library_ops(["ks_conv_fwd", "aten::add", "aten::mean"]) == []


REFERENCE_IN_A_HELPER = COPY_KERNEL + """

def _answer(x):
    return torch.relu(x) * 2.0 + 1.0


class ModelNew(nn.Module):
    def forward(self, x):
        answer = _answer(x)
        out = torch.empty_like(answer)
        n = answer.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](answer, out, n, BLOCK=1024)
        return out
"""


def test_the_reference_ops_run_outside_forward_s_body_are_labelled(tmp_path):
    """Forward's body holds a kernel launch and a helper call; the record shows forward ran every op the
    reference runs (relu, mul, add), so the answer is PyTorch's work."""
    from kernelskill.runner.static_check import check_source

    task = FIXTURES / "tasks" / "scale_relu.py"
    assert check_source(REFERENCE_IN_A_HELPER, task.read_text()).labels == []
    r = run_review(task, REFERENCE_IN_A_HELPER, tmp_path, "helper", device="cpu")
    assert r["status"] == "correct", r.get("error_digest")
    assert r["custom_kernel"] is False and "torch_main_work" in r["labels"]
    assert any("every PyTorch op of the reference" in w for w in r["warnings"]), r["warnings"]


def test_a_result_the_reviewer_did_not_seal_is_refused(tmp_path):
    """A child whose result file carries no valid seal (written by anything but the child's own main) is a
    crash, never a review."""
    from kernelskill.runner import sandbox

    (tmp_path / "forger.py").write_text(
        "import json, sys\n"
        "sys.stdin.readline()\n"  # the key, read and dropped
        "open(sys.argv[2], 'w').write(json.dumps({'status': 'correct'}))\n"
    )
    (tmp_path / "signer.py").write_text(
        "import sys\n"
        "from kernelskill.runner.sandbox import read_key, write_result\n"
        "write_result(sys.argv[2], {'status': 'correct'}, read_key())\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{sandbox.scrubbed_env().get('PYTHONPATH', '')}"}
    forged = sandbox.run_child("forger", {}, tmp_path / "f", "f", 60, env_extra=env)
    assert isinstance(forged, sandbox.ChildFailure) and "not its own" in forged.digest
    signed = sandbox.run_child("signer", {}, tmp_path / "s", "s", 60, env_extra=env)
    assert isinstance(signed, sandbox.ChildResult) and signed.result == {"status": "correct"}
