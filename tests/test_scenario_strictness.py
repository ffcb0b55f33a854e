"""Scenarios are read strictly: a number written as a string, or a boolean for a number, is an error naming
the key; an int is accepted where a float is expected."""

from __future__ import annotations

import json

import pytest

from simlab.errors import InputError
from simlab.scenario import load_scenario, scenario_from_dict
from tests.helpers import ROOT, simlab

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
