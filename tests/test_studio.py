"""`langgraph dev` serves the graph offline: /ok answers and the assistant has the six roles."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
LANGGRAPH = Path(sys.executable).parent / "langgraph"


def _get(url, data=None):
    req = urllib.request.Request(
        url, data=json.dumps(data).encode() if data else None, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.slow
@pytest.mark.skipif(not LANGGRAPH.exists() and not shutil.which("langgraph"), reason="langgraph-cli not installed")
def test_langgraph_dev_serves_kernelskill(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "1"}
    exe = str(LANGGRAPH) if LANGGRAPH.exists() else shutil.which("langgraph")
    proc = subprocess.Popen(
        [exe, "dev", "--no-browser", "--no-reload", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=open(tmp_path / "dev.log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                assert _get(f"{base}/ok")["ok"] is True
                break
            except (OSError, AssertionError):
                assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
                assert time.time() < deadline, (tmp_path / "dev.log").read_text()[-3000:]
                time.sleep(1)
        assistants = _get(f"{base}/assistants/search", {"graph_id": "kernelskill"})
        assert assistants, "no assistant for graph kernelskill"
        graph = _get(f"{base}/assistants/{assistants[0]['assistant_id']}/graph")
        nodes = {n["id"] for n in graph["nodes"]} - {"__start__", "__end__"}
        assert nodes == {"generator", "reviewer", "diagnoser", "feature_extractor", "planner", "optimizer"}
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
