"""The two multi-instance hazards measured (issue 24): interactive P95 and the backend's peak in flight against the
number of gateway instances for each limiter, and the work crashes lose or duplicate under each restart policy.

Each point is the mean over seeds (common random numbers: the same seeds for every point) of runs of one scenario
with its `[gateway]` table replaced. Numbers only: `reporting/figures/gateway.py` draws them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from simlab.experiments.metrics import summarize
from simlab.experiments.stats import mean_ci
from simlab.scenario import Gateway, Scenario
from simlab.world.engine import simulate

LIMITERS = ("local", "split", "shared")
# restart policies compared, by label: the [gateway] fields each sets on top of the scenario's own
RESTART_POLICIES = {
    "memory, no retry": {"queue": "memory"},
    "memory, client retry": {"queue": "memory", "client_retry_ms": 1000.0},
    "persistent, at-most-once": {"queue": "persistent"},
    "persistent, at-least-once": {"queue": "persistent", "delivery": "at-least-once"},
    "at-least-once, idempotent": {"queue": "persistent", "delivery": "at-least-once", "idempotent": True},
}
RESTART_FIELDS = ("queue", "client_retry_ms", "delivery", "idempotent")


@dataclass(frozen=True)
class InstancesPoint:
    limiter: str
    instances: int
    seeds: int
    interactive_p95_ms: float  # mean over seeds, with its 95% interval
    interactive_p95_low: float
    interactive_p95_high: float
    backend_peak_in_flight: float  # mean over seeds
    backend_peak_max: int  # the highest of any seed
    time_above_cap_ms: float  # mean over seeds
    global_cap: int
    batch_throughput_per_min: float


@dataclass(frozen=True)
class RestartPoint:
    restart_policy: str
    seeds: int
    crashes: float  # means per run
    lost: float
    resubmitted: float
    abandoned: float
    redelivered: float
    duplicated: float
    interactive_failed: float
    batch_failed: float
    interactive_p95_ms: float


def _with_gateway(scenario: Scenario, **fields) -> Scenario:
    base = scenario.gateway.model_dump() if scenario.gateway is not None else {}
    return scenario.model_copy(update={"gateway": Gateway.model_validate({**base, **fields})})


def _rows(scenario: Scenario, policy: str, seeds, **fields) -> list[dict]:
    s = _with_gateway(scenario, **fields)
    options = s.options(policy)
    return [summarize(simulate(s, options, seed), s.slo_p95_ms, s.criteria.slo_bin_ms) for seed in seeds]


def instances_sweep(scenario: Scenario, policy: str, seeds, instances=(1, 2, 4, 8), limiters=LIMITERS,
                    shared_delay_ms: float = 0.0) -> list[InstancesPoint]:
    """Every limiter at every N, crashes off (the scenario's other [gateway] fields kept)."""
    out = []
    for limiter in limiters:
        for n in instances:
            rows = _rows(scenario, policy, seeds, instances=n, limiter=limiter, shared_delay_ms=shared_delay_ms,
                         crash_at_ms=[], mtbf_ms=None, **{k: Gateway.model_fields[k].default for k in RESTART_FIELDS})
            p95 = mean_ci([r["interactive_p95_ms"] for r in rows])
            # one instance is the plain engine (no gateway columns): its peak is the engine's max_in_flight
            peaks = [r.get("backend_peak_in_flight", r["max_in_flight"]) for r in rows]
            cap = scenario.options(policy).max_concurrency
            out.append(InstancesPoint(limiter, n, len(rows), *p95, float(np.mean(peaks)), int(max(peaks)),
                                      float(np.mean([r.get("time_above_cap_ms", _above(r, cap)) for r in rows])),
                                      cap, float(np.mean([r["batch_throughput_per_min"] for r in rows]))))
    return out


def _above(row: dict, cap: int) -> float:
    """A plain run's time above the cap: none if its peak is within it (not measured otherwise: NaN)."""
    return 0.0 if row["max_in_flight"] <= cap else float("nan")


def restart_sweep(scenario: Scenario, policy: str, seeds) -> list[RestartPoint]:
    """Every restart policy of RESTART_POLICIES on the scenario's crashes (its [gateway] must have some)."""
    if scenario.gateway is None or not scenario.gateway.crashes:
        raise ValueError(f"{scenario.name}: its [gateway] has no crashes (crash_at_ms or mtbf_ms)")
    out = []
    for label, fields in RESTART_POLICIES.items():
        reset = {k: Gateway.model_fields[k].default for k in RESTART_FIELDS}
        rows = _rows(scenario, policy, seeds, **{**reset, **fields})

        def mean(key):
            return float(np.mean([r[key] for r in rows]))

        out.append(RestartPoint(label, len(rows), mean("crashes"), mean("lost"), mean("resubmitted"),
                                mean("abandoned"), mean("redelivered"), mean("duplicated"), mean("interactive_failed"),
                                mean("batch_failed"), mean("interactive_p95_ms")))
    return out


def as_rows(points) -> list[dict]:
    return [asdict(p) for p in points]
