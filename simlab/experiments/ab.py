"""A/B experiments: every policy on the same seeds (common random numbers), paired comparisons with 95% CIs,
the article's three verdicts, and two bounds that put the numbers in context. The result is one AbRecord
(simlab/records.py): written once as result.json and CSV tables, read by every renderer."""

from __future__ import annotations

import math
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.experiments.metrics import LIFECYCLE_FILL, SUMMARY_COLUMNS, metric_columns
from simlab.experiments.runner import Job, run_jobs
from simlab.experiments.stats import intervals_overlap, mean_ci, paired
from simlab.store import csv_text
from simlab.policies import SchedulerOptions
from simlab.records import (VERDICT_COLUMNS, AbRecord, Comparison, Criteria, Interval, PolicyAggregate, RunMetrics,
                            Verdict, columns, save)
from simlab.scenario import Scenario

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
# batch lifecycle, compared only where the runs have them (a deadline, a timeout, eviction)
COMPARED_LIFECYCLE = {"batch_deadline_share": "higher", "wasted_ms": "lower"}
AGGREGATED = [c for c in SUMMARY_COLUMNS if c not in ("policy", "seed")]


def aggregated(rows) -> list[str]:
    """The metrics aggregated over seeds for these rows: AGGREGATED, and the lifecycle ones when present."""
    return [c for c in metric_columns(rows) if c not in ("policy", "seed")]


def _filled(rows: list[dict]) -> list[dict]:
    """Rows with every lifecycle metric any of them has: a policy that cannot evict evicted nothing."""
    keys = [c for c in LIFECYCLE_FILL if any(c in r for r in rows)]
    return [r if all(k in r for k in keys) else {**{k: LIFECYCLE_FILL[k] for k in keys}, **r} for r in rows]


NO_BATCH, BATCH_ALONE = "bound-no-batch", "bound-batch-alone"


def bound_warning(scenario, bounds: list[dict]) -> str | None:
    """When the interactive P95 with batch absent (mean over seeds) already exceeds the SLO."""
    p95 = [r["interactive_p95_ms"] for r in bounds if r.get("policy") == NO_BATCH]
    p95 = [v for v in p95 if v == v]
    if not p95:
        return None
    mean = sum(p95) / len(p95)
    if mean <= scenario.slo_p95_ms:
        return None
    return (f"capacity: with batch work absent, interactive P95 is already {mean:,.0f} ms (mean over "
            f"{len(p95)} seeds), above the SLO ({scenario.slo_p95_ms:,.0f} ms): no scheduler can meet this SLO on "
            "this traffic.")


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
            jobs += [Job(NO_BATCH, free, s, "no-batch") for s in seeds]
            jobs += [Job(BATCH_ALONE, free, s, "batch-alone") for s in seeds]
    return jobs


def run_ab(scenario: Scenario, options: SchedulerOptions, policies, seeds, out: Path | None = None, workers=1,
           baseline="unscheduled", progress=True, bounds=True, scheduler=None, tasks_format="auto") -> AbRecord:
    """Every policy (and the bounds) on every seed, and the record of it. With `out`, each run is saved under
    out/runs/ as it finishes (a rerun resumes); the record itself is written by `store`."""
    jobs = plan(scenario, options, policies, seeds, bounds, tasks_format)
    metrics = run_jobs(scenario, jobs, out, workers, progress, scheduler=scheduler)
    rows = _filled([m for j, m in zip(jobs, metrics) if not j.variant])
    bound_rows = _filled([m for j, m in zip(jobs, metrics) if j.variant])
    return build_record(scenario, options, policies, seeds, rows, bound_rows, baseline)


def aggregate_rows(rows: list[dict], labels) -> list[PolicyAggregate]:
    out = []
    metrics = aggregated(rows)
    for p in labels:
        mine = [r for r in rows if r["policy"] == p]
        out.append(PolicyAggregate(p, len(mine), {m: Interval.of(mean_ci([r[m] for r in mine])) for m in metrics}))
    return out


def build_record(scenario: Scenario, options: SchedulerOptions, policies, seeds, rows, bound_rows,
                 baseline="unscheduled") -> AbRecord:
    policies = list(policies)
    aggregates = aggregate_rows(rows, policies)
    aggregate = {a.policy: {m: i.tuple() for m, i in a.metrics.items()} for a in aggregates}
    bound_labels = list(dict.fromkeys(r["policy"] for r in bound_rows))
    crit = scenario.criteria
    return AbRecord(
        scenario=scenario.name,
        description=scenario.description,
        scenario_file=str(scenario.path) if scenario.path else None,
        facts=scenario.facts(),
        criteria=Criteria(scenario.slo_p95_ms, crit.slo_bin_ms, crit.p95_stay_ms, crit.batch_stall_ms),
        options=options.to_json_dict(),
        policies=policies,
        seeds=list(seeds),
        baseline=baseline if baseline in policies else policies[0],
        runs=[_run(r, aggregated(rows)) for r in rows],
        bound_runs=[_run(r, aggregated(bound_rows)) for r in bound_rows],
        aggregates=aggregates,
        bound_aggregates=aggregate_rows(bound_rows, bound_labels),
        comparisons=compare(rows, policies, baseline, aggregate),
        verdicts=judge(crit, options.max_concurrency, rows, policies, bound_rows),
    )


def _run(row: dict, metrics=AGGREGATED) -> RunMetrics:
    return RunMetrics(row["policy"], int(row["seed"]), {c: row.get(c) for c in metrics})


def compare(rows, policies, baseline, aggregate) -> list[Comparison]:
    """Each policy against the baseline, and `adaptive` against every other policy. `aggregate`: policy -> metric
    -> (mean, ci_low, ci_high), the per-policy intervals shown beside the paired difference."""
    pairs = [(p, baseline) for p in policies if p != baseline and baseline in policies]
    if "adaptive" in policies:
        pairs += [("adaptive", p) for p in policies if p != "adaptive" and ("adaptive", p) not in pairs]
    out = []
    present = set(aggregated(rows))
    compared = {**COMPARED, **{m: b for m, b in COMPARED_LIFECYCLE.items() if m in present}}
    for cand, base in pairs:
        for metric, better in compared.items():
            a = [r[metric] for r in sorted(rows, key=lambda r: r["seed"]) if r["policy"] == cand]
            b = [r[metric] for r in sorted(rows, key=lambda r: r["seed"]) if r["policy"] == base]
            pc = paired(a, b)
            ca, cb = aggregate[cand][metric], aggregate[base][metric]
            overlap = intervals_overlap(ca[1:], cb[1:]) if all(map(math.isfinite, ca[1:] + cb[1:])) else True
            out.append(Comparison(
                candidate=cand, baseline=base, metric=metric, better=better,
                candidate_mean=ca[0], candidate_ci_low=ca[1], candidate_ci_high=ca[2],
                baseline_mean=cb[0], baseline_ci_low=cb[1], baseline_ci_high=cb[2],
                **pc, cis_overlap=overlap,
            ))
    return out


def judge(criteria, max_concurrency, rows, policies, bound_rows=()) -> list[Verdict]:
    """The article's success criteria per policy, each on the worst seed (the max over seeds, not the mean):
    1. interactive P95 does not stay above the SLO: the longest stretch of consecutive SLO bins over it is shorter
       than p95_stay_ms in every seed. When the run with batch absent (bound-no-batch, also its worst seed) fails
       this too, a failing policy gets 'capacity' instead of 'fail': no scheduler can meet this SLO on this traffic
       without preempting running work;
    2. batch keeps moving: the longest batch stall (batch work waiting while no batch task completes) is shorter
       than batch_stall_ms in every seed, and no batch task is stranded (never started) in any seed;
    3. total concurrency never exceeds max_concurrency in any seed."""
    no_batch = [r["p95_over_slo_longest_ms"] for r in bound_rows if r["policy"] == NO_BATCH]
    bound_stay = max(no_batch) if no_batch else None
    bound_fails = bound_stay is not None and bound_stay >= criteria.p95_stay_ms
    out = []
    for p in policies:
        mine = [r for r in rows if r["policy"] == p]
        stay = max(r["p95_over_slo_longest_ms"] for r in mine)
        stall = max(r["longest_batch_stall_ms"] for r in mine)
        stranded = sum(r["stranded"] for r in mine)
        peak = max(r["max_in_flight"] for r in mine)
        p95 = "pass" if stay < criteria.p95_stay_ms else ("capacity" if bound_fails else "fail")
        out.append(Verdict(
            policy=p,
            p95_verdict=p95,
            longest_p95_over_slo_ms=stay,
            bound_longest_p95_over_slo_ms=bound_stay,
            batch_keeps_moving=stall < criteria.batch_stall_ms and stranded == 0,
            longest_batch_stall_ms=stall,
            stranded=stranded,
            concurrency_within_cap=max_concurrency is None or peak <= max_concurrency,
            max_in_flight=peak,
            max_concurrency=max_concurrency,
        ))
    return out


# --- files -------------------------------------------------------------------------------------------
def store(record: AbRecord, out: Path) -> AbRecord:
    """result.json (the record) and the tables users read, all from the record; the record as stored."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "summary.csv", csv_text(record.rows, metric_columns(record.rows)))
    if record.bound_runs:
        atomic_write_text(out / "bounds.csv", csv_text(record.bounds, metric_columns(record.bounds)))
    agg_rows, agg_cols = [], ["policy", "n"]
    metrics = aggregated(record.rows)
    for m in metrics:
        agg_cols += [f"{m}_mean", f"{m}_ci_low", f"{m}_ci_high"]
    for a in record.aggregates:
        row = {"policy": a.policy, "n": len(record.seeds)}
        for m in metrics:
            i = a.metrics[m]
            row[f"{m}_mean"], row[f"{m}_ci_low"], row[f"{m}_ci_high"] = i.mean, i.ci_low, i.ci_high
        agg_rows.append(row)
    atomic_write_text(out / "policies.csv", csv_text(agg_rows, agg_cols))
    if record.comparisons:
        atomic_write_text(out / "comparison.csv", csv_text(record.table("comparisons"), columns(Comparison)))
    atomic_write_text(out / "verdicts.csv", csv_text(record.table("verdicts"), VERDICT_COLUMNS))
    return save(record, out)
