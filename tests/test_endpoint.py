"""The real ChatOpenAI client over HTTP against a local stub server: retries, usage, preflight errors."""

import json
import time

from openai_stub import StubOpenAI, free_port
from typer.testing import CliRunner

from kernelskill.cli import app

from scripts_util import fenced

runner = CliRunner()


def test_optimize_through_real_client_retries_429_and_500(tmp_path, task_path, candidate, clean_env):
    good = fenced(candidate("good"))
    stub = StubOpenAI(reply=lambda body: good, faults=(429, 500))
    try:
        t0 = time.time()
        out = runner.invoke(
            app,
            [
                "optimize",
                str(task_path),
                "--model",
                "stub-model",
                "--base-url",
                stub.url,
                "--rounds",
                "0",
                "--device",
                "cpu",
                "--runs-dir",
                str(tmp_path),
                "--thread-id",
                "stub",
            ],
        )
        assert out.exit_code == 0, out.output
        assert "endpoint ok" in out.output
        posts = stub.chat_posts()
        assert len(posts) == 3  # 429, 500, then the completion: the client retried twice
        assert posts[0] == posts[2] and posts[0]["model"] == "stub-model"
        assert "Write the first Triton implementation" in posts[0]["messages"][-1]["content"]
        assert stub.requests[0][:2] == ("GET", "/v1/models")  # the preflight came first
        report = json.loads((tmp_path / "stub" / "report.json").read_text())
        assert report["best_candidate"] and report["stop_reason"].startswith("round budget")
        assert report["tokens"]["generator"] == {"calls": 1, "input_tokens": 123, "output_tokens": 45, "cost_usd": None}
        assert time.time() - t0 < 120
    finally:
        stub.stop()


def test_preflight_reports_bad_key(tmp_path, task_path, clean_env):
    stub = StubOpenAI(reply=lambda body: "", auth_status=401)
    try:
        out = runner.invoke(
            app,
            ["optimize", str(task_path), "--model", "stub-model", "--base-url", stub.url, "--runs-dir", str(tmp_path)],
        )
    finally:
        stub.stop()
    assert out.exit_code == 2, out.output
    assert "rejected the API key (401 Unauthorized)" in out.output and "$OPENAI_API_KEY" in out.output
    assert not stub.chat_posts() and not list(tmp_path.iterdir())  # nothing ran, no run directory


def test_preflight_reports_refused_connection_and_unknown_model(tmp_path, task_path, clean_env):
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = runner.invoke(
        app, ["optimize", str(task_path), "--model", "m", "--base-url", url, "--runs-dir", str(tmp_path)]
    )
    assert out.exit_code == 2, out.output
    assert f"cannot reach the model endpoint {url}" in out.output and "Is the server running?" in out.output
    stub = StubOpenAI(reply=lambda body: "", models=("other-model",))
    try:
        out = runner.invoke(
            app, ["optimize", str(task_path), "--model", "typo", "--base-url", stub.url, "--runs-dir", str(tmp_path)]
        )
    finally:
        stub.stop()
    assert out.exit_code == 2
    assert "'typo' not served" in out.output and "other-model" in out.output
