"""Property tests: every policy, driven through `simlab.replay.replay` on random traces and random valid options.

Two independent views are checked:
- the replay's output times (start/end per task), reconstructed into concurrency at every instant;
- a recorder wrapped around the policy (through `simlab.replay.make_policy`) that keeps its own count of tasks
  in flight and waiting, from the calls it sees, and checks each start at the moment it happens. It does not
  trust the policy's own counters: it compares them with its own.

The gateway gates (holdback, aimd, gradient2) and eviction (`evict = "newest"`) are drawn like the article's
policies: caps, interactive first, no task lost or run twice (a stopped task waits again, and starts again only
from there), and a free slot left free only for the reason each policy names.
"""

from __future__ import annotations

import math
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import simlab.replay
from simlab.policies import POLICY_NAMES, SchedulerOptions, Task, make_policy, options_from_dict
from simlab.replay import replay
from tests.gate_strategies import gate_options, never_strands

GATES = ("holdback", "aimd", "gradient2")
CAPPED = ("fifo", "priority", "static", "adaptive", *GATES)
KIND_AWARE = ("unscheduled", "priority", "static", "adaptive", *GATES)  # never start batch over a waiting interactive
EVICTABLE = ("priority", "static", "adaptive", *GATES)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- strategies ---------------------------------------------------------------------------------


@st.composite
def traces(draw, max_tasks=30):
    n = draw(st.integers(0, max_tasks))
    style = draw(st.sampled_from(["ties", "ints", "floats", "mixed"]))
    arrival = {
        "ties": st.sampled_from([0.0, 0.0, 1.0, 5.0, 10.0]),
        "ints": st.integers(0, 60).map(float),
        "floats": st.floats(0, 100, allow_nan=False, allow_infinity=False),
        "mixed": st.one_of(st.integers(0, 30).map(float), st.floats(0, 30), st.sampled_from([0.1, 0.2, 0.3])),
    }[style]
    service = st.one_of(
        st.just(0.0),
        st.integers(0, 20).map(float),
        st.floats(0, 40, allow_nan=False, allow_infinity=False),
    )
    kind = draw(st.sampled_from([["interactive", "batch"], ["batch", "batch", "interactive"], ["interactive"]]))
    rows = draw(st.lists(st.tuples(st.sampled_from(kind), arrival, service), min_size=n, max_size=n))
    return [(f"t{k}", kd, a, s) for k, (kd, a, s) in enumerate(rows)]


def fresh(rows):
    return [Task(i, k, a, s) for i, k, a, s in rows]


@st.composite
def option_dicts(draw, policy=None):
    policy = policy or draw(st.sampled_from(POLICY_NAMES))
    d = {"policy": policy, "tieBreak": draw(st.sampled_from(["fifo", "seed-heap"]))}
    if policy != "unscheduled":
        d["maxConcurrency"] = draw(st.integers(1, 5))
    if policy in ("static", "adaptive"):
        d["batchMaxConcurrency"] = draw(st.integers(0, 5))
    if policy == "adaptive":
        d["batchMinConcurrency"] = draw(st.integers(0, d["batchMaxConcurrency"]))
        d["interactiveRpsThreshold"] = draw(
            st.one_of(st.sampled_from([0.5, 1, 3, 20, 100, 1000]), st.floats(0.01, 5000))
        )
        d["interactiveP95LatencyMs"] = draw(st.one_of(st.sampled_from([1, 5, 20, 100, 500]), st.floats(0.1, 1000)))
        d["windowMs"] = draw(st.one_of(st.sampled_from([1, 5, 10, 30, 100, 1000, 10000]), st.floats(0.5, 2000)))
        smoothing = draw(st.sampled_from([None, "alpha", "tau"]))
        if smoothing == "alpha":
            d["smoothingAlpha"] = draw(st.one_of(st.sampled_from([0.1, 0.3, 0.5, 1]), st.floats(0.05, 1)))
        elif smoothing == "tau":
            d["smoothingTauMs"] = draw(st.one_of(st.sampled_from([1, 10, 100, 1000]), st.floats(0.5, 2000)))
        d["recheckOnExpiry"] = draw(st.booleans())
        d["rpsSource"] = draw(st.sampled_from(["completions", "arrivals"]))
    if policy in GATES:
        d.update(draw(gate_options(policy, d["maxConcurrency"])))
    if policy in EVICTABLE and draw(st.integers(0, 3)) == 0:
        d["evict"] = "newest"
        d["evictAfterMs"] = draw(st.one_of(st.sampled_from([0.5, 1, 5, 20]), st.floats(0.1, 50)))
    return d


def opts(d) -> SchedulerOptions:
    return options_from_dict(d, "hypothesis")


# --- the recorder -------------------------------------------------------------------------------


class Recorder:
    """Wraps a policy; checks every start at the instant it happens, with its own bookkeeping."""

    def __init__(self, policy, clock, options: SchedulerOptions):
        self.inner = policy
        self.clock = clock
        self.o = options
        self.running = 0
        self.batch_running = 0
        self.waiting: dict[int, Task] = {}  # submitted, not started
        self.started_ids: set[int] = set()
        self.running_ids: set[int] = set()  # started, neither finished nor stopped
        self.stopped: set[int] = set()  # stopped and not started again
        self.start_order: list[Task] = []
        self.batch_starts = 0
        self.calls = 0
        self.stops: list[Task] = []
        self.stop_count = 0

    # the driver's interface
    def submit(self, task):
        assert id(task) not in self.waiting and id(task) not in self.started_ids, "submitted twice"
        assert task.arrival_ms == self.clock(), "replay submits at the arrival instant"
        self.waiting[id(task)] = task
        started = self.inner.submit(task)
        assert task.submitted_ms == self.clock()
        if self.o.policy == "unscheduled":
            assert started == [task]
        return self._account(started)

    def finish(self, task):
        assert id(task) in self.running_ids, "finish of a task that is not running"
        self.running_ids.discard(id(task))
        self.running -= 1
        if task.kind == "batch":
            self.batch_running -= 1
        return self._account(self.inner.finish(task))

    def wake(self):
        return self._account(self.inner.wake())

    def may_stop(self):
        return self.inner.may_stop()

    def take_stops(self):
        stops, self.stops = self.stops, []
        return stops

    def next_check_ms(self):
        t = self.inner.next_check_ms()
        if t is not None:
            assert t > self.clock(), "a wake-up must be strictly in the future"
            assert (self.o.policy == "adaptive" and self.o.recheck_on_expiry) or self.o.evicts
        return t

    # the checks
    def _account(self, started):
        self.calls += 1
        o = self.o
        # the driver stops what the policy stops before it starts anything: so does this account
        for s in self.inner.take_stops():
            assert o.evicts, "a policy without eviction stopped a task"
            assert s.kind == "batch", f"interactive {s} stopped"
            assert id(s) in self.running_ids, f"{s} stopped while not running"
            self.running_ids.discard(id(s))
            self.running -= 1
            self.batch_running -= 1
            self.waiting[id(s)] = s
            self.stopped.add(id(s))
            self.stops.append(s)
            self.stop_count += 1
        for s in started:
            assert id(s) not in self.running_ids, f"{s} started twice"
            assert id(s) in self.waiting, f"{s} started without being submitted (or after starting)"
            assert id(s) not in self.started_ids or id(s) in self.stopped, f"{s} ran twice without being stopped"
            del self.waiting[id(s)]
            self.stopped.discard(id(s))
            self.started_ids.add(id(s))
            self.running_ids.add(id(s))
            self.start_order.append(s)
            self.running += 1
            if o.policy in CAPPED:
                assert self.running <= o.max_concurrency, "more tasks in flight than maxConcurrency"
            if s.kind == "batch":
                self.batch_starts += 1
                self.batch_running += 1
                if o.policy in KIND_AWARE:
                    waiting_interactive = [t for t in self.waiting.values() if t.kind == "interactive"]
                    assert not waiting_interactive, f"batch {s} started while {waiting_interactive} waited"
                if o.policy == "static":
                    assert s.cap_at_dispatch == o.batch_max_concurrency
                if o.policy == "adaptive":
                    cap = s.cap_at_dispatch
                    assert cap is not None and o.batch_min_concurrency <= cap <= o.batch_max_concurrency
                    assert isinstance(cap, int)
                if o.policy in ("static", "adaptive", *GATES):
                    assert self.batch_running <= s.cap_at_dispatch, "batch in flight above the cap in force"
                if o.policy in GATES:
                    assert self.batch_running <= self.batch_ceiling(), "batch in flight above batchMaxConcurrency"
        # the policy's own counters agree with what it told the driver
        p = self.inner
        assert (p.running, p.batch_running) == (self.running, self.batch_running)
        wi = sum(t.kind == "interactive" for t in self.waiting.values())
        wb = len(self.waiting) - wi
        assert p.queued() == (wi, wb)
        # work conservation: a free slot is only left free for a reason the policy names
        if o.policy in CAPPED and self.running < o.max_concurrency:
            # holdback and gradient2 may hold interactive work back too: checked below, by their own rule
            assert wi == 0 or o.policy in ("holdback", "gradient2"), "an interactive task waits while a slot is free"
            if o.policy in ("fifo", "priority"):
                assert wb == 0
            elif o.policy == "static" and wb:
                assert self.batch_running >= o.batch_max_concurrency
            elif o.policy in ("adaptive", "aimd") and wb:
                assert self.batch_running >= p.batch_cap()
        p = getattr(p, "inner", p)  # eviction wraps the policy
        if o.policy == "holdback" and self.running < o.max_concurrency and (wi or wb):
            s = p.saturation()
            held = s >= o.value("maxCeiling")
            assert held or not wi, "an interactive task waits at a free slot below the interactive ceiling"
            assert held or not wb or self.batch_running >= p.limit_at(s), "batch waits below its holdback ceiling"
        if o.policy == "gradient2" and self.running < o.max_concurrency:
            over = self.running >= p.limit
            if wi:
                assert over and self.running - self.batch_running >= p._part_i, "interactive held below its partition"
            elif wb:
                assert self.batch_running >= self.batch_ceiling() or (over and self.batch_running >= p._part_b)
        return started

    def batch_ceiling(self) -> int:
        """batchMaxConcurrency as the gates read it (maxConcurrency when unset; aimd: its source's maxLimit)."""
        o = self.o
        if o.policy == "aimd":
            return o.value("batchMaxConcurrency")
        return o.batch_max_concurrency if o.batch_max_concurrency is not None else o.max_concurrency


def run(rows, options: SchedulerOptions):
    tasks = fresh(rows)
    recorders = []

    def factory(o, clock, observe=None):
        rec = Recorder(make_policy(o, clock, observe), clock, o)
        recorders.append(rec)
        return rec

    with mock.patch.object(simlab.replay, "make_policy", factory):
        result = replay(tasks, options)
    assert len(recorders) == 1
    assert result.tasks is tasks
    return tasks, recorders[0]


# --- checks on the output alone ---------------------------------------------------------------------


def check_output(tasks, o: SchedulerOptions, stopped=frozenset()):
    """`stopped`: ids of tasks stopped and never started again (they started, and did not end)."""
    for t in tasks:
        assert (t.start_ms is None) == (t.end_ms is None) or id(t) in stopped
        if t.end_ms is not None:
            assert t.start_ms >= t.arrival_ms
            assert t.end_ms == t.start_ms + t.service_ms  # exactly: the delay backend
        else:
            assert t.kind == "batch", "only batch work can be held back for good"
    if o.policy == "unscheduled":
        assert all(t.start_ms == t.arrival_ms for t in tasks)
    if o.policy in CAPPED:
        # in flight at the end of each instant: start <= t < end (zero-length tasks hold a slot only within it)
        started = [t for t in tasks if t.end_ms is not None]  # (a stopped attempt's interval is not in the output)
        times = sorted({t.start_ms for t in started})
        for x in times:
            assert sum(t.start_ms <= x < t.end_ms for t in started) <= o.max_concurrency
    if o.policy in KIND_AWARE:
        for b in tasks:
            if b.kind == "batch" and b.start_ms is not None:
                for i in tasks:
                    if i.kind == "interactive" and i.arrival_ms < b.start_ms:
                        assert i.start_ms <= b.start_ms, f"{i} waited while batch {b} started"


# --- the properties -----------------------------------------------------------------------------


@SETTINGS
@given(rows=traces(), d=option_dicts())
def test_invariants_every_policy(rows, d):
    o = opts(d)
    tasks, rec = run(rows, o)
    check_output(tasks, o, rec.stopped)
    started = [t for t in tasks if t.start_ms is not None]
    ended = [t for t in tasks if t.end_ms is not None]
    assert len(rec.started_ids) == len(started)
    # every start is an end or a stop: nothing lost, nothing run twice
    assert len(rec.start_order) - rec.stop_count == len(ended)
    assert rec.running == 0 and rec.batch_running == 0, "every started task finished"
    assert len(rec.waiting) == len(tasks) - len(ended)
    if not o.evicts:
        assert rec.stop_count == 0


@SETTINGS
@given(rows=traces(), d=option_dicts(policy="adaptive"))
def test_adaptive_invariants_and_no_stranding_when_guarded(rows, d):
    o = opts(d)
    tasks, rec = run(rows, o)
    check_output(tasks, o, rec.stopped)
    if never_strands(o):
        assert all(t.start_ms is not None for t in tasks), "stranded tasks despite recheckOnExpiry/batchMin >= 1"


@SETTINGS
@given(rows=traces(), d=option_dicts(policy="adaptive"))
def test_recheck_on_expiry_rescues_the_stranded(rows, d):
    # batchMinConcurrency 0 is where the reference strands work; recheckOnExpiry must start everything.
    d = {**d, "batchMinConcurrency": 0, "recheckOnExpiry": True}
    assume(d["batchMaxConcurrency"] >= 1)
    o = opts(d)
    tasks, rec = run(rows, o)
    check_output(tasks, o, rec.stopped)
    assert all(t.start_ms is not None for t in tasks)


@SETTINGS
@given(rows=traces(), d=option_dicts())
def test_no_stranding_outside_adaptive_and_static(rows, d):
    o = opts(d)
    tasks, _ = run(rows, o)
    if never_strands(o):
        assert all(t.start_ms is not None for t in tasks)


@SETTINGS
@given(rows=traces(), d=option_dicts(policy="fifo"))
def test_fifo_policy_starts_in_arrival_order(rows, d):
    o = opts(d)
    tasks, rec = run(rows, o)
    arrival_order = sorted(tasks, key=lambda t: t.arrival_ms)  # stable: ties in trace order
    assert [t.id for t in rec.start_order] == [t.id for t in arrival_order]


@SETTINGS
@given(rows=traces(), d=st.sampled_from(["priority", "static", "adaptive"]).flatmap(lambda p: option_dicts(p)))
def test_fifo_tie_break_keeps_arrival_order_within_each_class(rows, d):
    d = {k: v for k, v in d.items() if k not in ("evict", "evictAfterMs")}  # a victim goes back to the front
    o = opts({**d, "tieBreak": "fifo"})
    tasks, rec = run(rows, o)
    for kind in ("interactive", "batch"):
        arrival_order = [t.id for t in sorted(tasks, key=lambda t: t.arrival_ms) if t.kind == kind]
        start_order = [t.id for t in rec.start_order if t.kind == kind]
        assert start_order == arrival_order[: len(start_order)]


@SETTINGS
@given(rows=traces(), d=option_dicts())
def test_replay_is_deterministic(rows, d):
    o = opts(d)
    a, _ = run(rows, o)
    b, _ = run(rows, o)
    assert [(t.start_ms, t.end_ms) for t in a] == [(t.start_ms, t.end_ms) for t in b]


@SETTINGS
@given(rows=traces(), d=option_dicts(policy="adaptive"))
def test_adaptive_cap_in_force_between_min_and_max(rows, d):
    o = opts({k: v for k, v in d.items() if k not in ("evict", "evictAfterMs")})
    tasks = fresh(rows)
    seen = []

    def factory(opt, clock, observe=None):
        p = make_policy(opt, clock, observe)
        orig_limit, orig_finish = p._batch_limit, p.finish
        state = {"completions": 0}

        def limit():
            cap = orig_limit()
            seen.append((cap, state["completions"]))
            return cap

        def finish(task):
            state["completions"] += task.kind == "interactive"
            return orig_finish(task)

        p._batch_limit, p.finish = limit, finish
        return p

    with mock.patch.object(simlab.replay, "make_policy", factory):
        replay(tasks, o)
    caps = [c for c, _ in seen]
    assert all(isinstance(c, int) and o.batch_min_concurrency <= c <= o.batch_max_concurrency for c in caps)
    if o.rps_source == "completions":
        # before any interactive completion the window is empty: pressure 0, smoothed or not -> batchMax
        assert all(c == o.batch_max_concurrency for c, done in seen if done == 0)
    if o.batch_min_concurrency == o.batch_max_concurrency:
        assert set(caps) <= {o.batch_max_concurrency}


def test_recorder_can_fail():
    """The recorder is honest: a policy that ignores its cap is caught."""
    rows = [(f"b{k}", "batch", 0.0, 5.0) for k in range(4)]
    o = opts({"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2})

    def broken_factory(opt, clock, observe=None):
        p = make_policy(opt, clock, observe)
        p._cap = 3  # the policy now admits one more batch task than the options allow
        p.options = opt
        return Recorder(p, clock, opt)

    tasks = fresh(rows)
    with mock.patch.object(simlab.replay, "make_policy", broken_factory):
        try:
            replay(tasks, o)
        except AssertionError as exc:
            assert "cap" in str(exc)
        else:
            raise AssertionError("the recorder missed a cap violation")


def test_output_check_can_fail():
    rows = [("i", "interactive", 0.0, 5.0), ("b", "batch", 0.0, 5.0)]
    o = opts({"policy": "priority", "maxConcurrency": 1})
    tasks = fresh(rows)
    replay(tasks, o)
    check_output(tasks, o)
    tasks[1].end_ms = math.nextafter(tasks[1].end_ms, math.inf)
    try:
        check_output(tasks, o)
    except AssertionError:
        pass
    else:
        raise AssertionError("check_output missed end != start + service")
