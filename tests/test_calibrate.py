"""`simlab calibrate`: the interactive-rate ramp, the knee, the recommended options."""

from __future__ import annotations

import json
import math
import re

import pytest

from helpers import ROOT, simlab
from simlab.calibration.knee import Point, find_knee, offered_rps, scale_arrivals, scaled
from simlab.policies import load_options
from simlab.scenario import Diurnal, Piecewise, Poisson, Trace, load_scenario

TINY = """\
name = "tiny-knee"
duration_ms = 60_000
slo_p95_ms = 1_000

[backend]
kind = "slots"
slots = 4

[scheduler]            # no thresholds yet: that is what calibrate recommends
policy = "static"
maxConcurrency = 4
batchMaxConcurrency = 3
batchMinConcurrency = 1

[[workload]]
name = "chat"
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 4 }
service = { dist = "lognormal", median = 200, p95 = 500 }

[[workload]]
name = "jobs"
class = "batch"
arrivals = { process = "burst", count = 60, at_ms = [0, 20_000, 40_000] }
service = { dist = "exponential", mean = 1_000 }

[experiment]
seed = 1
replications = 3
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_calibrate_finds_the_knee_and_writes_loadable_options(tiny, tmp_path):
    out = tmp_path / "cal"
    proc = simlab("calibrate", tiny, "--out", out, "--refine", "1", "--workers", "2", "--quiet")
    assert re.search(r"^Recommendation:\n.*\n.*\ninteractiveRpsThreshold +[\d.]+$", proc.stdout, re.M)
    # calibrate no longer exports competing options: the verified ones live in calibration.json, and its knee
    # becomes tune's search ranges (tune-bounds.json, read by `simlab tune --calibration`)
    assert not (out / "recommended-options.json").exists()
    from simlab.policies import options_from_dict

    options = options_from_dict(json.loads((out / "calibration.json").read_text())["options"])
    bounds = json.loads((out / "tune-bounds.json").read_text())
    assert bounds["interactiveRpsThreshold"] == [options.interactive_rps_threshold / 2, options.interactive_rps_threshold * 2]
    from simlab.tuning.space import with_calibration
    from simlab.scenario import load_scenario

    tuned = with_calibration(load_scenario(tiny), str(out))
    assert tuple(tuned.tune.bounds["interactiveP95LatencyMs"]) == (500.0, 2000.0)
    assert options.policy == "adaptive"
    assert options.interactive_p95_latency_ms == 1000
    assert options.max_concurrency == 4 and options.batch_max_concurrency == 3
    cal = json.loads((out / "calibration.json").read_text())
    alone, batch = cal["knees"]["alone"], cal["knees"]["batch"]
    assert alone["status"] == "found" and batch["status"] == "found"
    # batch holding 3 of the 4 slots brings the knee down; the recommended threshold sits at or under it
    assert batch["rps"] < alone["rps"]
    assert 0 < options.interactive_rps_threshold <= batch["rps"]
    assert batch["ci_low"] <= batch["rps"] <= batch["ci_high"]
    # The verification ramps the adaptive scheduler up to the batch-absent curve's upper bracket, a rate where even
    # batch absent has P95 over the SLO: no scheduler beats batch absent, so adaptive must cross there too ("found",
    # never "above"). With the recommended threshold it throttles batch, so it crosses later than batch at full cap.
    adaptive = cal["knees"]["adaptive"]
    assert adaptive["status"] == "found"
    assert batch["rps"] < adaptive["rps"]
    assert (out / "figures" / "knee.png").is_file() and (out / "figures" / "knee.svg").is_file()
    report = (out / "report.md").read_text()
    assert "## Recommendation" in report and "figures/knee.png" in report
    assert (out / "knee.csv").read_text().startswith("curve,factor,offered_rps")
    # a rerun resumes from the saved runs and gives the same answer
    again = simlab("calibrate", tiny, "--out", out, "--refine", "1", "--quiet")
    assert again.stdout == proc.stdout


def test_explicit_rates(tiny, tmp_path):
    out = tmp_path / "rates"
    simlab("calibrate", tiny, "--out", out, "--rates", "1,3,6,12", "--refine", "0", "--no-verify",
           "--replications", "2", "--no-figures", "--quiet")
    cal = json.loads((out / "calibration.json").read_text())
    rps = sorted({p["offered_rps"] for p in cal["points"]})
    assert len(rps) == 4 and rps[0] == pytest.approx(1, rel=0.15) and rps[-1] == pytest.approx(12, rel=0.1)
    assert "adaptive" not in cal["knees"]


def test_find_knee():
    slo = 1000.0

    def pts(values, half=50.0):
        return [Point("batch", i, x, [y], y, y - half, y + half) for i, (x, y) in enumerate(values)]

    k = find_knee(pts([(1, 400), (2, 600), (3, 900), (4, 1500), (5, 4000)]), slo, "batch")
    assert k.status == "found" and k.rps == pytest.approx(3 + math.log(1000 / 900) / math.log(1500 / 900))
    assert k.lo < k.rps < k.hi and k.bracket == (3, 4)
    assert find_knee(pts([(1, 400), (2, 500)]), slo, "batch").status == "above"
    assert find_knee(pts([(1, 1400), (2, 1500)]), slo, "batch").status == "below"
    inf = find_knee(pts([(1, 400), (2, math.nan)]), slo, "batch")  # nothing completed: P95 is infinite
    assert inf.status == "found" and inf.rps == 2


def test_scaling_every_open_loop_process(tiny):
    assert scale_arrivals(Poisson(process="poisson", rate_per_s=2), 3).rate_per_s == 6
    assert scale_arrivals(Piecewise(process="piecewise", rates_per_s=[1, 2], step_ms=10), 2).rates_per_s == [2, 4]
    assert scale_arrivals(Diurnal(process="diurnal", mean_rate_per_s=5), 0.5).mean_rate_per_s == 2.5
    t = scale_arrivals(Trace(process="trace", file="x.csv", limit_ms=1000, time_scale=1.0), 2)
    assert t.time_scale == 0.5 and t.limit_ms == 2000  # the same window, twice the requests
    s = load_scenario(tiny)
    assert offered_rps(scaled(s, 2.0), [1, 2]) == pytest.approx(2 * offered_rps(s, [1, 2]), rel=0.15)


def test_trace_scenario_ramps(tmp_path):
    s = load_scenario(ROOT / "scenarios" / "nightly-backfill.toml")
    base = offered_rps(s, [1])
    assert base == pytest.approx(2867 / 600, rel=0.01)  # the trace's first 10 minutes
    assert offered_rps(scaled(s, 2.0), [1]) == pytest.approx(2 * base, rel=0.1)


def test_closed_loop_interactive_is_refused():
    proc = simlab("calibrate", ROOT / "scenarios" / "seed-article.toml", "--out", "/tmp/never", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "closed-loop" in proc.stderr and "seed-article.toml" in proc.stderr


def test_bad_flags(tiny, tmp_path, capsys):
    from simlab.cli import main

    for args, fragment in ((["--rates", "fast"], "--rates"), (["--rates", "0,2"], "positive rates"),
                           (["--refine", "-1"], "--refine"), (["--replications", "0"], "--replications")):
        assert main(["calibrate", str(tiny), "--out", str(tmp_path / "x"), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and fragment in err, err
