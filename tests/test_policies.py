"""Unit tests of every policy, driven directly with a fake clock and hand-computed scenarios.

A policy is a clock-free object: `submit(task)` / `finish(task)` / `wake()` return the tasks that start now,
in start order; time is read only through the injected clock (ms). The expectations below are computed by
hand from docs/reference-policy.md, not by running the code under test.
"""

from __future__ import annotations

import math

import pytest

from simlab.policies import (
    Adaptive,
    Fifo,
    Priority,
    Static,
    Task,
    Unscheduled,
    js_round,
    make_policy,
    options_from_dict,
)
from simlab.policies.queues import FifoQueue, SeedHeap, make_queue
from simlab.policies.window import expiry_instant
from simlab.replay import replay


class FakeClock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def opts(**kw):
    return options_from_dict(kw, "test")


def I(name, t=0.0):  # noqa: E743 - short helpers keep the scenarios readable
    return Task(name, "interactive", t)


def B(name, t=0.0):
    return Task(name, "batch", t)


def ids(tasks):
    return [t.id for t in tasks]


ADAPTIVE_BASE = dict(
    policy="adaptive",
    maxConcurrency=10,
    batchMaxConcurrency=4,
    batchMinConcurrency=0,
    interactiveRpsThreshold=1e9,
    interactiveP95LatencyMs=1e9,
    windowMs=10000,
)


def adaptive(clock, **changes):
    return make_policy(opts(**{**ADAPTIVE_BASE, **changes}), clock)


def add_sample(policy, clock, latency_ms, name="s"):
    """One interactive completion with the given end-to-end latency, ending at clock.now."""
    end = clock.now
    clock.now = end - latency_ms
    task = I(name, clock.now)
    assert policy.submit(task) == [task]
    clock.now = end
    return policy.finish(task)


# --- js_round -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, expected",
    [
        (2.5, 3),
        (3.5, 4),
        (0.5, 1),
        (1.5, 2),
        (2.4999999999999996, 2),
        (2.0, 2),
        (0.0, 0),
        (-2.5, -2),  # Math.round(-2.5) === -2
        (-0.5, 0),
        # Values where the naive floor(x + 0.5) is wrong but JavaScript's Math.round is not (checked in node):
        (0.49999999999999994, 0),
        (4503599627370497.0, 4503599627370497),
    ],
)
def test_js_round_matches_javascript_math_round(x, expected):
    assert js_round(x) == expected


def test_js_round_differs_from_python_round_at_even_halves():
    assert round(2.5) == 2 and js_round(2.5) == 3
    assert round(0.5) == 0 and js_round(0.5) == 1


# --- queues -------------------------------------------------------------------------------------


def pop_all(q):
    out = []
    while (item := q.pop()) is not None:
        out.append(item)
    return out


def test_seed_heap_pop_order_among_equals_is_the_articles():
    # push a,b,c,d -> [a,b,c,d]. pop a: d moves to the root, [d,b,c]; b and c are not strictly smaller: d stays.
    # pop d: c to the root, [c,b]; pop c; pop b.
    q = SeedHeap(10)
    for x in "abcd":
        q.push(x)
    assert pop_all(q) == list("adcb")


def test_seed_heap_five_equals():
    # [a,b,c,d,e] -> pop a, e to root, [e,b,c,d] -> e, [d,b,c] -> d, [c,b] -> c, b
    q = SeedHeap(0)
    for x in "abcde":
        q.push(x)
    assert pop_all(q) == list("aedcb")


def test_seed_heap_interleaved_push_pop():
    # push a,b,c -> [a,b,c]; pop a -> [c,b]; push d -> [c,b,d]; pop c -> [d,b]; pop d; pop b
    q = SeedHeap(0)
    for x in "abc":
        q.push(x)
    assert q.pop() == "a"
    q.push("d")
    assert pop_all(q) == list("cdb")


def test_seed_heap_orders_by_priority_first():
    q = SeedHeap()
    q.push("low1", 10)
    q.push("high1", 0)
    q.push("low2", 10)
    q.push("high2", 0)
    # [low1] -> push high1: sifts up over low1 -> [high1, low1]; push low2 -> [high1, low1, low2];
    # push high2 at index 3, parent low1 (10 > 0) swap -> index 1, parent high1 (0 <= 0) stop:
    # [high1, high2, low2, low1]. pop high1: low1 to root, children high2(0) < 10 -> swap: [high2, low1, low2]
    # pop high2: low2 to root [low2, low1]: low1 not strictly smaller -> pop low2, then low1.
    assert pop_all(q) == ["high1", "high2", "low2", "low1"]


def test_fifo_queue_is_submission_order_and_empty_pop_is_none():
    q = FifoQueue(10)
    assert q.pop() is None
    for x in "abcde":
        q.push(x)
    assert len(q) == 5
    assert pop_all(q) == list("abcde")
    assert len(q) == 0


def test_make_queue_by_tie_break():
    assert isinstance(make_queue("fifo", 0), FifoQueue)
    assert isinstance(make_queue("seed-heap", 10), SeedHeap)


# --- unscheduled --------------------------------------------------------------------------------


def test_unscheduled_starts_everything_on_submit():
    clock = FakeClock(5.0)
    p = make_policy(opts(policy="unscheduled"), clock)
    assert isinstance(p, Unscheduled)
    tasks = [B("b1"), I("i1"), B("b2"), I("i2"), B("b3")]
    for k, t in enumerate(tasks, 1):
        assert p.submit(t) == [t]
        assert t.submitted_ms == 5.0
        assert p.running == k
    assert p.batch_running == 3
    assert p.queued() == (0, 0)
    assert p.finish(tasks[0]) == []
    assert (p.running, p.batch_running) == (4, 2)
    assert p.next_check_ms() is None and p.wake() == []
    assert p.batch_cap() == math.inf


# --- fifo ---------------------------------------------------------------------------------------


def test_fifo_ignores_kinds():
    clock = FakeClock()
    p = make_policy(opts(policy="fifo", maxConcurrency=2), clock)
    assert isinstance(p, Fifo)
    b1, b2, b3, i1, i2 = B("b1"), B("b2"), B("b3"), I("i1"), I("i2")
    assert p.submit(b1) == [b1]
    assert p.submit(b2) == [b2]
    assert p.submit(b3) == []
    assert p.submit(i1) == []  # an interactive task queues behind batch work
    assert p.submit(i2) == []
    assert p.queued() == (2, 1)
    assert (p.running, p.batch_running) == (2, 2)
    clock.now = 10
    assert p.finish(b1) == [b3]  # b3 was submitted before i1: it goes first
    assert p.queued() == (2, 0)
    assert p.finish(b2) == [i1]
    assert p.finish(b3) == [i2]
    assert (p.running, p.batch_running) == (2, 0)
    assert p.queued() == (0, 0)


def test_fifo_starts_several_on_one_finish_never_more_than_max():
    clock = FakeClock()
    p = make_policy(opts(policy="fifo", maxConcurrency=3), clock)
    tasks = [I(f"t{k}") for k in range(6)]
    started = []
    for t in tasks:
        started += p.submit(t)
    assert ids(started) == ["t0", "t1", "t2"]
    assert p.running == 3
    assert ids(p.finish(tasks[0])) == ["t3"]
    assert ids(p.finish(tasks[1])) == ["t4"]
    assert ids(p.finish(tasks[2])) == ["t5"]
    assert p.running == 3


def test_fifo_tie_break_fifo_keeps_submission_order():
    clock = FakeClock()
    p = make_policy(opts(policy="priority", maxConcurrency=1, tieBreak="fifo"), clock)
    blocker = I("x")
    assert p.submit(blocker) == [blocker]
    tasks = [I(n) for n in "abcd"]
    for t in tasks:
        assert p.submit(t) == []
    order = []
    running = blocker
    for _ in range(4):
        (running,) = p.finish(running)
        order.append(running.id)
    assert order == list("abcd")


@pytest.mark.parametrize("kind", ["interactive", "batch"])
def test_seed_heap_tie_break_through_a_policy(kind):
    # One slot is busy; a, b, c, d queue with equal priority; each finish starts the next pop: a, d, c, b.
    clock = FakeClock()
    p = make_policy(opts(policy="static", maxConcurrency=1, batchMaxConcurrency=1, tieBreak="seed-heap"), clock)
    blocker = I("x")
    assert p.submit(blocker) == [blocker]
    for n in "abcd":
        assert p.submit(Task(n, kind, 0.0)) == []
    order = []
    running = blocker
    for _ in range(4):
        (running,) = p.finish(running)
        order.append(running.id)
    assert order == list("adcb")


# --- priority -----------------------------------------------------------------------------------


def test_priority_starts_interactive_first():
    clock = FakeClock()
    p = make_policy(opts(policy="priority", maxConcurrency=2), clock)
    assert isinstance(p, Priority)
    b1, b2, b3, i1, i2 = B("b1"), B("b2"), B("b3"), I("i1"), I("i2")
    assert p.submit(b1) == [b1]
    assert p.submit(b2) == [b2]
    assert p.submit(b3) == []
    assert p.submit(i1) == []
    assert p.submit(i2) == []
    assert p.queued() == (2, 1)
    assert p.finish(b1) == [i1]  # interactive first although b3 came earlier
    assert p.finish(b2) == [i2]
    assert p.finish(i1) == [b3]
    assert p.queued() == (0, 0)


def test_priority_has_no_batch_cap():
    clock = FakeClock()
    p = make_policy(opts(policy="priority", maxConcurrency=3), clock)
    batch = [B(f"b{k}") for k in range(4)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert ids(started) == ["b0", "b1", "b2"]  # batch work takes every slot
    assert (p.running, p.batch_running) == (3, 3)
    assert p.batch_cap() == math.inf
    i1 = I("i1")
    assert p.submit(i1) == []  # nothing reserved for interactive work
    assert p.finish(batch[0]) == [i1]
    assert p.finish(batch[1]) == [batch[3]]


# --- static -------------------------------------------------------------------------------------


def test_static_never_exceeds_batch_max():
    clock = FakeClock()
    p = make_policy(opts(policy="static", maxConcurrency=4, batchMaxConcurrency=2), clock)
    assert isinstance(p, Static)
    assert p.batch_cap() == 2
    batch = [B(f"b{k}") for k in range(5)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert ids(started) == ["b0", "b1"]
    assert (p.running, p.batch_running) == (2, 2)
    assert all(t.cap_at_dispatch == 2 for t in started)
    inter = [I(f"i{k}") for k in range(3)]
    assert p.submit(inter[0]) == [inter[0]]
    assert p.submit(inter[1]) == [inter[1]]
    assert p.submit(inter[2]) == []  # 4 running: full
    assert p.finish(batch[0]) == [inter[2]]  # interactive first
    assert p.finish(inter[0]) == [batch[2]]  # batch back to 2 in flight
    assert p.batch_running == 2
    assert p.finish(inter[1]) == []  # a free slot, but the batch cap holds
    assert (p.running, p.batch_running) == (3, 2)
    assert p.queued() == (0, 2)
    assert p.finish(batch[1]) == [batch[3]]
    assert p.finish(batch[2]) == [batch[4]]


def test_static_with_zero_batch_cap_starts_no_batch():
    clock = FakeClock()
    p = make_policy(opts(policy="static", maxConcurrency=2, batchMaxConcurrency=0), clock)
    assert p.submit(B("b")) == []
    i = I("i")
    assert p.submit(i) == [i]
    assert p.finish(i) == []
    assert p.queued() == (0, 1)


# --- adaptive: the cap formula -------------------------------------------------------------------


def test_adaptive_cap_is_batch_max_with_empty_window():
    clock = FakeClock()
    p = adaptive(clock)
    assert isinstance(p, Adaptive)
    batch = [B(f"b{k}") for k in range(6)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert ids(started) == ["b0", "b1", "b2", "b3"]
    assert p.batch_cap() == 4 and p.pressure() == 0.0
    assert p.window_stats() == (0.0, 0.0)


@pytest.mark.parametrize("n, cap", [(1, 3), (2, 2), (3, 1), (4, 0), (6, 0)])
def test_adaptive_pressure_from_completion_rps(n, cap):
    # windowMs 1000: n completions give rps = (n / 1000) * 1000 = n; threshold 4 -> pressure n/4 (capped at 1);
    # cap = jsRound(4 - 4 * pressure). Latencies are 0, so P95 adds no pressure.
    clock = FakeClock()
    p = adaptive(clock, windowMs=1000, interactiveRpsThreshold=4)
    for k in range(n):
        add_sample(p, clock, 0.0, f"s{k}")
    assert p.window_stats() == (float(n), 0.0)
    assert p.pressure() == min(1.0, n / 4)
    assert p.batch_cap() == cap
    batch = [B(f"b{k}") for k in range(5)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert len(started) == cap
    assert all(t.cap_at_dispatch == cap for t in started)


@pytest.mark.parametrize(
    "latency, cap",
    [
        (0.0, 4),
        (125.0, 4),  # pressure 1/8: 4 - 0.5 = 3.5 -> jsRound 4
        (250.0, 3),  # 1/4: 3.0
        (375.0, 3),  # 3/8: 4 - 1.5 = 2.5 -> jsRound 3 (Python's round gives 2)
        (625.0, 2),  # 5/8: 1.5 -> 2
        (875.0, 1),  # 7/8: 0.5 -> 1 (Python's round gives 0)
        (1000.0, 0),
        (5000.0, 0),  # pressure capped at 1
    ],
)
def test_adaptive_pressure_from_p95_with_js_rounding(latency, cap):
    clock = FakeClock(10_000.0)
    p = adaptive(clock, interactiveP95LatencyMs=1000)
    add_sample(p, clock, latency)
    # one completion in a 10 s window: rps 0.1 against a threshold of 1e9 adds a tiny rps pressure
    expected_pressure = max(min(1, 0.1 / 1e9), min(1, latency / 1000))
    assert p.pressure() == expected_pressure
    assert p.batch_cap() == cap


def test_adaptive_js_round_tie_differs_from_python_round():
    # bmax 4, bmin 0, pressure 3/8 -> 4 - 4 * 0.375 = 2.5: the reference admits 3 batch tasks, not 2.
    clock = FakeClock(1000.0)
    p = adaptive(clock, interactiveP95LatencyMs=1000)
    add_sample(p, clock, 375.0)
    batch = [B(f"b{k}") for k in range(5)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert len(started) == 3
    assert round(4 - 4 * 0.375) == 2


def test_adaptive_p95_index_and_rps_together():
    # 20 samples with latencies 10, 20, ..., 200: p95 index = min(19, floor(20 * 0.95)) = 19 -> 200.
    # rps = (20 / 10000) * 1000 = 2.0. Thresholds: rps 8 -> 0.25; p95 400 -> 0.5. pressure = 0.5 -> cap 2.
    clock = FakeClock(1000.0)
    p = adaptive(clock, interactiveRpsThreshold=8, interactiveP95LatencyMs=400)
    for k in range(20):
        add_sample(p, clock, 10.0 * (k + 1), f"s{k}")
    assert p.window_stats() == (2.0, 200.0)
    assert p.pressure() == 0.5
    assert p.batch_cap() == 2


def test_adaptive_p95_index_with_19_samples():
    # n = 19: floor(19 * 0.95) = floor(18.05) = 18 = n - 1 -> the maximum.
    clock = FakeClock(1000.0)
    p = adaptive(clock, interactiveP95LatencyMs=400)
    for k in [5, 1, 9, 3, 7, 2, 8, 4, 6, 19, 11, 17, 13, 15, 12, 18, 14, 16, 10]:
        add_sample(p, clock, float(k), f"s{k}")
    assert p.window_stats()[1] == 19.0


def test_adaptive_p95_index_with_40_samples():
    # n = 40: floor(40 * 0.95) = 38 -> the 39th smallest (latencies 1..40 -> 39).
    clock = FakeClock(1000.0)
    p = adaptive(clock, interactiveP95LatencyMs=400)
    for k in reversed(range(1, 41)):
        add_sample(p, clock, float(k), f"s{k}")
    assert p.window_stats() == ((40 / 10000) * 1000, 39.0)


def test_adaptive_batch_min_floor():
    # bmin 2, bmax 5: full pressure gives max(2, jsRound(5 - 3 * 1)) = 2; never below the floor.
    clock = FakeClock(1000.0)
    p = adaptive(clock, batchMaxConcurrency=5, batchMinConcurrency=2, interactiveP95LatencyMs=100)
    add_sample(p, clock, 900.0)
    assert p.pressure() == 1
    assert p.batch_cap() == 2
    batch = [B(f"b{k}") for k in range(4)]
    started = []
    for t in batch:
        started += p.submit(t)
    assert ids(started) == ["b0", "b1"]


def test_adaptive_latency_is_end_to_end_including_queueing():
    # max 1: i2 waits 300 ms behind i1, then runs 100 ms: its latency is 400, not 100.
    clock = FakeClock()
    p = adaptive(clock, maxConcurrency=1, interactiveP95LatencyMs=1000)
    i1, i2 = I("i1"), I("i2")
    assert p.submit(i1) == [i1]
    assert p.submit(i2) == []
    clock.now = 300
    assert p.finish(i1) == [i2]
    clock.now = 400
    p.finish(i2)
    # samples 300 and 400: p95 index min(1, floor(1.9)) = 1 -> 400; pressure 0.4 -> 4 - 1.6 = 2.4 -> 2
    assert p.window_stats()[1] == 400.0
    assert p.batch_cap() == 2


def test_adaptive_interactive_first_and_total_cap():
    clock = FakeClock()
    p = adaptive(clock, maxConcurrency=3, batchMaxConcurrency=3)
    b = [B(f"b{k}") for k in range(3)]
    for t in b:
        p.submit(t)
    assert (p.running, p.batch_running) == (3, 3)
    i1 = I("i1")
    b4 = B("b4")
    assert p.submit(b4) == []
    assert p.submit(i1) == []
    assert p.finish(b[0]) == [i1]


def test_adaptive_window_expiry_restores_the_cap_on_the_next_event():
    clock = FakeClock(0.0)
    p = adaptive(clock, windowMs=1000, interactiveP95LatencyMs=100)
    add_sample(p, clock, 0.0)  # ts 0 (latency 0: no pressure) - just fills the window
    clock.now = 500
    add_sample(p, clock, 200.0, "hot")  # ts 500, latency 200 -> pressure 1 -> cap 0
    assert p.batch_cap() == 0
    clock.now = 1500  # 1500 - 500 = 1000: not strictly greater -> still in the window
    b1 = B("b1", 1500)
    assert p.submit(b1) == []
    clock.now = math.nextafter(1500.0, math.inf)
    b2 = B("b2", clock.now)
    assert p.submit(b2) == [b1, b2]  # expired: cap back to 4, both start on this submit


# --- adaptive: per-evaluation smoothing ----------------------------------------------------------


def test_adaptive_smoothing_advances_once_per_evaluation():
    # alpha 0.5, raw pressure 1 after the sample: each evaluation gives s = 0.5 + 0.5 s.
    clock = FakeClock(0.0)
    p = adaptive(clock, smoothingAlpha=0.5, interactiveP95LatencyMs=100)
    i1 = I("i1")
    assert p.submit(i1) == [i1]  # evaluation 1: empty window, s = 0
    assert p.pressure() == 0.0 and p.batch_cap() == 4
    clock.now = 100
    assert p.finish(i1) == []  # evaluation 2 (batch queue empty): s = 0.5 -> cap jsRound(2) = 2
    assert p.pressure() == 0.5 and p.batch_cap() == 2
    b1, b2 = B("b1", 100), B("b2", 100)
    # submit b1: evaluation 3: s = 0.75 -> cap 1 -> b1 starts; the loop evaluates again (4):
    # s = 0.875 -> cap jsRound(0.5) = 1 -> batchRunning 1 >= 1 -> stop.
    assert p.submit(b1) == [b1]
    assert b1.cap_at_dispatch == 1
    assert p.pressure() == 0.875 and p.batch_cap() == 1
    # submit b2: evaluation 5: s = 0.9375 -> cap jsRound(0.25) = 0.
    assert p.submit(b2) == []
    assert p.pressure() == 0.9375 and p.batch_cap() == 0


def test_adaptive_smoothing_counts_evaluations_not_time():
    # Same instants, same window; the only difference is three extra interactive submissions, each an evaluation
    # with an empty batch queue. They push the smoothed pressure up and keep b1 out.
    def scenario(extra_interactive: int):
        clock = FakeClock(0.0)
        p = adaptive(clock, smoothingAlpha=0.5, interactiveP95LatencyMs=100)
        i1 = I("i1")
        p.submit(i1)  # s = 0
        clock.now = 100
        p.finish(i1)  # s = 0.5
        for k in range(extra_interactive):
            x = I(f"x{k}", 100)
            assert p.submit(x) == [x]
        b1 = B("b1", 100)
        return p, p.submit(b1)

    p0, started0 = scenario(0)
    assert ids(started0) == ["b1"]  # s = 0.75 -> cap 1
    p3, started3 = scenario(3)
    # s: 0.5 -> 0.75 -> 0.875 -> 0.9375 (three submits) -> 0.96875 (b1's evaluation): cap jsRound(0.125) = 0
    assert started3 == []
    assert p3.pressure() == 0.96875


def test_adaptive_smoothing_alpha_one_is_no_smoothing():
    clock = FakeClock(0.0)
    p = adaptive(clock, smoothingAlpha=1, interactiveP95LatencyMs=1000)
    add_sample(p, clock, 375.0)
    assert p.pressure() == 0.375 and p.batch_cap() == 3


def test_adaptive_smoothing_decays_per_evaluation_when_pressure_drops():
    clock = FakeClock(0.0)
    p = adaptive(clock, smoothingAlpha=0.5, windowMs=100, interactiveP95LatencyMs=10)
    add_sample(p, clock, 50.0)  # submit at -50 evaluates s=0; finish at 0: s = 0.5
    assert p.pressure() == 0.5
    clock.now = 200  # the sample has expired: raw pressure 0
    x = I("x", 200)
    p.submit(x)
    assert p.pressure() == 0.25
    p.finish(x)  # a 0-ms sample: p95 0, rps 10/s vs threshold 1e9 -> ~0
    assert p.pressure() == pytest.approx(0.125)


# --- adaptive: time-constant smoothing (smoothingTauMs) ------------------------------------------


def test_adaptive_smoothing_tau_is_time_based():
    clock = FakeClock(0.0)
    p = adaptive(clock, smoothingTauMs=1000, interactiveP95LatencyMs=1000)
    i1 = I("i1")
    p.submit(i1)  # first evaluation at t=0: no history -> s stays 0
    assert p.pressure() == 0.0
    clock.now = 1000
    p.finish(i1)  # raw pressure 1 (latency 1000); weight 1 - e^-1
    s1 = 1 - math.exp(-1)
    assert p.pressure() == pytest.approx(s1, rel=1e-12)
    assert p.batch_cap() == js_round(4 - 4 * s1) == 1
    # More evaluations at the same instant change nothing (unlike smoothingAlpha).
    for k in range(5):
        x = I(f"x{k}", 1000)
        assert p.submit(x) == [x]
    assert p.pressure() == pytest.approx(s1, rel=1e-12)
    clock.now = 2000
    y = I("y", 2000)
    p.submit(y)
    s2 = 1 - math.exp(-2)
    assert p.pressure() == pytest.approx(s2, rel=1e-12)
    assert p.batch_cap() == js_round(4 - 4 * s2) == 1  # 4 - 3.459 = 0.54 -> 1


# --- adaptive: arrival- vs completion-based RPS --------------------------------------------------


def _rps_scenario(rps_source):
    clock = FakeClock(0.0)
    p = adaptive(clock, windowMs=1000, interactiveRpsThreshold=2, batchMaxConcurrency=2, rpsSource=rps_source)
    i1, i2 = I("i1"), I("i2")
    assert p.submit(i1) == [i1]
    assert p.submit(i2) == [i2]  # both still running: no completions yet
    b1, b2 = B("b1"), B("b2")
    return clock, p, [i1, i2], p.submit(b1) + p.submit(b2), (b1, b2)


def test_completion_rps_ignores_running_arrivals():
    _, p, _, started, _ = _rps_scenario("completions")
    assert ids(started) == ["b1", "b2"]
    assert p.window_stats() == (0.0, 0.0)


def test_arrival_rps_counts_arrivals_at_submit():
    clock, p, (i1, i2), started, (b1, b2) = _rps_scenario("arrivals")
    # 2 arrivals in a 1000 ms window: rps = (2 / 1000) * 1000 = 2 -> pressure 1 -> cap 0
    assert started == []
    assert p.window_stats()[0] == 2.0 and p.batch_cap() == 0
    clock.now = 1000.0  # 1000 - 0 is not > 1000: arrivals still counted
    b3 = B("b3", 1000)
    assert p.submit(b3) == []
    clock.now = math.nextafter(1000.0, math.inf)
    b4 = B("b4", clock.now)
    assert p.submit(b4) == [b1, b2]  # arrivals expired -> cap 2 (i1, i2 still running, not counted)


def test_arrival_rps_still_takes_p95_from_completions():
    clock = FakeClock(0.0)
    p = adaptive(clock, windowMs=1000, interactiveP95LatencyMs=100, rpsSource="arrivals")
    add_sample(p, clock, 100.0)
    assert p.pressure() == 1 and p.batch_cap() == 0


# --- recheckOnExpiry: the stranded case ----------------------------------------------------------

STRANDED = dict(maxConcurrency=4, batchMaxConcurrency=2, batchMinConcurrency=0, interactiveP95LatencyMs=100,
                windowMs=1000)


def _stranded_setup(recheck):
    clock = FakeClock(0.0)
    p = adaptive(clock, recheckOnExpiry=recheck, **STRANDED)
    i1 = I("i1")
    p.submit(i1)
    clock.now = 200
    p.finish(i1)  # latency 200 -> pressure 1 -> cap max(0, jsRound(0)) = 0
    assert p.batch_cap() == 0
    clock.now = 300
    b1 = B("b1", 300)
    assert p.submit(b1) == []
    return clock, p, b1


def test_without_recheck_batch_task_is_stranded():
    clock, p, b1 = _stranded_setup(False)
    assert p.next_check_ms() is None  # nothing will ever wake the batch queue
    assert p.queued() == (0, 1)


def test_with_recheck_batch_task_starts_when_the_sample_expires():
    clock, p, b1 = _stranded_setup(True)
    wake_at = p.next_check_ms()
    assert wake_at == expiry_instant(200.0, 1000.0)
    assert 1200.0 < wake_at == math.nextafter(1200.0, math.inf)
    clock.now = 1200.0  # not yet expired (strict trimming): a wake now starts nothing
    assert p.wake() == []
    clock.now = wake_at
    assert p.wake() == [b1]
    assert b1.cap_at_dispatch == 2
    assert p.next_check_ms() is None  # nothing queued


def test_recheck_not_requested_when_slots_are_full_or_queue_empty():
    clock = FakeClock(0.0)
    p = adaptive(clock, recheckOnExpiry=True, **{**STRANDED, "maxConcurrency": 1})
    i1 = I("i1")
    p.submit(i1)
    assert p.next_check_ms() is None  # batch queue empty
    p.submit(B("b1"))
    assert p.next_check_ms() is None  # total cap full: the finish will drain


def test_replay_stranded_vs_recheck():
    def run(recheck):
        tasks = [Task("i1", "interactive", 0.0, 200.0), Task("b1", "batch", 300.0, 10.0)]
        replay(tasks, opts(**{**ADAPTIVE_BASE, **STRANDED, "recheckOnExpiry": recheck}))
        return tasks

    i1, b1 = run(False)
    assert (i1.start_ms, i1.end_ms) == (0.0, 200.0)
    assert b1.start_ms is None and b1.end_ms is None
    i1, b1 = run(True)
    t = math.nextafter(1200.0, math.inf)
    assert (b1.start_ms, b1.end_ms) == (t, t + 10.0)


def test_heavy_interactive_traffic_then_silence():
    # Ten interactive requests (t = 0, 10, ..., 90, 5 ms each) complete at 5, 15, ..., 95. With windowMs 1000 and
    # interactiveRpsThreshold 5, n samples give rps n and pressure min(1, n / 5); cap = jsRound(2 - 2 * pressure)
    # is 0 until n <= 3. b1 arrives at 52 (5 samples: cap 0) and queues; then traffic stops.
    def run(recheck):
        tasks = [Task(f"i{k}", "interactive", 10.0 * k, 5.0) for k in range(10)]
        b1 = Task("b1", "batch", 52.0, 7.0)
        o = {**ADAPTIVE_BASE, **STRANDED, "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 1e9,
             "recheckOnExpiry": recheck}
        replay(tasks + [b1], opts(**o))
        assert all(t.end_ms == t.arrival_ms + 5.0 for t in tasks)
        return b1

    assert run(False).start_ms is None  # stranded for good: the reference never re-evaluates
    # with recheck: samples leave one by one; when the one at ts 65 leaves, 3 remain (75, 85, 95): cap 1
    b1 = run(True)
    assert b1.start_ms == expiry_instant(65.0, 1000.0)
    assert b1.end_ms == b1.start_ms + 7.0


def test_recheck_with_per_evaluation_smoothing_eventually_starts_batch():
    # alpha 0.9: s = 0.9 at i1's finish (cap jsRound(0.2) = 0) and 0.99 at b1's submit (cap 0). Smoothing keeps
    # pressure > 0 after the window empties; recheck must keep waking (advancing s) until the cap rises.
    tasks = [Task("i1", "interactive", 0.0, 200.0), Task("b1", "batch", 300.0, 10.0)]
    o = opts(**{**ADAPTIVE_BASE, **STRANDED, "recheckOnExpiry": True, "smoothingAlpha": 0.9})
    replay(tasks, o)
    assert tasks[1].start_ms is not None and tasks[1].start_ms > 1200.0
    tasks = [Task("i1", "interactive", 0.0, 200.0), Task("b1", "batch", 300.0, 10.0)]
    replay(tasks, o.with_changes(recheck_on_expiry=False))
    assert tasks[1].start_ms is None


def test_recheck_with_tau_smoothing_eventually_starts_batch():
    # tau 50 ms: s = 1 - e^-4 at i1's finish (cap 0), higher at b1's submit; after the window empties s decays
    # in time and the cap reaches 1 once s <= 0.75.
    tasks = [Task("i1", "interactive", 0.0, 200.0), Task("b1", "batch", 300.0, 10.0)]
    o = opts(**{**ADAPTIVE_BASE, **STRANDED, "recheckOnExpiry": True, "smoothingTauMs": 50})
    replay(tasks, o)
    assert tasks[1].start_ms is not None and tasks[1].start_ms > 1200.0
    tasks = [Task("i1", "interactive", 0.0, 200.0), Task("b1", "batch", 300.0, 10.0)]
    replay(tasks, o.with_changes(recheck_on_expiry=False))
    assert tasks[1].start_ms is None


# --- replay event order -------------------------------------------------------------------------


def test_replay_same_instant_arrivals_in_trace_order_before_finishes():
    # max 1, fifo: a runs 0..10; c and b both arrive at 10, when a finishes. Arrivals are submitted first
    # (c, b queued in trace order), then a's finish starts c; b starts when c ends at 11.
    tasks = [Task("a", "batch", 0.0, 10.0), Task("c", "interactive", 10.0, 1.0), Task("b", "batch", 10.0, 1.0)]
    replay(tasks, opts(policy="fifo", maxConcurrency=1))
    a, c, b = tasks
    assert (a.start_ms, c.start_ms, b.start_ms) == (0.0, 10.0, 11.0)


def test_replay_zero_service_tasks():
    tasks = [Task(k, "interactive", 5.0, 0.0) for k in range(3)]
    replay(tasks, opts(policy="fifo", maxConcurrency=1))
    assert [(t.start_ms, t.end_ms) for t in tasks] == [(5.0, 5.0)] * 3
