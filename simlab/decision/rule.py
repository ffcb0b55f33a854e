"""The decision rule: from per-unit measurements of every arm to one choice, its tie set, and whether the answer
is settled. Nothing here runs a simulation; every test is in simlab/decision/compare.py.

Rule "constrained" (the default), on the scenario's [decision] table:
1. Feasible: batch throughput >= throughput_fraction x the reference arm's, unit by unit (paired), within the
   throughput margin (a shortfall smaller than the margin is no shortfall), shown by a one-sided t-test at
   alpha = 1 - level; infeasible when shown below; otherwise undecided (not eligible).
2. The leader is the feasible arm with the lowest mean P95. The tie set: the feasible arms not shown worse than
   the leader by more than p95_margin x its P95 (Holm over the arms): those shown within the margin
   ("equivalent") and those the units cannot yet tell apart ("undecided").
3. Within the tie set, the arm with the highest mean throughput; the arms not shown below it by more than
   throughput_margin tie on throughput too.
4. The pick: the simplest of those (static before adaptive before the other families, fewer options changed
   from production, rounder values), then the highest throughput, then the lowest P95.
5. No arm of the tie set may dominate the pick (compare.dominators, Holm: better by more than a margin on one
   axis, no worse by a margin on the other): the choice moves to the dominator with the highest throughput (then
   lowest P95) until none is left.
Rule "slo": the same with the axes swapped: feasible when P95 is shown under the SLO (or, when no arm can be,
under the batch-absent bound x (1 + bound_tolerance) where that is above the SLO), within the P95 margin; the leader has the highest
throughput; P95 decides the ties within the tie set.

An undecided arm counts in a tie set when its point estimate is within the margin (the best guess the units
allow). Settled: the choice is the same with every undecided arm counted in, every one counted out, and each
one counted the other way; and with each arm of undecided feasibility counted feasible. Otherwise the arms that move it
are named ("unsettling") and racing (simlab/decision/racing.py) measures more units.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from simlab.decision.compare import (Arm, Axis, alpha_of, axes, dominators, equivalent, holm, p_above,
                                     p_below, units_to_decide, worse_beyond)

FEASIBILITY = ("yes", "no", "undecided")
STANDINGS = ("leader", "equivalent", "undecided", "out")
IN = ("leader", "equivalent", "undecided")  # in the tie set


def _round_score(value) -> float:
    """Fewer significant digits is rounder: 15 -> 2, 20 -> 1, 0.3 -> 1, 12.5 -> 3."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0 or not math.isfinite(value):
        return 0.0
    digits = f"{abs(value):.6g}".replace(".", "").lstrip("0").rstrip("0")
    return float(len(digits))


def simplicity(arm: Arm, defaults: dict) -> tuple:
    changed = [k for k, v in arm.options.items() if defaults.get(k) != v and k != "policy"]
    rank = {"static": 0, "adaptive": 1}.get(arm.family, 2)
    return (rank, len(changed), sum(_round_score(arm.options[k]) for k in changed))


def mean(values) -> float:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.mean(v)) if len(v) else math.nan


@dataclass
class Standing:
    """Where one deployable arm stands: feasibility, its place against the leader (primary axis) and, inside the
    tie set, against the best arm on the secondary axis. Codes only ("" where not judged)."""

    feasible: str = ""  # FEASIBILITY
    tie: str = ""  # STANDINGS, on the primary axis (P95 under "constrained")
    second: str = ""  # STANDINGS, on the secondary axis, within the tie set
    # the two parts of `feasible` (FEASIBILITY): the rule's own constraint, and the batch deadline share ("" when
    # the rule asks for none); what an answer with no feasible arm names as the trade
    constraint: str = ""
    on_time: str = ""


@dataclass
class Outcome:
    """The rule's answer on one set of units."""

    choice: str | None
    pick: str | None  # before the move to a dominating arm of the tie set
    leader: str | None
    second_leader: str | None
    standings: dict[str, Standing]
    settled: bool
    unsettling: list[str] = field(default_factory=list)  # arms whose undecided standing could move the choice
    units_needed: float = 0.0  # units per arm that would decide them, at the effects measured (inf: never)
    limit_ms: float | None = None  # "slo" rule: the P95 limit judged (the SLO, or the bound x tolerance)
    limit_kind: str = ""  # "slo" | "bound" | ""
    no_choice: str = ""  # "" | "no-feasible": why there is no choice

    @property
    def tie_set(self) -> list[str]:
        return [k for k, s in self.standings.items() if s.tie in IN]

    def seeds_needed(self, conditions: int) -> float:
        """`units_needed` as selection seeds per held-out condition (inf: never, at the effects measured)."""
        return self.units_needed / max(1, conditions) if math.isfinite(self.units_needed) else math.inf


@dataclass
class Frozen:
    """An arm racing stopped measuring: its standing when it stopped, not judged again."""

    standing: Standing
    round: int


def constraint_gap(a: Arm, rule, reference: Arm | None, limit: float | None):
    """Per unit, how far `a` is inside the rule's constraint (> 0: inside), the axis's margin counted as no
    worse: "constrained", throughput - (1 - throughput_margin) x throughput_fraction x the reference's; "slo",
    (1 + p95_margin) x limit - P95. None when there is nothing to judge against."""
    if rule.rule == "constrained":
        if reference is None:
            return None
        return a.throughput - (1 - rule.throughput_margin) * rule.throughput_fraction * reference.throughput
    if limit is None:
        return None
    return (1 + rule.p95_margin) * limit - a.p95


def feasibility(arms: list[Arm], rule, reference: Arm | None, bound_p95, slo_ms: float | None,
                alpha: float) -> tuple[dict[str, tuple[str, str, str]], float | None, str]:
    """Feasibility of each deployable arm as (both, the rule's constraint, the deadline share), each yes / no /
    undecided (the share "" when the rule asks for none), and for the "slo" rule the limit judged. The "slo" rule
    judges against the batch-absent bound x (1 + bound_tolerance) only when no arm can meet the SLO on P95 and that
    limit is above the SLO: a limit the batch-absent traffic itself exceeds. An arm kept out by the deadline share
    alone, or a bound below the SLO, leaves the SLO as it is."""
    shares = {a.label: on_time(a, rule, alpha) for a in arms}

    def judged(limit) -> dict[str, tuple[str, str, str]]:
        out = {}
        for a in arms:
            gap = constraint_gap(a, rule, reference, limit)
            part = "yes" if gap is None else _three(p_above(gap), p_below(gap), alpha)
            out[a.label] = (_both(part, shares[a.label]), part, shares[a.label] if _asks_share(rule) else "")
        return out

    if rule.rule == "constrained":
        return judged(None), None, ""
    out, limit, kind = judged(slo_ms), slo_ms, "slo"
    bound = mean(bound_p95) if bound_p95 is not None else math.nan
    relaxed = bound * (1 + rule.bound_tolerance)
    if (not any(part in ("yes", "undecided") for _, part, _ in out.values()) and math.isfinite(bound)
            and (slo_ms is None or relaxed > slo_ms)):
        limit, kind = relaxed, "bound"
        out = judged(limit)
    return out, limit, kind


def _asks_share(rule) -> bool:
    return getattr(rule, "batch_deadline_share", None) is not None


def on_time(a: Arm, rule, alpha: float) -> str:
    """`batch_deadline_share`: whether the arm's share of batch jobs done by their deadline is shown at least that
    share (one-sided t-test, like the constraint); "no" when the share was not measured (it cannot be shown)."""
    target = getattr(rule, "batch_deadline_share", None)
    if target is None:
        return "yes"
    if a.deadline_share is None or not np.isfinite(a.deadline_share).any():
        return "no"
    gap = a.deadline_share - target
    return _three(p_above(gap), p_below(gap), alpha)


def _both(first: str, second: str) -> str:
    """Feasible on two constraints: yes when both are shown, no when either is shown violated."""
    if "no" in (first, second):
        return "no"
    return "yes" if first == second == "yes" else "undecided"


def _three(p_yes: float, p_no: float, alpha: float) -> str:
    return "yes" if p_yes < alpha else ("no" if p_no < alpha else "undecided")


def against(anchor: Arm, pool: list[Arm], axis: Axis, alpha: float, stopped: int = 0) -> dict[str, str]:
    """Each arm of `pool` against `anchor` on `axis`: equivalent (within +-margin), out (worse by more than the
    margin) or undecided; two families (equivalence claims, "worse" claims), each Holm-corrected. `stopped`: arms
    racing stopped measuring once shown out: each still counts in the equivalence family, as a claim not shown
    (p = 1), so that the family is the size it would be had they been measured (in the "worse" family a claim
    already shown changes no other arm's threshold, so it needs no place)."""
    others = [a for a in pool if a.label != anchor.label]
    eq, _ = holm([equivalent(o, anchor, axis) for o in others] + [1.0] * stopped, alpha)
    worse, _ = holm([worse_beyond(o, anchor, axis) for o in others], alpha)
    out = {anchor.label: "leader"}
    for o, e, w in zip(others, eq, worse):
        out[o.label] = "equivalent" if e else ("out" if w else "undecided")
    return out


def score(arm: Arm, axis: Axis) -> float:
    """The arm's mean on `axis`, signed so that higher is better."""
    m = mean(arm.values(axis.name))
    return -m if axis.lower_is_better else m


def _best(pool: list[Arm], axis: Axis, defaults: dict) -> Arm:
    return min(pool, key=lambda a: (-score(a, axis), simplicity(a, defaults), a.label))


@dataclass
class _Pick:
    choice: Arm | None
    pick: Arm | None
    leader: Arm | None
    second_leader: Arm | None
    tie: dict[str, str]
    second: dict[str, str]


def inside(a: Arm, anchor: Arm, axis: Axis) -> bool:
    """The point estimate of `a` is within the margin of the anchor's (its best guess, while undecided)."""
    v, w = mean(a.values(axis.name)), mean(anchor.values(axis.name))
    return v <= (1 + axis.margin) * w if axis.lower_is_better else v >= (1 - axis.margin) * w


def _pick(pool: list[Arm], primary: Axis, secondary: Axis, alpha: float, defaults: dict, p95: Axis, thr: Axis,
          force: str | None = None, flip: frozenset = frozenset(), stopped: int = 0) -> _Pick:
    """Steps 2-5 on the feasible `pool`. An undecided arm counts in a tie set when its point estimate is within
    the margin (`force` "in" / "out": every undecided arm in / out; `flip`: these undecided arms the other way)."""
    if not pool:
        return _Pick(None, None, None, None, {}, {})

    def counts(a: Arm, standing: str, anchor: Arm, axis: Axis) -> bool:
        if standing in ("leader", "equivalent"):
            return True
        if standing != "undecided":
            return False
        guess = {"in": True, "out": False}.get(force) if force else inside(a, anchor, axis)
        return guess != (a.label in flip)

    leader = _best(pool, primary, defaults)
    tie = against(leader, pool, primary, alpha, stopped)
    kept = [a for a in pool if counts(a, tie[a.label], leader, primary)]
    top = _best(kept, secondary, defaults)
    second = against(top, kept, secondary, alpha)
    tied = [a for a in kept if counts(a, second[a.label], top, secondary)]
    first = min(tied, key=lambda a: (simplicity(a, defaults), -score(a, secondary), -score(a, primary), a.label))
    chosen = first
    for _ in range(len(kept)):
        better = dominators(chosen, kept, p95, thr, alpha).dominators
        if not better:
            break
        by = {a.label: a for a in kept}
        chosen = max((by[b] for b in better), key=lambda a: (score(a, secondary), score(a, primary), a.label))
    return _Pick(chosen, first, leader, top, tie, second)




def judge(arms: list[Arm], rule, reference: Arm | None, defaults: dict, bound_p95=None, slo_ms: float | None = None,
          frozen: dict[str, Frozen] | None = None, settle: bool = True) -> Outcome:
    """Apply `rule` (a scenario.Decision) to `arms` on their common units. `reference`: the throughput
    yardstick of the "constrained" rule. `frozen`: arms racing stopped measuring (their standing is kept).
    settle=False skips the settledness check (tuning's pick over trials)."""
    frozen = frozen or {}
    alpha = alpha_of(rule)
    p95, thr = axes(rule)
    primary, secondary = (p95, thr) if rule.rule == "constrained" else (thr, p95)
    live = [a for a in arms if a.deployable and a.label not in frozen]
    parts, limit, kind = feasibility(live, rule, reference, bound_p95, slo_ms, alpha)
    feasible = {k: v[0] for k, v in parts.items()}
    yes = [a for a in live if feasible[a.label] == "yes"]
    maybe = [a for a in live if feasible[a.label] == "undecided"]
    # an undecided arm counts in a tie set on its point estimate; the answer is settled when that guess does not
    # matter: every undecided arm in, every one out, each one the other way, each undecided feasibility counted in
    # arms racing stopped measuring once out of the tie set still count in the primary axis's equivalence family
    stopped = sum(1 for f in frozen.values() if f.standing.tie == "out")  # (only a feasible arm has a tie standing)
    pick = functools.partial(_pick, primary=primary, secondary=secondary, alpha=alpha, defaults=defaults, p95=p95,
                             thr=thr, stopped=stopped)
    base = pick(yes)
    standings = {}
    for a in arms:  # in the arms' order; the arms racing stopped keep their standing
        if a.label in frozen:
            standings[a.label] = frozen[a.label].standing
        elif a in live:
            standings[a.label] = Standing(feasible[a.label], base.tie.get(a.label, ""), base.second.get(a.label, ""),
                                          *parts[a.label][1:])
    if base.choice is None:
        unsettling = [a.label for a in maybe]
        return Outcome(None, None, None, None, standings, not unsettling, unsettling,
                       _needed_feasibility(maybe, rule, reference, limit, alpha), limit, kind, "no-feasible")
    if not settle:
        return Outcome(base.choice.label, base.pick.label, base.leader.label, base.second_leader.label, standings,
                       True, [], 0.0, limit, kind)
    everyone = pick(yes, force="in")
    undecided = sorted({k for k, v in base.tie.items() if v == "undecided"}
                       | {k for k, v in everyone.second.items() if v == "undecided"})
    variants = {"all in": everyone, "all out": pick(yes, force="out")}
    for k in undecided:
        variants[k] = pick(yes, flip=frozenset({k}))
    for a in maybe:
        variants["feasible " + a.label] = pick(yes + [a])
    moved = [k for k, v in variants.items() if v.choice is None or v.choice.label != base.choice.label]
    singles = {k.removeprefix("feasible ") for k in moved if k not in ("all in", "all out")}
    unsettling = sorted(singles or (set(undecided) if moved else set()))
    needed = _needed(base, everyone, unsettling, {a.label: a for a in live}, primary, secondary, alpha, rule,
                     reference, limit)
    return Outcome(base.choice.label, base.pick.label, base.leader.label, base.second_leader.label, standings,
                   not moved, unsettling, needed, limit, kind)


def _needed(base: _Pick, everyone: _Pick, unsettling: list[str], by: dict[str, Arm], primary: Axis,
            secondary: Axis, alpha: float, rule, reference, limit) -> float:
    """Units per arm that would decide every unsettling arm, if the effects stay as measured."""
    need = 0.0
    for k in unsettling:
        a = by[k]
        if base.tie.get(k) == "undecided":
            need = max(need, _needed_against(a, base.leader, primary, alpha))
        if everyone.second.get(k) == "undecided" and everyone.second_leader is not None:
            need = max(need, _needed_against(a, everyone.second_leader, secondary, alpha))
        if k not in base.tie:  # undecided feasibility
            need = max(need, _needed_feasibility([a], rule, reference, limit, alpha))
    return need


def _needed_against(a: Arm, anchor: Arm, axis: Axis, alpha: float) -> float:
    """The margin that decides the standing is the one on the anchor's worse side (the anchor is the best mean);
    an arm heading into the tie set must also clear the other side."""
    v, w = a.values(axis.name), anchor.values(axis.name)
    hi, lo = v - (1 + axis.margin) * w, v - (1 - axis.margin) * w
    side, other = (hi, lo) if axis.lower_is_better else (lo, hi)
    need = units_to_decide(side, alpha)
    heading_in = mean(side) < 0 if axis.lower_is_better else mean(side) > 0
    return max(need, units_to_decide(other, alpha)) if heading_in else need


def _needed_feasibility(arms: list[Arm], rule, reference, limit, alpha: float) -> float:
    need = 0.0
    for a in arms:
        gap = constraint_gap(a, rule, reference, limit)
        if gap is not None:
            need = max(need, units_to_decide(gap, alpha))
    return need

