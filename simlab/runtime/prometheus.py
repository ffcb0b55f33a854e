"""Prometheus metrics for a running Scheduler (optional: prometheus_client, the extra `simlab[runtime]` of the lab or
`simlab-runtime[prometheus]` of the runtime alone).

Gauges read the scheduler's snapshot at scrape time (queues, in flight per class, batch cap, window RPS and
P95); a counter counts ended requests by class and outcome; a histogram holds end-to-end latency by class.
"""

from __future__ import annotations

from simlab.runtime.scheduler import Scheduler

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


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
    rps = Gauge(f"{prefix}_window_rps", "interactive completions per second over the window", **kw)
    p95 = Gauge(f"{prefix}_window_p95_seconds", "interactive end-to-end P95 over the window", **kw)
    ended = Counter(f"{prefix}_requests", "ended requests", ["kind", "outcome"], **kw)
    latency = Histogram(f"{prefix}_latency_seconds", "end-to-end latency, queueing included", ["kind"],
                        buckets=LATENCY_BUCKETS_S, **kw)
    snap = scheduler.snapshot
    queued.labels("interactive").set_function(lambda: snap().queued_interactive)
    queued.labels("batch").set_function(lambda: snap().queued_batch)
    in_flight.labels("interactive").set_function(lambda: snap().in_flight_interactive)
    in_flight.labels("batch").set_function(lambda: snap().in_flight_batch)
    cap.set_function(lambda: snap().batch_cap)
    rps.set_function(lambda: snap().window_rps)
    p95.set_function(lambda: snap().window_p95_ms / 1000.0)

    def on_end(task) -> None:
        ended.labels(task.kind, task.outcome).inc()
        if task.outcome == "ok":
            latency.labels(task.kind).observe((task.end_ms - task.arrival_ms) / 1000.0)

    scheduler.add_listener(on_end)
    return registry
