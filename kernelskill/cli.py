"""The ``kernelskill`` command line (Typer)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

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
from kernelskill.runner.env import EVAL_PID_ENV
from kernelskill.runner.result import unusable_text

app = typer.Typer(
    rich_markup_mode=None, help="Turn a PyTorch module into verified, faster Triton kernels.", no_args_is_help=True
)

DEMO_DIR = Path(__file__).resolve().parent.parent / "evals" / "demo"


class Progress:
    """Prints one line per finished node and a spinner while a node runs."""

    def __init__(self) -> None:
        self.status: Any = None

    def __call__(self, event: str, node: str, message: str) -> None:
        """Handle one progress event: ``start`` (spinner), ``done`` (a line) or ``info``."""
        if self.status is not None:
            self.status.stop()
            self.status = None
        if event == "done":
            console.print(f"[bold cyan]{node:>17}[/] {escape(message)}")
        elif event == "start":
            self.status = console.status(f"running {node}...")
            self.status.start()
        else:
            console.print(message)

    def close(self) -> None:
        """Stop the spinner."""
        if self.status is not None:
            self.status.stop()


def _run(run: Any, resume: bool) -> None:
    from kernelskill.report import build_report, render_markdown
    from kernelskill.runner.env import apply_cpu_share
    from kernelskill.runs import execute

    apply_cpu_share()  # set by the eval runner when several GPU workers share this machine

    console.print(f"thread id: [bold]{run.thread_id}[/]  (run dir {run.dir})")
    console.print(f"resume with: kernelskill resume {run.thread_id}")
    progress = Progress()
    try:
        state = execute(run, resume=resume, progress=progress)
    except Exception as e:  # endpoint down, bad key, ...: the checkpoint keeps the finished nodes
        from kernelskill.nodes.model.llm import ModelUnavailable

        progress.close()
        if isinstance(e, ModelUnavailable):
            console.print(f"[yellow]run paused:[/] {e}")
            console.print(f"the finished steps are kept; when the endpoint is back: kernelskill resume {run.thread_id}")
        else:
            console.print(f"[red]run stopped:[/] {type(e).__name__}: {e}")
            console.print(f"fix the cause, then: kernelskill resume {run.thread_id}")
        raise typer.Exit(1) from None
    finally:
        progress.close()
    report = build_report(run, state)
    if state.get("task_error"):  # nothing was reviewed: one sentence, exit 2
        console.print(f"[red]{escape(unusable_text(state['task_error']))}[/]")
        console.print(f"report: {run.dir / 'report.md'}")
        raise typer.Exit(2)
    console.print()
    console.print(render_markdown(report))
    console.print(f"best candidate: {run.dir / 'best.py' if state.get('best') else '(none)'}")
    console.print(f"report: {run.dir / 'report.md'}")


@app.command()
def optimize(
    task_file: Annotated[
        Path, typer.Argument(help="KernelBench-format task file (Model, get_inputs, get_init_inputs).")
    ],
    model: Annotated[str | None, typer.Option(help="Chat model for every role (else KERNELSKILL_MODEL).")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint URL.")] = None,
    scripted: Annotated[str | None, typer.Option(help="Scripted-model file: no endpoint is called.")] = None,
    rounds: Annotated[int | None, typer.Option(help="Optimization rounds after the seed.")] = None,
    repairs: Annotated[int | None, typer.Option(help="Repair attempts per candidate.")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu")] = None,
    engine: Annotated[
        str | None, typer.Option(help="auto | llm | offline (compiler seed + deterministic skills; needs CUDA).")
    ] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run directories go (default ./runs).")] = None,
    thread_id: Annotated[str, typer.Option(help="Thread id to use (default: generated).")] = "",
    config: Annotated[Path | None, typer.Option(help="TOML config file (default ./kernelskill.toml).")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Stop after this many model tokens (0 = no limit).")] = None,
    max_wall_s: Annotated[float | None, typer.Option(help="Stop after this much wall time, s (0 = none).")] = None,
    target_sol: Annotated[
        float | None, typer.Option(help="Stop once the best reaches this % of speed-of-light (0 = off).")
    ] = None,
    patience: Annotated[
        int | None, typer.Option(help="Stop after N optimization rounds in a row without improvement (0 = off).")
    ] = None,
    price_in: Annotated[float | None, typer.Option(help="USD per 1M input tokens (cost estimate).")] = None,
    price_out: Annotated[float | None, typer.Option(help="USD per 1M output tokens (cost estimate).")] = None,
    record: Annotated[str | None, typer.Option(help="Record every model call to this cassette file.")] = None,
    replay: Annotated[
        str | None, typer.Option(help="Replay model calls from this cassette file (no endpoint is called).")
    ] = None,
    precision: Precision = None,
    kernels: Kernels = None,
    memory: Memory = None,
    checkpointer: Checkpointer = None,
) -> None:
    """Optimize one task; prints the thread id, progress and the final report."""
    from kernelskill.runner.taskfile import TaskFileError, load_task_module
    from kernelskill.runs import new_run

    if not task_file.is_file():
        console.print(f"[red]no such task file: {task_file}[/]")
        raise typer.Exit(2)
    try:
        load_task_module(task_file, cpu=True)
    except TaskFileError as e:
        console.print(f"[red]unusable task file:[/] {e}")
        raise typer.Exit(2) from None
    ctx = context_or_exit(
        config,
        precision=precision,
        kernels=kernels,
        memory=memory,
        checkpointer=checkpointer,
        model=model,
        base_url=base_url,
        scripted=scripted,
        max_rounds=rounds,
        max_repairs=repairs,
        device=device,
        engine=engine,
        max_tokens=max_tokens,
        max_wall_s=max_wall_s,
        target_sol_pct=target_sol,
        patience=patience,
        price_in_per_mtok=price_in,
        price_out_per_mtok=price_out,
        record=str(Path(record).resolve()) if record else None,
        replay=str(Path(replay).resolve()) if replay else None,
    )
    check_mode(ctx)
    check_endpoint(ctx)
    run = new_run(task_file, ctx, root=runs_dir, thread_id=thread_id)
    _run(run, resume=False)


@app.command()
def resume(
    thread_id: Annotated[str, typer.Argument(help="Thread id printed by `optimize` (or a run directory).")],
    runs_dir: Annotated[Path | None, typer.Option(help="Where run directories are (default ./runs).")] = None,
) -> None:
    """Continue an interrupted run from its last finished node."""
    from kernelskill.runs import RunError, load_run

    try:
        run = load_run(thread_id, runs_dir)
    except RunError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(2) from None
    check_endpoint(run.context)
    _run(run, resume=True)


@app.command()
def review(
    task_file: Annotated[Path, typer.Argument(help="KernelBench-format task file.")],
    candidate_file: Annotated[Path, typer.Argument(help="Candidate module defining ModelNew.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")] = False,
    device: Annotated[str, typer.Option(help="auto | cuda | cpu")] = "auto",
    timeout: Annotated[float, typer.Option(help="Evaluation time limit (s).")] = 300.0,
    trials: Annotated[int, typer.Option(help="Correctness trials on fresh inputs.")] = 5,
    ncu: Annotated[bool, typer.Option("--ncu", help="Also profile with Nsight Compute (CUDA, ncu on PATH).")] = False,
    strict_tolerance: Annotated[
        bool,
        typer.Option(
            "--strict-tolerance",
            help="atol/rtol against the reference only: no second check against a float64 run of the reference.",
        ),
    ] = False,
    precision: Precision = None,
) -> None:
    """Review one candidate: exit 0 when it passes, 1 when rejected, 2 on unusable arguments or task, or not judged."""
    import tempfile

    from kernelskill.runner.sandbox import run_review

    for p in (task_file, candidate_file):
        if not p.is_file():
            console.print(f"[red]no such file: {p}[/]")
            raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="kernelskill-review-") as tmp:
        result = run_review(
            task_file,
            candidate_file.read_text(),
            tmp,
            candidate_file.stem,
            timeout_s=timeout,
            device=device,
            trials=trials,
            float64_truth=not strict_tolerance,
            ncu=ncu,
            precision=context_or_exit(precision=precision).precision,
        )
    if result["status"] == "invalid_task":
        console.print(f"[red]unusable task:[/] {result['error_digest']}")
        raise typer.Exit(2)
    if result["status"] == "harness_error":  # the reviewer's own failure: the candidate was not judged
        console.print(f"[red]not judged[/] (the reviewer's own failure, not the candidate's): {result['error_digest']}")
        raise typer.Exit(2)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    elif result["status"] == "correct":
        console.print(
            f"[green]PASS[/] on {result.get('device')}: candidate {result['runtime_ms']:.4f} ms, "
            f"eager {result.get('eager_ms') or 0:.4f} ms"
        )
        if result.get("timing_kind") == "cuda_events":
            console.print(f"speedup vs eager: {result.get('speedup_vs_eager') or 0:.3f}x")
        else:
            console.print("(CPU interpreter timings: correctness only, not a speedup)")
    else:
        console.print(f"[red]REJECTED[/] ({result['status']}): {result.get('error_digest', '')}")
    raise typer.Exit(0 if result["status"] == "correct" else 1)


@app.command()
def demo(
    runs_dir: Annotated[Path | None, typer.Option(help="Where the run directory goes.")] = None,
) -> None:
    """Run the whole graph on CPU on a bundled task with the SCRIPTED demo model."""
    from kernelskill.graph.context import load_context
    from kernelskill.runs import new_run

    meta = json.loads((DEMO_DIR / "demo.json").read_text())
    console.print("[bold yellow]DEMO: the model is SCRIPTED[/] (replies from evals/demo/, no endpoint is called)")
    ctx = load_context(None, scripted=str(DEMO_DIR / "script.json"), device="cpu", **meta.get("context", {}))
    task = (DEMO_DIR / meta["task"]).resolve()
    run = new_run(task, ctx, root=runs_dir)
    _run(run, resume=False)


def _register_subcommands() -> None:
    from kernelskill.cli_eval import register as register_eval
    from kernelskill.cli_skills import skills_app

    app.add_typer(skills_app, name="skills")
    register_eval(app)


_register_subcommands()


def main() -> None:
    """Console-script entry point."""
    if os.environ.get(EVAL_PID_ENV):  # a task an eval launched: it ends with the eval
        from kernelskill.evals.runner import follow_the_eval

        follow_the_eval()
    try:
        app()
    except KeyboardInterrupt:
        console.print("\ninterrupted; resume with `kernelskill resume THREAD_ID`")
        sys.exit(130)


if __name__ == "__main__":
    main()
