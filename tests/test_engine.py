"""The SimPy engine: same answers as the replay tool on `delay`, conservation on `slots`, determinism."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pytest

from simlab.policies import options_from_dict
from simlab.scenario import scenario_from_dict
from simlab.world.engine import Engine
from tests.helpers import random_trace, simlab

OPTION_SETS = [
    {"policy": "adaptive", "maxConcurrency": 8, "batchMaxConcurrency": 6, "batchMinConcurrency": 1,
     "interactiveRpsThreshold": 20, "interactiveP95LatencyMs": 500},
    {"policy": "adaptive", "maxConcurrency": 6, "batchMaxConcurrency": 4, "batchMinConcurrency": 0,
     "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 300, "windowMs": 3000, "smoothingAlpha": 0.3,
     "tieBreak": "seed-heap"},
    {"policy": "adaptive", "maxConcurrency": 6, "batchMaxConcurrency": 4, "batchMinConcurrency": 0,
     "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 300, "windowMs": 2000, "recheckOnExpiry": True,
     "smoothingTauMs": 1500},
    {"policy": "static", "maxConcurrency": 5, "batchMaxConcurrency": 2},
    {"policy": "unscheduled"},
]


def trace_scenario(trace, tmp_path, backend=None):
    text = f"""
name = "trace-delay"
duration_ms = 1e9
[backend]
kind = "delay"
[[workload]]
class = "interactive"
arrivals = {{ process = "trace", file = "{trace}" }}
[[workload]]
class = "batch"
arrivals = {{ process = "trace", file = "{trace}" }}
"""
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def read_times(path, start_col="start_ms"):
    with open(path) as f:
        return {r["id"]: (r[start_col], r["end_ms"]) for r in csv.DictReader(f)}


@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: o["policy"] + str(len(o)))
@pytest.mark.parametrize("integer_times", [False, True])
def test_run_on_delay_matches_replay(tmp_path, opts, integer_times):
    trace = random_trace(tmp_path / "trace.csv", 600, seed=len(opts) * 7 + integer_times, integer_times=integer_times)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(opts))
    scenario = trace_scenario(trace, tmp_path)
    simlab("replay", trace, "--options", options, "--out", tmp_path / "replay.csv")
    simlab("run", scenario, "--options", options, "--out", tmp_path / "run", "--quiet")
    replayed = read_times(tmp_path / "replay.csv")
    ran = read_times(tmp_path / "run" / "runs" / opts["policy"] / "seed-1" / "tasks.csv")
    assert replayed.keys() == ran.keys()
    for task_id, (start, end) in replayed.items():
        r_start, r_end = ran[task_id]
        assert (start == "") == (r_start == "") and (end == "") == (r_end == ""), task_id
        if start:
            assert float(start) == float(r_start) and float(end) == float(r_end), task_id


def small_world(backend, policy_opts, seed=3, duration=20_000):
    scenario = scenario_from_dict(
        {
            "name": "small",
            "duration_ms": duration,
            "backend": backend,
            "workload": [
                {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 8},
                 "service": {"dist": "lognormal", "median": 120, "p95": 600}},
                {"class": "batch", "arrivals": {"process": "burst", "count": 60, "at_ms": [0, 5000]},
                 "service": {"dist": "exponential", "mean": 900}},
            ],
        }
    )
    return scenario, options_from_dict(policy_opts)


@pytest.mark.parametrize("opts", OPTION_SETS[:4] + [{"policy": "priority", "maxConcurrency": 4}, {"policy": "fifo", "maxConcurrency": 4}])
def test_slots_conserves_work_and_respects_caps(opts):
    scenario, options = small_world({"kind": "slots", "slots": 4}, opts)
    engine = Engine(scenario, options, seed=5)
    result = engine.run()
    started = [t for t in result.tasks if t.start_ms is not None]
    assert engine.backend.busy_ms == pytest.approx(sum(t.service_ms for t in started))
    for t in result.tasks:
        assert t.arrival_ms <= (t.dispatch_ms if t.dispatch_ms is not None else float("inf"))
        if t.start_ms is not None:
            assert t.dispatch_ms <= t.start_ms <= t.end_ms
            assert t.end_ms == pytest.approx(t.start_ms + t.service_ms)
    # never more tasks in service than slots
    events = sorted([(t.start_ms, 1) for t in started] + [(t.end_ms, -1) for t in started], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak <= 4
    if options.batch_min_concurrency != 0:
        assert all(t.end_ms is not None for t in result.tasks)


def test_same_seed_same_tasks_for_every_policy():
    """Common random numbers: arrivals and service draws do not depend on the policy."""
    draws = []
    for opts in OPTION_SETS:
        scenario, options = small_world({"kind": "slots", "slots": 4}, opts)
        result = Engine(scenario, options, seed=11).run()
        draws.append(sorted((t.id, t.arrival_ms, t.service_ms) for t in result.tasks))
    assert all(d == draws[0] for d in draws)


@pytest.mark.parametrize("name", ["seed-article", "eval-sweep", "gateway-restarts", "real-engine-priority"])
def test_a_run_without_its_time_series_is_the_same_run(name):
    """`series=False` (what decide and tune run): no samples, and the same tasks, summary and end, to the bit:
    observing the policy and the backend changes none of their decisions."""
    from pathlib import Path

    from simlab.experiments.metrics import summarize
    from simlab.scenario import load_scenario

    drains = load_scenario(Path(__file__).parent.parent / "scenarios" / f"{name}.toml")
    cut = drains.model_copy(update={"max_sim_ms": 0.7 * drains.duration_ms})  # tasks in flight at the hard stop
    for scenario, policy in itertools.product((drains, cut), ("adaptive", "holdback", "gradient2", "aimd", "static")):
        options = scenario.options(policy)
        runs = []
        for series in (True, False):
            r = Engine(scenario, options, seed=3, series=series).run()
            columns = {k: v for k, v in r.table.columns.items() if v is not None}
            metrics = summarize(r, scenario.slo_p95_ms, scenario.criteria.slo_bin_ms)
            runs.append((r, columns, metrics))
        (kept, kept_columns, kept_metrics), (bare, bare_columns, bare_metrics) = runs
        assert len(kept.series["t_ms"]) > 10 and len(bare.series["t_ms"]) == 0
        if scenario is cut:
            assert kept.end_ms >= cut.end_ms and np.isnan(kept_columns["end_ms"]).any()
        assert bare.end_ms == kept.end_ms and bare.gateway == kept.gateway and bare.counters == kept.counters
        assert bare_columns.keys() == kept_columns.keys()
        for k in kept_columns:
            assert np.array_equal(bare_columns[k], kept_columns[k], equal_nan=True), (policy, k)
        assert repr(bare_metrics) == repr(kept_metrics), policy


def test_ab_summary_identical_with_one_and_two_workers(tmp_path):
    args = ["ab", "scenarios/seed-article.toml", "--replications", "3", "--quiet", "--no-figures"]
    simlab(*args, "--out", tmp_path / "w1", "--workers", "1")
    simlab(*args, "--out", tmp_path / "w2", "--workers", "2")
    for name in ("summary.csv", "comparison.csv", "policies.csv", "verdicts.csv"):
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name
