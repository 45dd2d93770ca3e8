"""generator: seed the first candidate from the reference and retrieved skills."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.graph.context import Context
from kernelskill.graph.state import Candidate, State, Task
from kernelskill.skills_kb.retrieve import cards_text, retrieve

from .candidates import make_candidate
from .codeblock import extract_code
from .llm import ask, call_index
from .prompting import render


def load_task(path: str) -> Task:
    """Read a task file (the reviewer validates it; here only its text is needed)."""
    p = Path(path)
    return Task(name=p.stem, path=str(p.resolve()), source=p.read_text())


def task_summary(source: str) -> str:
    """The task's docstrings and the torch calls in its forward, as a retrieval query."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source[:500]
    parts = [ast.get_docstring(tree) or ""]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            parts.append(ast.get_docstring(node) or "")
            parts += [ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)]
    return " ".join(p for p in parts if p)[:800]


def generator(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: load the task, set the budget, ask the model for a seed candidate."""
    ctx = runtime.context or Context()
    task = load_task(state["task_path"])
    cards = retrieve("write a first Triton kernel for: " + task_summary(task["source"]), k=3, db_dir=ctx.skills_db)
    skills = cards_text(cards)
    seeds: list[Candidate] = []
    tokens: list[dict[str, Any]] = []
    k = max(1, ctx.seeds)
    for i in range(k):
        variant = f"This is seed {i + 1} of {k}: take a different approach from the other seeds." if k > 1 else ""
        system, user = render(
            "generator", task_name=task["name"], reference=task["source"], skills=skills, variant=variant
        )
        reply, usage = ask(ctx, "generator", system, user, call_index(state, "generator") + i)
        source, problem = extract_code(reply)
        note = problem or ("seed from the model" if k == 1 else f"seed {i + 1} of {k} from the model")
        seeds.append(make_candidate({"candidates": seeds}, source, "generator", None, 0, note))
        tokens.append(usage)
    return {
        "task": task,
        "budget": ctx.budget(),
        "search": {"seeds": k, "parents": ctx.parents, "explore": ctx.explore, "seed": ctx.seed},
        "started_at": time.time(),
        "round": 0,
        "repairs": 0,
        "current": seeds[0],
        "pending_seeds": seeds[1:],
        "candidates": seeds,
        "tokens": tokens,
    }
