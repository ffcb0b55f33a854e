"""The static frontier as arms of `ab`: every batch cap the backend can run, on the A/B's own seeds, judged with
the A/B's policies by the same rule as `decide` (one round, no racing, no confirmation units: `ab` compares on
the seeds it was given). The DecideRecord goes to the A/B folder as decision.json, its arms as frontier.csv."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simlab.decision.compare import Arm
from simlab.decision.frontier import (SHARE, backend_slots, exported_options, frontier_specs,
                                      reference_label, static_label)
from simlab.decision.rule import judge
from simlab.decision.racing import arms_of, best_of
from simlab.decision.run import arm_results
from simlab.experiments.plan import P95, THR, Plan
from simlab.experiments.stats import mean_ci
from simlab.records import DecideRecord, Interval, Round, Unit
from simlab.world.conditions import Condition

DECISION_FILE = "decision.json"
# the deployable families, as decide judges them (simlab/decision/families.py); the rest are baselines
FAMILY = {p: p for p in ("adaptive", "static", "holdback", "aimd", "gradient2")}


def ab_decision(scenario, options, result, out: Path | None, workers: int = 1, progress: bool = True,
                scheduler=None, adaptive_label: str = "adaptive-defaults") -> DecideRecord | None:
    """The frontier's verdict for an AbRecord `result`; None when there is nothing to decide (no
    maxConcurrency, or a single class of work). Writes decision.json and frontier.csv into `out`."""
    kinds = {w.kind for w in scenario.workload}
    if options.max_concurrency is None or options.max_concurrency < 2 or kinds != {"interactive", "batch"}:
        return None
    base = Condition("base", "base", 0.0)
    plan = Plan(scenario, [base], None if out is None else Path(out) / "frontier", workers, progress, scheduler)
    plan.add_seeds(list(result.seeds))
    specs = frontier_specs(options, scenario)
    plan.run(specs)
    arms = arms_of(plan.measured, specs)
    swept = {a.label for a in arms}
    order = {s: i for i, s in enumerate(result.seeds)}
    for p in result.policies:
        label = static_label(options.batch_max_concurrency) if p == "static" else (
            adaptive_label if p == "adaptive" else p)
        if label in swept:
            continue  # the frontier holds it
        rows = sorted((r for r in result.rows if r["policy"] == p), key=lambda r: order[r["seed"]])
        opts = options.with_changes(policy=p)
        share = [r.get(SHARE, math.nan) for r in rows] if any(SHARE in r for r in rows) else None
        arms.append(Arm(label, exported_options(opts), [r[P95] for r in rows], [r[THR] for r in rows],
                        FAMILY.get(p, "baseline"), options.batch_max_concurrency if p == "static" else None, share))
    rule = scenario.decision
    by = {a.label: a for a in arms}
    ref = reference_label(rule, options, adaptive_label)
    bound = np.array([m[P95] for m in sorted(result.bounds, key=lambda r: order[r["seed"]])
                      if m["policy"] == "bound-no-batch"]) if result.bounds else None
    defaults = exported_options(options.with_changes(policy="adaptive")) if options.batch_max_concurrency else {}
    outcome = judge(arms, rule, by.get(ref), defaults, bound, scenario.slo_p95_ms)
    record = DecideRecord(
        scenario=scenario.name, command="ab", rule=rule.rule, level=rule.level, p95_margin=rule.p95_margin,
        throughput_margin=rule.throughput_margin, throughput_fraction=rule.throughput_fraction,
        bound_tolerance=rule.bound_tolerance, batch_deadline_share=rule.batch_deadline_share,
        reference=ref if ref in by else None, slo_p95_ms=scenario.slo_p95_ms,
        max_concurrency=options.max_concurrency, backend_slots=backend_slots(scenario), conditions=["base"],
        search_conditions=[], selection_units=[Unit("base", s) for s in result.seeds], confirmation_units=[],
        selection=arm_results(arms, outcome, rule, by.get(ref), {}), confirmation=[], choice=outcome.choice,
        pick=outcome.pick, leader=outcome.leader, second_leader=outcome.second_leader, no_choice=outcome.no_choice,
        limit_ms=outcome.limit_ms, limit_kind=outcome.limit_kind, settled=outcome.settled,
        settled_by="decided" if outcome.settled else "",
        unsettling=list(outcome.unsettling), seeds_needed=None, seeds_budget=len(result.seeds),
        rounds=[Round(len(result.seeds), len(arms), plan.runs, outcome.choice, outcome.tie_set, outcome.settled)],
        best_static=best_of(arms, "static", rule, by.get(ref), defaults, bound, scenario.slo_p95_ms),
        best_adaptive=best_of(arms, "adaptive", rule, by.get(ref), defaults, bound, scenario.slo_p95_ms),
        bound_p95=Interval.of(mean_ci(bound)) if bound is not None and len(bound) else None,
        confirmed=False, constraint_missed=False, slo_met=_slo(arms, outcome.choice, rule, scenario.slo_p95_ms),
        per_condition=[], exported=False, exit_code=0, runs=plan.runs, runs_exhaustive=plan.runs + plan.shared,
        runs_shared=plan.shared)
    if out is not None:
        from simlab.decision import files

        files.write_ab(record, Path(out))
    return record


def _slo(arms, choice, rule, slo_ms) -> str:
    from simlab.decision.compare import alpha_of, p_above, p_below

    a = next((x for x in arms if x.label == choice), None)
    if a is None:
        return ""
    alpha = alpha_of(rule)
    return "yes" if p_below(a.p95 - slo_ms) < alpha else ("no" if p_above(a.p95 - slo_ms) < alpha else "undecided")
