"""Test setup: interpreter mode, isolated skill index and run directories, GPU/live-model skips."""

import os
import tempfile
from pathlib import Path

# Before anything imports triton: kernels decorated in this process run on Triton's CPU interpreter,
# unless only GPU tests run on a GPU (see pytest_configure) or the caller chose.
_CALLER_INTERPRET = os.environ.get("TRITON_INTERPRET")
os.environ.setdefault("TRITON_INTERPRET", "1")
# One Chroma index per pytest run (subprocesses inherit it), never the user's cache.
_TEST_TMP = Path(tempfile.mkdtemp(prefix="kernelskill-tests-"))
os.environ.setdefault("KERNELSKILL_SKILLS_DB", str(_TEST_TMP / "chroma"))
os.environ["KERNELSKILL_RUNS_DIR"] = str(_TEST_TMP / "runs")
# Baselines and GPU ceilings are measured once per pytest run, not taken from the user's cache.
os.environ.setdefault("KERNELSKILL_CACHE_DIR", str(_TEST_TMP / "cache"))
# Skill outcomes (priors) recorded by test runs stay in the run's folder.
os.environ.setdefault("KERNELSKILL_SKILL_OUTCOMES", str(_TEST_TMP / "skill_outcomes.jsonl"))
for var in ("KERNELSKILL_MODEL", "KERNELSKILL_BASE_URL", "KERNELSKILL_SCRIPTED", "KERNELSKILL_CONFIG"):
    os.environ.pop(var, None)

import pytest  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_configure(config):
    """``pytest -m gpu`` on a GPU compiles kernels for it: in-process GPU tests launch real kernels (no test
    module, so no kernel, is imported before this hook)."""
    if _CALLER_INTERPRET is None and config.getoption("markexpr", "") == "gpu" and _cuda():
        os.environ["TRITON_INTERPRET"] = "0"


def pytest_collection_modifyitems(config, items):
    gpu = _cuda()
    live = os.environ.get("KERNELSKILL_LIVE_LLM") == "1"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (run `make test-gpu` on a GPU machine)"))
        if "live_llm" in item.keywords and not live:
            item.add_marker(pytest.mark.skip(reason="needs a live model endpoint (set KERNELSKILL_LIVE_LLM=1)"))


@pytest.fixture
def task_path() -> Path:
    return FIXTURES / "tasks" / "scale_relu.py"


@pytest.fixture
def candidate():
    def read(name: str) -> str:
        return (FIXTURES / "candidates" / f"{name}.py").read_text()

    return read


@pytest.fixture
def clean_env(monkeypatch):
    """A key for the real client, and no model settings from the caller's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for var in ("KERNELSKILL_MODEL", "KERNELSKILL_BASE_URL", "KERNELSKILL_SCRIPTED"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session (skipped with the reason when its binaries are missing)."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (make setup installs it)")
    from pg_util import SKIP_REASON, PostgresServer, server_bin

    bindir = server_bin()
    if bindir is None:
        pytest.skip(SKIP_REASON)
    try:
        server = PostgresServer(bindir).start()
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run the server as (initdb refuses root)")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """The URL of a fresh, empty database on the session's server."""
    return postgres_server.new_database()
