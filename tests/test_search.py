"""Seeds and best-first search: the parents pool, the parent draw, extra seeds in a scripted run."""

from kernelskill.graph.context import Context
from kernelskill.graph.search import select_parent, update_parents
from kernelskill.runs import execute, new_run

from scripts_util import fenced, write_script


def entry(cid, ms=None):
    review = {"status": "correct", "timing_kind": "cuda_events" if ms else "interpreter", "runtime_ms": ms}
    return {"candidate": {"id": cid}, "review": review}


def test_parents_pool_keeps_the_fastest_first():
    pool = []
    for cid, ms in (("a", 3.0), ("b", None), ("c", 1.0), ("d", 2.0)):
        pool = update_parents(pool, entry(cid, ms), width=3)
    assert [p["candidate"]["id"] for p in pool] == ["c", "d", "a"]
    assert [p["candidate"]["id"] for p in update_parents([], entry("x"), width=0)] == ["x"]


def test_parent_draw_is_best_first_with_exploration_and_deterministic():
    pool = [entry("best", 1.0), entry("other", 2.0)]
    state = {"best": pool[0], "parents": pool, "round": 0, "search": {"explore": 0.0, "seed": 1}}
    assert select_parent(state)[0]["candidate"]["id"] == "best"
    state["search"]["explore"] = 1.0
    parent, why = select_parent(state)
    assert parent["candidate"]["id"] == "other" and "exploring" in why
    state["search"]["explore"] = 0.5
    picks = [select_parent({**state, "round": r})[0]["candidate"]["id"] for r in range(40)]
    assert picks == [select_parent({**state, "round": r})[0]["candidate"]["id"] for r in range(40)]
    assert set(picks) == {"best", "other"}
    assert select_parent({"best": pool[0], "round": 0})[0] is pool[0]  # no pool yet: the best


def test_extra_seed_rescues_a_failed_first_seed(tmp_path, task_path, candidate):
    rules = [
        {"role": "generator", "match": "seed 1 of 2", "reply": fenced(candidate("raises"))},
        {"role": "generator", "match": "seed 2 of 2", "reply": fenced(candidate("good"))},
        {"role": "optimizer", "reply": fenced(candidate("good"))},
    ]
    script = write_script(tmp_path / "script", rules)
    ctx = Context(scripted=str(script), device="cpu", seeds=2, max_rounds=1, max_repairs=0)
    state = execute(new_run(task_path, ctx, root=tmp_path / "runs"))
    assert [(a["candidate_id"], a["status"]) for a in state["attempts"]][:2] == [
        ("r0-generator-0", "runtime_error"),
        ("r0-generator-1", "correct"),
    ]
    assert state["best"]["candidate"]["id"] == "r0-generator-1"
    # the seed round is remembered by its best reviewed candidate: the extra seed
    assert (state["trajectory"][0]["candidate_id"], state["trajectory"][0]["outcome"]) == ("r0-generator-1", "correct")
    assert state["candidates"][-1]["parent_id"] == "r0-generator-1"
    assert [e["round"] for e in state["trajectory"]] == [0, 1]
    assert sum(1 for t in state["tokens"] if t["role"] == "generator") == 2
