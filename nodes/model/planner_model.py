"""Model-backed planning: the model picks one of the policy's allowed skills, with its reasons.

Used only when the planner itself has a model (see :func:`kernelskill.nodes.model.llm.role_has_model`).
A verdict naming a skill the policy does not allow (forbidden, excluded, already failed, unknown)
is rejected and asked again once with the reason; a second rejection falls back to the policy's
first allowed skill. Every step is written into the plan's trace.

Without long-term memory (``Context.memory``), :func:`method_plan` asks the planner's model (its own
or the shared one) to name a method of its own: no allowed list, no policy decision, no card.
"""

from __future__ import annotations

import json
from typing import Any

from kernelskill.graph.context import Context
from kernelskill.graph.memory import trajectory_summary
from kernelskill.graph.search import parent_of
from kernelskill.graph.state import Plan, State
from kernelskill.skills_kb.library import default_library
from kernelskill.skills_kb.policy import Decision
from kernelskill.skills_kb.ranking import Ranked

from .llm import ask_verdict, call_index
from .prompting import render
from .verdicts import MethodVerdict, PlannerVerdict, method_from_text, method_name, planner_from_text


def rejection(skill_id: str, decision: Decision, allowed: list[str], failed: set[str]) -> str:
    """Why ``skill_id`` cannot be this round's plan ("" when it can)."""
    if skill_id in allowed:
        return ""
    if skill_id in failed:
        return f"skill {skill_id!r} was already tried on this task without improving the best"
    if skill_id in decision.forbidden:
        return f"skill {skill_id!r} is forbidden by the policy for bottleneck {decision.bottleneck}"
    if skill_id in decision.excluded:
        return f"skill {skill_id!r} is excluded by the policy: {decision.excluded[skill_id]}"
    if not skill_id:
        return "the reply names no skill"
    return f"skill {skill_id!r} is not in the allowed list"


def _timing(review: dict[str, Any]) -> str:
    if review.get("timing_kind") == "cuda_events":
        return f"{review['runtime_ms']:.4f} ms on GPU"
    return "CPU interpreter run: correctness only"


def _prompt(state: State, decision: Decision, ranked: list[Ranked], correction: str) -> tuple[str, str]:
    best = parent_of(state)
    timing = _timing(dict(best["review"]))
    lib = default_library()
    allowed = "\n".join(f"- {r.skill_id}: {lib.get(r.skill_id).title} [{r.describe()}]" for r in ranked)
    return render(
        "planner",
        task_name=state["task"]["name"],
        round=state.get("round", 0) + 1,
        candidate_id=best["candidate"]["id"],
        candidate=best["candidate"]["source"],
        timing=timing,
        features=json.dumps(state.get("features", {}), sort_keys=True),
        bottleneck=decision.bottleneck,
        decision="\n".join(decision.trace) or "(none)",
        allowed=allowed,
        history=trajectory_summary(state),
        correction=correction,
    )


def model_plan(
    state: State, ctx: Context, decision: Decision, ranked: list[Ranked], fallback: Plan
) -> tuple[Plan, list[dict[str, Any]]]:
    """The model's plan (or ``fallback`` after two rejected verdicts) and the calls' token records."""
    allowed = [r.skill_id for r in ranked]
    failed = set(state.get("failed_plans", []))
    trace = list(fallback["trace"])
    tokens: list[dict[str, Any]] = []
    correction = ""
    for attempt in (1, 2):
        system, user = _prompt(state, decision, ranked, correction)
        index = call_index(state, "planner") + len(tokens)
        verdict, text, usage = ask_verdict(ctx, "planner", system, user, PlannerVerdict, index)
        tokens.append(usage)
        if not isinstance(verdict, PlannerVerdict):
            verdict = planner_from_text(text)
        why = rejection(verdict.skill_id if verdict else "", decision, allowed, failed)
        if verdict is not None and not why:
            trace.append(f"model plan (attempt {attempt}): {verdict.skill_id}: {verdict.rationale}")
            return (
                Plan(
                    skill_id=verdict.skill_id,
                    title=default_library().get(verdict.skill_id).title,
                    reason=f"model-backed planner: {verdict.rationale or '(no rationale)'}; "
                    f"policy: bottleneck {decision.bottleneck} (rule {decision.rule})",
                    trace=trace,
                    source="model",
                    rationale=verdict.rationale,
                    expected_effect=verdict.expected_effect,
                    code_region=verdict.code_region,
                ),
                tokens,
            )
        trace.append(f"model plan rejected (attempt {attempt}): {why}")
        correction = f"\nYour previous answer was rejected: {why}. Choose exactly one of: {', '.join(allowed)}."
    trace.append(f"model plans rejected twice; using the policy's first allowed skill {fallback['skill_id']}")
    return Plan(**{**fallback, "trace": trace, "source": "policy (model plan rejected)"}), tokens


def _method_prompt(state: State, correction: str) -> tuple[str, str]:
    best = parent_of(state)
    return render(
        "planner_without_skills",
        task_name=state["task"]["name"],
        round=state.get("round", 0) + 1,
        candidate_id=best["candidate"]["id"],
        candidate=best["candidate"]["source"],
        timing=_timing(dict(best["review"])),
        features=json.dumps(state.get("features", {}), sort_keys=True),
        history=trajectory_summary(state),
        correction=correction,
    )


def _method_rejection(name: str, failed: set[str]) -> tuple[str, str]:
    """Why a named method cannot be this round's plan, and what to ask for instead (both "" when it can)."""
    if not name:
        return "the reply names no method", "Name exactly one method in skill_id."
    if name in failed:
        return (
            f"method {name!r} was already tried on this task without improving the best",
            f"Name a method other than {', '.join(sorted(failed))}.",
        )
    return "", ""


def method_plan(
    state: State, ctx: Context, failed: set[str], trace: list[str]
) -> tuple[Plan | None, list[dict[str, Any]], str]:
    """Without long-term memory: the method the planner's model names, the calls' token records, and why none.

    A reply that names no method, or one in ``failed`` (the plans already tried, empty without
    short-term memory), is asked again once with the reason; a second such reply gives no plan.
    """
    trace = list(trace)
    tokens: list[dict[str, Any]] = []
    correction = why = ""
    for attempt in (1, 2):
        system, user = _method_prompt(state, correction)
        index = call_index(state, "planner") + len(tokens)
        verdict, text, usage = ask_verdict(ctx, "planner", system, user, MethodVerdict, index)
        tokens.append(usage)
        if isinstance(verdict, PlannerVerdict):
            verdict.skill_id = method_name(verdict.skill_id)
        else:
            verdict = method_from_text(text)
        name = verdict.skill_id if verdict else ""
        why, again = _method_rejection(name, failed)
        if verdict is not None and not why:
            trace.append(f"model plan (attempt {attempt}): {name}: {verdict.rationale}")
            rationale = verdict.rationale or "(no rationale)"
            plan = Plan(
                skill_id=name,
                title=name,
                reason=f"named by the planner's model (no skills knowledge base): {rationale}",
                trace=trace,
                source="model",
                rationale=verdict.rationale,
                expected_effect=verdict.expected_effect,
                code_region=verdict.code_region,
            )
            return plan, tokens, ""
        trace.append(f"model plan rejected (attempt {attempt}): {why}")
        correction = f"\nYour previous answer was rejected: {why}. {again}"
    return None, tokens, f"the planner's model named no method to apply (no long-term memory): {why}"
