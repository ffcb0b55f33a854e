"""A/B experiments: every policy on the same seeds (common random numbers), paired comparisons with 95% CIs,
the article's three verdicts, and two bounds that put the numbers in context."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from simlab.atomic import atomic_write_text
from simlab.experiments.metrics import SUMMARY_COLUMNS
from simlab.experiments.runner import Job, run_jobs
from simlab.experiments.tables import csv_text
from simlab.experiments.stats import intervals_overlap, mean_ci, paired
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario

DEFAULT_POLICIES = ("unscheduled", "priority", "static", "adaptive")
# Metrics compared between policies, and which direction is better.
COMPARED = {
    "interactive_p50_ms": "lower",
    "interactive_p95_ms": "lower",
    "interactive_p99_ms": "lower",
    "batch_throughput_per_min": "higher",
    "batch_makespan_ms": "lower",
    "longest_batch_stall_ms": "lower",
    "max_in_flight": "lower",
}
AGGREGATED = [c for c in SUMMARY_COLUMNS if c not in ("policy", "seed")]


@dataclass
class AbResult:
    policies: list[str]
    seeds: list[int]
    rows: list[dict]  # one per policy and seed
    bounds: list[dict]
    aggregate: dict[str, dict[str, tuple[float, float, float]]]  # policy -> metric -> (mean, lo, hi)
    comparisons: list[dict]
    verdicts: list[dict]


def seeds_for(seed: int, replications: int) -> list[int]:
    return list(range(seed, seed + replications))


def plan(scenario: Scenario, options: SchedulerOptions, policies, seeds, bounds: bool = True,
         tasks_format: str = "auto") -> list[Job]:
    jobs = [
        Job(p, options.with_changes(policy=p), s, keep_tasks=(s == seeds[0]), tasks_format=tasks_format)
        for p in policies
        for s in seeds
    ]
    if bounds:
        free = options.with_changes(policy="unscheduled")
        has = {w.kind for w in scenario.workload}
        if "batch" in has and "interactive" in has:
            jobs += [Job("bound-no-batch", free, s, "no-batch") for s in seeds]
            jobs += [Job("bound-batch-alone", free, s, "batch-alone") for s in seeds]
    return jobs


def run_ab(scenario: Scenario, options: SchedulerOptions, policies, seeds, out: Path | None, workers=1,
           baseline="unscheduled", progress=True, bounds=True, scheduler=None, tasks_format="auto") -> AbResult:
    jobs = plan(scenario, options, policies, seeds, bounds, tasks_format)
    metrics = run_jobs(scenario, jobs, out, workers, progress, scheduler=scheduler)
    rows = [m for j, m in zip(jobs, metrics) if not j.variant]
    bound_rows = [m for j, m in zip(jobs, metrics) if j.variant]
    aggregate = {
        p: {m: mean_ci([r[m] for r in rows if r["policy"] == p]) for m in AGGREGATED} for p in policies
    }
    comparisons = compare(rows, policies, baseline, aggregate)
    verdicts = judge(scenario, options, rows, aggregate, policies)
    result = AbResult(list(policies), list(seeds), rows, bound_rows, aggregate, comparisons, verdicts)
    if out is not None:
        write_outputs(result, scenario, options, out)
    return result


def compare(rows, policies, baseline, aggregate) -> list[dict]:
    """Each policy against the baseline, and `adaptive` against every other policy."""
    pairs = [(p, baseline) for p in policies if p != baseline and baseline in policies]
    if "adaptive" in policies:
        pairs += [("adaptive", p) for p in policies if p != "adaptive" and ("adaptive", p) not in pairs]
    out = []
    for cand, base in pairs:
        for metric, better in COMPARED.items():
            a = [r[metric] for r in rows if r["policy"] == cand]
            b = [r[metric] for r in rows if r["policy"] == base]
            pc = paired(a, b)
            ca, cb = aggregate[cand][metric], aggregate[base][metric]
            out.append(
                {
                    "candidate": cand,
                    "baseline": base,
                    "metric": metric,
                    "better": better,
                    "candidate_mean": ca[0],
                    "candidate_ci_low": ca[1],
                    "candidate_ci_high": ca[2],
                    "baseline_mean": cb[0],
                    "baseline_ci_low": cb[1],
                    "baseline_ci_high": cb[2],
                    **pc,
                    "cis_overlap": intervals_overlap(ca[1:], cb[1:]) if all(map(math.isfinite, ca[1:] + cb[1:])) else True,
                }
            )
    return out


def judge(scenario: Scenario, options: SchedulerOptions, rows, aggregate, policies) -> list[dict]:
    """The article's success criteria, per policy, on the mean over seeds:
    1. interactive P95 does not stay above its threshold (no stretch of SLO bins longer than stay_ms);
    2. batch keeps moving during interactive peaks (no stall longer than the limit, nothing stranded);
    3. total concurrency never exceeds maxConcurrency (in any seed)."""
    crit = scenario.criteria
    out = []
    for p in policies:
        mine = [r for r in rows if r["policy"] == p]
        stay = max(r["p95_over_slo_longest_ms"] for r in mine)
        stall = max(r["longest_batch_stall_ms"] for r in mine)
        stranded = sum(r["stranded"] for r in mine)
        peak = max(r["max_in_flight"] for r in mine)
        cap = options.max_concurrency
        out.append(
            {
                "policy": p,
                "p95_not_stuck_above_slo": stay < crit.p95_stay_ms,
                "longest_p95_over_slo_ms": stay,
                "batch_keeps_moving": stall < crit.batch_stall_ms and stranded == 0,
                "longest_batch_stall_ms": stall,
                "stranded": stranded,
                "concurrency_within_cap": cap is None or peak <= cap,
                "max_in_flight": peak,
                "max_concurrency": cap,
            }
        )
    return out


# --- files -------------------------------------------------------------------------------------------
def write_outputs(result: AbResult, scenario: Scenario, options: SchedulerOptions, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "summary.csv", csv_text(result.rows, SUMMARY_COLUMNS))
    if result.bounds:
        atomic_write_text(out / "bounds.csv", csv_text(result.bounds, SUMMARY_COLUMNS))
    agg_rows, agg_cols = [], ["policy", "n"]
    for m in AGGREGATED:
        agg_cols += [f"{m}_mean", f"{m}_ci_low", f"{m}_ci_high"]
    for p in result.policies:
        row = {"policy": p, "n": len(result.seeds)}
        for m in AGGREGATED:
            row[f"{m}_mean"], row[f"{m}_ci_low"], row[f"{m}_ci_high"] = result.aggregate[p][m]
        agg_rows.append(row)
    atomic_write_text(out / "policies.csv", csv_text(agg_rows, agg_cols))
    if result.comparisons:
        atomic_write_text(out / "comparison.csv", csv_text(result.comparisons, list(result.comparisons[0])))
    atomic_write_text(out / "verdicts.csv", csv_text(result.verdicts, list(result.verdicts[0])))
    meta = {
        "scenario": scenario.name,
        "description": scenario.description,
        "scenario_file": str(scenario.path) if scenario.path else None,
        "slo_p95_ms": scenario.slo_p95_ms,
        "options": options.to_json_dict(),
        "policies": result.policies,
        "seeds": result.seeds,
    }
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=1))
