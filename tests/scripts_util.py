"""Helpers to write scripted-model files for tests."""

import json
from pathlib import Path


def write_script(folder: Path, rules: list[dict], label: str = "test") -> Path:
    """Write a script whose rules' ``reply`` texts are inline."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.json"
    path.write_text(json.dumps({"label": label, "rules": rules}))
    return path


def fenced(source: str) -> str:
    return f"Here you go.\n\n```python\n{source}\n```\n"
