"""Long-term memory: card schema, the Chroma index (packaged MiniLM, offline), retrieval quality."""

from pathlib import Path

import pytest
import yaml

from kernelskill.skills_kb.index import SkillIndex
from kernelskill.skills_kb.library import CARDS_DIR, default_library, load_library
from kernelskill.skills_kb.schema import CardError, load_card

QUERIES = Path(__file__).parent / "data" / "retrieval_queries.yaml"


def test_all_shipped_cards_valid():
    lib = default_library()
    assert lib.errors == []
    assert len(lib.cards) >= 30


def test_malformed_card_named_and_rest_usable(tmp_path):
    good = next(CARDS_DIR.glob("*.yaml"))
    (tmp_path / good.name).write_text(good.read_text())
    data = yaml.safe_load(good.read_text())
    (tmp_path / "bad-class.yaml").write_text(yaml.safe_dump({**data, "id": "bad-class", "bottlenecks": ["slowness"]}))
    (tmp_path / "bad-pred.yaml").write_text(
        yaml.safe_dump({**data, "id": "bad-pred", "applies_when": ["features.colour == red"]})
    )
    missing = {k: v for k, v in data.items() if k != "mechanism"}
    (tmp_path / "no-mechanism.yaml").write_text(yaml.safe_dump({**missing, "id": "no-mechanism"}))
    lib = load_library(tmp_path)
    assert list(lib.cards) == [good.stem]
    errors = "\n".join(lib.errors)
    assert "bad-class.yaml: field 'bottlenecks.0'" in errors
    assert "bad-pred.yaml: field 'applies_when'" in errors and "colour" in errors
    assert "no-mechanism.yaml: field 'mechanism'" in errors
    with pytest.raises(CardError, match="does not match the file name"):
        (tmp_path / "renamed.yaml").write_text(good.read_text())
        load_card(tmp_path / "renamed.yaml")


def test_index_reembeds_only_changed_cards(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    for p in sorted(CARDS_DIR.glob("*.yaml"))[:3]:
        (cards / p.name).write_text(p.read_text())
    first = SkillIndex(tmp_path / "db", load_library(cards)).sync()
    assert len(first["embedded"]) == 3
    assert SkillIndex(tmp_path / "db", load_library(cards)).sync() == {"embedded": [], "removed": []}
    victim = sorted(cards.glob("*.yaml"))[0]
    victim.write_text(victim.read_text().replace("title: ", "title: Revised ", 1))
    gone = sorted(cards.glob("*.yaml"))[1]
    gone.unlink()
    index = SkillIndex(tmp_path / "db", load_library(cards))
    assert index.sync() == {"embedded": [victim.stem], "removed": [gone.stem]}
    assert index.collection.count() == 2


OPEN_AT = """
import sys, time
from kernelskill.skills_kb.index import SkillIndex
from kernelskill.skills_kb.library import load_library

library = load_library(sys.argv[2])
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # every process opens the fresh index at once
print(SkillIndex(sys.argv[1], library).sync()["embedded"].__len__(), flush=True)
"""


def test_workers_opening_a_fresh_index_at_once_do_not_race(tmp_path):
    import subprocess
    import sys
    import time

    cards = tmp_path / "cards"
    cards.mkdir()
    for p in sorted(CARDS_DIR.glob("*.yaml"))[:2]:
        (cards / p.name).write_text(p.read_text())
    start = str(time.time() + 12)  # after every interpreter has imported Chroma and the encoder
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT, str(tmp_path / "db"), str(cards), start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-600:] for _, err in outs]
    assert sorted(int(out) for out, _ in outs) == [0, 0, 2]  # one embedded the cards, the others found them


def test_retrieval_recall_at_3():
    from kernelskill.skills_kb.index import open_index

    queries = yaml.safe_load(QUERIES.read_text())
    assert len(queries) >= 20
    index = open_index()
    hits = [q["expected"] in [h.skill_id for h in index.search(q["query"], k=3)] for q in queries]
    misses = [q["query"] for q, ok in zip(queries, hits, strict=True) if not ok]
    assert sum(hits) / len(hits) >= 0.9, misses


@pytest.mark.parametrize(
    "query, expected",
    [
        ("numerically stable softmax computed in a single sweep with a running maximum", "online-softmax"),
        ("mean and variance for a normalization layer in one pass", "welford-statistics"),
        ("replay many small kernel launches as one captured graph", "cuda-graphs"),
    ],
)
def test_retrieval_examples(query, expected):
    from kernelskill.skills_kb.index import open_index

    assert expected in [h.skill_id for h in open_index().search(query, k=3)]


def test_every_card_transform_is_implemented_and_named_in_the_offline_banner():
    from kernelskill.cli_common import deterministic_skills
    from kernelskill.engine.transforms import applicable
    from kernelskill.skills_kb.library import default_library

    named = [c for c in default_library().cards.values() if c.transform]
    assert named, "no card names a deterministic transform"
    banner = deterministic_skills()
    for card in named:
        assert "no deterministic transform named" not in (applicable(card.transform, "x") or ""), card.id
        assert f"{card.id} ({card.transform})" in banner
    assert "no deterministic transform named" in applicable("no_such_transform", "x")
