"""Evals on a Ray cluster: a local Ray instance, a custom resource standing in for GPUs, the scripted engine."""

import _thread
import io
import json
import signal
import threading
import time

import pytest
from rich.console import Console

from kernelskill.evals.runner import run_eval
from kernelskill.graph.context import Context

from conftest import FIXTURES
from scripts_util import fenced, write_script

ray = pytest.importorskip("ray", reason="ray is not installed (make setup installs it)")

# the parts of a summary row that do not depend on timing or on where the task ran
STABLE = ("key", "status", "correct", "custom_kernel", "timing_kind", "speedup_vs_eager", "rounds", "stop_reason")
STANDIN = "gpu_standin"


def _tasks(folder, n=3):
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{i + 1:02d}_scale_relu.py").write_text((FIXTURES / "tasks" / "scale_relu.py").read_text())
    return folder


def _stable(summary):
    rows = [{k: r[k] for k in STABLE} for r in summary["rows"]]
    overall = {k: summary["overall"][k] for k in ("tasks", "correct", "success", "pending", "fast_1")}
    return rows, overall


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, so that ``interrupt_main()`` raises KeyboardInterrupt (see test_evals)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, resources={STANDIN: 2}, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_cluster_gives_the_local_pools_summary(tmp_path, candidate, local_ray):
    from kernelskill.evals.cluster import TOKEN_FILE, RayLauncher

    tasks = _tasks(tmp_path / "tasks")
    script = write_script(tmp_path / "script", [{"role": "generator", "reply": fenced(candidate("good"))}])
    ctx = dict(scripted=str(script), device="cpu", max_rounds=0)
    console = Console(file=io.StringIO(), width=200)

    local = run_eval([1], tasks, 0, "0,1", tmp_path / "local", Context(**ctx), console, task_timeout_s=300)

    out = tmp_path / "ray"
    # shared_fs=False: every task is staged (files sent to the node and back), as without a shared filesystem
    launcher = RayLauncher("ray", out, gpu=True, resource=STANDIN, shared_fs=False)
    assert launcher.slots() == 2
    remote = run_eval(
        [1], tasks, 0, "", out, Context(cluster="ray", **ctx), console, task_timeout_s=300, launch=launcher
    )
    assert _stable(remote) == _stable(local)
    assert _stable(remote)[1]["correct"] == 3 and not remote["interrupted"]
    assert len(launcher.nodes) == 3  # every task ran as a Ray task
    for key in (r["key"] for r in remote["rows"]):
        run_dir = out / "runs" / key
        meta = json.loads((run_dir / "run.json").read_text())  # came back, pointing at the driver's paths again
        assert meta["context"]["run_dir"] == str(run_dir.resolve())
        assert (run_dir / "report.json").is_file() and (run_dir / "checkpoints.sqlite").is_file()
        assert json.loads((run_dir / "eval_task.json").read_text())["status"] == "finished"
    eval_meta = json.loads((out / "eval.json").read_text())
    assert eval_meta["launches"][-1]["cluster"] == "ray"
    assert "Ray tasks on cluster ray" in remote["workers"]

    # resumed with the same --out: every finished task is skipped, nothing is launched
    again = RayLauncher("ray", out, gpu=True, resource=STANDIN)
    run_eval([1], tasks, 0, "", out, Context(cluster="ray", **ctx), console, launch=again)
    assert again.nodes == [] and (out / TOKEN_FILE).read_text() == again.token


def test_cluster_and_gpus_exclude_each_other(tmp_path):
    with pytest.raises(ValueError, match="drop --gpus"):
        run_eval([1], None, 1, "0,1", tmp_path, Context(cluster="ray", device="cpu"), Console(file=io.StringIO()))


def test_cluster_setting_is_validated(monkeypatch):
    from kernelskill.graph.context import load_context

    assert load_context(cluster="ray://head:10001").cluster == "ray://head:10001"
    monkeypatch.setenv("KERNELSKILL_CLUSTER", "auto")
    assert load_context().cluster == "auto"
    with pytest.raises(ValueError, match="cluster must be"):
        load_context(cluster="slurm")


def _pids_alive(folder):
    alive = []
    for f in folder.iterdir():
        try:
            state = open(f"/proc/{f.name}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(int(f.name))
    return alive


@pytest.mark.slow
def test_ctrl_c_stops_the_clusters_tasks_and_the_run_resumes(tmp_path, candidate, local_ray, python_sigint):
    from kernelskill.evals.cluster import RayLauncher

    tasks = _tasks(tmp_path / "tasks", 2)
    marker, pids = tmp_path / "hold", tmp_path / "pids"
    marker.write_text("held")
    pids.mkdir()
    # the candidate's forward records its pid (a folder: the review refuses a candidate's file writes) and waits
    # while the marker exists: both tasks hang in their review
    held = candidate("good").replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        "        import os, pathlib, time\n"
        f"        pathlib.Path({str(pids)!r}, str(os.getpid())).mkdir(exist_ok=True)\n"
        f"        while os.path.exists({str(marker)!r}):\n"
        "            time.sleep(0.05)\n",
        1,
    )
    script = write_script(tmp_path / "script", [{"role": "generator", "reply": fenced(held)}])
    ctx = Context(scripted=str(script), device="cpu", max_rounds=0, cluster="ray")
    out = tmp_path / "eval"
    launcher = RayLauncher("ray", out, gpu=True, resource=STANDIN, shared_fs=False)

    def interrupt_when_held():
        deadline = time.time() + 240
        while len(_pids_alive(pids)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        _thread.interrupt_main()  # Ctrl-C on the driver

    threading.Thread(target=interrupt_when_held, daemon=True).start()
    console = Console(file=io.StringIO(), width=200)
    summary = run_eval([1], tasks, 0, "", out, ctx, console, task_timeout_s=300, launch=launcher)
    assert summary["interrupted"] and summary["partial"]
    assert _pids_alive(pids) == []  # the candidates' processes on the node were killed
    for key in ("L1-01_scale_relu", "L1-02_scale_relu"):
        run_dir = out / "runs" / key
        assert json.loads((run_dir / "eval_task.json").read_text())["status"] == "interrupted"
        assert (run_dir / "run.json").is_file() and (run_dir / "checkpoints.sqlite").is_file()  # sent back
    assert "resume with:" in console.file.getvalue() and "--cluster ray" in console.file.getvalue()

    marker.unlink()
    resumed = RayLauncher("ray", out, gpu=True, resource=STANDIN)
    summary = run_eval([1], tasks, 0, "", out, ctx, Console(file=io.StringIO()), task_timeout_s=300, launch=resumed)
    assert not summary["partial"] and summary["overall"]["correct"] == 2 and len(resumed.nodes) == 2, [
        (r["status"], r["reason"], r["stop_reason"]) for r in summary["rows"]
    ]
    for key in ("L1-01_scale_relu", "L1-02_scale_relu"):
        nodes = [json.loads(line)["node"] for line in (out / "runs" / key / "events.jsonl").read_text().splitlines()]
        assert nodes.count("generator") == 1  # resumed from the checkpoint: the seed was not written again


def test_a_head_node_without_cuda_leaves_the_engine_to_the_clusters_gpus(tmp_path, local_ray, monkeypatch):
    """The driver may lack a GPU: the offline engine is allowed with --cluster, and refused only when the cluster
    has no GPU either (the local Ray here has none, only the stand-in resource)."""
    import typer

    from kernelskill.cli_common import check_mode

    monkeypatch.setattr("kernelskill.runner.env.cuda_available", lambda: False)
    check_mode(Context(cluster="ray", engine="offline"))  # does not exit: the nodes' GPUs decide
    with pytest.raises(typer.Exit):
        check_mode(Context(engine="offline"))  # no cluster, no GPU here: nothing can run
    with pytest.raises(ValueError, match="offline engine needs CUDA GPUs and the cluster has none"):
        run_eval([1], _tasks(tmp_path / "t"), 0, "", tmp_path / "out", Context(cluster="ray", engine="offline"),
                 Console(file=io.StringIO()))  # fmt: skip
