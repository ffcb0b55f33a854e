"""Mends from the review: strict scenarios, an event budget, ab --options beside the baseline A/B, per-task CSVs
that survive ordinary ids, and make-results.sh from any folder."""

from __future__ import annotations

import csv
import re
import json
from pathlib import Path

import pytest

from simlab.errors import InputError
from simlab.scenario import load_scenario, scenario_from_dict
from tests.helpers import ROOT, simlab

ODD_IDS = ["a,b", 'say "hi"', "café ü 東京", "both, \"and\" ñ", "plain"]


def trace_scenario(folder: Path) -> Path:
    rows = [("id", "kind", "arrival_ms", "service_ms")]
    for i, name in enumerate(ODD_IDS):
        rows.append((name, "interactive", str(i * 10.0), "50"))
        rows.append((f"{name}/batch", "batch", str(i * 10.0 + 1), "80"))
    with (folder / "odd.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    path = folder / "odd.toml"
    path.write_text(
        'name = "odd-ids"\nduration_ms = 1_000\n[backend]\nkind = "slots"\nslots = 2\n'
        "[scheduler]\nmaxConcurrency = 2\nbatchMaxConcurrency = 1\nbatchMinConcurrency = 1\n"
        "interactiveRpsThreshold = 10\ninteractiveP95LatencyMs = 500\n"
        '[[workload]]\nclass = "interactive"\narrivals = { process = "trace", file = "odd.csv" }\n'
        '[[workload]]\nclass = "batch"\narrivals = { process = "trace", file = "odd.csv" }\n'
        "[experiment]\nreplications = 1\n",
        encoding="utf-8",
    )
    return path


def ids_in(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    header = rows[0].keys()
    assert None not in header and all(None not in r for r in rows), "a row has more cells than the header"
    return [r["id"] for r in rows]


def test_odd_ids_round_trip_through_run_ab_and_replay(tmp_path):
    scenario = trace_scenario(tmp_path)
    expected = sorted(ODD_IDS + [f"{n}/batch" for n in ODD_IDS])
    simlab("run", scenario, "--policy", "static", "--out", tmp_path / "run", "--quiet")
    tasks = tmp_path / "run" / "runs" / "static" / "seed-1" / "tasks.csv"
    assert sorted(ids_in(tasks)) == expected
    with tasks.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            assert row["kind"] in ("interactive", "batch") and float(row["end_ms"]) > float(row["arrival_ms"])
    simlab("ab", scenario, "--out", tmp_path / "ab", "--quiet", "--no-figures", "--policies", "priority,static")
    assert sorted(ids_in(tmp_path / "ab" / "runs" / "priority" / "seed-1" / "tasks.csv")) == expected
    out = tmp_path / "replay.csv"
    simlab("replay", tmp_path / "odd.csv", "--out", out)
    assert ids_in(out) == [i for n in ODD_IDS for i in (n, f"{n}/batch")]  # trace order


# --- strict scenarios ----------------------------------------------------------------------------------------
GOOD = {
    "name": "s", "duration_ms": 60_000, "backend": {"kind": "slots", "slots": 4},
    "workload": [{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                  "service": {"dist": "constant", "value": 100}}],
}


@pytest.mark.parametrize("where, value, key", [
    ((), "60000", "duration_ms"),
    (("backend",), "4", "slots"),
    (("workload", 0, "arrivals"), "5", "rate_per_s"),
    (("backend",), True, "slots"),
    ((), False, "slo_p95_ms"),
    (("backend",), 4.0, "slots"),  # a whole number of slots, written as a float: not an int
])
def test_numeric_strings_and_booleans_are_rejected(where, value, key):
    data = json.loads(json.dumps(GOOD))
    node = data
    for part in where:
        node = node[part]
    node[key] = value
    with pytest.raises(InputError) as exc:
        scenario_from_dict(data)
    assert key in str(exc.value) and repr(value) in str(exc.value)


def test_ints_are_accepted_where_floats_are_expected():
    s = scenario_from_dict({**GOOD, "duration_ms": 60_000, "slo_p95_ms": 2_000})
    assert s.duration_ms == 60_000.0 and isinstance(s.duration_ms, (int, float))
    data = json.loads(json.dumps(GOOD))
    data["tune"] = {"bounds": {"windowMs": [1000, 30000]}}
    assert list(scenario_from_dict(data).tune.bounds["windowMs"]) == [1000, 30000]
    for path in (ROOT / "scenarios").glob("*.toml"):
        load_scenario(path)


def test_numeric_string_from_the_command_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((ROOT / "scenarios" / "seed-article.toml").read_text().replace("duration_ms = 60_000", 'duration_ms = "60000"'))
    proc = simlab("run", bad, "--out", tmp_path / "x", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bad.toml: duration_ms" in proc.stderr and "'60000'" in proc.stderr


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


# --- ab --options writes beside the baseline A/B -----------------------------------------------------------
def test_ab_with_options_has_its_own_default_folder(tmp_path):
    opts = tmp_path / "tuned.json"
    opts.write_text(json.dumps({"maxConcurrency": 8, "batchMaxConcurrency": 4, "batchMinConcurrency": 1,
                                "interactiveRpsThreshold": 20, "interactiveP95LatencyMs": 500}))
    scenario = ROOT / "scenarios" / "seed-article.toml"
    args = ("--replications", "1", "--quiet", "--no-figures", "--policies", "static")
    simlab("ab", scenario, *args, cwd=tmp_path)
    baseline = (tmp_path / "results" / "seed-article" / "ab" / "summary.csv").read_bytes()
    proc = simlab("ab", scenario, "--options", opts, *args, cwd=tmp_path)
    assert (tmp_path / "results" / "seed-article" / "ab-tuned" / "summary.csv").exists()
    assert "results/seed-article/ab-tuned" in proc.stdout
    assert (tmp_path / "results" / "seed-article" / "ab" / "summary.csv").read_bytes() == baseline
