"""The offline engine's whole graph on CPU: compiler seed -> review -> policy -> deterministic skills.

The compiler seed needs a GPU (TorchInductor's Triton output), so here it is replaced by a
hand-written seed and CUDA is pretended present in the agent process only; every candidate is still
reviewed for real, in its own process, on Triton's CPU interpreter.
"""

import json
from pathlib import Path

from kernelskill.engine.compiler import SeedOutcome
from kernelskill.graph.context import Context
from kernelskill.nodes import generator as generator_node
from kernelskill.runs import describe, execute, new_run

FIXTURES = Path(__file__).parent / "fixtures"


def test_offline_graph_applies_deterministic_skills(tmp_path, monkeypatch, task_path):
    import kernelskill.runner.env as env

    seed_source = (FIXTURES / "candidates" / "good.py").read_text()
    seed_source = seed_source.replace("n = x.numel()\n", "n = x.numel()\n        BLOCK = 256\n")
    seed_source = seed_source.replace("triton.cdiv(n, 256)", "triton.cdiv(n, BLOCK)").replace(
        "BLOCK=256", "BLOCK=BLOCK"
    )
    monkeypatch.setattr(env, "cuda_available", lambda: True)
    monkeypatch.setattr(
        generator_node,
        "compiler_seeds",
        lambda ctx, path, workdir: [SeedOutcome("default", source=seed_source), SeedOutcome("triton", error="n/a")],
    )
    ctx = Context(max_rounds=2)
    state = execute(new_run(task_path, ctx, root=tmp_path / "runs"))
    assert state["engine"] == "offline" and state["budget"]["max_repairs"] == 1  # deterministic repairs only
    first = state["candidates"][0]
    assert first["origin"] == "compiler" and first["id"] == "r0-compiler-0"
    assert state["best"]["review"]["status"] == "correct"
    skills = [e["skill_id"] for e in state["trajectory"]]
    assert skills == [None, "block-size-num-warps"]  # the policy's pick for a pointwise kernel
    sweep = [c for c in state["candidates"] if c["note"].startswith("autotune_sweep:")]
    assert len(sweep) >= 2 and all(c["origin"] == "optimizer" and c["parent_id"] == first["id"] for c in sweep)
    assert {c["id"] for c in sweep} <= {a["candidate_id"] for a in state["attempts"]}  # every variant reviewed
    # then nothing is left: the sweep's other card shares its transform, and CUDA graphs need >= 3 launches
    stop = state["stop_reason"]
    assert (
        stop.startswith("offline: no deterministic skill left") and "autotune-configs (transform already tried" in stop
    )
    assert "cuda-graphs (applies_when failed: derived.launches_per_forward >= 3" in stop
    report = (Path(ctx.run_dir) / "report.md").read_text()
    assert "OFFLINE engine" in report
    # every capture is in the report, the one that made no seed with its reason
    assert state["seed_notes"] == ["compiler seed: TorchInductor, variant default (0 s to capture)",
                                   "compiler seed (triton) unavailable: n/a"]  # fmt: skip
    assert "\n- compiler seed (triton) unavailable: n/a\n" in report
    assert json.loads((Path(ctx.run_dir) / "report.json").read_text())["seed_notes"] == state["seed_notes"]
    line = describe("generator", {"current": first, "seed_notes": state["seed_notes"]})
    assert line.endswith("lines | compiler seed (triton) unavailable: n/a")  # the progress line names it too


def test_model_mode_on_cuda_adds_the_compiler_seed_and_shows_it_to_the_model(tmp_path, monkeypatch, task_path):
    import kernelskill.runner.env as env

    from scripts_util import fenced, write_script

    good = (FIXTURES / "candidates" / "good.py").read_text()
    compiler_source = good.replace("class ModelNew", "# kernelskill test compiler seed\nclass ModelNew")
    monkeypatch.setattr(env, "cuda_available", lambda: True)
    monkeypatch.setattr(
        generator_node, "compiler_seeds", lambda ctx, path, workdir: [SeedOutcome("default", source=compiler_source)]
    )
    # the only generator rule matches the starting-point text: without it the scripted model has no reply
    script = write_script(
        tmp_path / "script", [{"role": "generator", "match": "Starting point: TorchInductor", "reply": fenced(good)}]
    )
    state = execute(new_run(task_path, Context(scripted=str(script), max_rounds=0), root=tmp_path / "runs"))
    assert state["engine"] == "llm" and state["budget"]["max_repairs"] == 3
    assert [(c["id"], c["origin"]) for c in state["candidates"]] == [
        ("r0-generator-0", "generator"),
        ("r0-compiler-1", "compiler"),
    ]
    assert [a["status"] for a in state["attempts"]] == ["correct", "correct"]


def test_a_seed_without_a_kernel_of_its_own_is_repaired_in_the_graph(tmp_path, monkeypatch, task_path):
    """The whole offline graph: the compiler seed is one library call (a cuDNN convolution's place in the
    program), the reviewer rejects it (no custom kernel), the diagnoser's repair recaptures it with the
    convolution in our kernels (two forms, both reviewed), and the run goes on from the repaired seed; the
    reference's own ops are never needed."""
    import kernelskill.runner.env as env
    from kernelskill.engine import transforms
    from kernelskill.engine.compiler import SEED_MARK
    from kernelskill.engine.inductor_seed import CONV_KERNEL_MARK

    head = f'"""{SEED_MARK} scale_relu: TorchInductor\'s kernels (variant \'default\'), captured"""\n'
    library = head + (
        "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):  # stands for buf0 = extern_kernels.convolution(x, w)\n"
        "        return torch.relu(x) * 2.0 + 1.0\n"
    )
    good = (FIXTURES / "candidates" / "good.py").read_text()

    def capture(ctx, task_path, variant, workdir, *args, conv_kernel=None, **kwargs):
        marked = head.replace("captured", f"{CONV_KERNEL_MARK} ({conv_kernel}), captured")
        return SeedOutcome(variant, source=marked + good, capture={}, wall_s=0.1)

    monkeypatch.setattr(env, "cuda_available", lambda: True)
    monkeypatch.setattr(transforms, "capture_variant", capture)
    monkeypatch.setattr(
        generator_node, "compiler_seeds", lambda ctx, path, workdir: [SeedOutcome("default", source=library)]
    )
    state = execute(new_run(task_path, Context(max_rounds=1), root=tmp_path / "runs"))
    statuses = {a["candidate_id"]: a["status"] for a in state["attempts"]}
    assert statuses["r0-compiler-0"] == "rejected"
    repaired = [c for c in state["candidates"] if c["origin"] == "diagnoser"]
    assert len(repaired) == 2 and all(c["parent_id"] == "r0-compiler-0" for c in repaired)
    assert all(statuses[c["id"]] == "correct" for c in repaired)
    assert state["best"]["candidate"]["origin"] in ("diagnoser", "optimizer")
    assert not any(c["origin"] == "reference" for c in state["candidates"])
    assert state["trajectory"][0]["outcome"] == "correct" and state["trajectory"][0]["repairs"] == 1
