"""The gateway gates' control laws against hand computations from their sources, decision by decision.

holdback: llm-d priority_holdback.go `computeLimitStepwiseSpread` and utilization/detector.go `Saturation`;
aimd: Netflix AIMDLimit._update behind WindowedLimit with a percentile window; gradient2: Gradient2Limit._update
(ExpAvgMeasurement for the long RTT) and AbstractPartitionedLimiter's acquire. Every expected number is written
out as the arithmetic the source does.
"""

from __future__ import annotations

import pytest

from simlab.errors import InputError
from simlab.policies import Observation, Task, make_policy, options_from_dict
from simlab.policies.gates import ExpAvg, Gradient2, SampleWindow
from simlab.policies.options import KNOWN_KEYS, SOURCE_DEFAULTS


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def opts(**kw):
    return options_from_dict(kw, "test")


def observing(**fields):
    state = {"busy": 0, "waiting": 0, "capacity": 8, "kv_used": None, "kv_capacity_tokens": None, **fields}
    return state, (lambda: Observation(**state))


def tasks(kind, n, at=0.0):
    return [Task(f"{kind}{k}", kind, at, 1.0) for k in range(n)]


# --- holdback -----------------------------------------------------------------------------------------------------

def test_holdback_batch_bands_fall_linearly_between_the_ceilings():
    # B = 6 bands of batch below interactive: c_j = 1.0 - j x (1.0 - 0.4) / 6 = 0.9, 0.8, 0.7, 0.6, 0.5, 0.4
    # (float: 1.0 - 4 x 0.6 / 6 is 0.6000000000000001); band j open while saturation < c_j
    _, observe = observing()
    p = make_policy(opts(policy="holdback", maxConcurrency=8, batchMaxConcurrency=6), Clock(), observe)
    cases = {0.0: 6, 0.39: 6, 0.4: 5, 0.45: 5, 0.5: 4, 0.55: 4, 0.6: 4, 0.61: 3, 0.85: 1, 0.9: 0, 1.0: 0, 2.0: 0}
    assert {s: p.limit_at(s) for s in cases} == cases


def test_holdback_step_is_upstreams_two_bands():
    # two bands (interactive, batch): the batch ceiling is cMax - 1 x (cMax - cMin) / 1 = 1.0 - 0.6 = 0.4
    _, observe = observing()
    p = make_policy(opts(policy="holdback", maxConcurrency=8, batchMaxConcurrency=6, holdbackShape="step"), Clock(),
                    observe)
    assert [p.limit_at(s) for s in (0.0, 0.3999, 0.4, 0.9)] == [6, 6, 0, 0]


def test_holdback_saturation_is_the_utilization_detectors_roofline():
    state, observe = observing(waiting=2, kv_used=0.6)
    p = make_policy(opts(policy="holdback", maxConcurrency=8), Clock(), observe)
    assert p.saturation() == max(2 / 5, 0.6 / 0.8)  # max(WaitingQueue / 5, KVCacheUsage / 0.8)
    state["kv_used"] = None
    assert p.saturation() == 2 / 5  # no KV cache: the queue alone
    q = make_policy(opts(policy="holdback", maxConcurrency=8, saturationSignal="kv", kvCacheUtilThreshold=0.5),
                    Clock(), lambda: Observation(0, 9, 8, 0.3, 1000))
    assert q.saturation() == 0.3 / 0.5


def test_holdback_holds_interactive_back_at_full_saturation():
    # saturation >= maxCeiling gates the interactive band, and the whole cycle stops (HoL blocking)
    state, observe = observing(waiting=5)  # 5 / queueDepthThreshold 5 = 1.0 = maxCeiling
    clock = Clock()
    p = make_policy(opts(policy="holdback", maxConcurrency=8, saturationSignal="queue"), clock, observe)
    i, b = Task("i", "interactive", 0.0, 1.0), Task("b", "batch", 0.0, 1.0)
    assert p.submit(b) == [] and p.submit(i) == []
    state["waiting"] = 4  # 0.8: interactive open; batch bands c_j = 1 - j x 0.6 / 8 above 0.8: j = 1, 2 (0.925, 0.85)
    done = Task("x", "interactive", 0.0, 1.0)
    p._started(done)
    assert p.finish(done) == [i, b]
    assert b.cap_at_dispatch == 2


def test_holdback_inflight_counts_each_start():
    # capacity 4 (the backend's), bands c_j = 1 - j x 0.5 / 4 = 0.875, 0.75, 0.625, 0.5; S = in flight / 4:
    # 0 -> cap 4, start; 0.25 -> 4, start; 0.5 -> 3, start (2 < 3); 0.75 -> 1: the fourth waits
    _, observe = observing(capacity=4)
    p = make_policy(opts(policy="holdback", maxConcurrency=8, batchMaxConcurrency=4, minCeiling=0.5,
                         saturationSignal="inflight"), Clock(), observe)
    started = [t for b in tasks("batch", 10) for t in p.submit(b)]
    assert len(started) == 3 and [t.cap_at_dispatch for t in started] == [4, 4, 3]
    assert p.queued() == (0, 7)


def test_holdback_refuses_a_signal_it_cannot_read():
    with pytest.raises(InputError, match="KV cache"):
        make_policy(opts(policy="holdback", maxConcurrency=4, saturationSignal="kv"), Clock(),
                    lambda: Observation(0, 0, 4, None, None))
    with pytest.raises(InputError, match="no observation"):
        make_policy(opts(policy="holdback", maxConcurrency=4), Clock())


# --- aimd ---------------------------------------------------------------------------------------------------------

def test_aimd_update_is_aimdlimits():
    p = make_policy(opts(policy="aimd", maxConcurrency=32, initialLimit=10, batchMinConcurrency=1,
                         batchMaxConcurrency=20, interactiveP95LatencyMs=500), Clock())
    assert p.batch_cap() == 10
    assert p.update(100, 5, False) == 11  # inflight 5 x 2 >= 10: +1
    assert p.update(100, 4, False) == 11  # 8 < 11: app-limited, unchanged
    assert p.update(600, 11, False) == 9  # rtt 600 > timeout 500: (int) (11 x 0.9) = (int) 9.9
    assert p.update(100, 0, True) == 8  # a drop: (int) (9 x 0.9) = (int) 8.1
    down = [p.update(900, 0, False) for _ in range(8)]
    assert down == [7, 6, 5, 4, 3, 2, 1, 1]  # 7.2, 6.3, 5.4, 4.5, 3.6, 2.7, 1.8, then 0.9 -> max(minLimit 1, 0)
    for _ in range(40):
        p.update(100, 40, False)
    assert p.batch_cap() == 20  # min(maxLimit, ...)


def test_aimd_initial_limit_is_clipped_and_defaults_are_netflixs():
    p = make_policy(opts(policy="aimd", maxConcurrency=8, batchMaxConcurrency=6), Clock())
    assert p.batch_cap() == 6  # initialLimit 20, clipped into [minLimit 20 -> maxLimit 6]: min(6, max(20, 20))
    q = make_policy(opts(policy="aimd", maxConcurrency=300), Clock())
    assert (q._min, q._max, q._backoff, q._timeout, q.batch_cap()) == (20, 200, 0.9, 5000.0, 20)


def test_sample_window_is_windowedlimits():
    w = SampleWindow(opts(policy="aimd", maxConcurrency=4))  # P95, windows of 1000 ms, at least 10 samples
    assert w.add(5.0, 1.0, 0, False) is None  # the first sample closes the first window: 1 sample, not enough
    assert w.next_update == 5.0 + min(max(2 * 1.0, 1000.0), 1000.0)
    for k in range(1, 11):  # 10 samples up to t = 1000 <= 1005: the window stays open
        assert w.add(100.0 * k, float(k), k, False) is None
    assert w.add(1100.0, 50.0, 3, True) == (10.0, 10, True)  # sorted[round(11 x 0.95) - 1] = sorted[9] = 10
    assert w.next_update == 1100.0 + 1000.0
    assert w.add(1200.0, 0.05, 0, False) is None and w.count == 0  # below minRttThreshold 0.1 ms: ignored


def test_one_window_bound_moves_the_other():
    # Netflix clamps the next window into [minWindowTime, maxWindowTime], both 1 s by default: a longer window
    # needs both; giving one, the other follows it
    w = SampleWindow(opts(policy="aimd", maxConcurrency=4, minWindowTimeMs=10_000))
    assert (w.min_window, w.max_window) == (10_000, 10_000)
    w = SampleWindow(opts(policy="aimd", maxConcurrency=4, maxWindowTimeMs=500))
    assert (w.min_window, w.max_window) == (500, 500)
    w = SampleWindow(opts(policy="aimd", maxConcurrency=4, minWindowTimeMs=200, maxWindowTimeMs=5000))
    assert (w.min_window, w.max_window) == (200, 5000)


def test_aimd_backs_off_when_the_interactive_p95_is_over_target():
    # the first completion (at 1 ms) closes the first window alone (discarded); the next window runs to 1 + 1000.
    # Ten interactive requests sent at 0 end at 100, 200, ..., 1000 ms; the eleventh ends at 1100 and closes the
    # window: P95 = sorted[round(11 x 0.95) - 1] = sorted[9] = 1000 ms > 500: the cap drops to (int) (6 x 0.9) = 5
    clock = Clock()
    p = make_policy(opts(policy="aimd", maxConcurrency=12, batchMaxConcurrency=6, batchMinConcurrency=1,
                         interactiveP95LatencyMs=500, initialLimit=6), clock)
    first, *rest = tasks("interactive", 12)
    for t in (first, *rest):
        p.submit(t)
    clock.now = 1.0
    p.finish(first)
    assert p.batch_cap() == 6
    for k, t in enumerate(rest[:10], start=1):
        clock.now = 100.0 * k
        p.finish(t)
    assert p.batch_cap() == 6  # the window is still open
    clock.now = 1100.0
    p.finish(rest[10])
    assert p.batch_cap() == 5


# --- gradient2 ----------------------------------------------------------------------------------------------------

def test_gradient2_update_is_gradient2limits():
    p = make_policy(opts(policy="gradient2", maxConcurrency=100, minLimit=1, initialLimit=20), Clock())
    assert isinstance(p, Gradient2) and p.limit == 20
    # rtt 100: long = 100 (warm-up mean); gradient min(1, 1.5 x 100 / 100) = 1; new = 20 x 1 + 4 = 24;
    # smoothed: 20 x 0.8 + 24 x 0.2 = 20.8
    assert p.update(100.0, 20) == 20 and p._estimate == pytest.approx(20 * 0.8 + 24 * 0.2)
    # rtt 300: long = (100 + 300) / 2 = 200; gradient 1.5 x 200 / 300 = 1.0; new = 20.8 + 4; 20.8 x 0.8 + 24.8 x 0.2
    assert p.update(300.0, 20) == 21 and p._estimate == pytest.approx(20.8 * 0.8 + 24.8 * 0.2)
    # rtt 1000: long = 1400 / 3; gradient 1.5 x 466.67 / 1000 = 0.7; new = 21.6 x 0.7 + 4 = 19.12
    est = 20.8 * 0.8 + 24.8 * 0.2
    gradient = 1.5 * (1400 / 3) / 1000
    assert p.update(1000.0, 21) == 21
    assert p._estimate == pytest.approx(est * 0.8 + (est * gradient + 4) * 0.2)
    est = est * 0.8 + (est * gradient + 4) * 0.2
    # rtt 10: long = 1410 / 4 = 352.5, more than twice the short: decayed to 352.5 x 0.95 after use; gradient 1
    assert p.update(10.0, 21) == int(est * 0.8 + (est + 4) * 0.2)
    assert p._long.value == pytest.approx(352.5 * 0.95)
    est = est * 0.8 + (est + 4) * 0.2
    # app-limited: max in flight 5 < estimate / 2: nothing moves
    assert p.update(100.0, 5) == int(est) and p._estimate == pytest.approx(est)
    # the partitions of limit 21: ceil(21 x 0.9) = 19, ceil(21 x 0.1) = 3
    assert (p.limit, p._part_i, p._part_b) == (21, 19, 3)


def test_exp_avg_is_expavgmeasurement():
    m = ExpAvg(window=9, warmup=2)
    assert m.add(10.0) == 10.0 and m.add(20.0) == 15.0  # warm-up: the mean
    assert m.add(35.0) == pytest.approx(15.0 * 0.8 + 35.0 * 0.2)  # factor 2 / (9 + 1) = 0.2


def test_gradient2_partitions_admit_as_the_partitioned_limiter():
    # limit 4, partitions 0.5 / 0.25: ceil(2) = 2 interactive, ceil(1) = 1 batch. Below the limit anything starts;
    # at it, a class only below its partition; interactive first
    p = make_policy(opts(policy="gradient2", maxConcurrency=8, initialLimit=4, minLimit=4, interactivePartition=0.5,
                         batchPartition=0.25), Clock())
    started = [t for b in tasks("batch", 6) for t in p.submit(b)]
    assert len(started) == 4  # 4 in flight = the limit; batch 4 >= its partition 1
    i = tasks("interactive", 3)
    assert p.submit(i[0]) == [i[0]] and p.submit(i[1]) == [i[1]]  # 0, then 1 < 2 in the interactive partition
    assert p.submit(i[2]) == []  # 2 >= 2: waits, with 6 < 8 in flight
    assert p.queued() == (1, 2) and p.running == 6


def test_gradient2_min_limit_never_exceeds_the_hard_cap():
    p = make_policy(opts(policy="gradient2", maxConcurrency=8), Clock())  # minLimit 20, initialLimit 20 -> 8
    assert (p._min_limit, p.limit) == (8, 8)


# --- eviction -----------------------------------------------------------------------------------------------------

def test_evicting_stops_the_newest_batch_task_once_per_overdue_request():
    clock = Clock()
    p = make_policy(opts(policy="static", maxConcurrency=2, batchMaxConcurrency=2, evict="newest", evictAfterMs=100),
                    clock)
    b1, b2 = tasks("batch", 2)
    assert p.submit(b1) == [b1]
    clock.now = 5.0
    assert p.submit(b2) == [b2]
    clock.now = 10.0
    i = Task("i", "interactive", 10.0, 1.0)
    assert p.submit(i) == [] and p.take_stops() == []
    assert p.next_check_ms() == 110.0
    clock.now = 110.0
    assert p.wake() == [i]
    assert p.take_stops() == [b2] and p.take_stops() == []
    assert (p.running, p.batch_running, p.queued()) == (2, 1, (0, 1))
    clock.now = 160.0
    assert p.finish(i) == [b2]  # from the front of the batch queue
    assert p.evictions == 1 and p.next_check_ms() is None


def test_evict_front_of_the_queue_with_the_seed_heap_too():
    clock = Clock()
    p = make_policy(opts(policy="priority", maxConcurrency=1, tieBreak="seed-heap", evict="newest", evictAfterMs=1),
                    clock)
    b = tasks("batch", 3)
    p.submit(b[0])
    p.submit(b[1])
    p.submit(b[2])
    i = Task("i", "interactive", 0.0, 1.0)
    p.submit(i)
    clock.now = 1.0
    assert p.wake() == [i] and p.take_stops() == [b[0]]
    assert p.finish(i) == [b[0]]  # the victim first, before the two that never ran


# --- options ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, message", [
    ({"policy": "holdback", "maxConcurrency": 4, "minCeilling": 0.3}, "did you mean 'minCeiling'"),
    ({"policy": "holdback", "maxConcurrency": 4, "minCeiling": 0.9, "maxCeiling": 0.8}, "must be below maxCeiling"),
    ({"policy": "holdback", "maxConcurrency": 4, "saturationSignal": "gpu"}, "saturationSignal"),
    ({"policy": "gradient2", "maxConcurrency": 4, "batchPartition": 0.5}, "sum to at most 1"),
    ({"policy": "aimd", "maxConcurrency": 4, "backoffRatio": 0.2}, "backoffRatio"),
    ({"policy": "aimd", "maxConcurrency": 4, "windowSize": 5}, "windowSize"),
    ({"policy": "aimd"}, "needs key(s) maxConcurrency"),
    ({"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2, "evict": "newest"}, "evictAfterMs"),
    ({"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2, "evict": "oldest", "evictAfterMs": 5},
     "evict"),
])
def test_bad_gate_options_are_named(data, message):
    with pytest.raises(InputError) as err:
        options_from_dict(data, "opts.json")
    assert message in str(err.value)


def test_evict_is_a_warning_where_it_cannot_apply():
    o = opts(policy="unscheduled", evict="newest", evictAfterMs=5)
    assert not o.evicts and any("evict does not apply" in w for w in o.warnings())
    assert not make_policy(o, Clock()).may_stop()


def test_source_defaults_are_noted_and_left_out_of_the_options():
    o = opts(policy="holdback", maxConcurrency=4, minCeiling=0.3)
    assert "minCeiling" not in dict((k, v) for k, v, _ in o.defaults_taken())
    assert ("queueDepthThreshold", 5, "llm-d utilization-detector DefaultQueueDepthThreshold") in o.defaults_taken()
    assert "queueDepthThreshold" not in o.to_json_dict()  # the JSON holds only what was chosen
    assert "queueDepthThreshold=5" in o.defaults_note()
    assert opts(policy="static", maxConcurrency=4, batchMaxConcurrency=2).defaults_note() is None


@pytest.mark.parametrize("policy", ["holdback", "aimd", "gradient2"])
def test_tunable_ranges_are_options_that_validate_at_both_ends(policy):
    from simlab.policies import POLICIES

    partner = {"minCeiling": {"maxCeiling": 1.0}, "maxCeiling": {"minCeiling": 0.0},
               "batchMinConcurrency": {"batchMaxConcurrency": 15}, "batchPartition": {"interactivePartition": 0.5}}
    for key, r in POLICIES[policy].TUNABLE.items():
        assert key in KNOWN_KEYS
        low, high = r.bounds(16)
        assert low <= high
        for value in (low, high):
            value = int(value) if r.integer else float(value)
            options_from_dict({"policy": policy, "maxConcurrency": 16, key: value, **partner.get(key, {})}, "tunable")
    for key in SOURCE_DEFAULTS[policy]:
        assert key in KNOWN_KEYS


def test_every_backend_observes():
    from simlab.scenario import scenario_from_dict
    from simlab.world.engine import Engine

    for backend, capacity in [({"kind": "delay"}, None), ({"kind": "slots", "slots": 3}, 3),
                              ({"kind": "continuous-batching", "max_num_seqs": 5}, 5),
                              ({"kind": "api", "concurrency": 7, "token_time": {"base_ms": 1.0}}, 7)]:
        sc = scenario_from_dict({"name": "o", "duration_ms": 10.0, "backend": backend, "workload": [
            {"class": "batch", "arrivals": {"process": "burst", "count": 1},
             "prompt_tokens": {"dist": "constant", "value": 1.0}, "output_tokens": {"dist": "constant", "value": 1.0},
             "service": {"dist": "constant", "value": 1.0}}]})
        obs = Engine(sc, opts(policy="unscheduled"), 1).backend.observe()
        assert (obs.busy, obs.waiting, obs.capacity, obs.kv_used) == (0, 0, capacity, None)
        assert obs.kv_capacity_tokens is None
