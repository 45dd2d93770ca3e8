"""``kernelskill skills ...``: the skills knowledge base (long-term memory)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

skills_app = typer.Typer(help="The skills knowledge base (long-term memory).", no_args_is_help=True)
console = Console(highlight=False, soft_wrap=True)


@skills_app.command("list")
def skills_list() -> None:
    """List the skill cards."""
    from kernelskill.skills_kb.library import default_library

    lib = default_library()
    for cid, card in sorted(lib.cards.items()):
        console.print(f"{cid:32} {', '.join(card.bottlenecks):40} {card.title}")
    for err in lib.errors:
        console.print(f"[red]invalid card:[/] {err}")
    console.print(f"{len(lib.cards)} cards")


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
        console.print(f"{hit.similarity:.3f}  {hit.skill_id:32} {lib.cards[hit.skill_id].title}")


@skills_app.command("reindex")
def skills_reindex(
    force: Annotated[bool, typer.Option(help="Re-embed every card, changed or not.")] = False,
) -> None:
    """Bring the Chroma index up to date with the card files."""
    from kernelskill.skills_kb.index import SkillIndex

    with console.status("embedding skill cards..."):
        index = SkillIndex()
        changes = index.sync(force=force)
    console.print(
        f"index {index.db_dir}: {len(changes['embedded'])} embedded, {len(changes['removed'])} removed, "
        f"{index.collection.count()} cards"
    )
    for err in index.library.errors:
        console.print(f"[red]skipped invalid card:[/] {err}")
