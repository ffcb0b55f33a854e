"""The decision rule: from per-unit measurements of every arm to one recommendation.

A unit is one (traffic condition, seed) run; every arm is measured on the same units (common random
numbers), so arms are compared with paired CIs. The rule (the scenario's [decision] table):

- "constrained" (default): an arm is feasible when the lower CI bound of its paired throughput margin
  (throughput - fraction x reference throughput) is >= 0; among feasible arms, the lowest mean P95 wins, and
  every arm whose paired P95 difference with it is not significant ties with it. Ties go to the higher
  throughput, then (among throughputs that tie in turn) to the simpler arm.
- "slo": feasible when the P95 CI's upper bound meets the SLO (or, when no arm can, the batch-absent bound
  x (1 + bound_tolerance)); the highest throughput wins; throughput ties go to lower P95, then simplicity.
- either rule, with `batch_deadline_share`: an arm is feasible only if the lower CI bound of its share of batch jobs
  done by their deadline is at least that share.

Simplicity: static before adaptive, then fewer options that differ from the production defaults, then
rounder values. Nothing here runs a simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simlab.experiments.stats import mean_ci, paired
from simlab.records import DecisionRecord

P95, THR = "interactive_p95_ms", "batch_throughput_per_min"


@dataclass
class Arm:
    """One configuration measured on the common units."""

    label: str  # "static-14", "adaptive-tuned", "adaptive-defaults", "priority", ...
    options: dict  # the production SchedulerOptions (camelCase) that reproduce it
    p95: list[float]  # per unit, in unit order
    throughput: list[float]
    family: str = "adaptive"  # static | adaptive | baseline (priority, unscheduled: not deployable as options)
    deadline_share: list[float] | None = None  # per unit: batch jobs done by their deadline (None: not measured)

    def ci(self, which: str, level: float = 0.95) -> tuple[float, float, float]:
        return mean_ci(self.p95 if which == P95 else self.throughput, level)


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


def _pdiff(a: list[float], b: list[float], level: float) -> dict:
    return paired(a, b, level)


def _significant_below(d: dict) -> bool:
    return bool(np.isfinite(d["diff_ci_high"]) and d["diff_ci_high"] < 0)


def _significant_above(d: dict) -> bool:
    return bool(np.isfinite(d["diff_ci_low"]) and d["diff_ci_low"] > 0)


def decide(arms: list[Arm], rule, reference: Arm | None, defaults: dict, bound_p95: list[float] | None = None,
           slo_ms: float | None = None, groups: list[slice] | None = None) -> DecisionRecord:
    """Apply `rule` (a scenario.Decision) to `arms`. `reference` sets the throughput yardstick. `groups`: the
    units of each traffic condition (default: one group), for the last step: no feasible arm may dominate the
    choice across them (`dominated_across`), or the choice moves to it."""
    groups = groups or [slice(None)]
    level = rule.level
    deployable = [a for a in arms if a.family in ("static", "adaptive")]
    rows = {a.label: {"arm": a.label, "family": a.family, "options": a.options} for a in arms}
    for a in arms:
        r = rows[a.label]
        r["p95_mean"], r["p95_ci_low"], r["p95_ci_high"] = a.ci(P95, level)
        r["throughput_mean"], r["throughput_ci_low"], r["throughput_ci_high"] = a.ci(THR, level)
    on_time = _deadline_check(arms, rule, rows, level)
    deployable = [a for a in deployable if on_time(a)]
    if rule.rule == "constrained":
        ref = reference.throughput if reference is not None else None
        for a in arms:
            if ref is None:
                rows[a.label]["feasible"] = on_time(a)
                continue
            margin = [t - rule.throughput_fraction * r for t, r in zip(a.throughput, ref)]
            m = mean_ci(margin, level)
            lo = m[1] if math.isfinite(m[1]) else m[0]
            rows[a.label]["throughput_margin"] = m[0]
            rows[a.label]["throughput_margin_ci_low"] = lo
            rows[a.label]["feasible"] = bool(lo >= 0) and on_time(a)
        feasible = [a for a in deployable if rows[a.label]["feasible"]]
        if not feasible:
            return _record(rule, None, "no deployable arm keeps batch throughput at "
                           f"{rule.throughput_fraction:g} x the reference on the CI's lower bound", rows, [], [], arms, defaults, level)
        best = min(feasible, key=lambda a: (rows[a.label]["p95_mean"], simplicity(a, defaults)))
        ties = [a for a in feasible if a is best or not _significant_above(_pdiff(a.p95, best.p95, level))]
        top = max(ties, key=lambda a: rows[a.label]["throughput_mean"])
        thr_ties = [a for a in ties if a is top or not _significant_below(_pdiff(a.throughput, top.throughput, level))]
        chosen = min(thr_ties, key=lambda a: (simplicity(a, defaults), rows[a.label]["p95_mean"]))
        chosen = _undominated(chosen, ties, rows, level)
        chosen, moved = _undominated_across(chosen, feasible, rows, level, groups)
        reason = (f"lowest interactive P95 among arms whose batch throughput is >= {rule.throughput_fraction:g} x "
                  f"{reference.label if reference else 'reference'} on the lower CI bound")
        if rule.batch_deadline_share is not None:
            reason += f" and whose batch jobs meet their deadline >= {rule.batch_deadline_share:.0%} (CI lower bound)"
        if len(ties) > 1:
            reason += f"; {len(ties)} arms tie on P95 (paired CIs), ranked by throughput then simplicity"
        if moved:
            reason += f"; moved to {chosen.label}, which dominates the P95 pick {moved} (paired CIs)"
        return _record(rule, chosen, reason, rows, feasible, ties, arms, defaults, level)
    # "slo"
    def meets(a: Arm, limit: float) -> bool:
        hi = rows[a.label]["p95_ci_high"]
        return (hi if math.isfinite(hi) else rows[a.label]["p95_mean"]) <= limit

    limit, how = slo_ms, f"P95 <= SLO {slo_ms:,.0f} ms (CI upper bound)"
    feasible = [a for a in deployable if slo_ms is not None and meets(a, slo_ms)]
    if not feasible and bound_p95:
        limit = float(np.mean(bound_p95)) * (1 + rule.bound_tolerance)
        how = f"the SLO cannot be met; P95 within {rule.bound_tolerance:.0%} of the batch-absent bound ({limit:,.0f} ms)"
        feasible = [a for a in deployable if meets(a, limit)]
    for a in arms:
        rows[a.label]["feasible"] = a in feasible
    if rule.batch_deadline_share is not None:
        how += f" and batch jobs done by their deadline >= {rule.batch_deadline_share:.0%} (CI lower bound)"
    if not feasible:
        return _record(rule, None, f"no deployable arm meets {how}", rows, [], [], arms, defaults, level)
    top = max(feasible, key=lambda a: rows[a.label]["throughput_mean"])
    ties = [a for a in feasible if a is top or not _significant_below(_pdiff(a.throughput, top.throughput, level))]
    chosen = min(ties, key=lambda a: (simplicity(a, defaults), rows[a.label]["p95_mean"]))
    p95_best = min(ties, key=lambda a: rows[a.label]["p95_mean"])
    if _significant_above(_pdiff(chosen.p95, p95_best.p95, level)):
        chosen = p95_best  # a measurably lower P95 at the same throughput beats simplicity
    chosen = _undominated(chosen, ties, rows, level)
    chosen, moved = _undominated_across(chosen, feasible, rows, level, groups)
    how += f"; moved to {chosen.label}, which dominates {moved} (paired CIs)" if moved else ""
    return _record(rule, chosen, f"highest batch throughput with {how}", rows, feasible, ties, arms, defaults, level)


def _deadline_check(arms: list[Arm], rule, rows, level):
    """`batch_deadline_share`: a predicate on arms (the lower CI bound of the share meets it), its numbers in rows."""
    target = getattr(rule, "batch_deadline_share", None)
    if target is None:
        return lambda a: True
    ok = set()
    for a in arms:
        if a.deadline_share is None:
            continue  # not measured: it cannot be shown to meet the share
        mean, lo, hi = mean_ci(a.deadline_share, level)
        lo = lo if math.isfinite(lo) else mean
        rows[a.label].update(deadline_share_mean=mean, deadline_share_ci_low=lo, deadline_share_ci_high=hi)
        if lo >= target:
            ok.add(a.label)
    return lambda a: a.label in ok


def _undominated(chosen: Arm, pool: list[Arm], rows, level) -> Arm:
    """Within the tie set, the throughput-then-simplicity order can land on an arm another tied arm dominates:
    move to the dominator until none is left. Only within the tie set: "not measurably worse" is not
    transitive, and chains of it outside would drift P95 far from the best arm's."""
    for _ in range(len(pool)):
        better = [a for a in pool if a is not chosen and dominated_by(chosen, a, level)]
        if not better:
            break
        chosen = max(better, key=lambda a: (rows[a.label]["throughput_mean"], -rows[a.label]["p95_mean"]))
    return chosen


def _undominated_across(chosen: Arm, feasible: list[Arm], rows, level, groups) -> tuple[Arm, str | None]:
    """No feasible deployable arm may dominate the choice (across the conditions' groups): "not measurably
    worse" does not chain, so the P95 pick's tie set can leave out an arm that ties with the pick and beats it
    on throughput. Move to the dominator (highest throughput, then lowest P95) until none is left; every move is
    a measurable gain on one axis and no measurable loss on the other. (first pick's label, or None)"""
    first = chosen.label
    for _ in range(len(feasible)):
        better = [a for a in feasible if a is not chosen and dominated_across(chosen, a, groups, level)]
        if not better:
            break
        chosen = max(better, key=lambda a: (rows[a.label]["throughput_mean"], -rows[a.label]["p95_mean"]))
    return chosen, (first if chosen.label != first else None)


def _record(rule, chosen: Arm | None, reason, rows, feasible, ties, arms, defaults, level) -> DecisionRecord:
    for a in arms:
        r = rows[a.label]
        r["chosen"] = chosen is not None and a.label == chosen.label
        r["p95_tie"] = a in ties
        if chosen is not None:
            d = _pdiff(a.p95, chosen.p95, level)
            t = _pdiff(a.throughput, chosen.throughput, level)
            r["p95_vs_chosen"], r["p95_vs_chosen_ci_low"], r["p95_vs_chosen_ci_high"] = d["diff"], d["diff_ci_low"], d["diff_ci_high"]
            r["thr_vs_chosen"], r["thr_vs_chosen_ci_low"], r["thr_vs_chosen_ci_high"] = t["diff"], t["diff_ci_low"], t["diff_ci_high"]
    ranking = sorted(rows.values(), key=lambda r: (not r.get("feasible", False), r["p95_mean"]))
    return DecisionRecord(rule.rule, chosen.label if chosen else None, reason, [a.label for a in feasible],
                          [a.label for a in ties], ranking)


def dominated_by(arm: Arm, other: Arm, level: float = 0.95) -> bool:
    """`other` is measurably better on one axis and not measurably worse on the other (paired CIs)."""
    d = paired(other.p95, arm.p95, level)
    t = paired(other.throughput, arm.throughput, level)
    better_p95, worse_p95 = _significant_below(d), _significant_above(d)
    better_thr, worse_thr = _significant_above(t), _significant_below(t)
    return (better_p95 and not worse_thr) or (better_thr and not worse_p95)


def dominated_across(arm: Arm, other: Arm, groups: list[slice], level: float = 0.95) -> bool:
    """`other` dominates `arm` across traffic conditions (each group: one condition's units): over all the units
    it is measurably better on one axis and not measurably worse on the other (`dominated_by`, paired CIs), and
    on no single condition is it measurably worse on either axis. A cap that wins on the pooled traffic but
    loses measurably at some load level is a trade-off across conditions, not a domination."""
    if not dominated_by(arm, other, level):
        return False
    for g in groups:
        d = paired(other.p95[g], arm.p95[g], level)
        t = paired(other.throughput[g], arm.throughput[g], level)
        if _significant_above(d) or _significant_below(t):
            return False
    return True
