"""Run the eval's task jobs on a Ray cluster (``kernelskill eval --cluster ray[://ADDRESS]``).

:class:`RayLauncher` is a :data:`~.runner.Launch` like :class:`~.runner.SubprocessLauncher`: the
eval loop of :mod:`.runner` is unchanged (selection, resume, records, progress, summary), only the
place a job runs differs. Each job becomes one Ray task that asks for one GPU (none when the
candidates run on the CPU) and runs the job on its node with :class:`~.runner.SubprocessLauncher`,
the same code as the local pool: its own session, the per-task limit, the deadline hand-off, the
whole process tree killed on expiry. The node gives the task its GPU's share of its cores
(``KERNELSKILL_CPUS``, as the local pool does for each GPU worker).

The eval directory on the driver stays the single record. A node that sees it at the same path (the
driver's host, or a shared filesystem; checked with a token file the driver writes there) runs the
task in place. Any other node gets the task file, the run directory so far and the outcome store
with the job, runs the task in a scratch directory, and sends the run directory (and the outcomes
it recorded) back after the launch, finished, timed out or stopped. The task file keeps one path on
each node (:func:`_task_copy`), since a run's checkpoints hold it. Every node needs kernelskill
installed the same way as the driver (README, "Evals on a Ray cluster").

Ctrl-C on the driver (:meth:`RayLauncher.kill_all`) raises a stop flag held by a small Ray actor:
each running task kills its process tree, sends back what it has, and returns; tasks that do not
answer within a minute are cancelled by force.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kernelskill.runner.env import CPUS_ENV, cpu_shares

from .runner import SubprocessLauncher, TaskExit, TaskJob
from .suite import read_json, write_json

TOKEN_FILE = ".cluster-token"
STOP_POLL_S = 1.0
STOP_GRACE_S = 60.0
# variables of the driver's environment that travel with each job (the rest is the node's own)
FORWARDED_PREFIXES = ("KERNELSKILL_", "TRITON_")


def ray_address(cluster: str) -> str | None:
    """The ``ray.init`` address of a ``cluster`` setting: None (local Ray) for ``ray``, else as given."""
    return None if cluster == "ray" else cluster


@dataclass
class NodeJob:
    """What travels to the node: the job, where the driver's eval directory is, and (for staging) its files."""

    job: TaskJob
    eval_dir: str
    token: str
    gpu: bool
    runs_dir: str
    task_bytes: bytes
    run_tar: bytes  # the run directory so far (empty when there is none yet)
    outcomes: bytes  # the JSONL outcome store so far (empty with Postgres or without a store)
    outcomes_path: str  # the driver's store, "" when outcomes do not travel


@dataclass
class NodeResult:
    """What comes back: how the launch ended, and the files of a staged run."""

    exit: TaskExit
    node: str
    staged: bool
    run_tar: bytes = b""
    new_outcomes: bytes = b""


def pack_dir(path: Path) -> bytes:
    """A gzipped tar of the files under ``path`` (empty bytes when it does not exist)."""
    if not path.is_dir():
        return b""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(str(path), arcname=".")
    return buf.getvalue()


def unpack_dir(data: bytes, path: Path) -> None:
    """Extract a :func:`pack_dir` archive into ``path`` (files present in both are replaced)."""
    path.mkdir(parents=True, exist_ok=True)
    if data:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(str(path), filter="data")


def _retarget_run_json(run_dir: Path, task_path: str, new_run_dir: str) -> None:
    """Point a run's saved task path and run directory at this host's copies (a staged run moves twice)."""
    meta = read_json(run_dir / "run.json")
    if not meta:
        return
    meta["task_path"] = task_path
    meta.setdefault("context", {})["run_dir"] = new_run_dir
    write_json(run_dir / "run.json", meta)


def _task_copy(path: Path, data: bytes) -> Path:
    """The task file on this node, at a path that stays the same for every launch of the task.

    A run's checkpoints hold its task's path, so a task resumed on another node must find the file
    at the same path: the driver's own when this node has the same file there (an installed suite,
    a shared folder), else a copy named by its content in this node's temporary directory.
    """
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    copy = Path(tempfile.gettempdir()) / "kernelskill-tasks" / hashlib.sha256(data).hexdigest()[:16] / path.name
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        part = copy.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(data)
        part.replace(copy)
    return copy


def _sees_eval_dir(eval_dir: str, token: str) -> bool:
    if not token:
        return False
    try:
        return (Path(eval_dir) / TOKEN_FILE).read_text() == token
    except OSError:
        return False


def _node_cpu_share() -> list[int]:
    """This task's share of the node's cores: the share of its GPU among the node's GPUs ([] without one)."""
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    node = ray.get_runtime_context().get_node_id()
    total = next((int(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["NodeID"] == node), 0)
    if len(ids) != 1 or not ids[0].isdigit() or int(ids[0]) >= total:
        return []
    return cpu_shares(total)[int(ids[0])]


def run_on_node(node_job: NodeJob, stop: Any) -> NodeResult:
    """The body of one Ray task: run the job here with :class:`SubprocessLauncher`, in place or staged."""
    import ray

    job = node_job.job
    env = {**os.environ, **job.env}
    if node_job.gpu and CPUS_ENV not in job.env:
        share = _node_cpu_share()
        if share:
            env[CPUS_ENV] = ",".join(map(str, share))
    staged = not _sees_eval_dir(node_job.eval_dir, node_job.token)
    scratch = Path(tempfile.mkdtemp(prefix="kernelskill-task-")) if staged else None
    run_dir, seeded = job.run_dir, 0
    if scratch is not None:
        runs = scratch / "runs"
        run_dir = runs / job.spec.key
        task = _task_copy(job.spec.path, node_job.task_bytes)
        unpack_dir(node_job.run_tar, run_dir)
        _retarget_run_json(run_dir, str(task), str(run_dir.resolve()))
        swap = {node_job.runs_dir: str(runs), str(job.spec.path): str(task)}
        if node_job.outcomes_path:
            store = scratch / "skill_outcomes.jsonl"
            store.write_bytes(node_job.outcomes)
            seeded = len(node_job.outcomes)
            env["KERNELSKILL_SKILL_OUTCOMES"] = str(store)
        job = replace(job, run_dir=run_dir, cmd=[swap.get(a, a) for a in job.cmd])
    job = replace(job, cmd=[sys.executable, *job.cmd[1:]])  # this node's interpreter, wherever it is installed
    launcher = SubprocessLauncher()
    done: list[TaskExit] = []
    thread = threading.Thread(target=lambda: done.append(launcher(replace(job, env=env))), daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(STOP_POLL_S)
        if thread.is_alive() and ray.get(stop.is_set.remote()):
            launcher.kill_all()
            thread.join()
    result = NodeResult(
        done[0] if done else TaskExit(None, error="the task's launcher failed on the node"),
        node=ray.get_runtime_context().get_node_id(),
        staged=staged,
    )
    if scratch is not None:
        _retarget_run_json(run_dir, str(node_job.job.spec.path), str(node_job.job.run_dir.resolve()))
        result.run_tar = pack_dir(run_dir)
        if node_job.outcomes_path:
            result.new_outcomes = (scratch / "skill_outcomes.jsonl").read_bytes()[seeded:]
        shutil.rmtree(scratch, ignore_errors=True)
    return result


class _StopFlag:
    """Raised once by the driver on Ctrl-C; every running task polls it."""

    def __init__(self) -> None:
        self.raised = False

    def set(self) -> None:
        self.raised = True

    def is_set(self) -> bool:
        return self.raised


class RayLauncher:
    """Runs each job as one Ray task on whichever node Ray picks; results come back to the eval directory.

    Args:
        cluster: ``ray`` (a local Ray: the one running on this host, else a new one), ``auto`` (the
            cluster this node belongs to) or ``ray://HOST:PORT`` (Ray Client). When Ray is already
            initialized in this process (tests), that instance is used.
        eval_dir: the driver's eval directory.
        gpu: whether each task asks for one GPU (None: when the cluster has any ``resource``).
        resource: the resource one task asks one unit of: ``GPU``, or a custom resource standing in for it.
        forward_env: names of further driver variables that travel with each job (e.g. the API key's).
        outcomes_store: the driver's JSONL outcome store, sent to staged tasks and extended with what they
            record ("" with Postgres, where every node writes the database itself).
        shared_fs: None: each node checks whether it sees the eval directory; False: no node runs in place
            (every task is staged, as on a cluster without a shared filesystem).
    """

    def __init__(
        self,
        cluster: str,
        eval_dir: Path,
        gpu: bool | None = None,
        resource: str = "GPU",
        forward_env: Sequence[str] = (),
        outcomes_store: str | Path = "",
        shared_fs: bool | None = None,
    ) -> None:
        import ray

        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=ray_address(cluster), include_dashboard=False, log_to_driver=False)
        self.eval_dir = Path(eval_dir).resolve()
        self.eval_dir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(16)
        (self.eval_dir / TOKEN_FILE).write_text(self.token)
        self.shared_fs = shared_fs
        self.resources = ray.cluster_resources()
        self.resource = resource
        self.gpu = bool(self.resources.get(resource)) if gpu is None else gpu
        self.forward_env = tuple(forward_env)
        self.outcomes_store = str(outcomes_store)
        self._stop: Any = ray.remote(num_cpus=0)(_StopFlag).remote()
        self._task = ray.remote(max_retries=0)(run_on_node)
        self._running: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.nodes: list[str] = []  # the node of every finished launch, in order

    def slots(self) -> int:
        """How many tasks the cluster runs at once: its ``resource`` units, or its CPUs for CPU-only runs."""
        key = self.resource if self.gpu else "CPU"
        return max(1, int(self.resources.get(key, 1)))

    def _options(self) -> dict[str, Any]:
        if not self.gpu:
            return {"num_cpus": 1}
        if self.resource == "GPU":
            return {"num_cpus": 1, "num_gpus": 1}
        return {"num_cpus": 1, "resources": {self.resource: 1}}

    def _node_job(self, job: TaskJob) -> NodeJob:
        keep = {
            k: v
            for k, v in job.env.items()
            if k.startswith(FORWARDED_PREFIXES) or k in self.forward_env or os.environ.get(k) != v
        }
        store = Path(self.outcomes_store) if self.outcomes_store else None
        return NodeJob(
            job=replace(job, env=keep),
            eval_dir=str(self.eval_dir),
            token=self.token if self.shared_fs is not False else "",
            gpu=self.gpu,
            runs_dir=str(job.run_dir.parent),
            task_bytes=job.spec.path.read_bytes(),
            run_tar=pack_dir(job.run_dir),
            outcomes=store.read_bytes() if store and store.is_file() else b"",
            outcomes_path=str(store or ""),
        )

    def __call__(self, job: TaskJob) -> TaskExit:
        """Run ``job`` on the cluster until it ends; a staged run's files are written back to ``job.run_dir``."""
        import ray

        with self._lock:
            if self._closed:
                return TaskExit(None, error="the eval was stopped before this task started")
            ref = self._task.options(**self._options()).remote(self._node_job(job), self._stop)
            self._running[id(ref)] = ref
        t0 = time.monotonic()
        try:
            # the node enforces the limit (at most doubled by waits for a shared GPU); this only guards a lost node
            result: NodeResult = ray.get(ref, timeout=2 * job.timeout_s + 2 * STOP_GRACE_S + 600)
        except Exception as e:  # a lost node, a cancelled task: this task's error, not the suite's
            return TaskExit(None, wall_s=time.monotonic() - t0, error=f"{type(e).__name__}: {e}")
        finally:
            with self._lock:
                self._running.pop(id(ref), None)
        if result.staged:
            unpack_dir(result.run_tar, job.run_dir)
            if result.new_outcomes and self.outcomes_store:
                with open(self.outcomes_store, "ab") as f:
                    f.write(result.new_outcomes)
        with self._lock:
            self.nodes.append(result.node)
        return result.exit

    def kill_all(self) -> int:
        """Stop every running task (their files still come back) and start no new one; how many were running."""
        import ray

        with self._lock:
            self._closed = True
            refs = list(self._running.values())
        ray.get(self._stop.set.remote())
        _, late = ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S) if refs else ([], [])
        for ref in late:
            ray.cancel(ref, force=True)
        return len(refs)

    def close(self) -> None:
        """Shut Ray down when this launcher started or joined it (not when the caller had)."""
        import ray

        if self._owns_ray:
            ray.shutdown()
