"""The convolution benchmark: tracing a task's convolutions on the meta device, FLOPs, the table; timing on a GPU."""

from __future__ import annotations

import json
import textwrap

import pytest

from kernelskill.evals.bench_conv import flops, markdown, measure, task_convs, trace_convs

TASK = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Model(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, 8, (3, 5), stride=2, padding=(1, 2), groups=2)
            self.w = nn.Parameter(torch.randn(8, 4, 3))

        def forward(self, x):
            y = self.conv(x).flatten(2)
            return F.conv_transpose1d(y, self.w, stride=3, output_padding=1) + self.conv(x).sum()

    def get_inputs():
        return [torch.randn(4096, 6, 512, 512)]  # 25 GB: tracing on the meta device allocates nothing

    def get_init_inputs():
        return [6]
    """
)


def test_a_tasks_convolutions_are_traced_without_memory(tmp_path):
    (tmp_path / "t.py").write_text(TASK)
    recs = trace_convs(tmp_path / "t.py")
    assert [r["op"] for r in recs] == ["conv2d", "conv_transpose1d", "conv2d"]
    fwd, tr = recs[0], recs[1]
    assert fwd["input"] == [4096, 6, 512, 512] and fwd["weight"] == [8, 3, 3, 5] and fwd["groups"] == 2
    assert fwd["stride"] == [2, 2] and fwd["padding"] == [1, 2] and fwd["bias"] and not fwd["transposed"]
    assert tr["transposed"] and tr["stride"] == [3] and tr["output_padding"] == [1] and not tr["bias"]
    (row,) = [r for _, r in task_convs([tmp_path]) if r["op"] == "conv2d"]  # the repeated call once
    assert row == fwd


def test_flops_count_each_multiply_add_twice():
    rec = {"weight": [8, 3, 3, 5], "transposed": False, "input": [2, 6, 10, 10]}
    assert flops(rec, [2, 8, 5, 5]) == 2.0 * 2 * 8 * 25 * 3 * 15
    tr = {"weight": [8, 4, 3], "transposed": True, "input": [2, 8, 7]}
    assert flops(tr, [2, 4, 22]) == 2.0 * 2 * 7 * 8 * 4 * 3


def test_the_table_has_a_line_per_convolution_and_geometric_means():
    rows = [
        {"task": "level2/a", "op": "conv2d", "input": [1], "weight": [1], "cudnn_ms": 2.0, "compile_ms": 2.0,
         "ours_ms": 1.0, "ours_tflops": 10.0, "ours_pct_tf32_peak": 5.0, "vs_cudnn": 2.0, "vs_compile": 2.0,
         "err_ours": 1e-4, "err_cudnn": 2e-4},
        {"task": "level2/b", "op": "conv2d", "input": [1], "weight": [1], "cudnn_ms": 1.0, "compile_ms": 1.0,
         "ours_ms": 2.0, "ours_tflops": 5.0, "ours_pct_tf32_peak": 2.5, "vs_cudnn": 0.5, "vs_compile": 0.5,
         "err_ours": 1e-4, "err_cudnn": 2e-4},
        {"task": "level3/c", "error": "RuntimeError: no"},
    ]  # fmt: skip
    text = markdown(rows, "tf32r")
    assert "| level2 | 2 | 1.000 | 1.000 |" in text and "RuntimeError: no" in text


@pytest.mark.gpu
def test_one_convolution_timed_three_ways_on_the_gpu():
    rec = {"op": "conv2d", "input": [8, 32, 32, 32], "weight": [64, 32, 3, 3], "bias": True, "stride": [1, 1],
           "padding": [1, 1], "dilation": [1, 1], "groups": 1, "output_padding": [0, 0], "transposed": False,
           "dtype": "float32"}  # fmt: skip
    row = measure(rec, "tf32r")
    assert row["out"] == [8, 64, 32, 32]
    assert row["err_ours"] < 1e-3  # TF32 products (cuDNN picks its own algorithm: TF32 or not, per shape)
    for name in ("cudnn", "compile", "ours"):
        assert row[f"{name}_ms"] > 0 and row[f"{name}_tflops"] > 0


def test_a_second_run_into_the_same_folder_measures_only_what_is_missing(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text(TASK)
    measured = []

    def fake_measure(rec, precision, config=None):  # the GPU timing stands aside; what is measured is the point
        measured.append(rec["op"])
        if rec["op"] == "conv_transpose1d" and len(measured) < 4:
            raise RuntimeError("out of memory")
        return {"out": [1], "cudnn_ms": 1.0, "compile_ms": 1.0, "ours_ms": 1.0, "ours_tflops": 1.0,
                "vs_cudnn": 1.0, "vs_compile": 1.0, "err_ours": 0.0, "err_cudnn": 0.0}  # fmt: skip

    monkeypatch.setattr(bench_conv, "measure", fake_measure)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "out")]
    assert bench_conv.main(args) == 0 and measured == ["conv2d", "conv_transpose1d"]
    assert bench_conv.main(args) == 0 and measured[2:] == ["conv_transpose1d"]  # the failed row only
    assert bench_conv.main([*args, "--precision", "ieee"]) == 0 and len(measured) == 5  # another precision: all
    assert bench_conv.main([*args, "--config", '{"DIRECT": true}']) == 0 and len(measured) == 7  # another config
    from kernelskill.engine import conv_tune

    monkeypatch.setattr(conv_tune, "enabled", lambda device: True)  # a GPU, tuning on: all again
    assert bench_conv.main(args) == 0 and len(measured) == 9
    assert bench_conv.main(args) == 0 and len(measured) == 9
    assert '"tuned": true' in (tmp_path / "out" / "bench_conv.jsonl").read_text()
    table = (tmp_path / "out" / "bench_conv.md").read_text()
    assert table.count("| tasks/t |") == 2 and "out of memory" not in table


def test_the_comparison_of_configurations_times_each_and_resumes(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text(TASK)
    seen = []

    def fake_compare_one(rec, precision, configs):  # the GPU timing stands aside: what is run and written is the point
        seen.append((rec["op"], precision, configs))
        return {"ms": [2.0, 1.0, "CompilationError: no"], "err": [0.0, 0.0, None], "speedup": [1.0, 2.0, None]}

    monkeypatch.setattr(bench_conv, "compare_one", fake_compare_one)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "out"), "--compare", "{}",
            '{"TMA_B": true}', '{"WARP_SPEC": true}']  # fmt: skip
    assert bench_conv.main(args) == 0 and len(seen) == 2
    assert seen[0][2] == [{}, {"TMA_B": True}, {"WARP_SPEC": True}]
    assert bench_conv.main(args) == 0 and len(seen) == 2  # resumed: nothing left
    assert bench_conv.main([*args[:-1]]) == 0 and len(seen) == 4  # other configurations: measured again
    table = (tmp_path / "out" / "bench_compare.md").read_text()
    assert "| tasks/t | conv2d |" in table and "CompilationError" in table
    assert '| tasks | `{"TMA_B": true}` | 2 | 2.000 | 2.000 | 2.000 |' in table


def test_a_comparison_row_that_failed_is_measured_again(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text(TASK)
    seen = []

    def fake_compare_one(rec, precision, configs):
        seen.append(rec["op"])
        if rec["op"] == "conv_transpose1d" and len(seen) < 3:
            raise RuntimeError("CUDA out of memory")
        return {"ms": [2.0, 1.0], "err": [0.0, 0.0], "speedup": [1.0, 2.0]}

    monkeypatch.setattr(bench_conv, "compare_one", fake_compare_one)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "out"), "--compare", "{}", '{"TMA_B": true}']
    assert bench_conv.main(args) == 0 and seen == ["conv2d", "conv_transpose1d"]
    assert bench_conv.main(args) == 0 and seen[2:] == ["conv_transpose1d"]  # the failed row only, as --config runs
    assert "out of memory" not in (tmp_path / "out" / "bench_compare.md").read_text()


def test_each_configuration_is_timed_in_both_orders_and_a_failing_one_is_a_cell(monkeypatch):
    import torch
    import torch.nn.functional as F

    from kernelskill.engine import conv as conv_module
    from kernelskill.evals import bench_conv
    from kernelskill.runner import timing

    x, w = torch.randn(1, 4, 6, 6, dtype=torch.float64), torch.randn(5, 4, 3, 3, dtype=torch.float64)
    args = {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}
    monkeypatch.setattr(bench_conv, "_operands", lambda rec: (x, w, None, F.conv2d, args))

    def fake_conv(x, w, b, config=None, **kw):  # the CPU stands in for the GPU: a configuration is its label
        if config.get("broken"):
            raise RuntimeError("PassManager::run failed")
        out = F.conv2d(x, w, b, **{k: kw[k] for k in args})
        out.label = config.get("label", "default")
        return out

    order, clock = [], iter([4.0, 2.0, 3.0, 1.0])  # first pass: default, fast; second pass: fast, default

    def fake_time(fn):
        order.append(fn().label)
        return {"median_ms": next(clock)}

    monkeypatch.setattr(conv_module, "conv", fake_conv)
    monkeypatch.setattr(timing, "time_adaptive", fake_time)
    rec = {"transposed": False, "output_padding": [0, 0]}
    row = bench_conv.compare_one(rec, "ieee", [{}, {"label": "fast"}, {"broken": True}])
    assert order == ["default", "fast", "fast", "default"]  # in the order given, then reversed
    assert row["passes"] == [[4.0, 2.0, None], [1.0, 3.0, None]]
    assert row["ms"][:2] == [2.5, 2.5] and row["ms"][2].startswith("RuntimeError: PassManager")
    assert row["speedup"] == [1.0, 1.0, None] and row["err"][2] is None and row["err"][0] < 1e-12


@pytest.mark.gpu
def test_the_weight_through_a_tensor_descriptor_computes_the_same_convolution_on_the_gpu():
    from kernelskill.evals.bench_conv import compare_one

    rec = {"op": "conv2d", "input": [8, 36, 20, 20], "weight": [70, 36, 3, 3], "bias": True, "stride": [1, 1],
           "padding": [1, 1], "dilation": [1, 1], "groups": 1, "output_padding": [0, 0], "transposed": False,
           "dtype": "float32"}  # fmt: skip
    row = compare_one(rec, "ieee", [{}, {"TMA_B": True}])
    assert all(isinstance(t, float) for t in row["ms"]), row["ms"]
    assert max(row["err"]) < 1e-5, row["err"]


POOLED_TASK = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(16, 64, 3)
            self.pool = nn.MaxPool2d(2)

        def forward(self, x):
            y = torch.min(self.conv(x), dim=1, keepdim=True)[0]
            return self.pool(torch.tanh(self.conv(x) - 0.5)), torch.tanh(y)

    def get_inputs():
        return [torch.randn(256, 16, 512, 512)]  # 4 GB: traced on the meta device

    def get_init_inputs():
        return []
    """
)


def test_the_fusions_listing_says_what_each_convolution_fuses_without_a_gpu(tmp_path, capsys):
    from kernelskill.evals.bench_conv import main

    (tmp_path / "1_pooled.py").write_text(POOLED_TASK)
    (tmp_path / "2_broken.py").write_text("raise RuntimeError('no model here')\n")
    assert main(["--tasks", str(tmp_path), "--fusions"]) == 0
    lines = capsys.readouterr().out.splitlines()
    name = tmp_path.name
    assert lines[:2] == [
        f"{name}/1_pooled.py: conv2d -> our implicit-GEMM Triton kernel (tf32r), with min over the channels / tanh "
        "fused before its store",
        f"{name}/1_pooled.py: conv2d -> our implicit-GEMM Triton kernel (tf32r), with sub / tanh / max_pool2d 2x2 "
        "fused before its store",
    ], lines[:2]
    assert lines[2].startswith(f"{name}/2_broken.py: not traced: TaskFileError:") and "no model here" in lines[2]
    assert len(lines) == 3


def test_whole_tasks_are_timed_with_their_fusions_and_resumed(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv

    tasks = tmp_path / "level2"
    tasks.mkdir()
    (tasks / "1_pooled.py").write_text(POOLED_TASK)
    (tasks / "2_noconv.py").write_text(POOLED_TASK.replace("self.conv(x)", "x").replace("nn.Conv2d(16, 64, 3)", "None"))
    (tasks / "3_also.py").write_text(POOLED_TASK)
    timed = []

    def fake(task_path, precision, profile=False):  # the GPU timing stands aside: which tasks, resume, table
        timed.append(task_path.name)
        if task_path.name == "3_also.py" and len(timed) < 3:
            raise RuntimeError("out of memory")
        return {"eager_ms": 2.0, "compile_ms": 1.0, "ours_ms": 0.8, "vs_eager": 2.5, "vs_compile": 1.25,
                "err_vs_eager": 1e-6, "fused": ["with sub / tanh / max_pool2d 2x2 fused before its store"]}  # fmt: skip

    monkeypatch.setattr(bench_conv, "measure_task", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--tasks", str(tasks), "--whole", "--out", str(tmp_path / "out")]
    assert bench_conv.main(args) == 0 and timed == ["1_pooled.py", "3_also.py"]  # no convolution: no row
    assert bench_conv.main(args) == 0 and timed[2:] == ["3_also.py"]  # the failed row only
    table = (tmp_path / "out" / "bench_whole.md").read_text()
    assert "| level2/1_pooled | 2 | 1 | 0.8 | 2.500 | 1.250 | 1.0e-06 | with sub / tanh / max_pool2d 2x2" in table
    assert "| level2 | 2 | 2.500 / 2.500 | 1.250 / 1.250 | 2 |" in table and "out of memory" not in table


def test_shards_share_the_whole_tasks_and_the_table_gets_every_row(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv

    tasks = tmp_path / "level2"
    tasks.mkdir()
    for i in range(1, 6):
        (tasks / f"{i}_t.py").write_text(POOLED_TASK)
    timed = []

    def fake(task_path, precision, profile=False):
        timed.append(task_path.name)
        return {"eager_ms": 2.0, "compile_ms": 1.0, "ours_ms": 0.5, "vs_eager": 4.0, "vs_compile": 2.0,
                "err_vs_eager": 0.0, "fused": []}  # fmt: skip

    monkeypatch.setattr(bench_conv, "measure_task", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--tasks", str(tasks), "--whole", "--out", str(tmp_path / "out")]
    assert bench_conv.main([*args, "--shard", "1/2"]) == 0 and timed == ["2_t.py", "4_t.py"]
    assert bench_conv.main([*args, "--shard", "0/2"]) == 0 and timed[2:] == ["1_t.py", "3_t.py", "5_t.py"]
    table = (tmp_path / "out" / "bench_whole.md").read_text()
    assert [line.split(" |")[0] for line in table.splitlines() if line.startswith("| level2/")] == [
        f"| level2/{i}_t" for i in range(1, 6)
    ]  # every row, in the tasks' order, whichever shard measured it
    assert bench_conv.main(args) == 0 and len(timed) == 5  # nothing left to measure
    with pytest.raises(SystemExit):
        bench_conv.main([*args, "--shard", "2/2"])


def test_on_a_shared_gpu_a_task_out_of_memory_is_measured_again_holding_it_alone(tmp_path, monkeypatch):
    import torch

    from kernelskill.evals import bench_conv
    from kernelskill.runner import gpu_share

    tasks = tmp_path / "level2"
    tasks.mkdir()
    (tasks / "1_big.py").write_text(POOLED_TASK)
    (tasks / "2_broken.py").write_text(POOLED_TASK)
    calls = []

    def fake(task_path, precision, profile=False, alone=False, need_bytes=0.0):
        calls.append((task_path.name, alone, need_bytes))
        if task_path.name == "2_broken.py":
            raise RuntimeError("an error of its own")
        if not alone:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ...")
        return {"eager_ms": 2.0, "compile_ms": 1.0, "ours_ms": 0.8, "vs_eager": 2.5, "vs_compile": 1.25,
                "err_vs_eager": 0.0, "fused": []}  # fmt: skip

    monkeypatch.setattr(bench_conv, "measure_task", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_share, "active", lambda: True)
    assert bench_conv.main(["--tasks", str(tasks), "--whole", "--out", str(tmp_path / "out")]) == 0
    assert calls == [("1_big.py", False, 0.0), ("1_big.py", True, 2 << 30), ("2_broken.py", False, 0.0)]
    rows = [json.loads(line) for line in (tmp_path / "out" / "bench_whole.jsonl").read_text().splitlines()]
    assert rows[0]["alone"] is True and rows[0]["vs_compile"] == 1.25
    assert rows[1]["error"] == "RuntimeError: an error of its own"  # not an out-of-memory: no second try


@pytest.mark.gpu
def test_a_whole_task_timed_three_ways_with_its_epilogue_fused_on_the_gpu(tmp_path):
    from kernelskill.evals.bench_conv import measure_task

    task = tmp_path / "t.py"
    task.write_text(POOLED_TASK.replace("256, 16, 512, 512", "8, 16, 64, 64"))
    row = measure_task(task, "tf32r")
    assert row["err_vs_eager"] < 1e-2  # TF32 products, like cuDNN's
    assert any("max_pool2d 2x2" in f for f in row["fused"]) and any("min over the channels" in f for f in row["fused"])
    for name in ("eager", "compile", "ours"):
        assert row[f"{name}_ms"] > 0


def test_the_kernel_table_ranks_a_profiles_kernels_per_call():
    """--profile's table: GPU time per call, launches per call, host-only events left out, longest first."""
    from types import SimpleNamespace as E

    from kernelskill.evals.bench_conv import kernel_table

    events = [E(key="ks_conv_fwd_ep", device_time_total=6000.0, count=5), E(key="aten::conv", device_time_total=0.0,
              count=5), E(key="ks_to_channels_last", device_time_total=1000.0, count=5), E(key="memset",
              device_time_total=5.0, count=10)]  # fmt: skip
    got = kernel_table(events, 5)
    assert got == [["ks_conv_fwd_ep", 1.2, 1.0], ["ks_to_channels_last", 0.2, 1.0], ["memset", 0.001, 2.0]]
    assert kernel_table(events, 5, top=1) == got[:1]


MISH_TASK = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(64, 128, 3)

        def forward(self, x):
            return F.mish(F.mish(self.conv(x)))

    def get_inputs():
        return [torch.rand(64, 64, 256, 256)]  # 1 GB: on the meta device, nothing is allocated

    def get_init_inputs():
        return []
    """
)

STATIC = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from kernelskill.evals.bench_conv import static_rows

    for r in static_rows(Path(sys.argv[1]), "tf32r"):
        c = r["config"]
        print(json.dumps([c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"], c.get("EPI_SPLIT"),
                          r.get("EPI_SPLIT"), r.get("registers"), r.get("spill_stores"), r.get("error")]))
    """
)


def test_the_static_survey_compiles_each_candidate_as_launched_and_finds_no_spill_with_the_split(tmp_path):
    """Two Mish steps after a 64-channel convolution: each tuning candidate compiled for sm_90 as launched. In
    column slices (the rule) none spills; the default's tile finished whole (the candidate timed against it), 128 x
    128 over one warp group, spills kilobytes per thread to local memory (ptxas)."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "mish.py").write_text(MISH_TASK)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # a real compile, as on the GPU
    out = subprocess.run([sys.executable, "-c", STATIC, str(tmp_path / "mish.py")], capture_output=True, text=True,
                         timeout=900, env=env)  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    assert len(rows) >= 5 and not any(r[-1] for r in rows), out.stdout[-2000:] + out.stderr[-3000:]
    sliced = [r for r in rows if r[4] is None]
    assert sliced[0][:3] == [128, 128, 4] and sliced[0][5] == 8  # the default: 128 values a thread, 8 slices of 16
    assert all(r[7] == 0 for r in sliced), sliced  # no candidate spills
    whole = [r for r in rows if r[4] == 1]
    assert [r[:3] for r in whole] == [[128, 128, 4]] and whole[0][7] > 1000, whole  # the whole tile spills
    assert all(r[6] <= 255 for r in rows)


def test_a_launch_is_compiled_with_the_launchers_specialization(tmp_path):
    """An int argument of 1 becomes a constant and a multiple of 16 is known divisible: the loads along a stride of
    16 elements become 16-byte vectors; with a stride of 17 they do not."""
    import os
    import subprocess
    import sys

    code = textwrap.dedent(
        """
        import triton, triton.language as tl
        from kernelskill.runner.compile_check import compile_as_launched, resource_usage

        @triton.jit
        def rows(X, Out, stride, one, BLOCK: tl.constexpr):
            r = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            v = tl.load(X + r * stride + cols * one)
            tl.store(Out + r * BLOCK + cols, v)

        for stride in (16, 17):
            c = compile_as_launched(rows, {"X": "*fp32", "Out": "*fp32", "stride": stride, "one": 1}, {"BLOCK": 128},
                                    {"num_warps": 1})
            print(stride, "ld.global.v4" in c.asm["ptx"], resource_usage(c)["spill_stores"])
        """
    )
    (tmp_path / "rows.py").write_text(code)  # a @triton.jit kernel needs a source file
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(tmp_path / "rows.py")], capture_output=True, text=True, timeout=300,
                         env=env)  # fmt: skip
    assert out.stdout.split("\n")[:2] == ["16 True 0", "17 False 0"], out.stdout + out.stderr[-3000:]


def test_the_tuning_records_table_ranks_each_candidate_against_the_fastest(tmp_path, monkeypatch):
    from kernelskill.evals import bench_conv
    from kernelskill.runner import cache

    monkeypatch.setenv("KERNELSKILL_CACHE_DIR", str(tmp_path / "cache"))
    base = {
        "BLOCK_M": 128,
        "BLOCK_N": 64,
        "BLOCK_K": 32,
        "FLAT_K": False,
        "DIRECT": True,
        "num_warps": 4,
        "num_stages": 3,
    }
    padded = {**base, "DIRECT": False, "BLOCK_K": 16, "PAD_C": 16}
    key = json.dumps(["NVIDIA H200", "3.6.0", [8, 3, 32, 32], [3072, 1024, 32, 1], "torch.float32", [64, 3, 3, 3],
                      True, [1, 1, 1, 1, False, 0, None], "tf32r", [["relu"]], [], ""])  # fmt: skip
    cache.put(
        "conv_configs", key, {"config": padded, "ms": 0.5, "timed": {json.dumps(base): 2.0, json.dumps(padded): 0.5}}
    )
    cache.put("conv_configs", "not a key of this layout", {"config": base})
    assert bench_conv.main(["--tuning", "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "tuning.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| NVIDIA")]
    assert len(rows) == 1
    assert "| tf32r | relu | 0.500 | 4.00 |" in rows[0]  # the default took four times the fastest's time
    assert "m128 n64 k16 w4 s3 PAD_C=16 1.00; *m128 n64 k32 w4 s3 DIRECT 4.00" in rows[0]
    back = {**base, "DIRECT": False}  # a transposed convolution's forms: each named, none the same label
    forms = [back, {**back, "PHASE_INNER": True}, {**back, "GATHER": True}]
    assert [bench_conv.short_config(c) for c in forms] == [
        "m128 n64 k32 w4 s3",
        "m128 n64 k32 w4 s3 PHASE_INNER",
        "m128 n64 k32 w4 s3 GATHER",
    ]


SMALL_GRID_TASK = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(256, 32, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x))

    def get_inputs():
        return [torch.rand(10, 256, 7, 7)]  # 490 positions: 4 tiles, on a GPU of 132 multiprocessors

    def get_init_inputs():
        return []
    """
)


def test_the_compile_reports_which_matrix_instructions_a_kernel_runs(tmp_path):
    """On sm_90 a product of a warp group (4 warps) is Hopper's ``wgmma``; of 2 warps Ampere's ``mma.sync``; a
    kernel of no ``tl.dot``, neither (what ``--static`` counts per candidate)."""
    import os
    import subprocess
    import sys

    code = textwrap.dedent(
        """
        import triton, triton.language as tl
        from kernelskill.runner.compile_check import compile_as_launched, resource_usage

        @triton.jit
        def product(A, B, C, DOT: tl.constexpr):
            i = tl.arange(0, 64)
            a = tl.load(A + i[:, None] * 64 + i[None, :])
            b = tl.load(B + i[:, None] * 64 + i[None, :])
            c = tl.dot(a, b) if DOT else a * b
            tl.store(C + i[:, None] * 64 + i[None, :], c)

        for dot, warps in ((True, 4), (True, 2), (False, 4)):
            ptrs = {"A": "*fp16", "B": "*fp16", "C": "*fp32"}
            u = resource_usage(compile_as_launched(product, ptrs, {"DOT": dot}, {"num_warps": warps}))
            print(warps, dot, u["wgmma"] > 0, u["mma_sync"] > 0)
        """
    )
    (tmp_path / "product.py").write_text(code)  # a @triton.jit kernel needs a source file
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(tmp_path / "product.py")], capture_output=True, text=True, timeout=300,
                         env=env)  # fmt: skip
    lines = out.stdout.split("\n")[:3]
    assert lines == ["4 True True False", "2 True False True", "4 False False False"], out.stdout + out.stderr[-3000:]


def test_the_static_table_counts_candidates_by_their_matrix_instructions():
    from kernelskill.evals.bench_conv import static_markdown

    row = {"task": "level2/t", "input": [1], "weight": [1], "epilogue": [], "config": {}, "registers": 128,
           "spill_stores": 0, "spill_loads": 0}  # fmt: skip
    rows = [{**row, "wgmma": 8}, {**row, "wgmma": 4}, {**row, "wgmma": 0, "mma_sync": 16}, {**row, "wgmma": 0},
            {**row, "error": "CompilationError"}]  # fmt: skip
    table = static_markdown(rows, "tf32r")
    assert "| level2 | 1 | 5 | 0 | 0 | 0 | 0 | 2 / 1 / 1 | 1 |" in table, table


def test_the_static_survey_offers_split_k_for_a_grid_of_few_tiles_and_compiles_both_passes(tmp_path):
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "small.py").write_text(SMALL_GRID_TASK)
    script = STATIC.replace('c.get("EPI_SPLIT"),', 'c.get("SPLIT_K"),')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "small.py")], capture_output=True, text=True,
                         timeout=900, env=env)  # fmt: skip
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    assert rows and not any(r[-1] for r in rows), out.stdout[-2000:] + out.stderr[-3000:]
    assert sorted(r[4] for r in rows if r[4]) == [8, 16]  # 4 tiles of 72 steps: 8 and 16 ranges
    assert all(r[6] and r[7] == 0 for r in rows)  # every pass compiled, none spills


def test_a_convolution_with_a_sample_of_2_31_elements_stays_off_our_kernel(tmp_path):
    """Its per-sample strides would be kernel arguments of 2**31 or more, which Inductor's codegen of a kernel
    node cannot take: the rewrite leaves that convolution where it was and takes the others."""
    from kernelskill.evals.bench_conv import fusions

    (tmp_path / "t.py").write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.big = nn.Conv2d(2, 2, 1)  # 2 x 32768 x 32768 = 2**31 elements a sample
                    self.small = nn.Conv2d(2, 4, 3)

                def forward(self, x):
                    return self.big(x).sum() + self.small(x[:, :, :64, :64]).sum()

            def get_inputs():
                return [torch.randn(1, 2, 32768, 32768)]

            def get_init_inputs():
                return []
            """
        )
    )
    assert fusions(tmp_path / "t.py") == ["conv2d -> our implicit-GEMM Triton kernel (tf32r)"]


def test_the_compile_time_of_the_tuning_candidates_one_by_one_and_together(tmp_path):
    """``--compile-time``: per convolution, its candidates' kernels compiled for sm_90 (no GPU), one by one and
    together on a pool of threads, each way in a fresh process with an empty Triton cache; a table with totals."""
    from kernelskill.evals.bench_conv import main

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "4_mish.py").write_text(MISH_TASK)
    assert main(["--tasks", str(tmp_path / "tasks"), "--compile-time", "--out", str(tmp_path / "out")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "compile_time.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and "error" not in rows[0], rows
    assert rows[0]["input"] == [64, 64, 256, 256] and rows[0]["candidates"] >= 5
    assert rows[0]["one by one"] > 0 and rows[0]["together"] > 0
    table = (tmp_path / "out" / "compile_time.md").read_text()
    assert "sm_90" in table and "1 convolutions:" in table and "| tasks/4_mish |" in table


def test_a_convolution_of_one_input_channel_per_group_is_described_as_the_depthwise_stencil(tmp_path):
    """A forward convolution of one input channel per group runs the stencil kernel, not the implicit GEMM; a
    transposed one of one input channel runs the implicit GEMM; the description says which."""
    from kernelskill.evals.bench_conv import fusions

    (tmp_path / "t.py").write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn as nn

            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.dw = nn.Conv2d(4, 4, 3, groups=4)
                    self.up = nn.ConvTranspose2d(1, 4, 3)

                def forward(self, x):
                    return self.dw(x).sum() + self.up(x[:, :1]).sum()

            def get_inputs():
                return [torch.randn(1, 4, 16, 16)]

            def get_init_inputs():
                return []
            """
        )
    )
    assert fusions(tmp_path / "t.py") == [
        "conv2d -> our depthwise stencil Triton kernel (tf32r)",
        "conv_transpose2d -> our implicit-GEMM Triton kernel (tf32r)",
    ]
