"""Known-bad candidates (the cheats peers' judges fell for) are all rejected, each for its reason.

Every file in fixtures/adversarial names its task and the expected status and message in its
first two lines. The same set runs on a GPU in test_reviewer_gpu.py.
"""

from pathlib import Path

import pytest

from kernelskill.runner.sandbox import run_review

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "adversarial").glob("*.py"))


def expectation(path: Path) -> tuple[Path, str, str]:
    lines = path.read_text().splitlines()
    task = lines[0].removeprefix("# task: ").strip()
    status, needle = lines[1].removeprefix("# expect: ").split("|", 1)
    return FIXTURES / "tasks" / f"{task}.py", status, needle


def test_at_least_ten_cheats():
    assert len(CASES) >= 10


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_rejected_for_the_right_reason(path, tmp_path):
    task, status, needle = expectation(path)
    r = run_review(task, path.read_text(), tmp_path, path.stem, device="cpu", timeout_s=120)
    assert r["status"] == status, (r["status"], r.get("error_digest"))
    assert any(n in r["error_digest"] for n in needle.split("|")), r["error_digest"]


def test_torch_ops_in_forward_are_labelled(tmp_path):
    """A kernel that runs, next to the reference's own PyTorch ops, is correct but not custom work."""
    source = (
        (FIXTURES / "candidates" / "good.py")
        .read_text()
        .replace("        return out\n", "        return torch.maximum(out, torch.relu(x) * 2.0 + 1.0)\n")
    )
    r = run_review(FIXTURES / "tasks" / "scale_relu.py", source, tmp_path, "mixed", device="cpu")
    assert r["status"] == "correct"
    assert r["custom_kernel"] is False and "torch_main_work" in r["labels"]
    assert any("PyTorch" in w for w in r["warnings"])
