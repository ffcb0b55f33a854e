"""ops/grafana/simlab-scheduler.json: every panel's query names only metrics the runtime exports.

The exported names are read from a fresh CollectorRegistry with an instrumented Scheduler that has a shared
limiter (not started: no Redis needed), so a renamed or removed metric fails here.
"""

from __future__ import annotations

import json
import re

import pytest

from simlab.policies import options_from_dict
from simlab.runtime import Scheduler
from simlab.runtime.shared import RedisLimiter
from tests.helpers import ROOT

prometheus_client = pytest.importorskip("prometheus_client")
from simlab.runtime.prometheus import instrument  # noqa: E402

DASHBOARD = ROOT / "ops" / "grafana" / "simlab-scheduler.json"
METRIC = re.compile(r"\bsimlab_[a-z0-9_]+")
LABEL = re.compile(r"\b(kind|outcome)\s*=~?\s*\"([^\"]*)\"")


def exported() -> dict[str, set[tuple[str, str]]]:
    """Sample name -> the (label, value) pairs it carries, as a scrape of a limiter-backed scheduler shows."""
    options = options_from_dict({"policy": "adaptive", "maxConcurrency": 8, "batchMaxConcurrency": 6,
                                 "batchMinConcurrency": 1, "interactiveRpsThreshold": 20,
                                 "interactiveP95LatencyMs": 500})
    sched = Scheduler(options, limiter=RedisLimiter("redis://127.0.0.1:6379/0", instances=2))
    registry = prometheus_client.CollectorRegistry()
    instrument(sched, registry)
    names: dict[str, set[tuple[str, str]]] = {}
    for family in registry.collect():
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels.items())
    return names


def panels(node):
    for panel in node.get("panels", []):
        yield panel
        yield from panels(panel)  # rows hold panels too


def test_every_panel_queries_only_exported_metrics():
    names = exported()
    board = json.loads(DASHBOARD.read_text())
    seen = set()
    found = list(panels(board))
    assert found
    for panel in found:
        if panel.get("type") == "row":
            continue
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        assert exprs, f"panel {panel['title']!r} has no query"
        for expr in exprs:
            used = METRIC.findall(expr)
            assert used, f"panel {panel['title']!r}: {expr!r} names no simlab metric"
            for name in used:
                assert name in names, f"panel {panel['title']!r} queries {name}, which the runtime does not export"
                seen.add(name)
                for label, value in LABEL.findall(expr):
                    assert (label, value) in names[name], f"{name} has no series with {label}={value!r}"
    # the article's list (section 8.1) and the shared limiter's state each have a panel
    for wanted in ("simlab_scheduler_latency_seconds_bucket", "simlab_scheduler_window_p95_seconds",
                   "simlab_scheduler_window_p99_seconds", "simlab_scheduler_arrivals_total",
                   "simlab_scheduler_in_flight", "simlab_scheduler_queued", "simlab_scheduler_concurrency_use",
                   "simlab_scheduler_max_concurrency", "simlab_scheduler_limiter_shared",
                   "simlab_scheduler_global_in_flight"):
        assert wanted in seen, f"no panel shows {wanted}"


def test_the_dashboard_imports_with_a_prometheus_data_source():
    board = json.loads(DASHBOARD.read_text())
    (source,) = board["__inputs"]
    assert source["pluginId"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        assert panel["datasource"]["uid"] == "${" + source["name"] + "}"
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
