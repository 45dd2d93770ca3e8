"""What an eval runs and where it keeps its state: task selection, the eval directory's files.

An eval directory holds::

    eval.json                  levels, the task list, the run configuration, prices, launches
    runs/<key>/                one optimize run per task (key ``L<level>-<file stem>``), plus
        eval_task.json         the eval runner's record of that task (status, wall time, attempts)
        eval.log               the task process's output
    summary.json / summary.md  the summary (rebuilt by ``kernelskill eval report DIR``)
    plots/*.png                speedup distribution, speedup per round, % of speed-of-light
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).parent / "tasks"
EVAL_META = "eval.json"
TASK_RECORD = "eval_task.json"
REPORT = "report.json"


@dataclass(frozen=True)
class TaskSpec:
    """One task of an eval: its level (a label when the folder is external) and file."""

    level: int
    path: Path

    @property
    def key(self) -> str:
        """Stable id inside an eval run; also the task's thread id and run-directory name."""
        return thread_id_for(self.level, self.path)

    @property
    def name(self) -> str:
        """The task file's stem."""
        return self.path.stem


def thread_id_for(level: int, path: Path) -> str:
    """Stable thread id of a task inside an eval run."""
    return f"L{level}-{path.stem}"


def parse_levels(text: str | int) -> list[int]:
    """``"2"`` -> ``[2]``; ``"1,2,3"`` -> ``[1, 2, 3]``.

    Raises:
        ValueError: when a part is not a positive integer.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    levels = [int(p) for p in parts]
    if not levels or any(level < 1 for level in levels):
        raise ValueError(f"levels must be positive integers, got {text!r}")
    return list(dict.fromkeys(levels))


def _natural_key(path: Path) -> tuple[Any, ...]:
    """Sort ``2_x.py`` before ``10_x.py`` (KernelBench names start with an unpadded number)."""
    return tuple(int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", path.name))


def task_files(level: int, tasks_dir: Path | None, limit: int) -> list[Path]:
    """The task files of one level (or of ``tasks_dir``), in natural order, at most ``limit`` (0 = all)."""
    folder = Path(tasks_dir) if tasks_dir else TASKS_DIR / f"level{level}"
    files = sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")), key=_natural_key)
    return files[:limit] if limit else files


def default_level(tasks_dir: Path | None) -> str:
    """The level a run labels its tasks with when ``--level`` is not given: N for a folder ``levelN``, else 1."""
    m = re.fullmatch(r"level(\d+)", Path(tasks_dir).resolve().name) if tasks_dir is not None else None
    return m.group(1) if m else "1"


def check_levels(levels: list[int], tasks_dir: Path | None) -> None:
    """Raise ValueError naming what is wrong with ``levels`` / ``tasks_dir`` (see :func:`select_tasks`)."""
    if tasks_dir is None:
        bundled = sorted(int(p.name[5:]) for p in TASKS_DIR.glob("level*") if p.name[5:].isdigit())
        missing = [lv for lv in levels if lv not in bundled]
        if missing:
            raise ValueError(
                f"--level {','.join(map(str, missing))}: the bundled suite has levels {', '.join(map(str, bundled))} "
                "(give --tasks DIR for another folder)"
            )
        return
    if len(levels) != 1:
        raise ValueError("--tasks takes one folder: give one --level (it labels the tasks)")
    if not Path(tasks_dir).is_dir():
        raise ValueError(f"--tasks {tasks_dir}: not a folder")


def select_tasks(levels: list[int], tasks_dir: Path | None, limit: int) -> list[TaskSpec]:
    """The tasks of an eval: every level of the bundled suite, or the one folder ``tasks_dir``.

    Raises:
        ValueError: when ``tasks_dir`` is given with several levels or is not a folder, or when a level
            of the bundled suite does not exist.
    """
    check_levels(levels, tasks_dir)
    return [TaskSpec(level, p.resolve()) for level in levels for p in task_files(level, tasks_dir, limit)]


def check_task_file(path: Path) -> str | None:
    """Import a task file as ``optimize`` does; the reason it is unusable, or None when it is fine."""
    from kernelskill.runner.taskfile import TaskFileError, load_task_module

    name = f"kernelskill_eval_check_{abs(hash(str(path)))}"
    try:
        load_task_module(path, cpu=True, name=name)
    except TaskFileError as e:
        return str(e)
    except Exception as e:  # e.g. a CPU_SHAPES that breaks the module: still the task's fault
        return f"{path}: {type(e).__name__}: {e}"
    finally:
        sys.modules.pop(name, None)
    return None


def log_tail(path: Path, lines: int = 5) -> str:
    """The last lines of a log, joined with `` / `` (at most 600 characters)."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " / ".join(text[-lines:])[-600:]


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; empty when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def read_meta(out: Path) -> dict[str, Any]:
    """The eval directory's ``eval.json`` (empty when absent)."""
    return read_json(Path(out) / EVAL_META)


def specs_from_meta(meta: dict[str, Any]) -> list[TaskSpec]:
    """The task list saved in ``eval.json``."""
    default_level = int((meta.get("levels") or [meta.get("level", 1)])[0])
    specs = []
    for t in meta.get("tasks", []):
        if isinstance(t, str):  # older eval.json: a list of paths
            specs.append(TaskSpec(default_level, Path(t)))
        else:
            specs.append(TaskSpec(int(t["level"]), Path(t["path"])))
    return specs


def meta_tasks(specs: list[TaskSpec]) -> list[dict[str, Any]]:
    """The task list as saved in eval.json."""
    return [{"key": s.key, "level": s.level, "path": str(s.path)} for s in specs]


def is_finished(run_dir: Path, retry_timeouts: bool = False) -> bool:
    """A task that is not re-run: it wrote its report, or it used up its wall-time limit.

    With ``retry_timeouts`` a timed-out task runs again (from its checkpoint, with a fresh limit).
    """
    if (run_dir / REPORT).exists():
        return True
    return not retry_timeouts and read_json(run_dir / TASK_RECORD).get("status") == "timeout"
