"""Gateway instances in the simulation (simlab/world/gateway.py): one instance changes nothing, N instances
overshoot the cap with local counts and not with split or shared ones, and a crash loses, resubmits and
duplicates exactly what it should."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simlab import scenario as scenario_module
from simlab.errors import InputError
from simlab.experiments.metrics import summarize
from simlab.scenario import Gateway, load_scenario, scenario_from_dict
from simlab.world.engine import Engine, simulate
from tests.helpers import ROOT

BUNDLED = sorted(p for p in (ROOT / "scenarios").glob("*.toml") if p.stem != "bench-1h")  # one hour: too long here


def _same(a, b) -> bool:
    if a.end_ms != b.end_ms:
        return False
    for name, col in a.table.columns.items():
        other = b.table.columns[name]
        if (col is None) != (other is None) or (col is not None and not np.array_equal(col, other, equal_nan=True)):
            return False
    return all(np.array_equal(a.series[k], b.series[k], equal_nan=True) for k in a.series)


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_one_instance_reproduces_the_single_gateway_for_every_limiter(path, monkeypatch):
    s = load_scenario(path).model_copy(update={"gateway": None})  # the gateway scenarios: as one plain gateway
    plain = {p: simulate(s, s.options(p), 1) for p in s.experiment.policies}
    # the gateway layer itself, not the engine's shortcut around it
    monkeypatch.setattr(scenario_module.Gateway, "plain", property(lambda self: False))
    for limiter in ("local", "split", "shared"):
        g = Gateway(instances=1, limiter=limiter, shared_delay_ms=3.0, balancer="random")
        sc = s.model_copy(update={"gateway": g})
        for policy, expected in plain.items():
            got = simulate(sc, sc.options(policy), 1)
            assert _same(got, expected), (path.stem, limiter, policy)
            assert got.gateway["backend_peak_in_flight"] <= max(summarize(expected, s.slo_p95_ms)["max_in_flight"], 0)


def test_a_plain_gateway_table_adds_no_columns():
    s = load_scenario(ROOT / "scenarios" / "seed-article.toml")
    sc = s.model_copy(update={"gateway": Gateway(instances=1)})
    row = summarize(simulate(sc, sc.options("adaptive"), 1), s.slo_p95_ms)
    assert summarize(simulate(s, s.options("adaptive"), 1), s.slo_p95_ms) == row
    assert "backend_peak_in_flight" not in row


def _four(limiter: str, delay: float = 0.0, policy: str = "adaptive") -> dict:
    s = load_scenario(ROOT / "scenarios" / "seed-article.toml")
    sc = s.model_copy(update={"gateway": Gateway(instances=4, limiter=limiter, shared_delay_ms=delay)})
    return summarize(simulate(sc, sc.options(policy), 1), s.slo_p95_ms)


def test_four_local_instances_exceed_the_cap_and_split_or_shared_do_not():
    local, split, shared = _four("local"), _four("split"), _four("shared")
    assert local["global_cap"] == 8
    assert local["backend_peak_in_flight"] > 8 and local["time_above_cap_ms"] > 0
    assert local["max_in_flight"] == local["backend_peak_in_flight"]  # the engine's own count agrees
    for row in (split, shared):
        assert row["backend_peak_in_flight"] <= 8 and row["time_above_cap_ms"] == 0


def test_a_late_view_of_the_shared_limit_lets_a_burst_through():
    late = _four("shared", delay=5.0)
    assert late["backend_peak_in_flight"] > 8  # 20-job bursts: every instance grants before it sees the others


# --- crashes: a case where every count is known ---------------------------------------------------
def _crash_world(**gateway) -> dict:
    """Two instances, round-robin, each running one batch task at a time (priority, maxConcurrency 1 each: local);
    six 1000 ms jobs at 0: instance 0 gets jobs 0, 2, 4 and instance 1 jobs 1, 3, 5. Instance 0 crashes at 500 ms
    (job 0 running, 2 and 4 queued) and is back at 1500 ms."""
    return {
        "name": "crash", "duration_ms": 1000.0,
        "backend": {"kind": "slots", "slots": 10},
        "scheduler": {"policy": "priority", "maxConcurrency": 1},
        "workload": [{"class": "batch", "arrivals": {"process": "burst", "count": 6, "at_ms": [0.0]},
                      "service": {"dist": "constant", "value": 1000.0}}],
        "gateway": {"instances": 2, "crash_at_ms": [500.0], "restart_ms": 1000.0, **gateway},
    }


def _run_crash(**gateway):
    s = scenario_from_dict(_crash_world(**gateway))
    result = simulate(s, s.options("priority"), 1)
    return summarize(result, s.slo_p95_ms), result


def test_a_crash_with_a_memory_queue_loses_the_queue_and_clients_send_it_again():
    row, result = _run_crash(client_retry_ms=100.0)
    assert (row["crashes"], row["lost"], row["resubmitted"], row["abandoned"], row["redelivered"],
            row["duplicated"]) == (1, 2, 2, 1, 0, 0)
    assert row["batch_failed"] == 1 and row["batch_completed"] == 5
    assert row["abandoned_work_ms"] == pytest.approx(500.0)
    # jobs 2 and 4 go to instance 1 (the only one up at 600 ms), after its 1, 3, 5: done at 4000 and 5000 ms
    ends = result.table["end_ms"]
    assert ends.tolist() == [500.0, 1000.0, 4000.0, 2000.0, 5000.0, 3000.0]


def test_a_crash_without_client_retries_fails_the_lost_tasks():
    row, _ = _run_crash()
    assert (row["lost"], row["resubmitted"], row["abandoned"]) == (2, 0, 1)
    assert row["batch_failed"] == 3 and row["batch_completed"] == 3


def test_a_persistent_queue_with_at_least_once_delivery_runs_the_crashed_task_again():
    row, result = _run_crash(queue="persistent", delivery="at-least-once")
    assert (row["lost"], row["resubmitted"], row["abandoned"], row["redelivered"], row["duplicated"]) == (0, 0, 0, 1, 1)
    assert row["batch_completed"] == 6 and row["batch_failed"] == 0
    # instance 0 is back at 1500 ms: job 0 again, then 2 and 4
    assert result.table["end_ms"].tolist() == [2500.0, 1000.0, 3500.0, 2000.0, 4500.0, 3000.0]
    idempotent, _ = _run_crash(queue="persistent", delivery="at-least-once", idempotent=True)
    assert (idempotent["redelivered"], idempotent["duplicated"]) == (1, 0)


def test_a_persistent_queue_at_most_once_keeps_the_queue_and_abandons_the_running_task():
    row, _ = _run_crash(queue="persistent")
    assert (row["lost"], row["abandoned"], row["redelivered"]) == (0, 1, 0)
    assert row["batch_completed"] == 5 and row["batch_failed"] == 1


def test_crash_times_from_mtbf_are_seeded():
    world = _crash_world()
    world["gateway"] = {"instances": 2, "mtbf_ms": 300.0, "restart_ms": 50.0, "client_retry_ms": 10.0}
    world["duration_ms"] = 2000.0
    s = scenario_from_dict(world)
    a = summarize(simulate(s, s.options("priority"), 7), 1000.0)
    b = summarize(simulate(s, s.options("priority"), 7), 1000.0)
    c = summarize(simulate(s, s.options("priority"), 8), 1000.0)
    assert a == b and a["crashes"] > 0
    assert a != c  # another seed, other crash times


# --- bad [gateway] tables ---------------------------------------------------------------------------
@pytest.mark.parametrize("gateway, where, words", [
    ({"instances": 0}, "gateway.instances", "greater than or equal to 1"),
    ({"limiter": "redis"}, "gateway.limiter", "local"),
    ({"balancer": "sticky"}, "gateway.balancer", "round-robin"),
    ({"instances": 2, "leases": 3}, "gateway.leases", "unknown key 'leases'"),
    ({"crash_at_ms": [5.0, 1.0]}, "gateway", "increasing"),
    ({"crash_at_ms": [5.0], "mtbf_ms": 10.0}, "gateway", "not both"),
    ({"delivery": "at-least-once"}, "gateway", 'queue = "persistent"'),
    ({"queue": "persistent", "client_retry_ms": 5.0}, "gateway", "client_retry_ms"),
    ({"idempotent": True}, "gateway", "idempotent"),
    ({"shared_delay_ms": -1.0}, "gateway.shared_delay_ms", "greater than or equal to 0"),
])
def test_bad_gateway_fields_name_the_field(gateway, where, words):
    world = _crash_world()
    world["gateway"] = gateway
    with pytest.raises(InputError) as info:
        scenario_from_dict(world, Path("crash.toml"))
    assert info.value.where == where and words in info.value.message


def test_crashes_with_batch_timeouts_are_refused():
    world = _crash_world()
    world["workload"][0]["timeout_ms"] = 100.0
    with pytest.raises(InputError) as info:
        scenario_from_dict(world, Path("crash.toml"))
    assert info.value.where == "gateway" and "timeout_ms" in info.value.message


def test_eviction_across_instances_is_refused():
    world = _crash_world()
    world["scheduler"] = {"policy": "priority", "maxConcurrency": 2, "evict": "newest", "evictAfterMs": 100.0}
    s = scenario_from_dict(world)
    with pytest.raises(InputError) as info:
        Engine(s, s.options("priority"), 1)
    assert info.value.where == "gateway" and "evict" in info.value.message


# --- the CLI as a user types it ------------------------------------------------------------------------
def test_run_on_gateway_instances_is_the_same_whatever_the_workers(tmp_path):
    from tests.helpers import simlab

    tables = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        simlab("run", ROOT / "scenarios" / "gateway-restarts.toml", "--policy", "adaptive", "--replications", "2",
               "--workers", workers, "--tasks", "none", "--out", out, "--quiet")
        tables.append((out / "summary.csv").read_text())
    assert tables[0] == tables[1]
    header = tables[0].splitlines()[0].split(",")
    assert {"backend_peak_in_flight", "time_above_cap_ms", "lost", "duplicated"} <= set(header)


def test_a_bad_gateway_field_exits_2_naming_it(tmp_path):
    from tests.helpers import simlab

    text = (ROOT / "scenarios" / "many-gateways.toml").read_text().replace('limiter = "local"', 'limiter = "redis"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    proc = simlab("run", bad, "--out", tmp_path / "out", check=False)
    assert proc.returncode == 2
    assert "gateway.limiter" in proc.stderr and "Traceback" not in proc.stderr


def test_the_sweeps_and_their_figures(tmp_path):
    from simlab.experiments.gateways import RESTART_POLICIES, instances_sweep, restart_sweep
    from simlab.reporting.figures.gateway import instances_figure, restarts_figure

    s = scenario_from_dict(_crash_world())
    points = instances_sweep(s, "priority", [1, 2], instances=(1, 2), limiters=("local", "shared"))
    by = {(p.limiter, p.instances): p for p in points}
    assert by[("local", 2)].backend_peak_in_flight == 2 > by[("shared", 2)].backend_peak_in_flight == 1
    assert by[("local", 1)].time_above_cap_ms == 0 and by[("local", 2)].time_above_cap_ms > 0
    restarts = restart_sweep(s, "priority", [1])
    assert [p.restart_policy for p in restarts] == list(RESTART_POLICIES)
    assert [(p.lost, p.resubmitted, p.abandoned, p.redelivered, p.duplicated) for p in restarts] == [
        (2, 0, 1, 0, 0), (2, 2, 1, 0, 0), (0, 0, 1, 0, 0), (0, 0, 0, 1, 1), (0, 0, 0, 1, 0)]
    assert instances_figure(points, tmp_path, s.name, "priority")[0].stat().st_size > 10_000
    assert restarts_figure(restarts, tmp_path, s.name, "priority")[0].stat().st_size > 10_000
