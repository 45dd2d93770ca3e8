"""The deterministic decision policy: metrics + features → bottleneck class → allowed skills.

The policy itself is data (``policy.yaml``): metric aliases (raw profiler names to ours), headroom
tiers, classification rules with priorities, and a decision table from bottleneck class to
preferred and forbidden skills. :func:`decide` evaluates it and returns a :class:`Decision` whose
``trace`` names every rule that fired and the numbers that fired it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .library import Library, default_library
from .schema import BOTTLENECKS, evaluate_predicate, parse_predicate

POLICY_FILE = Path(__file__).parent / "policy.yaml"


@dataclass
class Decision:
    """The policy's verdict for one situation."""

    bottleneck: str
    rule: str
    tier: str
    allowed: list[str]  # skill ids, in policy order
    forbidden: list[str]
    trace: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the graph state."""
        return asdict(self)


@lru_cache(maxsize=2)
def load_policy(path: str = str(POLICY_FILE)) -> dict[str, Any]:
    """Read and check the policy file (rule predicates parse, classes exist)."""
    data = yaml.safe_load(Path(path).read_text())
    for rule in data["rules"]:
        if rule["bottleneck"] not in BOTTLENECKS:
            raise ValueError(f"{path}: rule {rule['id']}: unknown bottleneck {rule['bottleneck']!r}")
        for p in rule.get("all", []) + rule.get("any", []):
            parse_predicate(p)
    for cls in data["table"]:
        if cls not in BOTTLENECKS:
            raise ValueError(f"{path}: table: unknown bottleneck class {cls!r}")
    return data


def normalize_metrics(raw: dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    """Rename raw profiler metrics to the policy's names and derive missing fields."""
    aliases: dict[str, str] = policy.get("aliases", {})
    out = {aliases.get(k, k): v for k, v in raw.items() if v is not None}
    if "sol_pct" in out and "headroom_pct" not in out:
        out["headroom_pct"] = max(0.0, 100.0 - float(out["sol_pct"]))
    return out


def _value_of(pred: str, features: dict[str, Any], metrics: dict[str, Any]) -> Any:
    ns, name, _, _ = parse_predicate(pred)
    return (features if ns == "features" else metrics).get(name)


def _fires(rule: dict[str, Any], features: dict[str, Any], metrics: dict[str, Any]) -> list[str] | None:
    """The predicates that made ``rule`` fire (with actual values), or None."""
    all_preds, any_preds = rule.get("all", []), rule.get("any", [])
    shown: list[str] = []
    for p in all_preds:
        if evaluate_predicate(p, features, metrics) is not True:
            return None
        shown.append(f"{p} (actual {_value_of(p, features, metrics)})")
    if any_preds:
        hits = [p for p in any_preds if evaluate_predicate(p, features, metrics) is True]
        if not hits:
            return None
        shown += [f"{p} (actual {_value_of(p, features, metrics)})" for p in hits]
    return shown


def card_applies(card: Any, features: dict[str, Any], metrics: dict[str, Any]) -> tuple[bool, str]:
    """Whether a card's own predicates allow it here (unknown fields do not block), and why not."""
    for p in card.applies_when:
        if evaluate_predicate(p, features, metrics) is False:
            return False, f"applies_when failed: {p} (actual {_value_of(p, features, metrics)})"
    for p in card.avoid_when:
        if evaluate_predicate(p, features, metrics) is True:
            return False, f"avoid_when holds: {p} (actual {_value_of(p, features, metrics)})"
    return True, ""


def decide(
    features: dict[str, Any],
    raw_metrics: dict[str, Any],
    library: Library | None = None,
    policy: dict[str, Any] | None = None,
) -> Decision:
    """Classify the bottleneck and list the skills the policy allows, with a trace."""
    library = library or default_library()
    policy = policy or load_policy()
    metrics = normalize_metrics(raw_metrics, policy)
    trace: list[str] = []
    bottleneck, rule_id = policy.get("fallback", "code_structure"), "fallback"
    for rule in sorted(policy["rules"], key=lambda r: r.get("priority", 100)):
        fired = _fires(rule, features, metrics)
        if fired is not None:
            bottleneck, rule_id = rule["bottleneck"], rule["id"]
            trace.append(f"{bottleneck}: rule {rule['id']} fired: " + "; ".join(fired))
            break
    else:
        trace.append(f"{bottleneck}: no rule fired; fallback class")
    tier = "unknown"
    primary = metrics.get("sol_pct")
    if primary is not None:
        for t in policy.get("tiers", []):
            if float(primary) < float(t["below"]):
                tier = t["name"]
                break
        trace.append(f"headroom tier {tier}: sol_pct {float(primary):.1f}")
    row = policy["table"].get(bottleneck, {})
    prefer: list[str] = row.get("prefer", [])
    forbid: list[str] = row.get("forbid", [])
    tagged = [cid for cid, c in library.cards.items() if bottleneck in c.bottlenecks]
    ordered = [c for c in prefer if c in library.cards] + sorted(c for c in tagged if c not in prefer)
    allowed: list[str] = []
    for cid in ordered:
        if cid in forbid:
            trace.append(f"{cid}: forbidden for {bottleneck} by the decision table")
            continue
        ok, why = card_applies(library.cards[cid], features, metrics)
        if ok:
            allowed.append(cid)
        else:
            trace.append(f"{cid}: excluded, {why}")
    return Decision(bottleneck, rule_id, tier, allowed, list(forbid), trace)
