"""``kernelskill skills ...``: the skills knowledge base (long-term memory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

skills_app = typer.Typer(
    rich_markup_mode=None, help="The skills knowledge base (long-term memory).", no_args_is_help=True
)
console = Console(highlight=False, soft_wrap=True)

CardsOption = Annotated[
    Path | None, typer.Option("--cards", help="Card directory (default: the packaged skills_kb/cards).")
]


def _library(cards: Path | None) -> Any:
    from kernelskill.skills_kb.library import default_library, load_library

    return load_library(cards) if cards else default_library()


@skills_app.command("list")
def skills_list(cards: CardsOption = None) -> None:
    """List the skill cards (invalid cards are reported with file and field, and skipped)."""
    lib = _library(cards)
    for cid, card in sorted(lib.cards.items()):
        console.print(f"{cid:32} {', '.join(card.bottlenecks):40} {card.title}", markup=False)
    for err in lib.errors:
        console.print("[red]invalid card:[/] " + err.replace("[", r"\["))
    console.print(f"{len(lib.cards)} cards" + (f", {len(lib.errors)} invalid (skipped)" if lib.errors else ""))


@skills_app.command("show")
def skills_show(skill_id: Annotated[str, typer.Argument(help="Card id.")]) -> None:
    """Show one card."""
    from kernelskill.skills_kb.library import default_library, render_card

    try:
        card = default_library().get(skill_id)
    except KeyError as e:
        console.print(f"[red]{e.args[0]}[/]")
        raise typer.Exit(2) from None
    console.print(render_card(card, full=True), markup=False)


@skills_app.command("search")
def skills_search(
    text: Annotated[str, typer.Argument(help="What you are looking for.")],
    k: Annotated[int, typer.Option(help="How many results.")] = 5,
) -> None:
    """Semantic search over the cards (Chroma + packaged MiniLM)."""
    from kernelskill.skills_kb.index import open_index
    from kernelskill.skills_kb.library import default_library

    lib = default_library()
    for hit in open_index().search(text, k=k):
        console.print(f"{hit.similarity:.3f}  {hit.skill_id:32} {lib.cards[hit.skill_id].title}", markup=False)


@skills_app.command("reindex")
def skills_reindex(
    force: Annotated[bool, typer.Option(help="Re-embed every card, changed or not.")] = False,
    cards: CardsOption = None,
    db: Annotated[
        Path | None, typer.Option(help="Chroma directory (default $KERNELSKILL_SKILLS_DB or ~/.cache/kernelskill).")
    ] = None,
) -> None:
    """Bring the Chroma index up to date with the card files (invalid cards are reported and skipped)."""
    from kernelskill.skills_kb.index import SkillIndex

    with console.status("embedding skill cards..."):
        index = SkillIndex(db, _library(cards))
        changes = index.sync(force=force)
    console.print(
        f"index {index.db_dir}: {len(changes['embedded'])} embedded, {len(changes['removed'])} removed, "
        f"{index.collection.count()} cards",
        markup=False,
    )
    for err in index.library.errors:
        console.print("[red]skipped invalid card:[/] " + err.replace("[", r"\["))


def _read_json(path: Path, key: str) -> dict[str, Any]:
    """A JSON object from ``path``; a review result (or report) holding ``key`` gives that entry."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        console.print(f"[red]cannot read {path}:[/] {e}", markup=True)
        raise typer.Exit(2) from None
    if isinstance(data, dict) and isinstance(data.get(key), dict):
        data = data[key]
    if not isinstance(data, dict):
        console.print(f"[red]{path}: expected a JSON object of {key}[/]")
        raise typer.Exit(2)
    return data


def _default_store() -> str:
    """The configured checkpointer's Postgres database when there is one, else the JSONL store of the runs root."""
    from kernelskill.cli_common import context_or_exit
    from kernelskill.runs import runs_root
    from kernelskill.skills_kb.outcomes import outcomes_path

    return context_or_exit().postgres() or str(outcomes_path(root=runs_root()))


@skills_app.command("explain")
def skills_explain(
    metrics_file: Annotated[Path, typer.Argument(help="JSON of profile metrics (or a review result.json).")],
    features_file: Annotated[
        Path | None, typer.Argument(help="JSON of code features, or a candidate .py to extract them from.")
    ] = None,
    rank: Annotated[bool, typer.Option(help="Also rank the allowed skills as the planner does.")] = False,
    task: Annotated[Path | None, typer.Option(help="Reference task file, to describe the situation.")] = None,
    store: Annotated[
        str | None, typer.Option(help="Outcome store for the priors (with --rank): a JSONL file or a postgres:// URL.")
    ] = None,
) -> None:
    """Print the decision policy's trace for a metrics file: class, rule, numbers, tier, skills."""
    from kernelskill.skills_kb.explain import explain_decision
    from kernelskill.skills_kb.policy import PolicyError, decide, load_policy

    metrics = _read_json(metrics_file, "metrics")
    features: dict[str, Any] = {}
    if features_file is not None and features_file.suffix == ".py":
        from kernelskill.nodes.feature_extractor import extract_features

        try:
            features = extract_features(features_file.read_text())
        except OSError as e:
            console.print(f"[red]cannot read {features_file}:[/] {e}")
            raise typer.Exit(2) from None
    elif features_file is not None:
        features = _read_json(features_file, "features")
    try:
        policy = load_policy()
    except PolicyError as e:
        console.print(f"[red]invalid policy:[/] {e}", markup=False)
        raise typer.Exit(2) from None
    decision = decide(features, metrics, policy=policy)
    ranked = None
    if rank:
        from kernelskill.skills_kb.index import open_index
        from kernelskill.skills_kb.priors import load_priors
        from kernelskill.skills_kb.ranking import rank as rank_skills
        from kernelskill.skills_kb.situation import describe_situation

        source = task.read_text() if task and task.is_file() else ""
        query = describe_situation(decision, features, task.stem if task else "", source)
        hits = open_index().search(query, k=len(decision.allowed), among=decision.allowed)
        priors = load_priors(store or _default_store())
        ranked = rank_skills(decision, {h.skill_id: h.similarity for h in hits}, priors, policy.prior_weight)
    console.print(explain_decision(decision, policy, ranked), markup=False)


@skills_app.command("stats")
def skills_stats(
    store: Annotated[
        str | None,
        typer.Option(
            help="Outcome store: a JSONL file or a postgres:// URL (default: the database of a Postgres "
            "checkpointer, else $KERNELSKILL_SKILL_OUTCOMES or <runs dir>/skill_outcomes.jsonl)."
        ),
    ] = None,
) -> None:
    """Print the per-skill priors learned from earlier rounds (GPU-timed rounds only count)."""
    from kernelskill.skills_kb.explain import priors_table
    from kernelskill.skills_kb.outcomes import open_store
    from kernelskill.skills_kb.priors import summarize

    outcomes = open_store(store or _default_store())
    try:
        records = outcomes.read()
    except Exception as e:  # an unreachable database: one sentence, exit 2
        console.print(f"cannot read the outcome store {outcomes.describe()}: {type(e).__name__}: {e}", markup=False)
        raise typer.Exit(2) from None
    informative = sum(bool(r.get("informative")) for r in records)
    where = outcomes.describe()
    console.print(f"store {where}: {len(records)} round(s) recorded, {informative} GPU-timed", markup=False)
    if not records:
        console.print("no outcomes yet: priors are neutral (win rate 0.50 for every skill)")
        return
    console.print(priors_table(summarize(records)), markup=False)
    console.print("win rate = (wins + 1) / (tries + 2); tries and wins count GPU-timed rounds only", markup=False)
