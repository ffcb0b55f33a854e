"""The industry's batch gates, as clock-free policies beside the article's: interactive first, a hard total cap
`maxConcurrency`, and a batch limit that each family moves by its own upstream rule.

- `holdback`: llm-d's flow control with the `priority-holdback-policy` usage limit (github.com/llm-d/llm-d-router,
  pkg/epp/framework/plugins/flowcontrol/usagelimits/priorityholdback/priority_holdback.go,
  `computeLimitStepwiseSpread`) over a saturation detector (saturationdetector/utilization/detector.go
  `Detector.Saturation`, saturationdetector/concurrency/detector.go), enforced as
  pkg/epp/flowcontrol/controller/internal/processor.go `dispatchCycle` does.
- `aimd`: Netflix concurrency-limits' `AIMDLimit._update` (concurrency-limits-core/.../limit/AIMDLimit.java) behind
  a `WindowedLimit` (limit/WindowedLimit.java) with a percentile sample window
  (limit/window/ImmutablePercentileSampleWindow.java), as the batch cap.
- `gradient2`: Netflix's `AbstractPartitionedLimiter` (limiter/AbstractPartitionedLimiter.java `acquire`,
  `Partition.updateLimit`) with interactive and batch partitions of one limit, the limit adapted by
  `Gradient2Limit._update` (limit/Gradient2Limit.java, `ExpAvgMeasurement` for the long RTT) behind a
  `WindowedLimit` with the default average sample window: the configuration of Netflix's README.

Defaults are the sources' (`options.SOURCE_DEFAULTS`, which names each one); where a source has none, simlab's
choice is marked there. docs/gateway-policies.md says what differs from upstream and why.
"""

from __future__ import annotations

import math

from simlab.errors import InputError
from simlab.policies.base import Task
from simlab.policies.options import Range
from simlab.policies.simple import Priority


# --- holdback --------------------------------------------------------------------------------------------------

class Holdback(Priority):
    """Batch is held back as the backend's saturation rises (llm-d priority holdback).

    Saturation S, as llm-d's detectors compute it for one endpoint: "utilization" (the default detector)
    max(waiting / queueDepthThreshold, kvUsed / kvCacheUtilThreshold), the KV term only with a KV cache; "kv" or
    "queue" alone; "inflight" (the concurrency detector, requests mode): tasks in flight / the backend's capacity
    (maxConcurrency when it has none), counted as each starts, as that detector counts synchronously.

    Bands and ceilings, by `computeLimitStepwiseSpread` (c_i = maxCeiling - i (maxCeiling - minCeiling) / (N - 1)):
    interactive is band 0 (ceiling maxCeiling); `holdbackShape = "step"` makes batch one band (ceiling minCeiling,
    upstream's two-priority case); "linear" (default) makes each of the B = batchMaxConcurrency batch slots a band of
    its own, so the batch cap is the number of slots j = 1..B with S < maxCeiling - j (maxCeiling - minCeiling) / B:
    B below minCeiling, falling linearly to 0 at maxCeiling. As `dispatchCycle`: a band is gated when S >= its
    ceiling, and a gated interactive band stops the whole cycle (head-of-line blocking: batch never passes it).
    The backend is read once per decision (a scraped metric does not move while the gateway dispatches); only the
    in-flight count moves within one.
    """

    name = "holdback"
    TUNABLE = {
        "minCeiling": Range(0.0, 0.95),
        "maxCeiling": Range(0.5, 1.0),
        "queueDepthThreshold": Range(1, 64, integer=True, log=True),
        "kvCacheUtilThreshold": Range(0.3, 1.0),
        "batchMaxConcurrency": Range(1, "maxConcurrency-1", integer=True),
    }

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        o = options
        self._signal = signal = o.value("saturationSignal")
        self._qdt = o.value("queueDepthThreshold")
        self._kvt = o.value("kvCacheUtilThreshold")
        self._low = o.value("minCeiling")
        self._high = o.value("maxCeiling")
        self._step = o.value("holdbackShape") == "step"
        self._slots = o.batch_max_concurrency if o.batch_max_concurrency is not None else o.max_concurrency
        self._cap = self._slots
        first = observe() if observe is not None else None
        if signal != "inflight" and first is None:
            raise InputError(None, "scheduler.saturationSignal", f"'{signal}' reads the backend, and this driver gives "
                             "the policy no observation of it; use \"inflight\", or pass observe=")
        if signal == "kv" and first.kv_used is None:
            raise InputError(None, "scheduler.saturationSignal", "'kv' needs a backend with a KV cache; this one has "
                             "none (use \"queue\", \"inflight\" or \"utilization\")")
        capacity = first.capacity if first is not None and first.capacity else None
        self._capacity = capacity or o.max_concurrency

    def saturation(self) -> float:
        """S now, from a fresh observation (or the in-flight count)."""
        if self._signal == "inflight":
            return self.running / self._capacity
        obs = self.observe()
        queue = obs.waiting / self._qdt
        if self._signal == "queue":
            return queue
        kv = None if obs.kv_used is None else obs.kv_used / self._kvt
        if self._signal == "kv":
            return kv
        return queue if kv is None or queue > kv else kv

    def limit_at(self, s: float) -> int:
        """The batch cap at saturation `s`: how many batch bands are open (see the class docstring)."""
        return holdback_limit(s, self._low, self._high, self._slots, self._step)

    def _drain(self) -> list[Task]:
        started = []
        interactive, batch = self._interactive, self._batch
        running, most = self.running, self.max_concurrency
        if running >= most or not (interactive or batch):
            return started  # nothing can start: no need to read the backend
        inflight = self._signal == "inflight"
        s = None if inflight else self.saturation()
        high, capacity = self._high, self._capacity
        while running < most:
            if inflight:
                s = running / capacity
            if s >= high:
                break  # the interactive band is gated: the whole cycle stops
            if interactive:
                started.append(interactive.take())
                running += 1
                continue
            if not batch:
                break
            limit = holdback_limit(s, self._low, high, self._slots, self._step)
            if self.batch_running >= limit:
                break
            task = batch.take()
            running += 1
            self.batch_running += 1
            task.cap_at_dispatch = limit
            started.append(task)
        self.running = running
        return started

    def batch_cap(self) -> float:
        s = self.saturation()
        self._cap = self.limit_at(s) if s < self._high else 0
        return self._cap

    def pressure(self) -> float:
        return self.saturation()


def holdback_limit(s: float, low: float, high: float, slots: int, step: bool) -> int:
    """Holdback's batch cap at saturation `s` (ceilings `low`..`high`, `slots` batch bands, or one band when `step`)."""
    spread = high - low
    if step:  # upstream's two bands: batch's ceiling is cMax - 1 x (cMax - cMin) / 1
        return slots if s < high - spread else 0
    j = min(slots, max(0, math.ceil(slots * (high - s) / spread) - 1))
    # the estimate, then upstream's own expression decides (floating point at a band's edge)
    while j < slots and s < high - (j + 1) * spread / slots:
        j += 1
    while j > 0 and not s < high - j * spread / slots:
        j -= 1
    return j


# --- Netflix's windowed sampling --------------------------------------------------------------------------------

class SampleWindow:
    """Netflix's `WindowedLimit`: samples gathered until one ends after `next_update`; the window then closes,
    the next lasts clamp(2 x its smallest RTT, minWindowTime, maxWindowTime), and a window of at least
    `windowSize` samples is handed on as (tracked RTT, max in flight, any drop). The tracked RTT is the window's
    percentile (ImmutablePercentileSampleWindow: sorted[round(n p) - 1]) or its mean (ImmutableAverageSampleWindow).
    Samples below minRttThreshold are ignored, as upstream."""

    __slots__ = ("percentile", "min_window", "max_window", "size", "min_rtt_threshold", "next_update", "rtts",
                 "total", "count", "min_rtt", "max_inflight", "drop")

    def __init__(self, options):
        o = options
        self.percentile = o.value("samplePercentile")
        low, high = o.value("minWindowTimeMs"), o.value("maxWindowTimeMs")
        # one bound given: the other follows it past the default (both default to 1 s), so a window of 10 s is
        # one key, as tuning searches it
        if o.max_window_time_ms is None:
            high = max(high, low)
        if o.min_window_time_ms is None:
            low = min(low, high)
        self.min_window, self.max_window = low, high
        self.size = o.value("windowSize")
        self.min_rtt_threshold = o.value("minRttThresholdMs")
        self.next_update = 0.0
        self._reset()

    def _reset(self) -> None:
        self.rtts = [] if self.percentile is not None else None
        self.total = 0.0
        self.count = 0
        self.min_rtt = math.inf
        self.max_inflight = 0
        self.drop = False

    def add(self, end_ms: float, rtt: float, inflight: int, drop: bool):
        """(tracked RTT, max in flight, drop) when this sample closes a full window, else None."""
        if rtt < self.min_rtt_threshold:
            return None
        if self.rtts is not None:
            self.rtts.append(rtt)
        else:
            self.total += rtt
        self.count += 1
        if rtt < self.min_rtt:
            self.min_rtt = rtt
        if inflight > self.max_inflight:
            self.max_inflight = inflight
        self.drop = self.drop or drop
        if not end_ms > self.next_update:
            return None
        self.next_update = end_ms + min(max(self.min_rtt * 2, self.min_window), self.max_window)
        out = None
        if self.count >= self.size:
            out = (self._tracked(), self.max_inflight, self.drop)
        self._reset()
        return out

    def _tracked(self) -> float:
        if self.rtts is None:
            return self.total / self.count
        ordered = sorted(self.rtts)
        index = math.floor(self.count * self.percentile + 0.5) - 1  # Java's Math.round, zero-based
        return ordered[max(0, index)]


class ExpAvg:
    """Netflix's `ExpAvgMeasurement(window, warmup)`: the mean of the first `warmup` samples, then an EMA with
    factor 2 / (window + 1)."""

    __slots__ = ("value", "total", "count", "window", "warmup")

    def __init__(self, window: int, warmup: int = 10):
        self.value = self.total = 0.0
        self.count = 0
        self.window, self.warmup = window, warmup

    def add(self, sample: float) -> float:
        if self.count < self.warmup:
            self.count += 1
            self.total += sample
            self.value = self.total / self.count
        else:
            factor = 2.0 / (self.window + 1)
            self.value = self.value * (1 - factor) + sample * factor
        return self.value


def _rtt(task: Task, now: float, from_submit: bool) -> float:
    return now - (task.submitted_ms if from_submit else task.dispatch_ms)


# --- aimd --------------------------------------------------------------------------------------------------------

class Aimd(Priority):
    """The batch cap moved by Netflix's AIMDLimit: each full sample window of interactive completions, the cap is
    cut to int(cap x backoffRatio) when the window's latency exceeds interactiveP95LatencyMs (AIMDLimit's
    `timeout`) or an interactive request failed (a drop), and raised by 1 when batch work fills at least half of
    it (`inflight * 2 >= limit`: not app-limited); then clamped into [batchMinConcurrency, batchMaxConcurrency]
    (minLimit, maxLimit). The sampled latency is end-to-end by default (`rttFrom`), queueing included: what the
    cap protects is the interactive request's wait at the gateway, which Netflix's RTT from acquire leaves out."""

    name = "aimd"
    TUNABLE = {
        "batchMinConcurrency": Range(1, "maxConcurrency-1", integer=True),
        "batchMaxConcurrency": Range(1, "maxConcurrency-1", integer=True),
        "initialLimit": Range(1, "maxConcurrency-1", integer=True),
        "backoffRatio": Range(0.5, 0.99),
        "interactiveP95LatencyMs": Range(50.0, 20_000.0, log=True),
        "minWindowTimeMs": Range(100.0, 30_000.0, log=True),  # Netflix's 1 s windows rarely hold 10 LLM requests
    }

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        o = options
        self._min = o.value("batchMinConcurrency")
        self._max = o.value("batchMaxConcurrency")
        self._backoff = o.value("backoffRatio")
        self._timeout = o.value("interactiveP95LatencyMs")
        self._from_submit = o.value("rttFrom") == "submit"
        self._window = SampleWindow(o)
        self._cap = self._clamp(o.value("initialLimit"))

    def _clamp(self, limit: int) -> int:
        return min(self._max, max(self._min, limit))  # AIMDLimit: Math.min(maxLimit, Math.max(minLimit, x))

    def update(self, rtt: float, inflight: int, drop: bool) -> int:
        """`AIMDLimit._update`: the new cap after one window (also the control law the tests check by hand)."""
        limit = self._cap
        if drop or rtt > self._timeout:
            limit = int(limit * self._backoff)
        elif inflight * 2 >= limit:
            limit = limit + 1
        self._cap = limit = self._clamp(limit)
        return limit

    def finish(self, task: Task) -> list[Task]:
        self._ended(task)
        if task.interactive:
            now = self.clock()
            window = self._window.add(now, _rtt(task, now, self._from_submit), self.batch_running,
                                      task.outcome == "failed")
            if window is not None:
                self.update(*window)
        return self._drain()


# --- gradient2 ---------------------------------------------------------------------------------------------------

class Gradient2(Priority):
    """One limit L for both classes, partitioned as Netflix's AbstractPartitionedLimiter does: while fewer than L
    tasks are in flight anything may start; at L or more a class may start only below its partition,
    max(1, ceil(L x share)) (interactivePartition, batchPartition). L is Gradient2Limit's estimate, updated each
    full sample window of every completion (both classes, RTT from dispatch: the limiter's acquire): the long RTT
    is an ExpAvgMeasurement(longWindow, 10), decayed by 0.95 when more than twice the short one; while the window's
    max in flight is below L / 2 nothing moves (app-limited); else gradient = clamp(rttTolerance x long / short,
    0.5, 1), new = L_est x gradient + queueSize, smoothed by `smoothing`, clamped into [minLimit, maxConcurrency].
    A timed-out attempt is a sample too (Netflix's onDropped); a stopped (evicted) one is not (onIgnore).

    simlab's additions: interactive first (a batch task never starts while an interactive one waits, where the
    Netflix limiter admits whichever request comes), the hard caps maxConcurrency and batchMaxConcurrency."""

    name = "gradient2"
    TUNABLE = {
        "minLimit": Range(1, "maxConcurrency", integer=True),
        "initialLimit": Range(1, "maxConcurrency", integer=True),
        "smoothing": Range(0.01, 1.0, log=True),
        "queueSize": Range(0, 16, integer=True),
        "rttTolerance": Range(1.0, 4.0),
        "longWindow": Range(10, 2000, integer=True, log=True),
        "batchPartition": Range(0.0, 0.5),
        "minWindowTimeMs": Range(100.0, 30_000.0, log=True),
    }

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        o = options
        self._max_limit = o.max_concurrency
        self._min_limit = min(o.value("minLimit"), o.max_concurrency)
        self._smoothing = o.value("smoothing")
        self._queue_size = o.value("queueSize")
        self._tolerance = o.value("rttTolerance")
        self._long = ExpAvg(o.value("longWindow"), 10)
        self._share_i = o.value("interactivePartition")
        self._share_b = o.value("batchPartition")
        self._bmax = o.batch_max_concurrency if o.batch_max_concurrency is not None else o.max_concurrency
        self._from_submit = o.value("rttFrom") == "submit"
        self._window = SampleWindow(o)
        self._inflight_at: dict[int, int] = {}  # id(task) -> tasks in flight when it started (its acquire)
        self._estimate = float(min(self._max_limit, max(self._min_limit, o.value("initialLimit"))))
        self._set_limit(int(self._estimate))

    def _set_limit(self, limit: int) -> None:
        # AbstractPartitionedLimiter.onNewLimit -> Partition.updateLimit: max(1, ceil(limit x percent))
        self.limit = limit
        self._part_i = max(1, math.ceil(limit * self._share_i))
        self._part_b = max(1, math.ceil(limit * self._share_b))

    def update(self, rtt: float, inflight: int) -> int:
        """`Gradient2Limit._update` for one window: the new limit (also what the tests check by hand)."""
        estimate = self._estimate
        short = rtt
        long = self._long.add(rtt)
        if long / short > 2:
            self._long.value *= 0.95
        if inflight < estimate / 2:
            return int(estimate)
        gradient = max(0.5, min(1.0, self._tolerance * long / short))
        new = estimate * gradient + self._queue_size
        new = estimate * (1 - self._smoothing) + new * self._smoothing
        new = max(self._min_limit, min(self._max_limit, new))
        self._estimate = new
        self._set_limit(int(new))
        return int(new)

    def finish(self, task: Task) -> list[Task]:
        inflight = self._inflight_at.pop(id(task), self.running)
        self._ended(task)
        now = self.clock()
        window = self._window.add(now, _rtt(task, now, self._from_submit), inflight, task.outcome == "timeout")
        if window is not None:
            self.update(window[0], window[1])
        return self._drain()

    def _drain(self) -> list[Task]:
        started = []
        interactive, batch = self._interactive, self._batch
        running, most, limit, at = self.running, self.max_concurrency, self.limit, self._inflight_at
        while running < most:
            if interactive:
                if running >= limit and running - self.batch_running >= self._part_i:
                    break  # the interactive partition is full: nothing starts ahead of it
                task = interactive.take()
            elif batch:
                cap = self._batch_ceiling(running - self.batch_running)
                if self.batch_running >= cap:
                    break
                task = batch.take()
                self.batch_running += 1
                task.cap_at_dispatch = cap
            else:
                break
            running += 1
            at[id(task)] = running
            started.append(task)
        self.running = running
        return started

    def _batch_ceiling(self, interactive_running: int) -> int:
        """The most batch tasks that may run beside these interactive ones: a batch task starts while the total is
        below L, or while batch is below its partition; never above batchMaxConcurrency."""
        free = self.limit - interactive_running
        return min(self._bmax, free if free > self._part_b else self._part_b)

    def batch_cap(self) -> float:
        return self._batch_ceiling(self.running - self.batch_running)

    def pressure(self) -> float:
        return self.limit / self._max_limit if self._max_limit else 0.0
