"""Readable explanations of a policy decision and of the skill priors (for ``kernelskill skills``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .policy import Decision, Policy, fmt
from .priors import Prior
from .ranking import Ranked


def explain_decision(decision: Decision, policy: Policy, ranked: Sequence[Ranked] | None = None) -> str:
    """Every step of a decision: metrics, derived fields, rules, class, tier, skills (and ranking)."""
    out: list[str] = []
    out.append("Metrics (normalized):")
    out += [f"  {k} = {fmt(v)}" for k, v in sorted(decision.metrics.items())] or ["  (none: features only)"]
    out += [f"  note: {n}" for n in decision.notes]
    out.append("Derived fields (policy.yaml `derived`):")
    for name, expr in policy.derived.items():
        out.append(f"  {name} = {fmt(decision.derived.get(name))}    [{expr.text}]")
    out.append("Rules, in priority order:")
    out += [f"  - {line}" for line in decision.rules_checked]
    fired = decision.trace[0] if decision.trace else ""
    if decision.rule == "fallback":
        out.append(f"  no rule fired: fallback class {decision.bottleneck}")
    else:
        out.append(f"  * {fired}")
    out.append(f"Bottleneck: {decision.bottleneck} (rule {decision.rule})")
    tier_line = next((t for t in decision.trace if t.startswith("headroom tier")), f"headroom tier {decision.tier}")
    out.append(f"Tier: {tier_line.removeprefix('headroom tier ')}")
    if decision.prefer:
        out.append("Preferred groups (tried first, group by group):")
        out += [f"  {i + 1}. {', '.join(g)}" for i, g in enumerate(decision.prefer)]
    out.append(f"Allowed ({len(decision.allowed)}): {', '.join(decision.allowed) or '(none)'}")
    if decision.forbidden:
        out.append(f"Forbidden for {decision.bottleneck} by the decision table: {', '.join(decision.forbidden)}")
    if decision.excluded:
        out.append(f"Excluded ({len(decision.excluded)}):")
        out += [f"  {sid}: {why}" for sid, why in decision.excluded.items()]
    if ranked is not None:
        out.append(f"Ranking (score = similarity + {policy.prior_weight:g} x (win rate - 0.5)):")
        out += [f"  {i + 1}. {r.describe()}" for i, r in enumerate(ranked)] or ["  (nothing allowed)"]
    return "\n".join(out)


def priors_table(priors: Mapping[str, Prior]) -> str:
    """One line per skill, best smoothed win rate first."""
    head = f"{'skill':32} {'tries':>5} {'wins':>5} {'fails':>5} {'win rate':>8} {'mean gain':>9} {'interp':>6}"
    rows = [head]
    for p in sorted(priors.values(), key=lambda p: (-p.win_rate, -p.tries, p.skill_id)):
        gain = f"{p.mean_gain:+.1%}" if p.mean_gain is not None else "-"
        counts = f"{p.tries:>5} {p.wins:>5} {p.failures:>5}"
        rows.append(f"{p.skill_id:32} {counts} {p.win_rate:>8.2f} {gain:>9} {p.uninformative:>6}")
    return "\n".join(rows)
