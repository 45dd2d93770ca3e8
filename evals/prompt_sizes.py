"""Prompt size per role: run the scripted demo with a cassette and measure every recorded prompt.

``python -m kernelskill.evals.prompt_sizes`` runs the whole graph on the CPU with the demo's
scripted model (no endpoint), records every model call, and prints per role the number of calls
and the mean size of the system + user messages in characters and in estimated tokens (characters
/ 4, the usual rule of thumb for English and code; no tokenizer is downloaded).
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

DEMO_DIR = Path(__file__).parent / "demo"


def measure(cassette: Path) -> dict[str, dict[str, float]]:
    """Per role: calls, mean characters and mean estimated tokens of the recorded prompts."""
    sizes: dict[str, list[int]] = defaultdict(list)
    for line in cassette.read_text().splitlines():
        call = json.loads(line)
        sizes[call["role"]].append(len(call["system"]) + len(call["user"]))
    return {
        role: {"calls": len(v), "chars": sum(v) / len(v), "tokens": sum(v) / len(v) / 4}
        for role, v in sorted(sizes.items())
    }


def run_demo(out: Path) -> Path:
    """Run the scripted demo with a cassette under ``out``; the cassette's path."""
    from kernelskill.graph.context import load_context
    from kernelskill.runs import execute, new_run

    meta = json.loads((DEMO_DIR / "demo.json").read_text())
    cassette = out / "calls.jsonl"
    ctx = load_context(
        None, scripted=str(DEMO_DIR / "script.json"), device="cpu", record=str(cassette), **meta.get("context", {})
    )
    execute(new_run((DEMO_DIR / meta["task"]).resolve(), ctx, root=out / "runs"))
    return cassette


def main() -> None:
    """Print the table."""
    with tempfile.TemporaryDirectory(prefix="kernelskill-prompts-") as tmp:
        sizes = measure(run_demo(Path(tmp)))
    print("| role | calls | mean chars | mean tokens (chars / 4) |\n|---|---|---|---|")
    for role, s in sizes.items():
        print(f"| {role} | {s['calls']:.0f} | {s['chars']:.0f} | {s['tokens']:.0f} |")


if __name__ == "__main__":
    main()
