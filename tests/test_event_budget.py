"""`max_tasks`, the event budget, counts every task of a run: open-loop arrivals (checked on their expected count
before they are drawn, and on the count drawn) and closed-loop requests beside them. The check is on counts, never
per-event work: valid scenarios run exactly as before (tests/test_reference_results.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from simlab.errors import InputError
from simlab.policies import options_from_dict
from simlab.scenario import scenario_from_dict
from simlab.world.engine import Engine
from simlab.world.workloads import expected_open_loop, open_loop_columns
from tests.bad_input import assert_bad_input
from tests.helpers import simlab

UNSCHEDULED = options_from_dict({"policy": "unscheduled"})


def scenario(workloads: list[dict], max_tasks: int, duration_ms: float = 10_000):
    return scenario_from_dict({"name": "budget", "duration_ms": duration_ms, "max_tasks": max_tasks,
                               "backend": {"kind": "slots", "slots": 4}, "workload": workloads})


def poisson(rate: float, **more) -> dict:
    return {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": rate},
            "service": {"dist": "constant", "value": 1}, **more}


def burst(count: int, at=0.0) -> dict:
    return {"class": "batch", "arrivals": {"process": "burst", "count": count, "at_ms": at},
            "service": {"dist": "constant", "value": 1}}


def users(n: int, think: float = 10.0) -> dict:
    return {"class": "interactive", "arrivals": {"process": "closed-loop", "users": n,
                                                 "think": {"dist": "constant", "value": think}},
            "service": {"dist": "constant", "value": 1}}


def test_open_loop_arrivals_count_against_the_budget():
    s = scenario([burst(101)], max_tasks=100)  # the mean (101) is too close to refuse before drawing
    with pytest.raises(InputError) as info:
        open_loop_columns(s, 1)
    assert info.value.where == "max_tasks"
    assert info.value.message.startswith("the open-loop arrivals number 101 or more at seed 1, more than "
                                         "max_tasks = 100 (the event budget, which counts every task)")
    assert len(open_loop_columns(scenario([burst(100)], max_tasks=100), 1)) == 100  # exactly the budget: runs


def test_an_impossible_draw_is_refused_before_drawing():
    # a day at a million requests per second: 8.64e10 tasks, refused from the rates alone, in no time
    s = scenario([poisson(1e6)], max_tasks=2_000_000, duration_ms=86_400_000)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"would number about 86,400,000,000, more than max_tasks = 2,000,000"):
        open_loop_columns(s, 1)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("workload", [
    poisson(50),
    poisson(50, load=3.5),
    poisson(50, diurnal_amplitude=0.9),
    {"class": "interactive", "arrivals": {"process": "piecewise", "rates_per_s": [10, 200, 0, 35], "step_ms": 1700},
     "service": {"dist": "constant", "value": 1}},
    {"class": "interactive", "arrivals": {"process": "diurnal", "mean_rate_per_s": 80, "amplitude": 0.7,
                                          "period_ms": 4000}, "service": {"dist": "constant", "value": 1}},
    burst(30, [0, 500, 900]),
])
def test_the_expected_count_never_exceeds_what_is_drawn_by_ten_deviations(workload):
    """The count checked before drawing is a lower bound: refusing on it never refuses a draw that fits."""
    s = scenario([workload], max_tasks=10**9)
    mean, sd = expected_open_loop(s)
    for seed in range(20):
        assert mean - 10 * sd <= len(open_loop_columns(s, seed))


def test_closed_loop_requests_count_beside_the_open_loop_tasks():
    s = scenario([burst(100), users(2)], max_tasks=150, duration_ms=60_000)
    with pytest.raises(InputError) as info:
        Engine(s, UNSCHEDULED, 1).run()
    assert info.value.where == "workload[1].arrivals"
    assert "requests (beside 100 open-loop tasks)" in info.value.message and "max_tasks = 150" in info.value.message
    # within the budget: the same world runs (100 + 2 users x 20 requests)
    fits = scenario([burst(100), {**users(2), "arrivals": {**users(2)["arrivals"], "requests_per_user": 20}}],
                    max_tasks=150, duration_ms=60_000)
    assert len(Engine(fits, UNSCHEDULED, 1).run().table) == 140


def test_tasks_given_to_the_engine_count_too():
    from simlab.policies import Task

    s = scenario([poisson(1)], max_tasks=3)
    tasks = [Task(str(i), "interactive", float(i), 1.0) for i in range(4)]
    with pytest.raises(InputError, match="4 open-loop tasks, more than max_tasks = 3"):
        Engine(s, UNSCHEDULED, 1, tasks=tasks).run()


@pytest.mark.slow
def test_the_cli_refuses_a_workload_over_the_budget(tmp_path):
    path = tmp_path / "over.toml"
    path.write_text('name = "over"\nduration_ms = 10_000\nmax_tasks = 1_000\n[backend]\nkind = "slots"\nslots = 2\n'
                    '[[workload]]\nclass = "interactive"\narrivals = { process = "poisson", rate_per_s = 1000 }\n'
                    'service = { dist = "constant", value = 1 }\n')
    assert_bad_input(tmp_path, "run", path, "--quiet", "--out", tmp_path / "out", allowed=("out",),
                     words=[str(path), "max_tasks", "would number about 10,000", "max_tasks = 1,000"])


# --- event budget ---------------------------------------------------------------------------------------------
def endless(tmp_path, think_ms: float, budget: str = "") -> Path:
    path = tmp_path / "endless.toml"
    path.write_text(
        f'name = "endless"\nduration_ms = 60_000\n{budget}\n[backend]\nkind = "delay"\n'
        '[[workload]]\nclass = "interactive"\n'
        f'arrivals = {{ process = "closed-loop", users = 4, think = {{ dist = "constant", value = {think_ms} }} }}\n'
        'service = { dist = "constant", value = 1e-9 }\n'
    )
    return path


def test_near_zero_think_and_service_times_stop_with_a_clear_error(tmp_path):
    # 4 users x 60 s / 2e-9 ms would be 1.2e14 requests: stopped within the first few thousand
    proc = simlab("run", endless(tmp_path, 1e-9), "--policy", "unscheduled", "--out", tmp_path / "o", "--quiet",
                  check=False, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "workload[0].arrivals" in proc.stderr and "max_tasks = 2,000,000" in proc.stderr, proc.stderr


def test_the_budget_is_a_hard_limit(tmp_path):
    proc = simlab("run", endless(tmp_path, 1.0, "max_tasks = 500"), "--policy", "unscheduled", "--out",
                  tmp_path / "o", "--quiet", check=False)
    assert proc.returncode == 2 and re.search(r"sent 50\d requests", proc.stderr) and "max_tasks = 500" in proc.stderr
    proc = simlab("run", endless(tmp_path, 1.0, "max_tasks = 300_000"), "--policy", "unscheduled", "--out",
                  tmp_path / "p", "--quiet")  # 240,000 requests: within the budget
