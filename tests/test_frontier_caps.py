"""The static frontier's cap count is bounded: every cap up to FULL_SWEEP_CAPS, then a geometric sample up to
maxConcurrency - 1 (always with the options' own cap and maxConcurrency - 1), with a warning; the same caps whatever
--workers is."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.decision.frontier import FULL_SWEEP_CAPS, SAMPLED_CAPS, caps_note, caps_swept, static_caps
from simlab.policies import options_from_dict
from tests.bad_input import simlab_in


def options(max_concurrency: int, own: int | None = None):
    return options_from_dict({"policy": "adaptive", "maxConcurrency": max_concurrency,
                              "batchMaxConcurrency": own if own is not None else max(0, max_concurrency - 1),
                              "batchMinConcurrency": 0, "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 500})


@pytest.mark.parametrize("m", [2, 8, 64, FULL_SWEEP_CAPS + 1])
def test_every_cap_up_to_the_full_sweep(m):
    assert static_caps(options(m)) == list(range(1, m))
    assert caps_note(options(m)) is None
    assert caps_swept(options(m)) == f"static caps 1..{m - 1} swept"  # the sentence of the committed results


@settings(max_examples=200, deadline=None)
@given(m=st.integers(FULL_SWEEP_CAPS + 2, 10**15), own=st.integers(0, 10**15))
def test_beyond_it_a_bounded_sample_with_the_own_cap_and_the_top(m, own):
    caps = static_caps(options(m, min(own, m)))
    assert len(caps) <= FULL_SWEEP_CAPS + SAMPLED_CAPS + 1
    assert caps == sorted(set(caps)) and caps[0] == 1 and caps[-1] == m - 1
    assert caps[:FULL_SWEEP_CAPS] == list(range(1, FULL_SWEEP_CAPS + 1))
    if 1 <= own < m:
        assert own in caps
    ratios = [b / a for a, b in zip(caps[FULL_SWEEP_CAPS - 1:], caps[FULL_SWEEP_CAPS:])]
    assert max(ratios) <= ((m - 1) / FULL_SWEEP_CAPS) ** (1 / SAMPLED_CAPS) * (1 + 1e-9) + 1 / FULL_SWEEP_CAPS


def test_no_cap_above_what_the_backend_serves():
    from simlab.scenario import scenario_from_dict
    import tomllib

    data = tomllib.loads(HUGE)
    data["backend"] = {"kind": "slots", "slots": 2}
    s = scenario_from_dict(data)
    assert static_caps(s.options("adaptive"), s) == [1, 2]
    assert caps_note(s.options("adaptive"), s) is None and caps_swept(s.options("adaptive"), s) == "static caps 1..2 swept"


def test_a_million_caps_become_97():
    caps = static_caps(options(1_000_000, 500))
    assert len(caps) == 97 and {1, 64, 500, 999_999} <= set(caps)
    assert caps_note(options(1_000_000, 500)) == (
        "maxConcurrency = 1,000,000: the static frontier measures 97 of the 999,999 caps 1..999,999 (every cap up to "
        "64, then 32 spaced geometrically up to 999,999, and the options' own batchMaxConcurrency), not every one")


HUGE = """name = "huge-cap"
duration_ms = 2000
slo_p95_ms = 500
[backend]
kind = "delay"
[scheduler]
maxConcurrency = 1000000
batchMaxConcurrency = 3
batchMinConcurrency = 1
interactiveRpsThreshold = 5
interactiveP95LatencyMs = 500
[[workload]]
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 5 }
service = { dist = "constant", value = 5 }
[[workload]]
class = "batch"
arrivals = { process = "burst", count = 4 }
service = { dist = "constant", value = 50 }
"""


@pytest.mark.slow
def test_ab_with_a_million_caps_samples_them_whatever_the_workers(tmp_path):
    scenario = tmp_path / "huge.toml"
    scenario.write_text(HUGE)
    frontiers = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        proc = simlab_in(tmp_path, "ab", scenario, "--replications", "2", "--no-figures", "--quiet", "--out", out,
                         "--workers", workers, "--policies", "static,adaptive", "--baseline", "static", timeout=600)
        assert proc.returncode == 0, proc.stderr
        # the own cap (3) is among the first 64: 64 + 32
        assert "warning: maxConcurrency = 1,000,000: the static frontier measures 96 of the 999,999 caps" in proc.stderr
        with open(out / "frontier.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        static = [r["arm"] for r in rows if r["family"] == "static"]
        assert len(static) == 96 and {"static-1", "static-3", "static-64", "static-999999"} <= set(static)
        assert "96 static caps of 1..999,999 swept" in (out / "report.md").read_text()
        frontiers.append((out / "frontier.csv").read_bytes())
    assert frontiers[0] == frontiers[1]
