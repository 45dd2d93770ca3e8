"""``kernelskill eval``: run the optimizer over a task suite."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelskill.cli_common import check_mode, console


def register(app: typer.Typer) -> None:
    """Add the eval command to the main app."""
    app.command("eval")(eval_cmd)


def eval_cmd(
    level: Annotated[int, typer.Option(help="Task level (1, 2 or 3) of the bundled suite.")] = 1,
    tasks: Annotated[
        Path | None, typer.Option(help="A folder of task files instead (e.g. a KernelBench level).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many tasks (0 = all).")] = 0,
    gpus: Annotated[str, typer.Option(help="Comma-separated GPU ids, one worker each (empty = one worker).")] = "",
    out: Annotated[Path | None, typer.Option(help="Eval run directory (reuse one to resume).")] = None,
    scripted: Annotated[str | None, typer.Option(help="Scripted-model file.")] = None,
    model: Annotated[str | None, typer.Option(help="Chat model for every role.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Optimization rounds per task.")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu")] = None,
) -> None:
    """Run the optimizer over a task suite and summarize (resumable)."""
    from kernelskill.evals.runner import run_eval
    from kernelskill.graph.context import load_context

    ctx = load_context(None, scripted=scripted, model=model, max_rounds=rounds, device=device)
    check_mode(ctx)
    summary = run_eval(level=level, tasks_dir=tasks, limit=limit, gpus=gpus, out=out, ctx=ctx, console=console)
    raise typer.Exit(0 if summary["tasks"] else 1)
