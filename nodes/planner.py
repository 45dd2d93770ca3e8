"""planner: the decision policy filters the skills; similarity and prior outcomes rank them; one is chosen.

1. **Policy** (``skills_kb/policy.yaml``): the best candidate's profile metrics and code features
   give a bottleneck class (with a trace naming the rule and its numbers), the allowed skills and
   their preferred groups.
2. **Similarity**: each allowed card's cosine similarity (Chroma) to a description of the current
   situation (task, reference ops, bottleneck, kernel traits, signals).
3. **Priors**: each skill's smoothed win rate on earlier tasks, from the outcome store next to the
   run directories (``skill_outcomes.jsonl``; GPU-timed rounds only).

Offline (no model, ``graph/modes.py``) only skills with a deterministic transform
(``engine/transforms.py``) that applies to the parent are candidates, ranked by policy group and
prior alone (no embedding model is needed); a transform already tried on this task is not tried
again. When the policy allows none of them, the remaining deterministic skills are tried anyway
(offline exploration, named in the trace): each result is measured and kept only if it is faster.
Under ``kernels = any`` a skill whose GPU-timed rounds under the same policy rule only lost (at least
``retire_after`` of them, mean gain at most ``retire_gain``: ``policy.yaml``) is not spent again; the
trace says so (with ``kernels = custom`` a slower custom candidate may still be the answer).

With a model configured for the planner itself (``planner_model``, or a scripted / replayed
planner), the model chooses among the ranked allowed skills (``nodes/model/planner_model.py``); otherwise
the top-ranked skill is the plan.

Sort key: ``(preferred group, -(similarity + prior_weight * (win_rate - 0.5)), skill id)`` (see
``skills_kb/ranking.py``). A skill whose round did not improve the best on this task (it failed, was
slower, or was correct without GPU timings to show a gain) is never chosen again; the trace says which.

The memory switch (``Context.memory``) changes what this node reads, not where the graph goes:

- without long-term memory (``no-long-term``, ``none``) there is no policy decision, no card, no
  similarity and no prior: offline, the plan is a uniform draw over the transforms that apply to the
  parent (``engine.transforms.TRANSFORMS``), seeded by the run seed and the round; with a model, the
  planner's model names a method of its own (``nodes/model/planner_model.method_plan``);
- without short-term memory (``no-short-term``, ``none``) the tried plans are not read
  (``graph.memory.recall``), so a plan that already failed can be chosen again.
"""

from __future__ import annotations

import random
from typing import Any

from langgraph.runtime import Runtime

from kernelskill.graph.context import Context
from kernelskill.graph.memory import recall, tried_plans
from kernelskill.graph.modes import on_cuda
from kernelskill.graph.search import parent_of
from kernelskill.graph.state import Plan, State
from kernelskill.skills_kb.index import open_index
from kernelskill.skills_kb.library import default_library
from kernelskill.skills_kb.outcomes import store_for
from kernelskill.skills_kb.policy import Decision, card_applies, decide, load_policy
from kernelskill.skills_kb.priors import load_priors, retired, summarize
from kernelskill.skills_kb.ranking import Ranked, rank
from kernelskill.skills_kb.situation import describe_situation

from .model.candidates import run_dir
from .model.llm import role_has_model
from .model.planner_model import method_plan, model_plan

SHOWN = 5  # ranked skills named in the plan's trace
# Skills whose method the CPU interpreter cannot run or measure: not offered there.
NEEDS_GPU = {
    "autotune-configs": "several @triton.autotune configs need a GPU to time",
    "cuda-graphs": "CUDA graph capture needs CUDA",
}
NO_LONG_TERM = "no long-term memory: no policy decision, skill cards or priors"


def _why(top: Ranked) -> str:
    place = f"preferred group {top.group + 1} of the policy" if top.preferred else "allowed, not preferred"
    return f"{place}; similarity {top.similarity:.3f}; prior {top.prior.describe()}"


def planner(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Node: choose this round's plan, or None when nothing applicable is left."""
    ctx = runtime.context or Context()
    state = recall(state, ctx)  # without short-term memory: no trajectory, no tried plans
    if not ctx.long_term_memory():
        return _plan_without_skills(state, ctx)
    features = state.get("features", {}) or {}
    metrics = parent_of(state)["review"].get("metrics", {}) or {}
    decision = decide(features, metrics)
    failed = set(state.get("failed_plans", []))
    trace = list(decision.trace)
    unrunnable = {} if on_cuda(ctx) else {s: why for s, why in NEEDS_GPU.items() if s in decision.allowed}
    if unrunnable:
        trace.append("not runnable here (CPU interpreter): " + "; ".join(f"{s} ({w})" for s, w in unrunnable.items()))
    open_ids = [s for s in decision.allowed if s not in failed and s not in unrunnable]
    if state.get("search_note"):
        trace.append(f"search: {state['search_note']}")
    if failed & set(decision.allowed):
        tried = tried_plans(state)
        skipped = sorted(failed & set(decision.allowed))
        trace.append(
            "already tried on this task, skipped: " + "; ".join(f"{s} ({tried.get(s, 'tried')})" for s in skipped)
        )
    if state.get("engine") == "offline":  # explores even when the policy allows no skill at all
        return _offline_plan(state, ctx, decision, open_ids, failed, trace)
    if not open_ids:
        return {
            "decision": decision.to_dict(),
            "plan": None,
            "stop_reason": f"no applicable skill left for bottleneck {decision.bottleneck} "
            f"(failed: {', '.join(sorted(failed)) or 'none'})",
        }
    task = state.get("task") or {}
    query = describe_situation(decision, features, task.get("name", ""), task.get("source", ""))
    hits = open_index(ctx.skills_db).search(query, k=len(open_ids), among=open_ids)
    priors = load_priors(store_for(run_dir(ctx), ctx.postgres()))
    ranked = rank(decision, {h.skill_id: h.similarity for h in hits}, priors, load_policy().prior_weight, failed)
    trace.append("ranking: " + "; ".join(f"{i + 1}. {r.describe()}" for i, r in enumerate(ranked[:SHOWN])))
    top = ranked[0]
    plan = Plan(
        skill_id=top.skill_id,
        title=default_library().get(top.skill_id).title,
        reason=f"bottleneck {decision.bottleneck} (rule {decision.rule}); {_why(top)}; "
        f"{len(ranked) - 1} other allowed skill(s) left",
        trace=trace,
        source="policy",
    )
    update: dict[str, Any] = {"decision": decision.to_dict(), "plan": plan}
    if role_has_model(ctx, "planner"):
        update["plan"], update["tokens"] = model_plan(state, ctx, decision, ranked, plan)
    return update


def _retired(records: list[dict[str, Any]], ctx: Context, decision: Decision, usable: dict[str, str]) -> dict[str, str]:
    """Offline under ``kernels = any``: the usable skills whose rounds under this rule only lost (``{id: why}``).

    The same transform in the same situation (policy rule) lost at least ``retire_after`` GPU-timed times
    with a mean gain of at most ``retire_gain`` (``policy.yaml``, ranking): the round is not spent again.
    Under ``kernels = custom`` a slower custom candidate can still be the answer, so nothing is retired.
    """
    if ctx.kernels != "any" or not usable or not decision.rule:
        return {}
    policy = load_policy()
    by_rule = summarize(r for r in records if r.get("rule") == decision.rule)
    out = {}
    for sid in sorted(usable):
        prior = by_rule.get(sid)
        if retired(prior, policy.retire_after, policy.retire_gain):
            out[sid] = prior.describe() if prior else "no GPU-timed tries"
    return out


def _used_transforms(state: State) -> set[str]:
    """The transforms of the rounds so far (a round planned before plans named theirs: its card's)."""
    cards = default_library().cards
    used = set()
    for e in state.get("trajectory", []):
        transform = (e.get("plan") or {}).get("transform")
        if not transform and e.get("skill_id") in cards:
            transform = cards[e["skill_id"] or ""].transform
        if transform:
            used.add(transform)
    return used


def _plan_without_skills(state: State, ctx: Context) -> dict[str, Any]:
    """Without long-term memory: offline, a seeded draw over the applicable transforms; else the model's own method."""
    trace = [NO_LONG_TERM]
    if state.get("search_note"):
        trace.append(f"search: {state['search_note']}")
    failed = set(state.get("failed_plans", []))
    if failed:
        trace.append("already tried on this task, not planned again: " + ", ".join(sorted(failed)))
    if state.get("engine") == "offline":
        return _drawn_transform(state, ctx, failed, trace)
    plan, tokens, why = method_plan(state, ctx, failed, trace)
    update: dict[str, Any] = {"decision": {}, "plan": plan, "tokens": tokens}
    if plan is None:
        update["stop_reason"] = why
    return update


def _drawn_transform(state: State, ctx: Context, failed: set[str], trace: list[str]) -> dict[str, Any]:
    """Offline without long-term memory: one transform drawn uniformly among those that apply to the parent."""
    from kernelskill.engine.transforms import TRANSFORMS, applicable

    source = parent_of(state)["candidate"]["source"]
    used = _used_transforms(state) | failed
    usable, skipped = [], []
    for transform in TRANSFORMS:
        why = "already tried on this task" if transform in used else applicable(transform, source)
        if why:
            skipped.append(f"{transform} ({why})")
        else:
            usable.append(transform)
    if skipped:
        trace.append("offline: not applicable: " + "; ".join(skipped))
    if not usable:
        return {
            "decision": {},
            "plan": None,
            "stop_reason": "offline, no long-term memory: no transform left to apply: " + "; ".join(skipped),
        }
    rnd = state.get("round", 0) + 1
    seed = (state.get("search") or {}).get("seed", ctx.seed)
    pick = random.Random(f"{seed}-{rnd}-transform").choice(usable)
    why = (
        f"offline, no long-term memory: uniform draw over the {len(usable)} applicable transform(s) "
        f"({', '.join(usable)}), seeded by the run seed {seed} and round {rnd}"
    )
    trace.append(why)
    plan = Plan(skill_id=pick, title=f"transform {pick}", reason=why, trace=trace, source="draw", transform=pick)
    return {"decision": {}, "plan": plan}


def _offline_plan(
    state: State,
    ctx: Context,
    decision: Decision,
    open_ids: list[str],
    failed: set[str],
    trace: list[str],
) -> dict[str, Any]:
    """Offline: the best-ranked allowed skill with an applicable deterministic transform."""
    from kernelskill.engine.transforms import applicable

    lib = default_library()
    source = parent_of(state)["candidate"]["source"]
    features = state.get("features", {}) or {}
    used = _used_transforms(state)
    usable: dict[str, str] = {}
    skipped = []
    for card in lib.cards.values():
        if not card.transform or card.id in failed:
            continue
        why = "transform already tried on this task" if card.transform in used else applicable(card.transform, source)
        if not why and card.id in decision.forbidden:
            why = f"forbidden for {decision.bottleneck} by the decision table"
        if not why:
            ok, reason = card_applies(card, features, decision.metrics, decision.derived)
            why = "" if ok else reason
        if why:
            skipped.append(f"{card.id} ({why})")
        else:
            usable[card.id] = card.transform
    allowed = [s for s in open_ids if s in usable]
    if skipped:
        trace.append("offline: not applicable: " + "; ".join(sorted(skipped)))
    records = store_for(run_dir(ctx), ctx.postgres()).read()  # once: the priors and the retired skills
    retired_ids = _retired(records, ctx, decision, usable)
    if retired_ids:
        trace.append(
            f"long-term memory: not spent again under rule {decision.rule}: "
            + "; ".join(f"{k} ({v})" for k, v in retired_ids.items())
        )
        allowed = [s for s in allowed if s not in retired_ids]
        usable = {k: v for k, v in usable.items() if k not in retired_ids}
    priors = summarize(records)
    if allowed:
        ranked = rank(decision, {}, priors, load_policy().prior_weight, set(decision.allowed) - set(allowed))
        top, why = ranked[0], f"offline: deterministic skill allowed by the policy; {_why(ranked[0])}"
        skill_id = top.skill_id
    elif usable:
        skill_id = sorted(usable)[0]
        why = (
            f"offline exploration: the policy allows no deterministic skill for bottleneck {decision.bottleneck}; "
            f"trying {skill_id} (measured, kept only if faster)"
        )
    else:
        return {
            "decision": decision.to_dict(),
            "plan": None,
            "stop_reason": f"offline: no deterministic skill left to apply (bottleneck {decision.bottleneck}): "
            + (
                "; ".join(
                    sorted(skipped)
                    + [f"{k} (only losses under rule {decision.rule}: {v})" for k, v in retired_ids.items()]
                )
                or "none is defined"
            ),
        }
    trace.append(why)
    plan = Plan(
        skill_id=skill_id,
        title=lib.get(skill_id).title,
        reason=f"bottleneck {decision.bottleneck} (rule {decision.rule}); {why}; transform {usable[skill_id]}",
        trace=trace,
        source="policy",
        transform=usable[skill_id],
    )
    return {"decision": decision.to_dict(), "plan": plan}
