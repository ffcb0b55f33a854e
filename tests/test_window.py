"""SlidingWindow against a naive transliteration of the article's SlidingWindowMetrics (sort on every snapshot)."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.policies.window import ArrivalCounter, SlidingWindow, expiry_instant


class ArticleWindow:
    """The article's window, line for line: a list of samples, shift() while too old, sort on snapshot."""

    def __init__(self, window_ms):
        self.window_ms = window_ms
        self.samples = []

    def add_sample(self, now, latency_ms):
        self.samples.append({"ts": now, "latencyMs": latency_ms})
        self.trim(now)

    def snapshot(self, now):
        self.trim(now)
        if len(self.samples) == 0:
            return 0, 0
        rps = (len(self.samples) / self.window_ms) * 1000
        latencies = sorted(s["latencyMs"] for s in self.samples)
        p95_index = min(len(latencies) - 1, math.floor(len(latencies) * 0.95))
        return rps, latencies[p95_index]

    def trim(self, now):
        while len(self.samples) > 0 and now - self.samples[0]["ts"] > self.window_ms:
            self.samples.pop(0)


def bits(x) -> bytes:
    return struct.pack("<d", float(x))


# Times: small integers (many exact-boundary hits), arbitrary floats, and exact multiples of the window.
windows = st.sampled_from([1.0, 3.0, 10.0, 100.0, 0.1, 7.5, 1000.0, 10000.0])
steps = st.one_of(
    st.just(0.0),
    st.integers(0, 12).map(float),
    st.floats(0, 50, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.1, 0.2, 0.3, 1 / 3]),
)
latencies = st.one_of(
    st.integers(0, 20).map(float),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
)
ops = st.lists(
    st.tuples(st.sampled_from(["add", "add", "snap"]), steps, latencies),
    min_size=1,
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(window_ms=windows, ops=ops, start=st.sampled_from([0.0, 1e9, 1.7e12, 0.1]))
def test_sliding_window_matches_the_article_bit_for_bit(window_ms, ops, start):
    ours, theirs = SlidingWindow(window_ms), ArticleWindow(window_ms)
    now = start
    for op, step, latency in ops:
        now += step
        if op == "add":
            ours.add(now, latency)
            theirs.add_sample(now, latency)
        else:
            a, b = ours.snapshot(now), theirs.snapshot(now)
            assert bits(a[0]) == bits(b[0]) and bits(a[1]) == bits(b[1]), (a, b)
        assert len(ours) == len(theirs.samples)
    a, b = ours.snapshot(now), theirs.snapshot(now)
    assert bits(a[0]) == bits(b[0]) and bits(a[1]) == bits(b[1])


def test_trimming_is_strict_at_exactly_window_ms():
    w = SlidingWindow(1000.0)
    w.add(0.0, 5.0)
    assert w.snapshot(1000.0) == (1.0, 5.0)  # 1000 - 0 > 1000 is false: still counted
    assert len(w) == 1
    assert w.snapshot(math.nextafter(1000.0, math.inf)) == (0.0, 0.0)
    assert len(w) == 0


def test_add_trims_too():
    w = SlidingWindow(10.0)
    w.add(0.0, 1.0)
    w.add(10.0, 2.0)
    assert len(w) == 2
    w.add(10.5, 3.0)
    assert len(w) == 2
    assert w.snapshot(10.5) == ((2 / 10.0) * 1000, 3.0)


def test_snapshot_empty_is_zero():
    assert SlidingWindow(10.0).snapshot(123.0) == (0.0, 0.0)


def test_p95_uses_floor_index_and_duplicates():
    w = SlidingWindow(1e9)
    for lat in [3.0, 1.0, 2.0, 2.0, 5.0, 5.0, 4.0, 1.0, 9.0, 9.0]:
        w.add(0.0, lat)
    # n = 10: floor(9.5) = 9 -> the largest
    assert w.snapshot(0.0)[1] == 9.0
    w2 = SlidingWindow(1e9)
    for k in range(100):
        w2.add(0.0, float(99 - k))
    # n = 100: floor(95.0) = 95 -> sorted[95] = 95
    assert w2.snapshot(0.0) == ((100 / 1e9) * 1000, 95.0)


def test_p95_matches_the_article_for_every_count_up_to_300():
    # floor(n * 0.95) vs n - 1 changes with n (n = 21 is the first where they differ): check every n.
    import random

    rng = random.Random(7)
    ours, theirs = SlidingWindow(1e12), ArticleWindow(1e12)
    for n in range(1, 301):
        lat = rng.choice([float(rng.randint(0, 50)), rng.uniform(0, 1000)])
        ours.add(float(n), lat)
        theirs.add_sample(float(n), lat)
        a, b = ours.snapshot(float(n)), theirs.snapshot(float(n))
        assert bits(a[0]) == bits(b[0]) and bits(a[1]) == bits(b[1]), n


def test_p95_with_21_samples_is_not_the_maximum():
    w = SlidingWindow(1e9)
    for k in range(1, 22):
        w.add(0.0, float(k))
    # floor(21 * 0.95) = floor(19.95) = 19 -> the 20th smallest, 20.0 (not the maximum 21.0)
    assert w.snapshot(0.0)[1] == 20.0


def test_rps_uses_the_articles_operation_order():
    # (n / windowMs) * 1000 and n * 1000 / windowMs differ in floating point for some n, windowMs.
    w = SlidingWindow(3.0)
    for _ in range(7):
        w.add(0.0, 1.0)
    assert bits(w.snapshot(0.0)[0]) == bits((7 / 3.0) * 1000)


def test_next_expiry_ms():
    w = SlidingWindow(1000.0)
    assert w.next_expiry_ms() is None
    w.add(200.0, 1.0)
    w.add(300.0, 1.0)
    e = w.next_expiry_ms()
    assert e == math.nextafter(1200.0, math.inf)
    assert len(w) == 2 and w.snapshot(math.nextafter(e, -math.inf)) == ((2 / 1000.0) * 1000, 1.0)
    assert w.snapshot(e)[0] == (1 / 1000.0) * 1000  # exactly the oldest one left


@settings(max_examples=500, deadline=None)
@given(
    ts=st.one_of(st.floats(0, 1e13, allow_nan=False), st.integers(0, 10**6).map(float), st.just(0.1)),
    window_ms=st.one_of(st.floats(1e-3, 1e7, allow_nan=False), st.sampled_from([0.1, 0.3, 1000.0, 10000.0])),
)
def test_expiry_instant_is_the_first_float_that_trims(ts, window_ms):
    e = expiry_instant(ts, window_ms)
    assert e - ts > window_ms
    assert not (math.nextafter(e, -math.inf) - ts > window_ms)
    # and the window agrees: a sample at ts survives a snapshot just before e and is gone at e
    w = SlidingWindow(window_ms)
    w.add(ts, 1.0)
    assert w.next_expiry_ms() == e
    w.snapshot(math.nextafter(e, -math.inf))
    assert len(w) == 1
    w.snapshot(e)
    assert len(w) == 0


def test_expiry_instant_when_the_sum_rounds():
    # 0.1 + 0.2 = 0.30000000000000004 in floating point; the rule is about now - ts, not ts + window.
    e = expiry_instant(0.1, 0.2)
    assert e - 0.1 > 0.2 and not (math.nextafter(e, -math.inf) - 0.1 > 0.2)


class ArticleArrivals:
    def __init__(self, window_ms):
        self.window_ms = window_ms
        self.ts = []

    def add(self, now):
        self.ts.append(now)

    def rps(self, now):
        while self.ts and now - self.ts[0] > self.window_ms:
            self.ts.pop(0)
        return (len(self.ts) / self.window_ms) * 1000


@settings(max_examples=200, deadline=None)
@given(window_ms=windows, ops=ops)
def test_arrival_counter_matches_naive(window_ms, ops):
    ours, theirs = ArrivalCounter(window_ms), ArticleArrivals(window_ms)
    now = 0.0
    for op, step, _ in ops:
        now += step
        if op == "add":
            ours.add(now)
            theirs.add(now)
        else:
            assert bits(ours.rps(now)) == bits(theirs.rps(now))
            if theirs.ts:
                assert ours.next_expiry_ms() == expiry_instant(theirs.ts[0], window_ms)
            else:
                assert ours.next_expiry_ms() is None


def test_top_refills_match_the_article_on_long_runs(monkeypatch):
    # Only the largest latencies are kept in order and refilled when expiries leave too few: with a tiny
    # `TOP`, refills happen all the time; patterns that stress them: falling latencies (every expiry is a
    # top value), rising ones (every add is), ties, and gaps that empty the window.
    import random

    from simlab.policies import window

    for top in (1, 2, 5, window.TOP):
        monkeypatch.setattr(window, "TOP", top)
        for seed in range(6):
            rng = random.Random(seed)
            win = rng.choice([5.0, 50.0, 500.0])
            ours, theirs = SlidingWindow(win), ArticleWindow(win)
            now = 0.0
            for i in range(1500):
                pattern = (i // 300 + seed) % 4
                lat = (float(1500 - i) if pattern == 0 else float(i) if pattern == 1
                       else float(rng.randint(0, 3)) if pattern == 2 else rng.uniform(0, 100))
                now += rng.choice([0.0, 0.5, 1.0, rng.expovariate(1.0)]) if rng.random() > 0.01 else 2 * win
                if rng.random() < 0.7:
                    ours.add(now, lat)
                    theirs.add_sample(now, lat)
                if rng.random() < 0.5:
                    a, b = ours.snapshot(now), theirs.snapshot(now)
                    assert bits(a[0]) == bits(b[0]) and bits(a[1]) == bits(b[1]), (top, seed, i)
                    assert len(ours) == len(theirs.samples)
            top_values = sorted(ours._top)
            rest = sorted(s["latencyMs"] for s in theirs.samples)
            assert all(v <= top_values[0] for v in rest[: len(rest) - len(top_values)]) if top_values else True
