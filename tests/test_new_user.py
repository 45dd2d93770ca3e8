"""What a new user runs into: unknown eval levels and impossible profile values get a clear answer."""

from pathlib import Path

from typer.testing import CliRunner

from kernelskill.cli import app
from kernelskill.skills_kb.policy import load_policy, normalize_metrics

runner = CliRunner()


def test_an_unknown_bundled_level_exits_2_naming_the_levels(tmp_path):
    out = runner.invoke(app, ["eval", "--level", "7", "--out", str(tmp_path / "e")])
    assert out.exit_code == 2
    assert "--level 7: the bundled suite has levels 1, 2, 3" in out.output
    assert not (tmp_path / "e").exists()


def test_negative_profile_values_are_dropped_with_a_note():
    metrics, notes = normalize_metrics({"sol_pct": -50, "spill_bytes": -8, "registers_per_thread": 64}, load_policy())
    assert metrics == {"registers_per_thread": 64}
    assert "ignored sol_pct: negative (-50)" in notes and "ignored spill_bytes: negative (-8)" in notes


def test_make_studio_says_where_studio_listens():
    import subprocess

    from conftest import REPO

    dry = subprocess.run(["make", "-n", "studio"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "http://127.0.0.1:2024" in dry and "smith.langchain.com/studio" in dry


def test_building_the_package_warns_of_no_ignored_data_folder(tmp_path):
    """Every data folder (prompts, cards, tasks, demo) is a listed package: no setuptools warning boxes."""
    import subprocess
    import sys

    import pytest

    from conftest import REPO

    pytest.importorskip("setuptools")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    assert "would be ignored" not in build.stdout + build.stderr


def test_report_notes_are_cut_between_words():
    from kernelskill.report import render_markdown

    entry = {
        "round": 0,
        "candidate_id": "r0-compiler-0",
        "skill_id": None,
        "outcome": "correct",
        "repairs": 0,
        "runtime_ms": None,
        "timing_kind": None,
        "improved": True,
        "error_digest": "",
        "plan_reason": "seed " + "wordy " * 60,
    }
    report = {
        "thread_id": "t",
        "task": "x.py",
        "mode": "scripted",
        "policy": {"precision": "fp32", "kernels": "any"},
        "stop_reason": "done",
        "attempts": [],
        "best_review": None,
        "trajectory": [entry],
        "tokens": {},
    }
    row = next(line for line in render_markdown(report).splitlines() if line.startswith("| 0 |"))
    note = row.rstrip(" |").rsplit("| ", 1)[1]
    assert note.endswith("wordy ...") and len(note) <= 160


def test_the_readmes_layout_matches_the_tree():
    """Every folder the README's layout block names exists, and every package folder is named there."""
    import re

    root = Path(__file__).parent.parent
    text = (root / "README.md").read_text()
    block = text[text.index("## Layout") :].split("```")[1]
    named = set(re.findall(r"^([a-z_]+(?:/[a-z_]+)?)/ ", block, re.M))
    for folder in named:
        assert (root / folder).is_dir(), folder
    packages = {p.parent.relative_to(root).as_posix() for p in root.glob("*/__init__.py")}
    packages |= {p.parent.relative_to(root).as_posix() for p in root.glob("nodes/*/__init__.py")}
    assert packages - {"tests"} <= named, packages - named


def test_help_draws_flags_without_a_value():
    out = runner.invoke(app, ["review", "--help"], env={"COLUMNS": "120"})
    assert out.exit_code == 0 and "--json" in out.output
    assert "<bool>" not in out.output  # a flag takes no value
    assert "<int>" in out.output  # options that take one still say what


def test_the_checkout_imports_its_subpackages_without_an_editable_install():
    """`python -m pytest` in the checkout's root with a plain (not `-e`) install, or none: the checkout's
    kernelskill/ comes first on sys.path and must still find kernelskill.runner and the others, which
    live at the checkout's top level. No site-packages here (``-S``): only the checkout can answer."""
    import subprocess
    import sys

    from conftest import REPO

    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import kernelskill.runner.result as r; print(r.__file__)"
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()) == REPO / "runner" / "result.py"
