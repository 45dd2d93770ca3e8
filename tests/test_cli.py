"""The CLI through Typer's CliRunner."""

from typer.testing import CliRunner

from kernelskill.cli import app

runner = CliRunner()


def test_help_lists_commands():
    out = runner.invoke(app, ["--help"])
    assert out.exit_code == 0
    for cmd in ("optimize", "resume", "review", "eval", "skills", "demo"):
        assert cmd in out.output


def test_skills_list_and_show():
    out = runner.invoke(app, ["skills", "list"])
    assert out.exit_code == 0 and "online-softmax" in out.output and "cards" in out.output
    shown = runner.invoke(app, ["skills", "show", "online-softmax"])
    assert shown.exit_code == 0 and "Pitfalls" in shown.output
    missing = runner.invoke(app, ["skills", "show", "no-such-skill"])
    assert missing.exit_code == 2 and "no skill card" in missing.output


def test_skills_search_and_reindex():
    out = runner.invoke(app, ["skills", "search", "numerically stable softmax in one pass over long rows"])
    results = [line for line in out.output.splitlines() if line[:1].isdigit()]
    assert out.exit_code == 0 and "online-softmax" in results[0]
    re = runner.invoke(app, ["skills", "reindex"])
    assert re.exit_code == 0 and "0 embedded" in re.output  # nothing changed since the search synced


def test_optimize_without_model_explains(task_path):
    out = runner.invoke(app, ["optimize", str(task_path)])
    assert out.exit_code == 2
    assert "No model endpoint is configured" in out.output and "--scripted" in out.output


def test_optimize_bad_task(tmp_path):
    from conftest import FIXTURES

    assert runner.invoke(app, ["optimize", str(tmp_path / "missing.py")]).exit_code == 2
    out = runner.invoke(app, ["optimize", str(FIXTURES / "tasks" / "broken_task.py"), "--scripted", "x.json"])
    assert out.exit_code == 2 and "get_inputs" in out.output


def test_review_exit_codes(task_path, tmp_path):
    from conftest import FIXTURES

    cands = FIXTURES / "candidates"
    ok = runner.invoke(app, ["review", str(task_path), str(cands / "good.py"), "--device", "cpu"])
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output and "not a speedup" in ok.output
    bad = runner.invoke(app, ["review", str(task_path), str(cands / "raises.py"), "--device", "cpu"])
    assert bad.exit_code == 1 and "runtime_error" in bad.output
    assert runner.invoke(app, ["review", str(task_path), str(tmp_path / "nope.py")]).exit_code == 2
    broken = FIXTURES / "tasks" / "broken_task.py"
    assert runner.invoke(app, ["review", str(broken), str(cands / "good.py"), "--device", "cpu"]).exit_code == 2


def test_demo_runs_all_six_nodes(tmp_path):
    out = runner.invoke(app, ["demo", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "SCRIPTED" in out.output
    for node in ("generator", "reviewer", "diagnoser", "feature_extractor", "planner", "optimizer"):
        assert node in out.output
    assert "compile_error" in out.output  # the seed fails to compile, then is repaired
    assert "round budget spent" in out.output
    assert "model-backed planner:" in out.output and "rejected first:" in out.output


def test_offline_engine_without_cuda_explains(task_path):
    out = runner.invoke(app, ["optimize", str(task_path), "--engine", "offline", "--device", "cpu"])
    assert out.exit_code == 2
    assert "offline engine needs a CUDA GPU" in out.output and "KERNELSKILL_MODEL" in out.output
