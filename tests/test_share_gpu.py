"""A shared GPU and the precision policies on a real GPU (marked gpu: skipped without CUDA)."""

import threading
from pathlib import Path

import pytest

from kernelskill.runner import gpu_share
from kernelskill.runner.sandbox import run_review

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).parent.parent / "evals" / "tasks"
GELU_TASK = TASKS / "level1" / "14_gelu.py"
GELU = Path(__file__).parent / "fixtures" / "solutions" / "14_gelu.py"


def test_reviews_sharing_a_gpu_all_finish_and_say_how_long_they_waited(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    results = {}

    def one(i):
        results[i] = run_review(
            GELU_TASK, GELU.read_text(), tmp_path / f"w{i}", f"gelu{i}", device="cuda", baseline_cache=False
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert len(results) == 3
    for r in results.values():
        assert r["status"] == "correct", r.get("error_digest")
        assert set(r["gpu_wait_s"]) == {"shared", "exclusive"}
    assert sum(r["gpu_wait_s"]["exclusive"] for r in results.values()) > 0  # timings queued behind each other
    medians = sorted(r["runtime_ms"] for r in results.values())
    assert medians[-1] < 1.15 * medians[0], medians  # exclusive timings agree


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_baselines_follow_the_precision_policy(tmp_path, precision):
    r = run_review(
        GELU_TASK, GELU.read_text(), tmp_path, "gelu", device="cuda", precision=precision, baseline_cache=False
    )
    assert r["status"] == "correct", r.get("error_digest")
    assert r["timing"]["eager"]["n"] >= 20 and r["speedup_vs_compile"] > 0
    if precision == "fp32":  # torch.compile with TF32 matmuls allowed is timed for context
        assert r["speedup_vs_compile_tf32"] > 0
    else:
        assert "speedup_vs_compile_tf32" not in r
    assert f"|{precision}|" in r["timing"]["baseline_key"]


BIG_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.rand(4 << 28)]  # 4 GiB of float32


def get_init_inputs():
    return []
"""

HOG = """
import sys, time, torch
free, _ = torch.cuda.mem_get_info()
keep = torch.empty(free - (3 << 30), dtype=torch.uint8, device="cuda")  # leaves 3 GiB: the task needs 8
print("held", flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_a_reference_out_of_memory_under_another_process_is_not_the_tasks_fault(tmp_path, monkeypatch):
    import subprocess
    import sys

    from kernelskill.runner.sandbox import probe_task

    task = tmp_path / "big_task.py"
    task.write_text(BIG_TASK)
    alone = probe_task(task, tmp_path / "alone", device="cuda")
    assert alone["status"] == "correct", alone.get("error_digest")  # the task fits an idle GPU
    hog = subprocess.Popen([sys.executable, "-c", HOG, "600"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "held"
        busy = probe_task(task, tmp_path / "busy", device="cuda")
        assert busy["status"] == "harness_error", busy  # never "invalid_task": the memory is another process's
        assert "other processes held" in busy["error_digest"], busy["error_digest"]
    finally:
        hog.kill()
        hog.wait()
    # shared through the eval's locks: the run alone waits for the other process to give its memory back
    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    hog = subprocess.Popen([sys.executable, "-c", HOG, "25"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "held"
        waited = probe_task(task, tmp_path / "shared", device="cuda")
        assert waited["status"] == "correct", waited.get("error_digest")
        assert waited["gpu_wait_s"]["exclusive"] > 1  # the run alone waited for the room
    finally:
        hog.kill()
        hog.wait()


CACHER = """
import sys, time, torch
from kernelskill.runner import gpu_share
free, _ = torch.cuda.mem_get_info()
with gpu_share.shared("review"):
    block = torch.empty(free - (3 << 30), dtype=torch.uint8, device="cuda")
    del block  # freed to PyTorch's cache: to other processes still memory in use
print("cached", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:  # a worker between steps: short holds, compiles with the share given up
    with gpu_share.shared("review"), gpu_share.released():
        time.sleep(0.2)
"""


def test_a_process_gives_its_cached_memory_to_a_run_waiting_for_room(tmp_path, monkeypatch):
    """Another worker's process keeps the memory it freed in its allocator's cache; a run alone that waits for
    room gets it back at that process's next hold, without the process ending."""
    import subprocess
    import sys

    import torch

    monkeypatch.setenv(gpu_share.ENV, str(tmp_path / "locks"))
    cacher = subprocess.Popen([sys.executable, "-c", CACHER, "120"], stdout=subprocess.PIPE, text=True)
    try:
        assert cacher.stdout.readline().strip() == "cached"
        assert torch.cuda.mem_get_info()[0] < 4 << 30  # the cache is held
        waited = gpu_share.wait_for_room(8 << 30, max_s=60, poll_s=0.1)
        assert waited < 30 and torch.cuda.mem_get_info()[0] >= 8 << 30
        assert cacher.poll() is None  # the process lives on; only its cache went
    finally:
        cacher.kill()
        cacher.wait()
