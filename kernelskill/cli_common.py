"""Pieces shared by the CLI modules: the console and the mode check."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console(highlight=False, soft_wrap=True)


def check_mode(ctx: Any) -> None:
    """Exit 2 with what to configure when no model (or scripted model) is set."""
    from kernelskill.runner.env import cuda_available

    if ctx.has_llm():
        return
    gpu = cuda_available()
    console.print(
        "[red]No model endpoint is configured.[/] Configure one of:\n"
        "  - a model: KERNELSKILL_MODEL=gpt-4.1 and OPENAI_API_KEY=... (any OpenAI-compatible server:\n"
        "    add KERNELSKILL_BASE_URL=http://localhost:8000/v1 for vLLM / SGLang / Ollama), or --model;\n"
        "  - a scripted model for a dry run: --scripted FILE (see evals/demo/script.json).\n"
        + (
            "A CUDA GPU is present, but the offline engine (compiler seed + deterministic skills) is not "
            "implemented yet."
            if gpu
            else "No CUDA GPU either: on a GPU machine the offline engine will not need a model."
        )
    )
    raise typer.Exit(2)


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
