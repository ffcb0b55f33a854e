"""Prometheus metrics for a running Scheduler (optional: prometheus_client, the extra `simlab[runtime]` of the lab or
`simlab-runtime[prometheus]` of the runtime alone).

The article's list (section 8.1), with the metric that carries each:
- interactive P95 / P99 end-to-end latency: `_latency_seconds` (histogram by class: quantiles across instances
  with `histogram_quantile`), and this instance's window view `_window_p95_seconds`, `_window_p99_seconds`;
- interactive arrival RPS: `_arrivals_total{kind}` (a counter: `rate()`);
- batch in flight: `_in_flight{kind="batch"}`; batch queue length: `_queued{kind="batch"}`;
- total concurrency use: `_concurrency_use` (in flight / maxConcurrency) and `_max_concurrency`.
Also the batch cap in force, the window's completion RPS, and ended requests by class and outcome.

With a shared limiter (simlab.runtime.shared): `_limiter_shared` (1 shared, 0 fallback), `_global_in_flight{kind}`
(leases in Redis as of the last answer), `_limiter_instances`, `_limiter_waiting{kind}` (started by the policy,
waiting for a shared slot; also counted in `_queued`), and counters of fallbacks, recoveries and lost leases.
Gauges are read at scrape time.
"""

from __future__ import annotations

from simlab.policies import KINDS
from simlab.runtime.scheduler import Scheduler

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)
OUTCOMES = ("ok", "error", "cancelled")


def instrument(scheduler: Scheduler, registry=None, prefix: str = "simlab_scheduler"):
    """Register the scheduler's metrics in `registry` (default: prometheus_client's global one)."""
    try:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram
    except ImportError:
        raise ImportError("Prometheus metrics need prometheus_client: pip install 'simlab[runtime]' (the lab) or "
                          "'simlab-runtime[prometheus]' (the runtime alone, from ./runtime)") from None
    registry = REGISTRY if registry is None else registry
    kw = {"registry": registry}
    queued = Gauge(f"{prefix}_queued", "requests waiting in the scheduler's queue", ["kind"], **kw)
    in_flight = Gauge(f"{prefix}_in_flight", "requests started and not ended", ["kind"], **kw)
    cap = Gauge(f"{prefix}_batch_cap", "batch concurrency cap in force (+Inf: none)", **kw)
    most = Gauge(f"{prefix}_max_concurrency", "the maxConcurrency option (+Inf: none)", **kw)
    use = Gauge(f"{prefix}_concurrency_use", "requests in flight / maxConcurrency (0 without a cap)", **kw)
    rps = Gauge(f"{prefix}_window_rps", "interactive completions per second over the window", **kw)
    p95 = Gauge(f"{prefix}_window_p95_seconds", "interactive end-to-end P95 over the window", **kw)
    p99 = Gauge(f"{prefix}_window_p99_seconds", "interactive end-to-end P99 over the window", **kw)
    arrivals = Counter(f"{prefix}_arrivals", "submitted requests", ["kind"], **kw)
    ended = Counter(f"{prefix}_requests", "ended requests", ["kind", "outcome"], **kw)
    latency = Histogram(f"{prefix}_latency_seconds", "end-to-end latency, queueing included", ["kind"],
                        buckets=LATENCY_BUCKETS_S, **kw)
    for kind in KINDS:  # every series exists from the start, at 0, so rate() and the dashboard see them
        arrivals.labels(kind)
        latency.labels(kind)
        for outcome in OUTCOMES:
            ended.labels(kind, outcome)
    snap = scheduler.snapshot
    limit = scheduler.options.max_concurrency
    queued.labels("interactive").set_function(lambda: snap().queued_interactive)
    queued.labels("batch").set_function(lambda: snap().queued_batch)
    in_flight.labels("interactive").set_function(lambda: snap().in_flight_interactive)
    in_flight.labels("batch").set_function(lambda: snap().in_flight_batch)
    cap.set_function(lambda: snap().batch_cap)
    most.set(float("inf") if limit is None else limit)
    use.set_function(lambda: 0.0 if limit is None else _in_flight(snap()) / limit)
    rps.set_function(lambda: snap().window_rps)
    p95.set_function(lambda: snap().window_p95_ms / 1000.0)
    p99.set_function(lambda: scheduler.window_quantile(0.99) / 1000.0)

    def on_submit(task) -> None:
        arrivals.labels(task.kind).inc()

    def on_end(task) -> None:
        ended.labels(task.kind, task.outcome).inc()
        if task.outcome == "ok":
            latency.labels(task.kind).observe((task.end_ms - task.arrival_ms) / 1000.0)

    scheduler.add_submit_listener(on_submit)
    scheduler.add_listener(on_end)
    if scheduler.limiter is not None:
        registry.register(LimiterCollector(scheduler.limiter, prefix))
    return registry


def _in_flight(s) -> int:
    return s.in_flight_interactive + s.in_flight_batch


class LimiterCollector:
    """The shared limiter's state, read once per scrape."""

    def __init__(self, limiter, prefix: str):
        self.limiter = limiter
        self.prefix = prefix

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        p, s = self.prefix, self.limiter.state()
        yield GaugeMetricFamily(f"{p}_limiter_shared", "1 while the limit is shared through Redis, 0 in fallback "
                                "(split caps)", value=1.0 if s.mode == "shared" else 0.0)
        yield GaugeMetricFamily(f"{p}_limiter_instances", "gateway instances the limit is shared by (configured)",
                                value=s.instances)
        for name, help_, values in (
            ("global_in_flight", "leases held in Redis by all instances, as of the last answer",
             (s.global_interactive, s.global_batch)),
            ("limiter_waiting", "started by the policy, waiting for a shared slot", (s.waiting_interactive,
                                                                                    s.waiting_batch)),
        ):
            family = GaugeMetricFamily(f"{p}_{name}", help_, labels=["kind"])
            for kind, value in zip(KINDS, values):
                family.add_metric([kind], value)
            yield family
        yield CounterMetricFamily(f"{p}_limiter_fallbacks", "times Redis was lost (fallback entered)",
                                  value=s.fallbacks)
        yield CounterMetricFamily(f"{p}_limiter_recoveries", "times Redis came back (shared mode restored)",
                                  value=s.recoveries)
        yield CounterMetricFamily(f"{p}_limiter_leases_lost", "leases found expired at renewal and added back",
                                  value=s.leases_lost)
