"""Graph state: the short-term memory of one optimization, with explicit reducers.

Everything here is plain JSON-like data (TypedDicts), so the SQLite checkpointer can persist every
step and a killed run resumes from its last finished node. Fields without a reducer are
overwritten by the node that returns them; accumulating fields say how they accumulate.
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from kernelskill.runner.result import ReviewResult

Origin = Literal["generator", "compiler", "diagnoser", "optimizer", "reference"]


class Task(TypedDict):
    """The reference problem: a KernelBench-format file."""

    name: str
    path: str
    source: str
    probe: NotRequired[dict[str, Any]]  # the reference run once on the review device: shapes, dtypes, device


class Candidate(TypedDict):
    """One candidate ``ModelNew`` source and where it came from."""

    id: str
    source: str  # empty when the model's reply held no usable code block
    origin: Origin
    parent_id: str | None
    round: int
    note: str  # the plan or repair that produced it, one line
    verdict: NotRequired[dict[str, Any]]  # the diagnoser's verdict (root_cause, evidence, fix_plan)
    partial: NotRequired[str]  # the code of a model reply cut off at the completion limit (no source)


class Plan(TypedDict):
    """The planner's choice for one round."""

    skill_id: str
    title: str
    reason: str  # why the policy allowed it and why it ranks first
    trace: list[str]  # the decision trace: rules that fired, with their numbers
    source: NotRequired[str]  # "policy" (deterministic), "model" (a model-backed planner's verdict) or "draw"
    transform: NotRequired[str]  # offline: the deterministic transform the optimizer applies
    rationale: NotRequired[str]  # the model-backed planner's verdict fields
    expected_effect: NotRequired[str]
    code_region: NotRequired[str]


class Best(TypedDict):
    """Best correct candidate so far and its review."""

    candidate: Candidate
    review: ReviewResult


class TrajectoryEntry(TypedDict):
    """One finished round: what was tried and how it came out."""

    round: int
    candidate_id: str
    skill_id: str | None  # None for the seed round
    plan_reason: str
    outcome: str  # a ReviewStatus, or "abandoned" after the repair budget ran out
    repairs: int
    runtime_ms: float | None
    timing_kind: str | None
    speedup_vs_eager: float | None
    error_digest: str
    improved: bool  # became the new best
    diagnosis: NotRequired[str]  # root cause named by the last repair of this round, if any
    plan: NotRequired[dict[str, Any]]  # the plan's verdict fields (source, rationale, effect, region, transform)


class Attempt(TypedDict):
    """One review of one candidate (every repair attempt included)."""

    candidate_id: str
    round: int
    status: str
    error_digest: str


class Budget(TypedDict):
    """Limits the routers read (copied from the run context by the generator; 0 = no limit)."""

    max_rounds: int
    max_repairs: int
    max_tokens: NotRequired[int]  # input + output tokens of all model calls
    max_wall_s: NotRequired[float]  # wall time since the run started (``elapsed_s``)
    target_sol_pct: NotRequired[float]  # stop once the best reaches this % of speed-of-light
    patience: NotRequired[int]  # stop after this many optimization rounds in a row without improvement


class InputState(TypedDict, total=False):
    """What a caller provides: the task file (and optionally budgets, else the context's)."""

    task_path: str


class State(TypedDict, total=False):
    """The full internal state."""

    task_path: str
    task: Task
    engine: str  # "llm" or "offline" (graph/modes.py), fixed by the generator
    budget: Budget
    round: int  # 0 = seed round; each optimizer call starts the next
    repairs: int  # repairs spent on the current candidate's chain
    current: Candidate  # the candidate under review
    review: ReviewResult  # the latest review (of ``current``)
    best: Best  # best correct candidate so far
    features: dict[str, Any]  # static features of the best candidate
    decision: dict[str, Any]  # the policy's decision (bottleneck, allowed skills, trace)
    plan: Plan | None  # this round's plan; None when nothing applicable is left
    stop_reason: str  # why the run ended (set by the node that ends it)
    started_at: float  # time.time() when the generator ran (wall-time budget)
    search: dict[str, Any]  # seeds, parents (pool width), explore (rate), seed (see graph/search.py)
    pending_seeds: list[Candidate]  # extra seeds the reviewer has still to review
    parents: list[Best]  # the pool of correct candidates, best first
    parent: Best  # this round's parent (graph/search.py)
    search_note: str  # how the parent was chosen
    elapsed_s: float  # seconds since ``started_at``, as of the latest review
    time_left_s: float | None  # seconds to this launch's deadline (graph.deadline) at the latest review
    repairable: bool  # offline: a deterministic repair applies to a failed candidate of this round
    task_error: str  # why the reference task is unusable (the generator's probe); no candidate is then run
    seed_notes: list[str]  # each compiler seed capture: its variant and time, or why it produced no seed
    candidates: Annotated[list[Candidate], operator.add]
    """Every candidate produced, in order (appended)."""
    attempts: Annotated[list[Attempt], operator.add]
    """Every review outcome, repairs included (appended)."""
    trajectory: Annotated[list[TrajectoryEntry], operator.add]
    """One entry per finished round (appended)."""
    failed_plans: Annotated[list[str], operator.add]
    """Skill ids whose round did not improve on the best (appended; never re-planned)."""
    tokens: Annotated[list[dict[str, Any]], operator.add]
    """Token usage per model call: role, input, output (appended)."""


class OutputState(TypedDict, total=False):
    """What a run returns."""

    task: Task
    best: Best
    trajectory: list[TrajectoryEntry]
    stop_reason: str


@functools.cache
def _reducers() -> dict[str, Any]:
    """``{field: reducer}`` for every field of :class:`State` annotated with one (LangGraph's channels)."""
    from typing import get_type_hints

    hints = get_type_hints(State, include_extras=True)
    return {name: hint.__metadata__[0] for name, hint in hints.items() if getattr(hint, "__metadata__", None)}


def apply_update(state: State, update: dict[str, Any]) -> State:
    """The state after a node's ``update``, by the reducers annotated on :class:`State` (what the routers see)."""
    out: dict[str, Any] = {**state}
    reducers = _reducers()
    for key, value in update.items():
        reduce = reducers.get(key)
        out[key] = reduce(state[key], value) if reduce is not None and key in state else value  # type: ignore[literal-required]
    return out  # type: ignore[return-value]
