"""Property tests of the SimPy engine: random small worlds, random policies and options, invariants checked.

Worlds: a `delay` or `slots` backend (random K, optionally a token_time model), one to three workloads
(Poisson, bursts, closed-loop users) with random service distributions, zero included. Policies: all five,
with random valid options (batchMinConcurrency 0, seed-heap tie-break, both smoothings, recheckOnExpiry,
rpsSource).

No task is lost: each finishes, or is stranded (never dispatched) only where the batch cap can sit at 0
with nothing to raise it: adaptive with batchMinConcurrency 0 and no recheckOnExpiry, and (by configuration)
static or adaptive with batchMaxConcurrency 0. Interactive tasks are never stranded.

Two views are checked:
- a monitor wrapped around the engine's seams (policy.submit, backend.dispatch/_start/_end/done) that keeps
  its own counts in event order and checks caps, interactive-first, slot usage and "never idle while work
  waits" at the instant each thing happens. Intervals alone cannot do that: with zero service times a task
  starts and ends at one instant, and the order inside an instant is not in the timestamps;
- the recorded output: per-task times, the time series, the backend's work counter.

About Little's law and the time series: `series` is sampled every `sample_ms`, so its Riemann sum only
approximates the time-average queue length (badly, for a scenario of a few hundred ms). Instead each sample
is checked exactly: the sampled count must lie between the number of intervals open strictly around the
sample instant and the number touching it (events at the sample's own instant may run before or after the
sampler). Little's law L = lambda W is then checked exactly on the step functions rebuilt from the task
intervals: the area under N(t) from a sweep over event times equals the sum of the waits.
"""

from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.policies import options_from_dict
from simlab.scenario import scenario_from_dict
from simlab.world.engine import Engine
from simlab.world.workloads import open_loop_tasks
from tests.gate_strategies import gate_options, never_strands

GATES = ("holdback", "aimd", "gradient2")
CAPPED = ("fifo", "priority", "static", "adaptive", *GATES)
KIND_AWARE = ("unscheduled", "priority", "static", "adaptive", *GATES)  # never start batch over a waiting interactive
HAS_CAP_AT_DISPATCH = ("priority", "static", "adaptive", *GATES)

SETTINGS = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies ---------------------------------------------------------------------------------


def dists(low=1.0, high=400.0, zero=True):
    # Exactly 0, or at least 1 ms: a think time of 1e-300 ms is no input anyone means, and closed-loop users
    # who take (almost) no time send requests without end (the loader rejects think and service both exactly
    # 0; it cannot know that 1e-300 ms is as bad).
    ms = st.one_of(st.just(0.0), st.floats(1, high))
    choices = [
        st.builds(lambda v: {"dist": "constant", "value": v}, st.sampled_from([low, 10.0, 50.0, high])),
        st.builds(lambda m: {"dist": "exponential", "mean": m}, st.floats(low, high)),
        st.builds(lambda a, b: {"dist": "uniform", "low": min(a, b), "high": max(a, b)}, ms, ms),
        st.builds(lambda m, k: {"dist": "lognormal", "median": m, "p95": m * k}, st.floats(low, high / 4), st.floats(1.1, 8)),
    ]  # fmt: skip
    if zero:
        choices.insert(0, st.just({"dist": "constant", "value": 0.0}))
    return st.one_of(*choices)


def always_zero(d: dict) -> bool:
    return (d["dist"] == "constant" and d["value"] == 0) or (d["dist"] == "uniform" and d["high"] == 0)


@st.composite
def arrivals(draw, duration):
    process = draw(st.sampled_from(["poisson", "burst", "closed-loop"]))
    if process == "poisson":
        a = {"process": "poisson", "rate_per_s": draw(st.floats(1, 100))}
        if draw(st.booleans()):
            a["start_ms"] = draw(st.sampled_from([0.0, duration / 3]))
        return a
    if process == "burst":
        at = draw(st.one_of(st.sampled_from([0.0, 100.0]), st.lists(st.integers(0, int(duration)).map(float), min_size=1, max_size=3)))
        return {"process": "burst", "count": draw(st.integers(1, 25)), "at_ms": at}
    a = {"process": "closed-loop", "users": draw(st.integers(1, 4)), "think": draw(dists(high=300))}
    if draw(st.booleans()):
        a["requests_per_user"] = draw(st.integers(1, 8))
    return a


@st.composite
def workloads(draw, duration, tokens_ok, kind):
    w = {"class": kind, "arrivals": draw(arrivals(duration))}
    if tokens_ok and draw(st.integers(0, 4)) == 0:
        tok = st.one_of(st.builds(lambda v: {"dist": "constant", "value": v}, st.integers(1, 500).map(float)),
                        st.builds(lambda h: {"dist": "uniform", "low": 1.0, "high": h}, st.floats(1, 2000)))  # fmt: skip
        w["prompt_tokens"] = draw(tok)
        w["output_tokens"] = draw(tok)
    else:
        w["service"] = draw(dists())
    if w["arrivals"]["process"] == "closed-loop" and "requests_per_user" not in w["arrivals"]:
        # A user who never thinks, served in no time, would never let the clock move: keep a limit then.
        if always_zero(w["arrivals"]["think"]) and (w.get("service") is None or always_zero(w["service"])):
            w["arrivals"]["requests_per_user"] = draw(st.integers(1, 8))
    return w


# Mostly both classes: that is where the policies differ.
CLASS_MIXES = [
    ["interactive", "batch"],
    ["batch", "interactive"],
    ["interactive", "batch", "batch"],
    ["batch", "interactive", "interactive"],
    ["interactive"],
    ["batch"],
]


@st.composite
def scenarios(draw):
    duration = draw(st.sampled_from([200.0, 1000.0, 3000.0]))
    backend = {"kind": draw(st.sampled_from(["delay", "slots"]))}
    if backend["kind"] == "slots":
        backend["slots"] = draw(st.integers(1, 5))
    tokens_ok = draw(st.booleans())
    if tokens_ok:
        backend["token_time"] = {
            "base_ms": draw(st.sampled_from([0.0, 5.0, 40.0])),
            "per_prompt_token_ms": draw(st.sampled_from([0.0, 0.05])),
            "per_output_token_ms": draw(st.sampled_from([0.0, 0.3, 2.0])),
        }
    return {
        "name": "prop",
        "duration_ms": duration,
        # The heaviest world here (3 x 300 tasks of ~2 s on one slot) drains in ~2e6 ms: a run that reaches
        # this hard stop (a wake-up loop, work that never drains) leaves tasks unfinished and fails, fast.
        "max_sim_ms": 1e7,
        "sample_ms": draw(st.sampled_from([7.0, 50.0, 333.0])),
        "backend": backend,
        "workload": [draw(workloads(duration, tokens_ok, kind)) for kind in draw(st.sampled_from(CLASS_MIXES))],
    }


@st.composite
def option_dicts(draw):
    policy = draw(st.sampled_from(["unscheduled", "fifo", "priority", "static", "adaptive", *GATES]))
    d = {"policy": policy, "tieBreak": draw(st.sampled_from(["fifo", "seed-heap"]))}
    if policy != "unscheduled":
        d["maxConcurrency"] = draw(st.integers(1, 6))
    if policy in ("static", "adaptive"):
        d["batchMaxConcurrency"] = draw(st.integers(0, 7))
    if policy == "adaptive":
        d["batchMinConcurrency"] = draw(st.integers(0, d["batchMaxConcurrency"]))
        d["interactiveRpsThreshold"] = draw(st.one_of(st.sampled_from([0.5, 5, 20, 1000]), st.floats(0.05, 200)))
        d["interactiveP95LatencyMs"] = draw(st.one_of(st.sampled_from([1, 50, 500]), st.floats(0.5, 3000)))
        d["windowMs"] = draw(st.one_of(st.sampled_from([1, 100, 1000, 10000]), st.floats(1, 5000)))
        smoothing = draw(st.sampled_from([None, "alpha", "tau"]))
        if smoothing == "alpha":
            d["smoothingAlpha"] = draw(st.one_of(st.sampled_from([0.1, 0.3, 1]), st.floats(0.05, 1)))
        elif smoothing == "tau":
            d["smoothingTauMs"] = draw(st.one_of(st.sampled_from([10, 1000]), st.floats(1, 3000)))
        d["recheckOnExpiry"] = draw(st.booleans())
        d["rpsSource"] = draw(st.sampled_from(["completions", "arrivals"]))
    if policy in GATES:
        d.update(draw(gate_options(policy, d["maxConcurrency"])))
    return d


# --- the monitor ------------------------------------------------------------------------------------


class Monitor:
    """Own bookkeeping at the engine's seams, in event order; every check at the instant it applies."""

    MAX_WAKES = 200_000
    MAX_TASKS = 200_000  # the largest world here has well under 50,000: more means a runaway, fail fast

    def __init__(self, engine: Engine):
        self.engine = engine
        self.o = o = engine.options
        self.in_flight = 0  # dispatched by the scheduler, not ended
        self.batch_in_flight = 0
        self.waiting_interactive: set[int] = set()  # submitted, not dispatched
        self.submitted: set[int] = set()
        self.alive: list = []
        self.dispatched: set[int] = set()
        self.dispatch_order: list = []
        self.start_order: list = []
        self.in_service = 0  # backend: started, not ended
        self.backend_waiting: set[int] = set()  # dispatched to the backend, not started
        self.wakes = 0
        self.slots = engine.scenario.backend.slots if engine.scenario.backend.kind == "slots" else None
        policy, backend = engine.policy, engine.backend
        submit, dispatch, done, start, end, wake = (
            policy.submit, backend.dispatch, backend.done, getattr(backend, "_start", None), backend._end, engine._wake
        )

        def on_submit(task):
            assert id(task) not in self.submitted, f"{task} submitted twice"
            assert len(self.submitted) < self.MAX_TASKS, "runaway: far more tasks than this world can make"
            assert task.arrival_ms == engine.env.now
            self.submitted.add(id(task))
            self.alive.append(task)  # the engine drops a task when it ends: keep it, so id() stays unique
            if task.interactive:
                self.waiting_interactive.add(id(task))
            return submit(task)

        def on_dispatch(task):
            assert id(task) in self.submitted and id(task) not in self.dispatched, f"{task} dispatched twice or unsubmitted"
            self.dispatched.add(id(task))
            self.dispatch_order.append(task)
            self.in_flight += 1
            if o.policy in CAPPED:
                assert self.in_flight <= o.max_concurrency, "scheduler in flight above maxConcurrency"
            if task.interactive:
                self.waiting_interactive.discard(id(task))
            else:
                self.batch_in_flight += 1
                if o.policy in KIND_AWARE:
                    assert not self.waiting_interactive, f"batch {task} dispatched while interactive work waited"
                if o.policy in HAS_CAP_AT_DISPATCH:
                    assert self.batch_in_flight <= task.cap_at_dispatch, "batch in flight above the cap in force"
            self.backend_waiting.add(id(task))
            dispatch(task)
            if engine.scenario.backend.kind == "delay":
                self._started(task)  # the delay backend has no _start: service begins on dispatch
            self._check_work_conserving()

        def on_start(task):
            self._started(task)
            start(task)

        def on_end(task):
            self.in_service -= 1
            end(task)
            self._check_work_conserving()

        def on_done(task):
            self.in_flight -= 1
            if not task.interactive:
                self.batch_in_flight -= 1
            done(task)

        def on_wake(event):
            self.wakes += 1
            assert self.wakes < self.MAX_WAKES, "wake-up loop"
            wake(event)

        policy.submit = on_submit
        backend.dispatch = on_dispatch
        backend.done = on_done
        backend._end = on_end
        engine._wake = on_wake
        if start is not None:
            backend._start = on_start

    def _started(self, task):
        assert id(task) in self.backend_waiting, f"{task} started twice or undispatched"
        self.backend_waiting.discard(id(task))
        self.start_order.append(task)
        self.in_service += 1
        if self.slots is not None:
            assert self.in_service <= self.slots, "more tasks in service than slots"

    def _check_work_conserving(self):
        if self.slots is not None and self.backend_waiting:
            assert self.in_service == self.slots, "a slot is idle while tasks wait in the backend's queue"


# --- interval helpers ---------------------------------------------------------------------------------


def sandwich(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each instant in t: (intervals [a, b) open strictly around it, intervals touching it)."""
    # With a <= b: #{a <= t} - #{b < t} = #{a <= t <= b} exactly; #{a < t} - #{b <= t} = #{a < t < b} minus the
    # zero-length intervals at t, still a lower bound (and those are never visible to a sampler anyway).
    a_sorted, b_sorted = np.sort(a), np.sort(b)
    lower = np.searchsorted(a_sorted, t, side="left") - np.searchsorted(b_sorted, t, side="right")
    upper = np.searchsorted(a_sorted, t, side="right") - np.searchsorted(b_sorted, t, side="left")
    return lower, upper


def area(a: np.ndarray, b: np.ndarray) -> float:
    """Integral of N(t) = #{a <= t < b} by a sweep over the event times."""
    times = np.concatenate([a, b])
    steps = np.concatenate([np.ones(len(a)), -np.ones(len(b))])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])
    return float(np.sum(level[:-1] * np.diff(times)))


def service_of(task, backend_config) -> float:
    if task.service_ms is not None:
        return task.service_ms
    m = backend_config.token_time
    return m.base_ms + m.per_prompt_token_ms * task.prompt_tokens + m.per_output_token_ms * task.output_tokens


def may_strand(o) -> bool:
    """The batch cap can sit at 0 with nothing left to raise it."""
    if o.policy == "static":
        return o.batch_max_concurrency == 0
    if o.policy == "adaptive":
        return o.batch_max_concurrency == 0 or (o.batch_min_concurrency == 0 and not o.recheck_on_expiry)
    return not never_strands(o)


# --- the property -------------------------------------------------------------------------------------


@SETTINGS
@given(scenarios(), option_dicts(), st.integers(0, 10_000))
def test_engine_invariants(scenario_dict, option_dict, seed):
    scenario = scenario_from_dict(scenario_dict)
    o = options_from_dict(option_dict)
    engine = Engine(scenario, o, seed)
    monitor = Monitor(engine)
    result = engine.run()
    tasks = result.tasks
    cfg = scenario.backend

    # every task once; open-loop tasks all there
    ids = [t.id for t in tasks]
    assert len(set(ids)) == len(ids), "duplicate task ids"
    assert {t.id for t in open_loop_tasks(scenario, seed)} <= set(ids)
    assert len(monitor.submitted) == len(tasks)

    # none lost: finished, or stranded (never dispatched) where the options allow it
    stranded = [t for t in tasks if t.dispatch_ms is None]
    for t in tasks:
        if t.dispatch_ms is not None:
            assert t.end_ms is not None and t.outcome == "ok", f"{t} dispatched but never finished"
    if stranded:
        assert may_strand(o), f"{len(stranded)} tasks stranded under {option_dict}"
        assert all(not t.interactive for t in stranded), "an interactive task was stranded"
    assert not monitor.waiting_interactive

    # times in order, and exactly the service time on slots and delay
    for t in tasks:
        if t.dispatch_ms is None:
            assert t.start_ms is None and t.end_ms is None
            continue
        assert t.arrival_ms <= t.dispatch_ms <= t.start_ms <= t.end_ms, t
        assert t.end_ms == t.start_ms + service_of(t, cfg), t
        if cfg.kind == "delay":
            assert t.start_ms == t.dispatch_ms
        if o.policy == "unscheduled":
            assert t.dispatch_ms == t.arrival_ms

    # the backend serves in dispatch order (its queue is FIFO; delay starts on dispatch)
    assert [id(t) for t in monitor.start_order] == [id(t) for t in monitor.dispatch_order]
    assert monitor.in_flight == 0 and monitor.in_service == 0 and not monitor.backend_waiting

    # closed-loop users have one request out at a time
    by_user: dict[str, list] = {}
    for t in tasks:
        m = re.fullmatch(r"(.*)-u(\d+)-(\d+)", str(t.id))
        if m:
            by_user.setdefault(f"{m[1]}/{m[2]}", []).append((int(m[3]), t))
    for reqs in by_user.values():
        reqs.sort(key=lambda r: r[0])
        for (_, prev), (_, nxt) in zip(reqs, reqs[1:]):
            assert prev.end_ms is not None and nxt.arrival_ms >= prev.end_ms

    # work conservation on slots: service delivered == the backend's own counter == busy slot-time
    started = [t for t in tasks if t.start_ms is not None]
    if cfg.kind == "slots":
        work = math.fsum(service_of(t, cfg) for t in started)
        assert math.isclose(engine.backend.busy_ms, work, rel_tol=1e-9, abs_tol=1e-6)
        busy_area = area(np.array([t.start_ms for t in started]), np.array([t.end_ms for t in started]))
        assert math.isclose(busy_area, work, rel_tol=1e-9, abs_tol=1e-6)

    # the time series, sample by sample, against counts rebuilt from the task intervals
    inf = math.inf
    s = result.series
    t_ms = s["t_ms"]
    assert len(t_ms) >= 1 and np.all(np.diff(t_ms) > 0)

    def col(getter, kind=None):
        return np.array([inf if (v := getter(t)) is None else v for t in tasks if kind is None or t.kind == kind])

    views = {
        "queued_interactive": (col(lambda t: t.arrival_ms, "interactive"), col(lambda t: t.dispatch_ms, "interactive")),
        "queued_batch": (col(lambda t: t.arrival_ms, "batch"), col(lambda t: t.dispatch_ms, "batch")),
        "in_flight_interactive": (col(lambda t: t.dispatch_ms, "interactive"), col(lambda t: t.end_ms, "interactive")),
        "in_flight_batch": (col(lambda t: t.dispatch_ms, "batch"), col(lambda t: t.end_ms, "batch")),
        "backend_busy": (col(lambda t: t.start_ms), col(lambda t: t.end_ms)),
        "backend_waiting": (col(lambda t: t.dispatch_ms), col(lambda t: t.start_ms)),
    }
    for name, (a, b) in views.items():
        lower, upper = sandwich(a, b, t_ms)
        bad = (s[name] < lower) | (s[name] > upper)
        assert not bad.any(), f"{name} at t={t_ms[bad][0]}: sampled {s[name][bad][0]}, intervals say [{lower[bad][0]}, {upper[bad][0]}]"
    if cfg.kind == "slots":
        assert np.all(s["backend_busy"] <= cfg.slots)
        assert np.all((s["backend_waiting"] == 0) | (s["backend_busy"] == cfg.slots))
    if o.policy in CAPPED:
        assert np.all(s["in_flight_interactive"] + s["in_flight_batch"] <= o.max_concurrency)

    # Little's law on [0, T], T = the last event: area under N(t) = sum of the times spent (exact, from a
    # sweep over the events, not from the interval lengths); so L = (n / T) * W.
    horizon = result.end_ms
    for who in ("interactive", "batch"):
        mine = [t for t in tasks if t.kind == who and t.dispatch_ms is not None]
        if not mine:
            continue
        arr = np.array([t.arrival_ms for t in mine])
        for until in ("dispatch_ms", "end_ms"):
            done = np.array([getattr(t, until) for t in mine])
            assert done.max() <= horizon
            waits = done - arr
            L = area(arr, done) / horizon if horizon > 0 else 0.0
            lam_W = len(mine) / horizon * waits.mean() if horizon > 0 else 0.0
            assert math.isclose(L, lam_W, rel_tol=1e-9, abs_tol=1e-9), (who, until, L, lam_W)


@settings(max_examples=25, deadline=None)
@given(scenarios(), option_dicts(), st.integers(0, 10_000))
def test_engine_is_deterministic(scenario_dict, option_dict, seed):
    """Same scenario, options and seed: the same task times and series, bit for bit."""
    scenario = scenario_from_dict(scenario_dict)
    o = options_from_dict(option_dict)
    a = Engine(scenario, o, seed).run()
    b = Engine(scenario, o, seed).run()
    key = lambda r: [(t.id, t.arrival_ms, t.dispatch_ms, t.start_ms, t.end_ms, t.cap_at_dispatch) for t in r.tasks]  # noqa: E731
    assert key(a) == key(b)
    for name in a.series:
        assert np.array_equal(a.series[name], b.series[name], equal_nan=True)
