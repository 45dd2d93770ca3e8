"""Per-machine caches: baselines per (task content, GPU, torch version) and ceilings per GPU.

One JSON file per cache under ``$KERNELSKILL_CACHE_DIR`` (default ``~/.cache/kernelskill``), written
atomically; concurrent writers at worst measure the same baseline twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Where cache files live."""
    return Path(os.environ.get("KERNELSKILL_CACHE_DIR", Path.home() / ".cache" / "kernelskill"))


def _path(name: str) -> Path:
    return cache_dir() / f"{name}.json"


def load(name: str) -> dict[str, Any]:
    """The whole cache ``name`` ({} when absent or unreadable)."""
    try:
        return dict(json.loads(_path(name).read_text()))
    except (OSError, ValueError):
        return {}


def get(name: str, key: str) -> Any:
    """One entry, or None."""
    return load(name).get(key)


def put(name: str, key: str, value: Any) -> None:
    """Store one entry (read-modify-write, atomic replace)."""
    path = _path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load(name)
    data[key] = value
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def baseline_key(task_source: str, gpu: str, torch_version: str, precision: str = "fp32") -> str:
    """Key of a task's baselines on one machine type under one precision policy (models as built: ``built``)."""
    digest = hashlib.sha256(task_source.encode()).hexdigest()[:16]
    return f"{digest}|{gpu}|{torch_version}|{precision}|built"
