"""The sliding window of interactive completions (the article's `SlidingWindowMetrics`).

The article sorts every sample on each snapshot; here the latencies are kept sorted as samples come and go,
with the same numbers bit for bit. A plain list with C bisection is three times cheaper than a SortedList at
the usual few hundred samples; past `SMALL` samples the window switches to a SortedList (O(log n) per change).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from math import inf, nextafter

from sortedcontainers import SortedList

SMALL = 4096  # samples; beyond, list insertion's memmove costs more than SortedList's bookkeeping


class SlidingWindow:
    __slots__ = ("window_ms", "_ts", "_lat", "_sorted", "_big")

    def __init__(self, window_ms: float):
        self.window_ms = window_ms
        self._ts: deque[float] = deque()
        self._lat: deque[float] = deque()
        self._sorted: list | SortedList = []
        self._big = False

    def add(self, now: float, latency_ms: float) -> None:
        ts, lat, s = self._ts, self._lat, self._sorted
        ts.append(now)
        lat.append(latency_ms)
        if self._big:
            s.add(latency_ms)
        else:
            insort(s, latency_ms)
            if len(s) > SMALL:
                self._sorted, self._big = SortedList(s), True
        window = self.window_ms
        while now - ts[0] > window:  # trim(now), inlined: once per completion (never empties: `now` is in)
            if self._big:
                self._sorted.remove(lat.popleft())
            else:
                del s[bisect_left(s, lat.popleft())]
            ts.popleft()

    def trim(self, now: float) -> None:
        ts, window = self._ts, self.window_ms
        while ts and now - ts[0] > window:  # strictly greater, as the reference
            ts.popleft()
            latency = self._lat.popleft()
            if self._big:
                self._sorted.remove(latency)
            else:
                s = self._sorted
                del s[bisect_left(s, latency)]

    def count(self, now: float) -> int:
        """Samples in the window at `now`, trimming it as `snapshot(now)` would (the RPS without the P95)."""
        ts, window = self._ts, self.window_ms
        while ts and now - ts[0] > window:
            ts.popleft()
            latency = self._lat.popleft()
            if self._big:
                self._sorted.remove(latency)
            else:
                s = self._sorted
                del s[bisect_left(s, latency)]
        return len(ts)

    def held_until(self, k: int) -> float:
        """The first instant at which fewer than `k` samples remain (with no `add`), given at least `k` now:
        when the k-th newest expires. An `add` only moves it later, so it stays a safe bound."""
        return expiry_instant(self._ts[-k], self.window_ms)

    def snapshot(self, now: float) -> tuple[float, float]:
        """(completions per second, P95 latency ms) over the window; (0, 0) when empty."""
        self.trim(now)
        n = len(self._ts)
        if n == 0:
            return 0.0, 0.0
        rps = (n / self.window_ms) * 1000
        return rps, self._sorted[min(n - 1, math.floor(n * 0.95))]

    def next_expiry_ms(self) -> float | None:
        """The first instant at which the oldest sample is trimmed, or None when empty."""
        if not self._ts:
            return None
        return expiry_instant(self._ts[0], self.window_ms)

    def snapshot_until(self, now: float) -> tuple[float, float, float]:
        """`snapshot(now)` and the instant until which it stays the same without an `add` (inf when empty):
        one call on the policy's hot path instead of three."""
        ts, window = self._ts, self.window_ms
        while ts and now - ts[0] > window:
            ts.popleft()
            latency = self._lat.popleft()
            if self._big:
                self._sorted.remove(latency)
            else:
                s = self._sorted
                del s[bisect_left(s, latency)]
        n = len(ts)
        if n == 0:
            return 0.0, 0.0, math.inf
        oldest = ts[0]
        until = oldest + window
        if not (until - oldest > window):  # expiry_instant(), its usual one step inlined
            until = nextafter(until, inf)
            if not (until - oldest > window):
                until = expiry_instant(oldest, window)
        p = math.floor(n * 0.95)
        return (n / window) * 1000, self._sorted[p if p < n else n - 1], until

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
