"""Pieces shared by the CLI modules: the console and the mode check."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console(highlight=False, soft_wrap=True)


def check_mode(ctx: Any) -> None:
    """Say which engine runs; exit 2 with what to configure when none can."""
    from kernelskill.graph.modes import engine_for, no_engine_message, on_cuda

    cuda = on_cuda(ctx)
    engine = engine_for(ctx, cuda)
    if engine is None and ctx.cluster and ctx.device != "cpu" and engine_for(ctx, True) == "offline":
        # the tasks run on the cluster's nodes: the engine is theirs (the launcher refuses a cluster without GPUs)
        console.print("this host has no CUDA GPU: each task asks the cluster for one")
        engine = "offline"
    if engine is None:
        console.print(f"[red]Nothing can run this task here.[/] {escape(no_engine_message(ctx, cuda))}")
        raise typer.Exit(2)
    if engine == "offline":
        console.print(
            "[bold yellow]OFFLINE mode[/]: no model is configured; the compiler seed (TorchInductor's kernels), "
            f"the reviewer, the policy and the deterministic skills ({escape(deterministic_skills())}) run the graph."
        )
    elif cuda and ctx.compiler_seed:
        console.print("model mode on CUDA: TorchInductor's kernels join the seeds as the model's starting point")
    if ctx.memory != "full":
        from kernelskill.graph.context import memory_line

        console.print(f"[bold yellow]memory[/]: {escape(memory_line(ctx.memory))}")


def deterministic_skills() -> str:
    """The cards that name a deterministic transform, as ``card (transform)``: what offline mode can apply."""
    from kernelskill.skills_kb.library import default_library

    cards = default_library().cards.values()
    return ", ".join(sorted(f"{c.id} ({c.transform})" for c in cards if c.transform))


def check_endpoint(ctx: Any) -> None:
    """Exit 2 with a readable message when the endpoint rejects the key, is unreachable or lacks a model."""
    from kernelskill.preflight import PreflightError, preflight

    if not getattr(ctx, "preflight", True):
        return
    try:
        models = preflight(ctx)
    except PreflightError as e:
        console.print(f"[red]model endpoint check failed:[/] {escape(str(e))}")
        raise typer.Exit(2) from None
    if models:
        console.print(f"endpoint ok: {ctx.base_url or 'OpenAI'} serves {', '.join(models)}")


Precision = Annotated[
    str | None,
    typer.Option(help="fp32 (default: fp32-accurate products, TF32 only where the reference uses it) | tf32."),
]
Kernels = Annotated[
    str | None,
    typer.Option(help="any (default: the fastest correct candidate wins) | custom (own kernels preferred)."),
]
Memory = Annotated[
    str | None,
    typer.Option(
        help="full (default) | no-long-term (no policy, skill cards or priors) | no-short-term (no trajectory, "
        "failures or tried plans) | none: the memory ablations."
    ),
]

Checkpointer = Annotated[
    str | None,
    typer.Option(
        help="sqlite (default: checkpoints.sqlite in the run directory) | postgres://USER@HOST/DB: one database for "
        "every run and host, the skill outcomes included."
    ),
]


def context_or_exit(config: Path | None = None, **values: Any) -> Any:
    """:func:`load_context`, or exit 2 with the configuration error in one sentence."""
    from kernelskill.graph.context import load_context

    try:
        return load_context(config, **values)
    except (ValueError, TypeError) as e:
        console.print(f"[red]configuration: {e}[/]")
        raise typer.Exit(2) from None
