"""The article's `LmTrafficScheduler`, decision for decision, plus opt-in fixes for its known weaknesses.

Exact by default (see docs/reference-policy.md). Options beside the reference:
- `recheckOnExpiry`: re-evaluate the cap when window samples expire, so batch work is never stranded;
- `smoothingTauMs`: an EMA with a real time constant instead of one step per evaluation;
- `rpsSource = "arrivals"`: pressure from the interactive arrival rate instead of the completion rate.
"""

from __future__ import annotations

import math
from math import floor

from simlab.policies.base import Task
from simlab.policies.simple import Priority
from simlab.policies.window import ArrivalCounter, SlidingWindow


MEMO = True  # False evaluates the cap afresh every time (tests compare the two)
_NEVER = -math.inf  # a memo valid until never (a constant: no global and attribute lookup per completion)


def js_round(x: float) -> int:
    """JavaScript's Math.round: nearest integer, halves toward +infinity (Python's round() is banker's)."""
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def full_count(window_ms: float, threshold: float) -> float:
    """The fewest window samples n with `(n / window_ms) * 1000 / threshold >= 1`, computed as the policy
    does (each step is correctly rounded, so monotone in n); inf when there is none to find."""
    estimate = window_ms * threshold / 1000
    if not estimate < 2.0**52:
        return math.inf
    n = max(1, int(estimate) - 2)
    while n > 1 and ((n - 1) / window_ms) * 1000 / threshold >= 1:
        n -= 1
    while not ((n / window_ms) * 1000 / threshold >= 1):
        n += 1
    return n


class Adaptive(Priority):
    name = "adaptive"

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        o = options
        self._bmax = o.batch_max_concurrency
        self._bmin = o.batch_min_concurrency
        self._range = self._bmax - self._bmin
        self._rps_threshold = o.interactive_rps_threshold
        self._p95_threshold = o.interactive_p95_latency_ms
        self._window = SlidingWindow(o.window_ms)
        self._add = self._window.add
        self._arrivals = ArrivalCounter(o.window_ms) if o.rps_source == "arrivals" else None
        self._alpha = o.smoothing_alpha
        self._tau = o.smoothing_tau_ms
        self._recheck = o.recheck_on_expiry
        self._smoothed = 0.0
        self._smoothed_at = None
        self._cap = self._bmax
        self._pressure = 0.0
        self._rps = 0.0
        self._p95 = 0.0
        # Without smoothing the cap is a function of the window's samples alone: until a sample is added
        # or the oldest one expires, evaluating it again gives the same value, so the last one is reused.
        # (Per-evaluation smoothing steps on every evaluation, and tau smoothing moves with time: never.)
        self._memo = MEMO and self._alpha is None and self._tau is None
        self._valid_until = -math.inf
        self._pending = None  # the instant of an evaluation not computed yet (see `_lazy_drain`)
        if self._arrivals is None:
            self.submit = super().submit  # nothing to count: one call per submission, not two
            if self._memo:
                self._batch_limit = self._reference_limit
                self.submit, self._drain, self.finish = self._lazy_submit, self._lazy_drain, self._lazy_finish
        # From this many samples in the window the RPS term alone is full pressure and the cap its floor.
        self._n_full = full_count(o.window_ms, self._rps_threshold)
        self._full_until = -math.inf  # before this instant the window holds at least `_n_full` samples
        x = self._bmax - self._range * 1.0
        self._cap_full = max(self._bmin, js_round(x))

    def submit(self, task: Task) -> list[Task]:
        if task.interactive:
            self._arrivals.add(self.clock())
            self._valid_until = -math.inf
        return super().submit(task)

    def finish(self, task: Task) -> list[Task]:
        self.running -= 1  # _ended(task), inlined
        if task.interactive:
            now = self.clock()
            self._window.add(now, now - task.submitted_ms)  # end-to-end, queueing included
            self._valid_until = -math.inf
        else:
            self.batch_running -= 1
        return self._drain()

    def note_completion(self, latency_ms: float) -> list[Task]:
        # `finish` of an interactive task, less the freed slot (the same pending-value rule as `_lazy_finish`).
        now = self.clock()
        if self._pending is not None:
            if len(self._interactive) >= self.max_concurrency - self.running:
                self._evaluate(self._pending)
            self._pending = None
        self._window.add(now, latency_ms)
        self._valid_until = _NEVER
        return self._drain()

    def _batch_limit(self) -> int:
        now = self.clock()
        if now < self._valid_until:
            return self._cap
        rps, p95, until = self._window.snapshot_until(now)
        if self._arrivals is not None:
            rps = self._arrivals.rps(now)
        a, b = rps / self._rps_threshold, p95 / self._p95_threshold
        pressure = a if a > b else b  # = max(min(1, a), min(1, b)), without four calls
        if pressure > 1:
            pressure = 1.0
        if self._alpha is not None:
            self._smoothed = self._alpha * pressure + (1 - self._alpha) * self._smoothed
            pressure = self._smoothed
        elif self._tau is not None:
            if self._smoothed_at is not None:
                weight = 1 - math.exp(-(now - self._smoothed_at) / self._tau)
                self._smoothed += weight * (pressure - self._smoothed)
            self._smoothed_at = now
            pressure = self._smoothed
        self._rps, self._p95, self._pressure = rps, p95, pressure
        x = self._bmax - self._range * pressure
        cap = math.floor(x)
        if x - cap >= 0.5:  # js_round, inlined
            cap += 1
        self._cap = cap = cap if cap > self._bmin else self._bmin
        if self._memo:
            if self._arrivals is not None:
                other = self._arrivals.next_expiry_ms()
                if other is not None and other < until:
                    until = other
            self._valid_until = until
        return cap

    def _reference_limit(self) -> int:
        """`_batch_limit` for the reference's own rule (no smoothing, completion RPS)."""
        now = self.clock()
        if now < self._valid_until:
            return self._cap
        if now < self._full_until:
            self._pending = now
            return self._cap_full
        if self._window.count(now) >= self._n_full:
            self._full_until = self._window.held_until(self._n_full)
            # The cap is the floor whatever the P95: only the instant is kept, and the values the time series
            # shows are computed from it if it looks, as after a lazy drain.
            self._pending = now
            return self._cap_full
        return self._evaluate(now)

    def _evaluate(self, now: float) -> int:
        """The reference's cap at `now` (no later than any sample in the window), and the state it leaves:
        the window trimmed at `now`, the values the time series shows, the instant until which they hold."""
        rps, p95, self._valid_until = self._window.snapshot_until(now)
        self._pending = None
        a, b = rps / self._rps_threshold, p95 / self._p95_threshold
        pressure = a if a > b else b
        if pressure > 1:
            pressure = 1.0
        self._rps, self._p95, self._pressure = rps, p95, pressure
        x = self._bmax - self._range * pressure
        cap = floor(x)
        if x - cap >= 0.5:
            cap += 1
        self._cap = cap = cap if cap > self._bmin else self._bmin
        return cap

    # --- lazy evaluation, for the reference's own rule ---------------------------------------------
    # Most drains find the batch queue empty: the reference still evaluates the cap there, and its value
    # decides nothing; it only stays "the cap in force" that the time series and a later decision see.
    # So such a drain keeps just the instant (`_pending`), and the value is computed from it when it is
    # observed, or before the window changes under it. Every decision and every observed value is the
    # reference's, bit for bit (tests/test_columnar.py compares with MEMO = False).
    def _lazy_submit(self, task: Task) -> list[Task]:
        task.submitted_ms = now = self.clock()
        (self._interactive if task.interactive else self._batch).push(task)
        # _lazy_drain(now), written out (as in `_lazy_finish`): one call fewer per task, on every run's hot path
        started = []
        interactive, batch = self._interactive, self._batch
        running, most = self.running, self.max_concurrency
        while running < most:
            if interactive:
                started.append(interactive.take())
                running += 1
                continue
            if not batch:
                if now >= self._valid_until:
                    self._pending = now
                break
            if now < self._valid_until:
                limit = self._cap
            elif now < self._full_until:
                self._pending = now
                limit = self._cap_full
            elif self._window.count(now) >= self._n_full:
                self._pending = now
                self._full_until = self._window.held_until(self._n_full)
                limit = self._cap_full
            else:
                limit = self._evaluate(now)
            if self.batch_running >= limit:
                break
            task = batch.take()
            running += 1
            self.batch_running += 1
            task.cap_at_dispatch = limit
            started.append(task)
        self.running = running
        return started

    def _lazy_drain(self, now: float | None = None) -> list[Task]:
        # `now`: the caller's clock reading (no time passes inside a call), read here when not given.
        started = []
        interactive, batch = self._interactive, self._batch
        running, most = self.running, self.max_concurrency
        while running < most:
            if interactive:
                started.append(interactive.take())
                running += 1
                continue
            if now is None:
                now = self.clock()
            if not batch:
                if now >= self._valid_until:  # else the value in force is already this one
                    self._pending = now
                break
            # _reference_limit(), inlined: once per drain that reaches the batch queue
            if now < self._valid_until:
                limit = self._cap
            elif now < self._full_until:  # the count is still full pressure: no need to count again
                self._pending = now
                limit = self._cap_full
            elif self._window.count(now) >= self._n_full:
                self._pending = now
                self._full_until = self._window.held_until(self._n_full)
                limit = self._cap_full
            else:
                limit = self._evaluate(now)
            if self.batch_running >= limit:
                break
            task = batch.take()
            running += 1
            self.batch_running += 1
            task.cap_at_dispatch = limit
            started.append(task)
        self.running = running
        return started

    def _lazy_finish(self, task: Task) -> list[Task]:
        self.running -= 1
        now = self.clock()
        if task.interactive:
            if self._pending is not None:
                # The drain below evaluates afresh (superseding the pending value unseen) iff it runs out of
                # interactive work before slots; otherwise the pending value outlives this sample: compute it now.
                if len(self._interactive) >= self.max_concurrency - self.running:
                    self._evaluate(self._pending)
                self._pending = None
            self._add(now, now - task.submitted_ms)
            self._valid_until = _NEVER
        else:
            self.batch_running -= 1
        # _lazy_drain(now), written out (tests/test_columnar.py holds the three to the eager reference)
        started = []
        interactive, batch = self._interactive, self._batch
        running, most = self.running, self.max_concurrency
        while running < most:
            if interactive:
                started.append(interactive.take())
                running += 1
                continue
            if not batch:
                if now >= self._valid_until:
                    self._pending = now
                break
            if now < self._valid_until:
                limit = self._cap
            elif now < self._full_until:
                self._pending = now
                limit = self._cap_full
            elif self._window.count(now) >= self._n_full:
                self._pending = now
                self._full_until = self._window.held_until(self._n_full)
                limit = self._cap_full
            else:
                limit = self._evaluate(now)
            if self.batch_running >= limit:
                break
            task = batch.take()
            running += 1
            self.batch_running += 1
            task.cap_at_dispatch = limit
            started.append(task)
        self.running = running
        return started

    # --- the stranded-work fix ------------------------------------------------------------------
    def next_check_ms(self) -> float | None:
        # After a drain, queued batch work with free slots means the cap is what holds it back.
        if not self._recheck or not len(self._batch) or self.running >= self.max_concurrency:
            return None
        if self._pending is not None:
            self._evaluate(self._pending)
        if self._cap >= self._bmax:
            return None  # the cap is as high as it goes: only a finishing batch task can help
        now = self.clock()
        times = [self._window.next_expiry_ms()]
        if self._arrivals is not None:
            times.append(self._arrivals.next_expiry_ms())
        if self._smoothed > 0 and self._range > 0:
            times.append(self._next_smoothing_step(now))
        times = [t for t in times if t is not None]
        return min(times) if times else None

    def _next_smoothing_step(self, now: float) -> float:
        if self._tau is not None:
            # Time until the decaying EMA lets the cap rise by one, at zero raw pressure.
            target = (self._bmax - self.batch_running - 0.5) / self._range
            if target <= 0:
                return None
            dt = self._tau * math.log(self._smoothed / target) if self._smoothed > target else 0.0
        else:
            # Per-evaluation smoothing has no time scale of its own; step it ten times per window.
            dt = self._window.window_ms / 10
        return max(now + dt, math.nextafter(now, math.inf))

    def wake(self) -> list[Task]:
        return self._drain()

    def may_wake(self) -> bool:
        return self._recheck  # next_check_ms() is None whenever recheckOnExpiry is off

    def batch_cap(self) -> float:
        if self._pending is not None:
            self._evaluate(self._pending)
        return self._cap

    def pressure(self) -> float:
        if self._pending is not None:
            self._evaluate(self._pending)
        return self._pressure

    def window_stats(self) -> tuple[float, float]:
        if self._pending is not None:
            self._evaluate(self._pending)
        return (self._rps, self._p95)
