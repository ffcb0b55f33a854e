"""Measure arms on common units (traffic condition x seed), with the static frontier always among them.

Adaptive with batchMinConcurrency = batchMaxConcurrency = N never moves its cap, so it is exactly static cap N
(tests/test_decision.py checks it run for run): every arm here is expressible as production options.
Static caps run as the `static` policy and are exported as that adaptive equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simlab.decision.rule import P95, THR, Arm
from simlab.experiments.runner import Job, run_jobs
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario
from simlab.world.conditions import Condition

SHARE = "batch_deadline_share"  # measured where a batch workload has deadline_ms ([decision] may require it)
PRODUCTION_KEYS = ("maxConcurrency", "batchMaxConcurrency", "batchMinConcurrency", "interactiveRpsThreshold",
                   "interactiveP95LatencyMs", "windowMs", "smoothingAlpha")


def production_options(options: SchedulerOptions) -> dict:
    """The production SchedulerOptions shape and nothing else (a static cap N becomes min = max = N).
    Options the production scheduler does not have (simlab's fixes) are refused rather than dropped."""
    data = options.to_json_dict()
    if options.policy == "static":
        data.update(policy="adaptive", batchMinConcurrency=data["batchMaxConcurrency"])
    elif options.policy != "adaptive":
        raise ValueError(f"policy '{options.policy}' is not the production scheduler")
    extra = {k: v for k, v in data.items() if k not in PRODUCTION_KEYS and k != "policy"
             and v != SchedulerOptions.model_fields[_snake(k)].default}
    if extra:
        raise ValueError(f"options {', '.join(sorted(extra))} are not part of the production SchedulerOptions")
    return {k: data[k] for k in PRODUCTION_KEYS if k in data}


def _snake(camel: str) -> str:
    for name, f in SchedulerOptions.model_fields.items():
        if (f.alias or "") == camel or name.replace("_", "") == camel.lower():
            return name
    return camel


@dataclass
class Spec:
    label: str
    options: SchedulerOptions
    family: str  # static | adaptive | baseline


FULL_SWEEP_CAPS = 64  # every static cap up to this one is measured (the bundled scenarios stay within it)
SAMPLED_CAPS = 32  # beyond it, this many more, spaced geometrically up to maxConcurrency - 1


def _ceil_root(x: int, n: int) -> int:
    """The least integer c with c ** n >= x (exact integer arithmetic: the same caps on every machine)."""
    lo, hi = 1, 1 << (x.bit_length() // n + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        if mid**n >= x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def static_caps(base: SchedulerOptions) -> list[int]:
    """The static caps the frontier measures: every cap 1..maxConcurrency-1 up to FULL_SWEEP_CAPS; above that,
    every cap to FULL_SWEEP_CAPS, SAMPLED_CAPS more spaced geometrically up to maxConcurrency-1 (always included),
    and the options' own batchMaxConcurrency. A function of the options alone (not of --workers)."""
    top = (base.max_concurrency or 2) - 1
    if top <= FULL_SWEEP_CAPS:
        return list(range(1, top + 1))
    caps = set(range(1, FULL_SWEEP_CAPS + 1))
    n, f = SAMPLED_CAPS, FULL_SWEEP_CAPS
    caps |= {_ceil_root(f ** (n - k) * top**k, n) for k in range(1, n + 1)}  # ceil(f * (top / f) ** (k / n))
    own = base.batch_max_concurrency
    if own is not None and 1 <= own <= top:
        caps.add(own)
    return sorted(caps)


def caps_note(base: SchedulerOptions) -> str | None:
    """A warning when the frontier samples the caps rather than measuring every one; None when it measures all."""
    caps, top = static_caps(base), (base.max_concurrency or 2) - 1
    if len(caps) == top:
        return None
    return (f"maxConcurrency = {top + 1:,}: the static frontier measures {len(caps)} of the {top:,} caps 1..{top:,} "
            f"(every cap up to {FULL_SWEEP_CAPS}, then {SAMPLED_CAPS} spaced geometrically up to {top:,}, and "
            f"the options' own batchMaxConcurrency), not every one")


def caps_swept(base: SchedulerOptions) -> str:
    """What the frontier measured, for a sentence: 'static caps 1..7 swept', or how many of them."""
    top = (base.max_concurrency or 2) - 1
    n = len(static_caps(base))
    return f"static caps 1..{top} swept" if n == top else f"{n} static caps of 1..{top:,} swept"


def frontier_specs(base: SchedulerOptions) -> list[Spec]:
    return [Spec(f"static-{n}", base.with_changes(policy="static", batch_max_concurrency=n, batch_min_concurrency=n), "static")
            for n in static_caps(base)]


@dataclass
class Measured:
    arms: list[Arm]
    units: list[tuple[str, int]]  # (condition, seed) in the arms' order
    bound_p95: list[float]  # batch-absent interactive P95 per unit
    bound_throughput: list[float]  # batch-alone throughput per unit
    rows: list[dict]  # every run's metrics with arm, condition, seed


def measure(scenario: Scenario, specs: list[Spec], conditions: list[Condition], seeds: list[int], out: Path | None,
            workers: int = 1, progress: bool = True, bounds: bool = True, scheduler=None) -> Measured:
    """Every spec on every (condition, seed), plus the two bounds; one run folder per condition.
    `scheduler`: a Dask scheduler address, as for `run_jobs` (identical results)."""
    units = [(c.name, s) for c in conditions for s in seeds]
    per: dict[str, dict[str, list[float]]] = {sp.label: {P95: [], THR: [], SHARE: []} for sp in specs}
    b95: list[float] = []
    bthr: list[float] = []
    rows: list[dict] = []
    free = (specs[0].options if specs else SchedulerOptions(policy="unscheduled")).with_changes(policy="unscheduled")
    kinds = {w.kind for w in scenario.workload}
    with_bounds = bounds and kinds == {"interactive", "batch"}
    for cond in conditions:
        world = cond.apply(scenario)
        jobs = [Job(sp.label, sp.options, s) for sp in specs for s in seeds]
        if with_bounds:
            jobs += [Job("bound-no-batch", free, s, "no-batch") for s in seeds]
            jobs += [Job("bound-batch-alone", free, s, "batch-alone") for s in seeds]
        metrics = run_jobs(world, jobs, None if out is None else out / cond.name, workers, progress, scheduler)
        for job, m in zip(jobs, metrics):
            rows.append({"arm": job.label, "condition": cond.name, "seed": job.seed, **{k: m[k] for k in (P95, THR)}})
            if job.label == "bound-no-batch":
                b95.append(m[P95])
            elif job.label == "bound-batch-alone":
                bthr.append(m[THR])
            else:
                per[job.label][P95].append(m[P95])
                per[job.label][THR].append(m[THR])
                if SHARE in m:
                    per[job.label][SHARE].append(m[SHARE])
    arms = []
    for sp in specs:
        try:
            opts = production_options(sp.options)
        except ValueError:
            opts = sp.options.to_json_dict()
        share = per[sp.label][SHARE]
        arms.append(Arm(sp.label, opts, per[sp.label][P95], per[sp.label][THR], sp.family,
                        share if share and len(share) == len(per[sp.label][P95]) else None))
    return Measured(arms, units, b95, bthr, rows)
