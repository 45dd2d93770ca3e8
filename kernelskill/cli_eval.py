"""``kernelskill eval``: run the optimizer over a task suite; ``eval report`` / ``eval compare`` read runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelskill.cli_common import (
    Checkpointer,
    Kernels,
    Memory,
    Precision,
    check_endpoint,
    check_mode,
    console,
    context_or_exit,
)

eval_app = typer.Typer(
    rich_markup_mode=None,
    help="Run the optimizer over a task suite (resumable) and summarize; `report` and `compare` read eval runs.",
    invoke_without_command=True,
)

PriceIn = Annotated[
    float | None, typer.Option(help="USD per 1M input tokens, for the cost estimate (default: unknown).")
]
PriceOut = Annotated[float | None, typer.Option(help="USD per 1M output tokens, for the cost estimate.")]


def register(app: typer.Typer) -> None:
    """Add the eval command group to the main app."""
    app.add_typer(eval_app, name="eval")


@eval_app.callback()
def eval_cmd(
    typer_ctx: typer.Context,
    level: Annotated[
        str | None,
        typer.Option(
            help="Task level of the bundled suite: 1, 2 or 3, or several as 1,2,3 (default 1; with --tasks, "
            "N for a folder named levelN, else 1: it labels the tasks)."
        ),
    ] = None,
    tasks: Annotated[
        Path | None, typer.Option(help="A folder of task files instead (e.g. a KernelBench level folder).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many tasks per level (0 = all).")] = 0,
    gpus: Annotated[
        str,
        typer.Option(
            help="Comma-separated GPU ids, one worker each (empty = one worker); an id named twice (0,0) "
            "runs two workers on that GPU, each timing still holding it alone."
        ),
    ] = "",
    gpu_locks: Annotated[
        Path | None,
        typer.Option(
            help="A lock directory shared with other evals on this host: each GPU of --gpus is shared through it, "
            "so evals running at once on one GPU still time it alone (default: only a GPU named twice is shared)."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Eval run directory (reuse one to resume).")] = None,
    scripted: Annotated[str | None, typer.Option(help="Scripted-model file.")] = None,
    model: Annotated[str | None, typer.Option(help="Chat model for every role.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Optimization rounds per task.")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu")] = None,
    engine: Annotated[
        str | None, typer.Option(help="auto | llm | offline (compiler seed + deterministic skills; needs CUDA).")
    ] = None,
    task_timeout: Annotated[
        float,
        typer.Option(min=1, help="Wall-time limit per task (s); on expiry the task is killed and recorded as timeout."),
    ] = 3600.0,
    price_in: PriceIn = None,
    price_out: PriceOut = None,
    retry_timeouts: Annotated[
        bool, typer.Option(help="Run tasks that timed out before again (from their checkpoint, fresh limit).")
    ] = False,
    rerun: Annotated[
        str,
        typer.Option(
            help="Start these finished tasks over: comma-separated globs over task keys (e.g. 'L1-46*,L3-0[36]*'); "
            "their previous runs move to superseded/ in the eval directory."
        ),
    ] = "",
    stop_after: Annotated[
        float,
        typer.Option(
            min=0,
            help="Stop the launch after this many seconds as Ctrl-C does (running tasks resume from their "
            "checkpoints next launch; 0 = no limit), to end within a time-boxed allocation.",
        ),
    ] = 0.0,
    precision: Precision = None,
    kernels: Kernels = None,
    memory: Memory = None,
    checkpointer: Checkpointer = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="Run the tasks on Ray instead of this host's process pool: ray (a local Ray), auto (the cluster "
            "this node belongs to) or ray://HOST:PORT (an existing cluster through Ray Client); one GPU per task."
        ),
    ] = None,
) -> None:
    """Run the optimizer over a task suite and summarize (resumable: `--out DIR` again skips finished tasks)."""
    if typer_ctx.invoked_subcommand is not None:
        return
    from kernelskill.evals.runner import run_eval
    from kernelskill.evals.suite import check_levels, default_level, parse_levels

    try:
        levels = parse_levels(level or default_level(tasks))
    except ValueError as e:
        console.print(f"[red]--level: {e}[/]")
        raise typer.Exit(2) from None
    try:
        check_levels(levels, tasks)
    except ValueError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    ctx = context_or_exit(
        scripted=scripted,
        model=model,
        max_rounds=rounds,
        device=device,
        engine=engine,
        precision=precision,
        kernels=kernels,
        memory=memory,
        checkpointer=checkpointer,
        cluster=cluster,
    )
    check_mode(ctx)
    check_endpoint(ctx)
    try:
        summary = run_eval(
            levels=levels,
            tasks_dir=tasks,
            limit=limit,
            gpus=gpus,
            out=out,
            ctx=ctx,
            console=console,
            task_timeout_s=task_timeout,
            price_in=price_in,
            price_out=price_out,
            retry_timeouts=retry_timeouts,
            rerun=rerun,
            gpu_locks=gpu_locks,
            stop_after_s=stop_after,
        )
    except ValueError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    if summary["interrupted"]:
        raise typer.Exit(130)
    raise typer.Exit(0 if summary["tasks"] else 1)


@eval_app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="An eval directory (holds eval.json and runs/).")],
    price_in: PriceIn = None,
    price_out: PriceOut = None,
) -> None:
    """Rebuild summary.json, summary.md and the plots of an eval directory from its runs."""
    from kernelskill.evals.report import EvalDirError, rebuild, summary_markdown

    try:
        summary = rebuild(run_dir, price_in, price_out)
    except EvalDirError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    console.print(summary_markdown(summary), markup=False)
    written = [run_dir / "summary.json", run_dir / "summary.md", *(run_dir / p for p in summary["plots"])]
    console.print("written: " + ", ".join(map(str, written)), markup=False)


@eval_app.command("policies")
def policies_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Eval directories, the first the reference setting.")],
    out: Annotated[Path | None, typer.Option("--out", help="Also write the table to this Markdown file.")] = None,
) -> None:
    """The same tasks under several policies side by side, each against baselines of its own policy."""
    from kernelskill.evals.policies import policies_markdown
    from kernelskill.evals.report import EvalDirError, build_summary

    try:
        text = policies_markdown([build_summary(d) for d in run_dirs])
    except EvalDirError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    console.print(text, markup=False)
    if out is not None:
        out.write_text(text)
        console.print(f"written: {out}", markup=False)


@eval_app.command("compare")
def compare_cmd(
    run_a: Annotated[Path, typer.Argument(help="Eval directory A (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="Eval directory B.")],
) -> None:
    """Per-task differences (status, speedup A vs B, ratio) and aggregate deltas of two eval runs."""
    from kernelskill.evals.compare import compare_markdown, compare_summaries
    from kernelskill.evals.report import EvalDirError, build_summary

    try:
        a, b = build_summary(run_a), build_summary(run_b)
    except EvalDirError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    try:
        cmp = compare_summaries(a, b)
    except ValueError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    console.print(compare_markdown(cmp), markup=False)
