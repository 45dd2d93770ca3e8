"""The deterministic decision policy: metrics + features → bottleneck class → allowed skills.

The policy itself is data (``policy.yaml``, documented at its top): metric aliases and unit
conversions, constants, derived fields written in the safe expression language of
:mod:`.expr`, headroom tiers, classification rules with priorities, and a decision table from
bottleneck class to preferred groups and forbidden skills. :func:`decide` evaluates it and returns
a :class:`Decision` whose ``trace`` names the rule that fired and the numbers that fired it, e.g.
``memory_bandwidth: rule dram-saturated fired: metrics.dram_throughput_pct >= 60 (actual 87)``.

Evaluation order: normalize the raw metrics (aliases, units, vocabulary) → compute the derived
fields → the first rule (lowest priority number) whose predicates hold picks the bottleneck class
(else the fallback class) → the headroom tier → the candidate skills (the rule's and the table's
preferred groups, then every other card tagged with the class) minus the table's forbidden ones
minus cards whose own ``applies_when`` / ``avoid_when`` rule them out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .expr import Expr, ExprError, parse_expr
from .library import Library, default_library
from .schema import (
    BOTTLENECKS,
    DERIVED,
    FEATURES,
    METRICS,
    PredicateError,
    evaluate_predicate,
    parse_predicate,
    predicate_value,
)

POLICY_FILE = Path(__file__).parent / "policy.yaml"


class PolicyError(ValueError):
    """A policy file that fails validation; the message names the file and the entry."""


@dataclass(frozen=True)
class Rule:
    """One classification rule: predicates that, when they hold, name the bottleneck class."""

    id: str
    bottleneck: str
    priority: int
    all: tuple[str, ...] = ()
    any: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    prefer: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class TableRow:
    """The decision table's entry for one bottleneck class."""

    prefer: tuple[tuple[str, ...], ...] = ()
    forbid: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """A loaded and validated ``policy.yaml``."""

    path: str
    fallback: str
    aliases: dict[str, tuple[str, float]]
    units: tuple[tuple[str, str, float], ...]
    constants: dict[str, float]
    derived: dict[str, Expr]
    tier_by: str
    tiers: tuple[tuple[str, float], ...]  # (name, upper bound); the last bound is +inf
    rules: tuple[Rule, ...]  # sorted by priority
    table: dict[str, TableRow]
    prior_weight: float
    retire_after: int = 4  # offline, kernels any: GPU-timed losses under one rule after which a skill is not spent
    retire_gain: float = -0.2  # ... when its mean gain there is at most this


@dataclass
class Decision:
    """The policy's verdict for one situation."""

    bottleneck: str
    rule: str
    tier: str
    allowed: list[str]  # skill ids: preferred groups in order, then the rest by id
    forbidden: list[str]  # the table's forbid list for the class
    trace: list[str] = field(default_factory=list)  # what fired and why (goes into prompts)
    prefer: list[list[str]] = field(default_factory=list)  # preferred groups, allowed ids only
    excluded: dict[str, str] = field(default_factory=dict)  # skill id -> why it is not allowed
    metrics: dict[str, Any] = field(default_factory=dict)  # normalized metrics
    derived: dict[str, Any] = field(default_factory=dict)  # derived fields (None = unknown)
    notes: list[str] = field(default_factory=list)  # normalization notes (renames, conversions, ignored)
    rules_checked: list[str] = field(default_factory=list)  # rules before the one that fired, and why not

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the graph state."""
        return asdict(self)

    def group_of(self, skill_id: str) -> int:
        """Index of the preferred group holding ``skill_id``; ``len(prefer)`` for the rest."""
        for i, group in enumerate(self.prefer):
            if skill_id in group:
                return i
        return len(self.prefer)


def fmt(value: Any) -> str:
    """A number as the trace shows it: ``87``, ``35.5``, ``0.00123``, ``true``; ``?`` when unknown."""
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


# --- loading ---------------------------------------------------------------------------------


def _groups(raw: Any, where: str) -> tuple[tuple[str, ...], ...]:
    """A prefer list: entries are ids (a group of one) or lists of ids (one group)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(f"{where}: prefer must be a list of ids or of lists of ids")
    out: list[tuple[str, ...]] = []
    for entry in raw:
        group = entry if isinstance(entry, list) else [entry]
        if not group or not all(isinstance(s, str) for s in group):
            raise PolicyError(f"{where}: prefer entry {entry!r} is not an id or a list of ids")
        out.append(tuple(group))
    return tuple(out)


def _predicates(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(f"{where}: expected a list of predicates")
    for p in raw:
        try:
            parse_predicate(str(p))
        except PredicateError as e:
            raise PolicyError(f"{where}: {e}") from None
    return tuple(str(p) for p in raw)


def parse_policy(data: Any, path: str = "policy.yaml") -> Policy:
    """Validate a policy mapping (as read from YAML) into a :class:`Policy`."""
    name = Path(path).name
    if not isinstance(data, dict):
        raise PolicyError(f"{name}: expected a mapping at top level")
    fallback = data.get("fallback", "code_structure")
    if fallback not in BOTTLENECKS:
        raise PolicyError(f"{name}: fallback: unknown bottleneck class {fallback!r}")

    aliases: dict[str, tuple[str, float]] = {}
    for raw, target in (data.get("aliases") or {}).items():
        to, scale = (target.get("to"), target.get("scale", 1)) if isinstance(target, dict) else (target, 1)
        if to not in METRICS:
            raise PolicyError(f"{name}: aliases.{raw}: {to!r} is not a metric in skills_kb/schema.py METRICS")
        aliases[str(raw)] = (str(to), float(scale))
    units: list[tuple[str, str, float]] = []
    for i, u in enumerate(data.get("units") or []):
        if not isinstance(u, dict) or not {"suffix", "to", "scale"} <= set(u):
            raise PolicyError(f"{name}: units[{i}]: want {{suffix, to, scale}}, got {u!r}")
        units.append((str(u["suffix"]), str(u["to"]), float(u["scale"])))
    constants = {str(k): float(v) for k, v in (data.get("constants") or {}).items()}

    derived: dict[str, Expr] = {}
    for dname, text in (data.get("derived") or {}).items():
        if dname not in DERIVED:
            raise PolicyError(f"{name}: derived.{dname}: not listed in skills_kb/schema.py DERIVED")
        vocab = {"metrics": METRICS, "features": FEATURES, "derived": dict.fromkeys(derived), "const": constants}
        try:
            derived[dname] = parse_expr(str(text), vocab)
        except ExprError as e:
            raise PolicyError(f"{name}: derived.{dname}: {e}") from None
    missing = [d for d in DERIVED if d not in derived]
    if missing:
        raise PolicyError(f"{name}: derived: no formula for {', '.join(missing)} (listed in schema.py DERIVED)")

    tiers_raw = data.get("tiers") or {}
    tier_by = str(tiers_raw.get("by", "derived.limiter_pct"))
    try:
        parse_predicate(f"{tier_by} >= 0")
    except PredicateError as e:
        raise PolicyError(f"{name}: tiers.by: {e}") from None
    tiers: list[tuple[str, float]] = []
    for i, level in enumerate(tiers_raw.get("levels") or []):
        if not isinstance(level, dict) or "name" not in level:
            raise PolicyError(f"{name}: tiers.levels[{i}]: want {{name, below}}")
        tiers.append((str(level["name"]), float(level.get("below", math.inf))))

    rules: list[Rule] = []
    seen: set[str] = set()
    for i, r in enumerate(data.get("rules") or []):
        rid = r.get("id", f"#{i}") if isinstance(r, dict) else f"#{i}"
        where = f"{name}: rules[{i}] ({rid})"
        if not isinstance(r, dict) or "id" not in r:
            raise PolicyError(f"{where}: a rule needs an id")
        if rid in seen:
            raise PolicyError(f"{where}: duplicate rule id")
        seen.add(rid)
        if r.get("bottleneck") not in BOTTLENECKS:
            raise PolicyError(f"{where}: unknown bottleneck {r.get('bottleneck')!r}")
        rule = Rule(
            id=rid,
            bottleneck=r["bottleneck"],
            priority=int(r.get("priority", 100)),
            all=_predicates(r.get("all"), where),
            any=_predicates(r.get("any"), where),
            none=_predicates(r.get("none"), where),
            prefer=_groups(r.get("prefer"), where),
        )
        if not rule.all and not rule.any:
            raise PolicyError(f"{where}: needs `all` or `any` predicates")
        rules.append(rule)
    rules.sort(key=lambda x: x.priority)

    table: dict[str, TableRow] = {}
    for cls, row in (data.get("table") or {}).items():
        if cls not in BOTTLENECKS:
            raise PolicyError(f"{name}: table: unknown bottleneck class {cls!r}")
        row = row or {}
        table[cls] = TableRow(_groups(row.get("prefer"), f"{name}: table.{cls}"), tuple(row.get("forbid") or ()))
    ranking = data.get("ranking") or {}
    weight = float(ranking.get("prior_weight", 0.5))
    if weight < 0:
        raise PolicyError(f"{name}: ranking.prior_weight must be >= 0")
    retire_after = int(ranking.get("retire_after", 4))
    if retire_after < 1:
        raise PolicyError(f"{name}: ranking.retire_after must be >= 1")
    retire_gain = float(ranking.get("retire_gain", -0.2))
    return Policy(
        path,
        fallback,
        aliases,
        tuple(units),
        constants,
        derived,
        tier_by,
        tuple(tiers),
        tuple(rules),
        table,
        weight,
        retire_after,
        retire_gain,
    )


@lru_cache(maxsize=4)
def load_policy(path: str = str(POLICY_FILE)) -> Policy:
    """Read and validate the policy file (cached per path)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise PolicyError(f"{Path(path).name}: not valid YAML: {e}") from None
    return parse_policy(data, path)


def policy_errors(policy: Policy, library: Library) -> list[str]:
    """Skill ids the policy names that no card defines (one message each)."""
    errors = []
    for cls, row in policy.table.items():
        for sid in [s for g in row.prefer for s in g] + list(row.forbid):
            if sid not in library.cards:
                errors.append(f"table.{cls} names unknown skill {sid!r}")
    for rule in policy.rules:
        for sid in (s for g in rule.prefer for s in g):
            if sid not in library.cards:
                errors.append(f"rule {rule.id} prefers unknown skill {sid!r}")
    return errors


# --- evaluation ------------------------------------------------------------------------------


def _number(value: Any) -> Any:
    """A metric value as a number (bools kept); None when it is not one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else value
    if isinstance(value, str):
        try:
            return float(value.replace(",", "").rstrip("%").strip())
        except ValueError:
            return None
    return None


def normalize_metrics(raw: dict[str, Any], policy: Policy) -> tuple[dict[str, Any], list[str]]:
    """Rename and convert raw profiler metrics to the policy's names; returns (metrics, notes).

    Names already in the vocabulary win over aliases and unit conversions of the same metric.
    Values that are not numbers or negative, and names outside :data:`~.schema.METRICS`, are dropped
    with a note.
    """
    out: dict[str, Any] = {}
    notes: list[str] = []
    converted: list[tuple[str, str, Any]] = []
    for key, value in raw.items():
        if value is None:
            continue
        num = _number(value)
        if num is None:
            notes.append(f"ignored {key}: not a number ({value!r})")
            continue
        if not isinstance(num, bool) and num < 0:  # times, shares, counts and rates are never negative
            notes.append(f"ignored {key}: negative ({value!r})")
            continue
        if key in METRICS:
            out[key] = num
            continue
        if key in policy.aliases:
            to, scale = policy.aliases[key]
        else:
            rule = next(((s, t, f) for s, t, f in policy.units if key.endswith(s)), None)
            if rule is None:
                notes.append(f"ignored {key}: not a metric the policy knows (skills_kb/schema.py METRICS)")
                continue
            to, scale = key[: -len(rule[0])] + rule[1], rule[2]
            if to not in METRICS:
                notes.append(f"ignored {key}: {to} is not a metric the policy knows")
                continue
        converted.append((key, to, num * scale if scale != 1 and not isinstance(num, bool) else num))
    for key, to, num in converted:
        if to in out:
            notes.append(f"ignored {key}: {to} is given directly")
            continue
        out[to] = num
        notes.append(f"{key} -> {to} = {fmt(num)}")
    return out, notes


def compute_derived(policy: Policy, features: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """Every derived field, in declaration order (None when its inputs are unknown)."""
    derived: dict[str, Any] = {}
    scope = {"metrics": metrics, "features": features, "derived": derived, "const": policy.constants}
    for name, expr in policy.derived.items():
        derived[name] = expr.evaluate(scope)
    return derived


class _Situation:
    """Features, normalized metrics and derived fields, with trace-friendly lookups."""

    def __init__(self, policy: Policy, features: dict[str, Any], metrics: dict[str, Any]) -> None:
        self.policy = policy
        self.features = features
        self.metrics = metrics
        self.derived = compute_derived(policy, features, metrics)

    def value(self, ref: str) -> Any:
        ns, _, name = ref.partition(".")
        return {"features": self.features, "metrics": self.metrics, "derived": self.derived}[ns].get(name)

    def holds(self, pred: str) -> bool | None:
        return evaluate_predicate(pred, self.features, self.metrics, self.derived)

    def actual(self, ref: str) -> str:
        """``87`` or, for a derived field, ``25 from metrics.sol_pct=25``."""
        text = fmt(self.value(ref))
        ns, _, name = ref.partition(".")
        if ns == "derived" and name in self.policy.derived:
            scope = {"metrics": self.metrics, "features": self.features, "derived": self.derived}
            inputs = [f"{i}.{n}={fmt(self.value(f'{i}.{n}'))}" for i, n in self.policy.derived[name].inputs(scope)]
            if inputs:
                text += " from " + ", ".join(inputs)
        return text

    def shown(self, pred: str) -> str:
        ns, name, _, _ = parse_predicate(pred)
        return f"{pred} (actual {self.actual(f'{ns}.{name}')})"

    def fires(self, rule: Rule) -> tuple[list[str] | None, str]:
        """(the predicates that made ``rule`` fire, shown with their values, or None; why not)."""
        shown: list[str] = []
        for p in rule.all:
            if self.holds(p) is not True:
                return None, f"{self.shown(p)} is not true"
            shown.append(self.shown(p))
        if rule.any:
            hits = [p for p in rule.any if self.holds(p) is True]
            if not hits:
                return None, "no `any` predicate is true: " + "; ".join(self.shown(p) for p in rule.any)
            shown += [self.shown(p) for p in hits]
        for p in rule.none:
            if self.holds(p) is True:
                return None, f"{self.shown(p)} holds"
        return shown, ""


def card_applies(
    card: Any, features: dict[str, Any], metrics: dict[str, Any], derived: dict[str, Any] | None = None
) -> tuple[bool, str]:
    """Whether a card's own predicates allow it here (unknown fields do not block), and why not."""
    for p in card.applies_when:
        if evaluate_predicate(p, features, metrics, derived) is False:
            return False, f"applies_when failed: {p} (actual {fmt(predicate_value(p, features, metrics, derived))})"
    for p in card.avoid_when:
        if evaluate_predicate(p, features, metrics, derived) is True:
            return False, f"avoid_when holds: {p} (actual {fmt(predicate_value(p, features, metrics, derived))})"
    return True, ""


def _tier(policy: Policy, sit: _Situation) -> tuple[str, str]:
    value = sit.value(policy.tier_by)
    if value is None or isinstance(value, bool):
        return "unknown", f"headroom tier unknown: {policy.tier_by} unknown (no speed-of-light or ncu throughput)"
    floor = -math.inf
    for name, below in policy.tiers:
        if float(value) < below:
            bound = f"below {fmt(below)}" if below != math.inf else f"at or above {fmt(floor)}"
            return name, f"headroom tier {name}: {policy.tier_by} = {sit.actual(policy.tier_by)} ({bound})"
        floor = below
    return "unknown", f"headroom tier unknown: {policy.tier_by} = {fmt(value)} above every level"


def decide(
    features: dict[str, Any],
    raw_metrics: dict[str, Any],
    library: Library | None = None,
    policy: Policy | None = None,
) -> Decision:
    """Classify the bottleneck and list the skills the policy allows, with a trace."""
    library = library or default_library()
    policy = policy or load_policy()
    metrics, notes = normalize_metrics(raw_metrics or {}, policy)
    sit = _Situation(policy, features or {}, metrics)
    trace: list[str] = []
    checked: list[str] = []
    chosen: Rule | None = None
    for rule in policy.rules:
        fired, why_not = sit.fires(rule)
        if fired is not None:
            chosen = rule
            trace.append(f"{rule.bottleneck}: rule {rule.id} fired: " + "; ".join(fired))
            break
        checked.append(f"rule {rule.id} ({rule.bottleneck}) did not fire: {why_not}")
    if chosen is None:
        bottleneck, rule_id = policy.fallback, "fallback"
        trace.append(f"{bottleneck}: no rule fired; fallback class")
    else:
        bottleneck, rule_id = chosen.bottleneck, chosen.id
    tier, tier_line = _tier(policy, sit)
    trace.append(tier_line)

    row = policy.table.get(bottleneck, TableRow())
    groups: list[list[str]] = []
    placed: set[str] = set()
    for group in (chosen.prefer if chosen else ()) + row.prefer:
        ids = [s for s in group if s in library.cards and s not in placed]
        placed.update(ids)
        if ids:
            groups.append(ids)
    tagged = sorted(cid for cid, c in library.cards.items() if bottleneck in c.bottlenecks and cid not in placed)
    allowed: list[str] = []
    excluded: dict[str, str] = {}
    for cid in [s for g in groups for s in g] + tagged:
        if cid in row.forbid:
            excluded[cid] = f"forbidden for {bottleneck} by the decision table"
            continue
        ok, why = card_applies(library.cards[cid], sit.features, metrics, sit.derived)
        if ok:
            allowed.append(cid)
        else:
            excluded[cid] = why
    trace += [f"{cid}: excluded, {why}" for cid, why in excluded.items()]
    prefer = [[s for s in g if s in allowed] for g in groups]
    return Decision(
        bottleneck=bottleneck,
        rule=rule_id,
        tier=tier,
        allowed=allowed,
        forbidden=list(row.forbid),
        trace=trace,
        prefer=[g for g in prefer if g],
        excluded=excluded,
        metrics=metrics,
        derived=sit.derived,
        notes=notes,
        rules_checked=checked,
    )
