"""The sliding window of interactive completions (the article's `SlidingWindowMetrics`).

The article sorts every sample on each snapshot. Its P95 is the j-th largest latency with j = n - index, about
n/20: so only the largest ones are kept in order (`_top`, ascending), with every other sample no larger than
`_top[0]`. An add or an expiry touches `_top` only for a value at least its smallest (about one sample in
ten); a snapshot is an index. When expiries leave `_top` shorter than j, it is refilled from the window's
samples with a selection (`heapq.nlargest`), O(n) at most once per ~n/20 expiries of top values: never a
sort per evaluation. The numbers are the article's, bit for bit (tests/test_window.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from heapq import nlargest
from math import inf, nextafter

from sortedcontainers import SortedList

TOP = 64  # the fewest largest latencies kept in order; a refill keeps max(TOP, n // 10 + 2), twice the P95's j
SMALL = 4096  # beyond this many, list insertion's memmove costs more than SortedList's bookkeeping


class SlidingWindow:
    __slots__ = ("window_ms", "_ts", "_lat", "_top", "_keep", "_big")

    def __init__(self, window_ms: float):
        self.window_ms = window_ms
        self._ts: deque[float] = deque()
        self._lat: deque[float] = deque()
        self._top: list | SortedList = []  # the window's largest latencies, ascending
        self._keep = TOP  # at most this many in `_top`
        self._big = False  # `_top` is a SortedList

    def add(self, now: float, latency_ms: float) -> None:
        ts, lat, top = self._ts, self._lat, self._top
        if top:
            if latency_ms > top[0]:
                self._enter(latency_ms)
        elif not ts:
            self._enter(latency_ms)  # the only sample; otherwise the next snapshot refills `_top`
        ts.append(now)
        lat.append(latency_ms)
        window = self.window_ms
        while now - ts[0] > window:  # trim(now), inlined: once per completion (never empties: `now` is in)
            ts.popleft()
            latency = lat.popleft()
            if top and latency >= top[0]:
                self._leave(latency)

    def _enter(self, latency: float) -> None:
        top = self._top
        if self._big:
            top.add(latency)
        else:
            insort(top, latency)
        if len(top) > self._keep:
            del top[0]  # now among the rest: no larger than the new `_top[0]`

    def _leave(self, latency: float) -> None:
        # Above `_top[0]` it is in `_top`; equal to it, one copy is there (and which copy leaves is no matter).
        if self._big:
            self._top.remove(latency)
        else:
            top = self._top
            del top[bisect_left(top, latency)]

    def _p95(self, n: int) -> float:
        """The article's `sorted(latencies)[min(n - 1, floor(n * 0.95))]` for the `n` samples in the window."""
        p = math.floor(n * 0.95)
        j = n - (p if p < n else n - 1)  # the P95 is the j-th largest
        top = self._top
        k = len(top)
        if k < j:
            keep = max(TOP, n // 10 + 2)
            values = nlargest(keep, self._lat)
            values.reverse()
            self._big = keep > SMALL
            self._top = top = SortedList(values) if self._big else values
            self._keep = keep
            k = len(top)
        return top[k - j]

    def trim(self, now: float) -> None:
        ts, window, top = self._ts, self.window_ms, self._top
        while ts and now - ts[0] > window:  # strictly greater, as the reference
            ts.popleft()
            latency = self._lat.popleft()
            if top and latency >= top[0]:
                self._leave(latency)

    def count(self, now: float) -> int:
        """Samples in the window at `now`, trimming it as `snapshot(now)` would (the RPS without the P95)."""
        self.trim(now)
        return len(self._ts)

    def snapshot(self, now: float) -> tuple[float, float]:
        """(completions per second, P95 latency ms) over the window; (0, 0) when empty."""
        self.trim(now)
        n = len(self._ts)
        if n == 0:
            return 0.0, 0.0
        return (n / self.window_ms) * 1000, self._p95(n)

    def latencies(self, now: float) -> list[float]:
        """A copy of the latencies in the window at `now` (trimmed as `snapshot(now)` would), oldest first."""
        self.trim(now)
        return list(self._lat)

    def next_expiry_ms(self) -> float | None:
        """The first instant at which the oldest sample is trimmed, or None when empty."""
        if not self._ts:
            return None
        return expiry_instant(self._ts[0], self.window_ms)

    def held_until(self, k: int) -> float:
        """The first instant at which fewer than `k` samples remain (with no `add`), given at least `k` now:
        when the k-th newest expires. An `add` only moves it later, so it stays a safe bound."""
        return expiry_instant(self._ts[-k], self.window_ms)

    def snapshot_until(self, now: float) -> tuple[float, float, float]:
        """`snapshot(now)` and the instant until which it stays the same without an `add` (inf when empty):
        one call on the policy's hot path instead of three."""
        self.trim(now)
        ts, window = self._ts, self.window_ms
        n = len(ts)
        if n == 0:
            return 0.0, 0.0, math.inf
        oldest = ts[0]
        until = oldest + window
        if not (until - oldest > window):  # expiry_instant(), its usual one step inlined
            until = nextafter(until, inf)
            if not (until - oldest > window):
                until = expiry_instant(oldest, window)
        return (n / window) * 1000, self._p95(n), until

    def __len__(self) -> int:
        return len(self._ts)


class ArrivalCounter:
    """Arrivals inside the window, for the arrival-based RPS variant."""

    __slots__ = ("window_ms", "_ts")

    def __init__(self, window_ms: float):
        self.window_ms = window_ms
        self._ts: deque[float] = deque()

    def add(self, now: float) -> None:
        self._ts.append(now)

    def rps(self, now: float) -> float:
        ts, window = self._ts, self.window_ms
        while ts and now - ts[0] > window:
            ts.popleft()
        return (len(ts) / window) * 1000

    def next_expiry_ms(self) -> float | None:
        if not self._ts:
            return None
        return expiry_instant(self._ts[0], self.window_ms)


def expiry_instant(ts: float, window_ms: float) -> float:
    """The first float time `now` with `now - ts > window_ms`, the instant a sample leaves the window."""
    t = ts + window_ms
    while not (t - ts > window_ms):
        t = math.nextafter(t, math.inf)
    return t
