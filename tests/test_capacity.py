"""Capacity check: offered interactive load against the backend, before any run; overload is never silent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simlab.experiments.capacity import check
from simlab.scenario import load_scenario, scenario_from_dict
from tests.helpers import ROOT, simlab

OVERLOAD = Path(__file__).parent / "fixtures" / "overload.toml"


def test_the_users_overload_case_by_hand():
    cap = check(load_scenario(OVERLOAD))
    assert cap.utilisation == pytest.approx(12 * 1.46 / 8)  # 2.19
    assert cap.overloaded and cap.slo_unreachable
    assert "utilisation 2.19" in cap.warnings()[0] and "8 slots" in cap.warnings()[0]


def base(**backend) -> dict:
    return {
        "name": "c",
        "duration_ms": 60_000,
        "slo_p95_ms": 2_000,
        "backend": backend,
        "workload": [
            {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 10},
             "service": {"dist": "constant", "value": 500}, "prompt_tokens": {"dist": "constant", "value": 1000},
             "output_tokens": {"dist": "constant", "value": 100}},
            {"class": "batch", "arrivals": {"process": "burst", "count": 100}, "service": {"dist": "constant", "value": 9},
             "prompt_tokens": {"dist": "constant", "value": 9}, "output_tokens": {"dist": "constant", "value": 9}},
        ],
    }


def test_slots_delay_and_rates_of_each_process():
    assert check(scenario_from_dict(base(kind="slots", slots=4))).utilisation == pytest.approx(10 * 0.5 / 4)
    delay = check(scenario_from_dict(base(kind="delay")))
    assert delay.utilisation is None and not delay.overloaded and "unlimited" in delay.detail
    for arrivals, rate in (
        ({"process": "piecewise", "rates_per_s": [2, 10, 30], "step_ms": 1000}, 14),
        ({"process": "diurnal", "mean_rate_per_s": 7, "amplitude": 0.9}, 7),
        ({"process": "closed-loop", "users": 3, "think": {"dist": "exponential", "mean": 1500}}, 3 / 2.0),
    ):
        data = base(kind="slots", slots=4)
        data["workload"][0]["arrivals"] = arrivals
        assert check(scenario_from_dict(data)).rate_per_s == pytest.approx(rate), arrivals


def test_a_load_multiplier_scales_open_loop_rates():
    data = base(kind="slots", slots=4)
    data["workload"][0]["load"] = 2.5
    assert check(scenario_from_dict(data)).utilisation == pytest.approx(2.5 * 10 * 0.5 / 4)


def test_mean_service_of_each_distribution():
    for dist, mean in (
        ({"dist": "exponential", "mean": 300}, 300),
        ({"dist": "uniform", "low": 100, "high": 300}, 200),
        ({"dist": "lognormal", "median": 100, "p95": 100 * math.exp(1.6448536269514722)}, 100 * math.exp(0.5)),
    ):
        data = base(kind="slots", slots=1)
        data["workload"][0]["service"] = dist
        assert check(scenario_from_dict(data)).utilisation == pytest.approx(10 * mean / 1000), dist


def test_token_time_continuous_batching_and_api():
    data = base(kind="slots", slots=2, token_time={"base_ms": 100, "per_prompt_token_ms": 0.1, "per_output_token_ms": 2})
    del data["workload"][0]["service"]
    assert check(scenario_from_dict(data)).utilisation == pytest.approx(10 * (100 + 100 + 200) / 1000 / 2)
    cb = base(kind="continuous-batching", max_num_seqs=10, step={"base_ms": 20, "per_token_ms": 0.01, "per_seq_ms": 1})
    # a full decode step: 20 + (0.01 + 1) x 10 = 30.1 ms for 10 tokens; prefill 1000 x 0.01 = 10 ms per request
    assert check(scenario_from_dict(cb)).utilisation == pytest.approx(10 * (100 * 30.1 / 10 + 10) / 1000)
    api = base(kind="api", concurrency=4, rpm=300, tpm=1_000_000,
               token_time={"base_ms": 0, "per_prompt_token_ms": 0, "per_output_token_ms": 5})
    cap = check(scenario_from_dict(api))
    assert cap.utilisation == pytest.approx(600 / 300) and "rpm" in cap.detail  # 600 requests/min vs 300
    api["backend"]["rpm"] = 3000
    cap = check(scenario_from_dict(api))
    assert cap.utilisation == pytest.approx(10 * 0.5 / 4) and "concurrency" in cap.detail
    api["backend"]["tpm"] = 300_000  # 10/s x 1100 tokens x 60 = 660,000 per minute
    assert check(scenario_from_dict(api)).utilisation == pytest.approx(660_000 / 300_000)


def test_bundled_scenarios_are_within_capacity():
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        cap = check(load_scenario(path))
        assert cap.utilisation is not None and cap.utilisation < 1, (path.name, cap.detail)


# --- as a user types it ------------------------------------------------------------------------------------
def test_run_warns_with_the_utilisation(tmp_path):
    proc = simlab("run", OVERLOAD, "--out", tmp_path / "run", "--quiet")
    assert "warning: capacity" in proc.stderr and "utilisation 2.19" in proc.stderr
    assert "12 req/s x 1.46 s mean service / 8 slots" in proc.stderr


def test_ab_warns_with_the_utilisation_and_the_batch_absent_bound(tmp_path):
    proc = simlab("ab", OVERLOAD, "--out", tmp_path / "ab", "--quiet", "--no-figures", "--policies", "priority,static")
    assert "utilisation 2.19" in proc.stderr
    assert "with batch work absent, interactive P95 is already" in proc.stderr


def test_tune_warns_and_refuses_to_export_unless_forced(tmp_path):
    out = tmp_path / "tune"
    proc = simlab("tune", OVERLOAD, "--out", out, "--quiet", check=False)
    assert "utilisation 2.19" in proc.stderr
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no options were exported" in proc.stderr and "--force" in proc.stderr
    assert not (out / "best-options.json").exists()
    assert (out / "study.db").exists() and (out / "trials.csv").exists()  # the study is kept
    proc = simlab("tune", OVERLOAD, "--out", out, "--quiet", "--force")
    assert "utilisation 2.19" in proc.stderr
    assert json.loads((out / "best-options.json").read_text())["maxConcurrency"] == 8


def test_no_warning_within_capacity(tmp_path):
    proc = simlab("run", ROOT / "scenarios" / "seed-article.toml", "--out", tmp_path / "ok", "--quiet")
    assert "capacity" not in proc.stderr


def test_ab_warns_when_its_runs_have_too_few_requests_for_a_p95(tmp_path):
    """A scenario so short that a run completes a handful of interactive requests: its P95s are said to rest on
    them (the median run's count), and a scenario with enough requests says nothing of it."""
    text = (ROOT / "docs" / "examples" / "tiny.toml").read_text().replace("duration_ms = 8_000", "duration_ms = 1_000")
    short = tmp_path / "short.toml"
    short.write_text(text)
    proc = simlab("ab", short, "--out", tmp_path / "ab", "--quiet", "--no-figures", "--no-frontier",
                  "--replications", "4")
    assert "warning: few requests: the median run completes" in proc.stderr
    assert "Lengthen duration_ms" in proc.stderr
    proc = simlab("ab", ROOT / "docs" / "examples" / "tiny.toml", "--out", tmp_path / "ok", "--quiet", "--no-figures",
                  "--no-frontier", "--replications", "4")
    assert "few requests" not in proc.stderr
