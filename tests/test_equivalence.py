"""Arms that are one simulation (simlab/policies/equivalence.py, simlab/experiments/twins.py).

A gate that provably runs as a static cap makes the static cap's decisions task for task, on random worlds; a
plan and a search run such arms once per unit and give each its own label; anything that might run otherwise
keeps its own runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.experiments.metrics import summarize
from simlab.experiments.plan import ArmSpec, Plan
from simlab.experiments.twins import run_key
from simlab.policies import options_from_dict
from simlab.scenario import load_scenario, scenario_from_dict
from simlab.world.conditions import split
from simlab.world.engine import Engine
from tests.gate_strategies import gate_options
from tests.test_engine_properties import scenarios

TINY = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tiny.toml"
COLUMNS = ("dispatch_ms", "start_ms", "end_ms", "outcome")


def _world(backend: dict, slots_at_least: int) -> dict:
    if backend["kind"] == "slots" and backend["slots"] < slots_at_least:
        backend = dict(backend, slots=slots_at_least)
    return backend


@st.composite
def reducible(draw):
    """A gate's options that run as a static cap, on a world where they do (a backend that never queues)."""
    world = draw(scenarios())
    policy = draw(st.sampled_from(["holdback", "gradient2"]))
    most = draw(st.integers(1, 6))
    d = {"policy": policy, "maxConcurrency": most, "tieBreak": draw(st.sampled_from(["fifo", "seed-heap"])),
         **draw(gate_options(policy, most))}
    if policy == "gradient2":
        d["minLimit"] = draw(st.integers(most, most + 3))
    else:
        d["saturationSignal"] = draw(st.sampled_from(["queue", "utilization"]))
    if draw(st.booleans()):
        d["evict"], d["evictAfterMs"] = "newest", draw(st.sampled_from([1.0, 20.0, 300.0]))
    world["backend"] = _world(world["backend"], most + draw(st.integers(0, 2)))
    return world, d


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reducible(), st.integers(0, 10_000))
def test_a_gate_that_runs_as_a_static_cap_makes_its_decisions_task_for_task(case, seed):
    world_dict, gate = case
    world = scenario_from_dict(world_dict)
    o = options_from_dict(gate)
    key = run_key(o, world)
    assert key[0] == "static", f"{gate} on {world_dict['backend']} should run as a static cap"
    _, most, cap, tie, evict, after = key
    static = {"policy": "static", "maxConcurrency": most, "batchMaxConcurrency": cap, "tieBreak": tie}
    if evict is not None:
        static.update(evict=evict, evictAfterMs=after)
    s = options_from_dict(static)
    assert run_key(s, world) == key
    a, b = Engine(world, o, seed).run(), Engine(world, s, seed).run()
    for column in COLUMNS:
        np.testing.assert_array_equal(a.table.columns[column], b.table.columns[column], err_msg=column)
    ma, mb = summarize(a, world.slo_p95_ms), summarize(b, world.slo_p95_ms)
    ma.pop("policy", None), mb.pop("policy", None)
    assert ma.keys() == mb.keys()
    for k in ma:
        same = ma[k] == mb[k] or (isinstance(ma[k], float) and math.isnan(ma[k]) and math.isnan(mb[k]))
        assert same, f"{k}: {ma[k]} != {mb[k]}"


def _slots(n: int) -> dict:
    return {"name": "w", "duration_ms": 1000, "backend": {"kind": "slots", "slots": n},
            "workload": [{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                          "service": {"dist": "constant", "value": 10}}]}


def test_what_might_run_otherwise_keeps_its_own_key():
    def kind(options: dict, world: dict) -> str:
        return run_key(options_from_dict(options), scenario_from_dict(world))[0]

    holdback = {"policy": "holdback", "maxConcurrency": 4, "batchMaxConcurrency": 3}
    assert kind(holdback, _slots(4)) == "static"
    assert kind(holdback, _slots(3)) == "options"  # 4 in flight on 3 slots: one waits, saturation moves
    assert kind(dict(holdback, saturationSignal="inflight"), _slots(8)) == "options"
    kv = dict(_slots(4), backend={"kind": "continuous-batching", "max_num_seqs": 8, "max_batched_tokens": 512},
              workload=[{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                         "prompt_tokens": {"dist": "constant", "value": 100},
                         "output_tokens": {"dist": "constant", "value": 20}}])
    assert kind(holdback, kv) == "options"  # the KV cache (and the engine's queue) move saturation
    gradient2 = {"policy": "gradient2", "maxConcurrency": 4, "batchMaxConcurrency": 3}
    assert kind(dict(gradient2, minLimit=4), kv) == "static"  # its limit cannot move, whatever the backend
    assert kind(dict(gradient2, minLimit=3), _slots(8)) == "options"
    assert kind({"policy": "aimd", "maxConcurrency": 4}, _slots(8)) == "options"
    for gateway in ({"instances": 2}, {"crash_at_ms": [500]}):  # each instance's policy sees its share of the tasks
        assert kind(dict(gradient2, minLimit=4), dict(_slots(8), gateway=gateway)) == "options"
    assert kind({"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 3,
                 "batchMinConcurrency": 3, "interactiveRpsThreshold": 10, "interactiveP95LatencyMs": 500},
                _slots(8)) == "options"  # not claimed: only what the module proves


def test_holdback_on_a_queueing_backend_is_not_its_static_cap():
    """The reduction's condition matters: with fewer slots than maxConcurrency holdback's saturation moves, and
    its runs differ from the static cap's."""
    world = scenario_from_dict(dict(_slots(2), duration_ms=5000, workload=[
        {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 20},
         "service": {"dist": "exponential", "mean": 80}},
        {"class": "batch", "arrivals": {"process": "burst", "count": 40, "at_ms": [0]},
         "service": {"dist": "exponential", "mean": 200}}]))
    holdback = options_from_dict({"policy": "holdback", "maxConcurrency": 6, "batchMaxConcurrency": 4,
                                  "saturationSignal": "queue", "queueDepthThreshold": 1})
    static = options_from_dict({"policy": "static", "maxConcurrency": 6, "batchMaxConcurrency": 4})
    assert run_key(holdback, world) != run_key(static, world)
    a, b = Engine(world, holdback, 1).run(), Engine(world, static, 1).run()
    assert not np.array_equal(a.table.columns["dispatch_ms"], b.table.columns["dispatch_ms"], equal_nan=True)


def test_a_plan_runs_twins_once_per_unit_and_labels_each(tmp_path):
    scenario = load_scenario(TINY)
    base = scenario.options()
    cap = base.batch_max_concurrency
    static = ArmSpec(f"static-{cap}", base.with_changes(policy="static", batch_min_concurrency=cap), "static", cap=cap)
    holdback = ArmSpec("holdback-defaults", base.with_changes(policy="holdback"), "holdback")
    gradient2 = ArmSpec("gradient2-defaults", base.with_changes(policy="gradient2", min_limit=base.max_concurrency),
                        "gradient2")
    other = ArmSpec("static-1", base.with_changes(policy="static", batch_max_concurrency=1, batch_min_concurrency=1),
                    "static", cap=1)
    conditions = split(scenario)[1]
    plan = Plan(scenario, conditions, tmp_path, workers=1, progress=False)
    units = plan.add_seeds([1, 2])
    plan.run([static, holdback, gradient2, other])
    assert plan.runs == 2 * len(units) and plan.shared == 2 * len(units)
    m = plan.measured.metrics
    for c, s in units:
        assert m[("holdback-defaults", c, s)]["policy"] == "holdback-defaults"
        for twin in ("holdback-defaults", "gradient2-defaults"):
            assert {k: v for k, v in m[(twin, c, s)].items() if k != "policy"} == \
                {k: v for k, v in m[(static.label, c, s)].items() if k != "policy"}
        assert m[("static-1", c, s)] != m[(static.label, c, s)]
    # a later round: the twin's new units come from its static cap's runs, made in the same call
    more = plan.add_seeds([3])
    plan.run([holdback, static], more)
    assert plan.runs == 2 * len(units) + len(more) and plan.shared == 2 * len(units) + len(more)
    assert all(("holdback-defaults", c, s) in m for c, s in more)


def test_a_search_simulates_a_trial_that_runs_as_the_reference_no_more(tmp_path, monkeypatch):
    """holdback's first trial is its defaults, which on GPU slots that never queue are the reference static cap:
    the search takes the reference's runs for it and simulates only the trials that differ."""
    import simlab.experiments.runner as runner
    import simlab.tuning.study as study
    from simlab.tuning.run import run_tune

    scenario = load_scenario(TINY)
    base = scenario.options()
    made = []
    real = runner.execute

    def counting(world, job, out):
        made.append(job.label)
        return real(world, job, out)

    monkeypatch.setattr(study, "execute", counting)
    record = run_tune(scenario, base, tmp_path / "tune-holdback", trials=3, validate=False, progress=False,
                      family="holdback")
    units = scenario.tune.seeds * len(split(scenario)[0])
    trials = {t.number: t for t in record_trials(tmp_path / "tune-holdback")}
    assert "trial-0" not in made  # the defaults: the reference's runs
    assert len(made) <= (len(trials) - 1) * units
    assert trials[0].user_attrs["origin"] == "defaults" and math.isfinite(trials[0].value)
    assert record is not None


def record_trials(folder: Path):
    import optuna

    from simlab.tuning.study import open_storage

    storage = open_storage(f"sqlite:///{(folder / 'study.db').resolve()}")
    name = optuna.study.get_all_study_names(storage)[0]
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def test_a_batch_that_fails_leaves_no_twin_pointing_at_a_run_never_made(tmp_path, monkeypatch):
    """A caller that catches a failed round and runs it again gets every arm's metrics: the representative a twin
    copies from is registered only once its run is made."""
    import simlab.experiments.plan as plan_module

    scenario = load_scenario(TINY)
    base = scenario.options()
    cap = base.batch_max_concurrency
    static = ArmSpec(f"static-{cap}", base.with_changes(policy="static", batch_min_concurrency=cap), "static", cap=cap)
    holdback = ArmSpec("holdback-defaults", base.with_changes(policy="holdback"), "holdback")
    plan = Plan(scenario, split(scenario)[1], tmp_path, workers=1, progress=False)
    units = plan.add_seeds([1])
    real = plan_module.run_cells

    def failing(*args, **kwargs):
        raise RuntimeError("a worker died")

    monkeypatch.setattr(plan_module, "run_cells", failing)
    with pytest.raises(RuntimeError):
        plan.run([static, holdback])
    monkeypatch.setattr(plan_module, "run_cells", real)
    plan.run([static, holdback])
    m = plan.measured.metrics
    assert plan.runs == len(units) and plan.shared == len(units)
    for c, s in units:
        assert dict(m[("holdback-defaults", c, s)], policy="") == dict(m[(static.label, c, s)], policy="")
