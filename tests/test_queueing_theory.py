"""The engine against queueing theory: M/M/c on `slots`, zero queueing on `delay`, Little's law.

M/M/c: one interactive class, Poisson arrivals at rate lambda, exponential service with mean 1/mu, c slots.
With `unscheduled` (or `priority` with a cap nobody reaches) the scheduler dispatches every task on arrival,
so all the waiting happens in the backend's own FIFO queue and `start_ms - arrival_ms` is the M/M/c waiting
time, whose mean is Erlang C: Wq = C(c, a) / (c mu - lambda), a = lambda / mu.

Each load is checked with independent replications (fixed seeds, so the test is deterministic): the mean
wait of each replication after a warm-up, then a Student-t 95% CI over replications that must contain the
exact Wq, and whose half-width must be small enough (a few % of Wq) that the check has teeth. Each load uses
its own block of seeds: loads sharing seeds would share their random draws and pass or fail together.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest
from scipy import stats

from simlab.policies import options_from_dict
from simlab.scenario import scenario_from_dict
from simlab.world.engine import Engine

SERVICE_MS = 100.0  # 1 / mu
SLOTS = 4
HUGE = 10**9  # a cap nobody reaches

# rho -> (customers per replication, replications, max CI half-width as a fraction of Wq)
LOADS = {
    0.5: (20_000, 8, 0.15),
    0.7: (20_000, 8, 0.15),
    0.85: (20_000, 8, 0.15),
    # Heavy traffic: the wait's autocorrelation time grows like 1 / (1 - rho)^2, so many more customers.
    0.95: (120_000, 8, 0.15),
}
WARMUP = 0.1  # fraction of each replication's customers discarded (the queue starts empty)

POLICIES = {
    "unscheduled": {"policy": "unscheduled"},
    "priority": {"policy": "priority", "maxConcurrency": HUGE},
}


def erlang_c(c: int, a: float) -> float:
    """Probability that an arrival waits in M/M/c with offered load a = lambda / mu (< c)."""
    # Stable form: the Poisson pmf/cdf, P(wait) = c B / (c - a (1 - B)) with B the Erlang B blocking.
    top = stats.poisson.pmf(c, a)
    below = stats.poisson.cdf(c - 1, a)
    return top * c / (c - a) / (below + top * c / (c - a))


def erlang_c_direct(c: int, a: float) -> float:
    """The textbook formula, term by term (a cross-check of erlang_c)."""
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) * c / (c - a)
    return tail / (head + tail)


def mmc_wq(c: int, lam: float, mu: float) -> float:
    return erlang_c(c, lam / mu) / (c * mu - lam)


def mmc_scenario(rho: float, customers: int, c: int = SLOTS, kind: str = "interactive"):
    mu = 1.0 / SERVICE_MS
    lam = rho * c * mu  # per ms
    duration = customers / lam
    scenario = scenario_from_dict(
        {
            "name": f"mmc-{rho}",
            "duration_ms": duration,
            "max_sim_ms": 100 * duration,
            "sample_ms": duration / 20,  # the time series is not used here; keep it small
            "backend": {"kind": "slots", "slots": c},
            "workload": [
                {
                    "name": "customers",  # the stream key: the same draws whatever the class
                    "class": kind,
                    "arrivals": {"process": "poisson", "rate_per_s": lam * 1000.0},
                    "service": {"dist": "exponential", "mean": SERVICE_MS},
                }
            ],
        }
    )
    return scenario, lam, mu


def seeds_for(rho: float, reps: int) -> list[int]:
    block = sorted(LOADS).index(rho) + 1
    return [1000 * block + r for r in range(reps)]


@lru_cache(maxsize=None)
def replicate(policy: str, rho: float) -> tuple:
    """Per replication: (all tasks' (arrival, dispatch, start, end) arrays, mean wait after warm-up)."""
    customers, reps, _ = LOADS[rho]
    scenario, _, _ = mmc_scenario(rho, customers)
    options = options_from_dict(POLICIES[policy])
    out = []
    for seed in seeds_for(rho, reps):
        tasks = Engine(scenario, options, seed).run().tasks
        times = np.array([(t.arrival_ms, t.dispatch_ms, t.start_ms, t.end_ms) for t in tasks], dtype=float)
        out.append(times)
    return tuple(out)


def t_interval(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)
    return float(values.mean()), float(half)


# --- Erlang C itself -------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("rho", [0.1, 0.5, 0.85, 0.95, 0.99])
def test_erlang_c_formulas_agree(c, rho):
    assert erlang_c(c, rho * c) == pytest.approx(erlang_c_direct(c, rho * c), rel=1e-10)


def test_erlang_c_known_values():
    # M/M/1: P(wait) = rho, Wq = rho / (mu - lambda).
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    assert mmc_wq(1, 0.7, 1.0) == pytest.approx(0.7 / 0.3)
    # M/M/2 at a = 1: C = 1/3 (textbook).
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)


# --- M/M/c on slots --------------------------------------------------------------------------------


# `priority` at 0.95 would repeat 7 s of simulation for numbers that are, task for task, those of
# `unscheduled` (test_priority_with_unreachable_cap_is_unscheduled).
MMC_CASES = [("unscheduled", rho) for rho in sorted(LOADS)] + [("priority", rho) for rho in sorted(LOADS) if rho < 0.9]


@pytest.mark.parametrize("policy, rho", MMC_CASES)
def test_mmc_mean_wait_matches_erlang_c(policy, rho):
    customers, reps, max_rel_half = LOADS[rho]
    _, lam, mu = mmc_scenario(rho, customers)
    wq = mmc_wq(SLOTS, lam, mu)
    means = []
    for times in replicate(policy, rho):
        arrival, dispatch, start, end = times.T
        assert np.array_equal(dispatch, arrival), "the scheduler must add no delay here"
        assert not np.isnan(end).any()
        assert abs(len(times) - customers) < 6 * math.sqrt(customers)  # Poisson count
        keep = slice(int(WARMUP * len(times)), None)  # tasks are in arrival order
        means.append(float(np.mean(start[keep] - arrival[keep])))
    mean, half = t_interval(means)
    msg = f"rho={rho}: mean wait {mean:.2f} ms +- {half:.2f} (95% CI over {reps} replications), Erlang C Wq={wq:.2f} ms"
    assert abs(mean - wq) <= half, msg
    assert half <= max_rel_half * wq, f"CI too wide to mean anything: {msg}"


@pytest.mark.parametrize("rho", [0.7, 0.95])
def test_mmc_probability_of_waiting_matches_erlang_c(rho):
    """P(wait > 0) = C(c, a): a second, lower-variance view of the same queue."""
    customers, reps, _ = LOADS[rho]
    _, lam, mu = mmc_scenario(rho, customers)
    fractions = []
    for times in replicate("unscheduled", rho):
        arrival, _, start, _ = times.T
        keep = slice(int(WARMUP * len(times)), None)
        fractions.append(float(np.mean(start[keep] > arrival[keep])))
    mean, half = t_interval(fractions)
    c = erlang_c(SLOTS, lam / mu)
    assert abs(mean - c) <= half, f"rho={rho}: P(wait) {mean:.4f} +- {half:.4f}, Erlang C {c:.4f}"
    assert half <= 0.03


@pytest.mark.parametrize("rho", [0.5, 0.85])
def test_priority_with_unreachable_cap_is_unscheduled(rho):
    """Task for task, `priority` with a cap nobody reaches gives the same times as `unscheduled`."""
    for a, b in zip(replicate("unscheduled", rho), replicate("priority", rho), strict=True):
        assert np.array_equal(a, b)


def test_mmc_batch_class_alone_is_the_same_queue():
    """A single batch class sees the same M/M/c queue (class only matters when there are two)."""
    scenario_i, _, _ = mmc_scenario(0.7, 3000, kind="interactive")
    scenario_b, _, _ = mmc_scenario(0.7, 3000, kind="batch")
    for policy in ("unscheduled", "priority"):
        options = options_from_dict(POLICIES[policy])
        ti = Engine(scenario_i, options, 7).run().tasks
        tb = Engine(scenario_b, options, 7).run().tasks
        assert [(t.arrival_ms, t.start_ms, t.end_ms) for t in ti] == [(t.arrival_ms, t.start_ms, t.end_ms) for t in tb]


# --- delay: no queueing at all ---------------------------------------------------------------------

UNCAPPED = {
    "unscheduled": {"policy": "unscheduled"},
    "fifo": {"policy": "fifo", "maxConcurrency": HUGE},
    "priority": {"policy": "priority", "maxConcurrency": HUGE},
    "static": {"policy": "static", "maxConcurrency": HUGE, "batchMaxConcurrency": HUGE},
    # batchMin = batchMax: the adaptive cap cannot shrink, whatever the pressure
    "adaptive": {"policy": "adaptive", "maxConcurrency": HUGE, "batchMaxConcurrency": HUGE,
                 "batchMinConcurrency": HUGE, "interactiveRpsThreshold": 1, "interactiveP95LatencyMs": 1},
    "adaptive-smoothed": {"policy": "adaptive", "maxConcurrency": HUGE, "batchMaxConcurrency": HUGE,
                          "batchMinConcurrency": HUGE, "interactiveRpsThreshold": 1, "interactiveP95LatencyMs": 1,
                          "smoothingTauMs": 500, "recheckOnExpiry": True, "tieBreak": "seed-heap"},
}  # fmt: skip


@pytest.mark.parametrize("kind", ["interactive", "batch"])
@pytest.mark.parametrize("policy", sorted(UNCAPPED))
def test_delay_backend_never_queues(policy, kind):
    scenario = scenario_from_dict(
        {
            "name": "delay",
            "duration_ms": 20_000,
            "backend": {"kind": "delay"},
            "workload": [
                {"class": kind, "arrivals": {"process": "poisson", "rate_per_s": 200},
                 "service": {"dist": "lognormal", "median": 300, "p95": 3000}},
                {"class": kind, "arrivals": {"process": "burst", "count": 500, "at_ms": [0, 7000]},
                 "service": {"dist": "constant", "value": 0}},
            ],
        }
    )  # fmt: skip
    tasks = Engine(scenario, options_from_dict(UNCAPPED[policy]), seed=3).run().tasks
    assert len(tasks) > 4000
    for t in tasks:
        assert t.dispatch_ms == t.arrival_ms and t.start_ms == t.arrival_ms, t
        assert t.end_ms == t.start_ms + t.service_ms and t.outcome == "ok", t


# --- Little's law ----------------------------------------------------------------------------------


def time_average(intervals_from: np.ndarray, intervals_to: np.ndarray, horizon: float) -> float:
    """Time-average over [0, horizon] of the number of open intervals, by a sweep over the event times
    (the area under the step function N(t), not a sum of interval lengths)."""
    lo = np.minimum(intervals_from, horizon)
    hi = np.minimum(intervals_to, horizon)
    times = np.concatenate([lo, hi])
    steps = np.concatenate([np.ones(len(lo)), -np.ones(len(hi))])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])
    area = float(np.sum(level[:-1] * np.diff(times)))
    return area / horizon


@pytest.mark.parametrize("rho", [0.5, 0.85])
def test_littles_law(rho):
    """L = lambda W, for the whole system (arrival..end) and for the queue (arrival..start).

    Per replication over [0, T] with T the end of arrivals: the time-average number (a sweep over the
    event times) matches the true arrival rate times the mean time of the customers who arrived in
    [0, T] (edge effects at T are O(1/n)); over replications both match the theory, L = lambda (Wq + 1/mu)."""
    customers, reps, _ = LOADS[rho]
    scenario, lam, mu = mmc_scenario(rho, customers)
    horizon = scenario.duration_ms
    L, Lq = [], []
    for times in replicate("unscheduled", rho):
        arrival, _, start, end = times.T
        l_sys = time_average(arrival, end, horizon)
        l_queue = time_average(arrival, start, horizon)
        lam_hat = len(arrival) / horizon
        assert l_sys == pytest.approx(lam_hat * np.mean(end - arrival), rel=0.01)
        assert l_queue == pytest.approx(lam_hat * np.mean(start - arrival), rel=0.02)
        L.append(l_sys)
        Lq.append(l_queue)
    wq = mmc_wq(SLOTS, lam, mu)
    for name, values, theory in (("L", L, lam * (wq + 1 / mu)), ("Lq", Lq, lam * wq)):
        mean, half = t_interval(values)
        # These include the empty start (no warm-up cut), so allow that bias on top of the CI.
        assert abs(mean - theory) <= half + 0.02 * theory, f"{name}: {mean:.3f} +- {half:.3f}, theory {theory:.3f}"
