"""`simlab fit`: reading logs, fitting arrivals and lengths, the written scenario and its validation."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, simlab
from simlab.calibration.fit import fit_arrivals, fit_lengths, fit_log
from simlab.calibration.logs import read_log
from simlab.calibration.scenario_writer import write_scenario
from simlab.calibration.validate import validate
from simlab.errors import InputError
from simlab.scenario import load_scenario

AZURE = ROOT / "scenarios" / "traces" / "azure-llm-2023-conv.csv"
MALFORMED = ROOT / "tests" / "malformed" / "fit"


def write_log(path: Path, times_ms, kinds=None, seed: int = 0, service: bool = False) -> Path:
    """A generic log: arrival_ms, kind, prompt_tokens, output_tokens (lognormal), optional service_ms."""
    rng = np.random.default_rng(seed)
    n = len(times_ms)
    kinds = kinds if kinds is not None else ["interactive"] * n
    prompt = np.maximum(1, np.rint(rng.lognormal(6.0, 0.9, n))).astype(int)
    output = np.maximum(1, np.rint(rng.lognormal(4.5, 0.7, n))).astype(int)
    svc = rng.lognormal(np.log(500), 0.5, n)
    head = "id,kind,arrival_ms,prompt_tokens,output_tokens" + (",service_ms" if service else "")
    rows = [head]
    for i in range(n):
        rows.append(f"r{i},{kinds[i]},{times_ms[i]:.3f},{prompt[i]},{output[i]}" + (f",{svc[i]:.1f}" if service else ""))
    path.write_text("\n".join(rows) + "\n")
    return path


def poisson_times(rate_per_s: float, duration_ms: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1000.0 / rate_per_s, int(rate_per_s * duration_ms / 1000 * 1.3) + 50))
    return t[t < duration_ms]


def hyperexponential_times(n: int, seed: int) -> np.ndarray:
    """Bursty renewal arrivals: 90% short gaps (20 ms), 10% long gaps (1.8 s); CV about 3.9."""
    rng = np.random.default_rng(seed)
    long = rng.random(n) < 0.1
    gaps = np.where(long, rng.exponential(1800.0, n), rng.exponential(20.0, n))
    return np.cumsum(gaps)


# --- the acceptance numbers on the real Azure conversation trace --------------------------------------------
@pytest.fixture(scope="module")
def azure_fit():
    return fit_log(read_log(AZURE))


def test_azure_rate_cv_and_token_medians(azure_fit):
    a = azure_fit.arrivals["interactive"]
    assert azure_fit.log.layout == "azure"
    assert a.n == 19_366
    assert 5.3 <= a.rate_per_s <= 5.7
    assert 1.0 <= a.cv <= 1.2
    lengths = azure_fit.lengths["interactive"]
    assert lengths["prompt_tokens"].quantiles[0.5] == pytest.approx(1020, rel=0.05)
    assert lengths["output_tokens"].quantiles[0.5] == pytest.approx(129, rel=0.05)
    # the rate drifts over the hour, so the scenario uses a piecewise process
    assert a.rate_constant.rejected and a.process == "piecewise"
    # a constant-rate Poisson process is rejected (CV 1.09 over 19k gaps is far from 1)
    assert a.poisson_rejected
    # lognormal fitted by scipy with floc=0: its median is the scale
    lf = lengths["output_tokens"]
    assert lf.sigma > 0 and lf.median > 0 and lf.p95 > lf.median


def test_azure_cli_end_to_end(tmp_path):
    out = tmp_path / "azure"
    proc = simlab("fit", AZURE, "--out", out, "--validate-seeds", "3", "--no-figures")
    assert re.search(r"^mean rate +5\.530 req/s$", proc.stdout, re.M)
    assert re.search(r"^inter-arrival CV +1\.094 \(Poisson: 1\)$", proc.stdout, re.M)
    fit = json.loads((out / "fit.json").read_text())
    a = fit["classes"]["interactive"]["arrivals"]
    assert 5.3 <= a["rate_per_s"] <= 5.7 and 1.0 <= a["interarrival_cv"] <= 1.2
    assert fit["classes"]["interactive"]["prompt_tokens"]["quantiles"]["p50"] == pytest.approx(1020, rel=0.05)
    scenario = load_scenario(out / "scenario.toml")
    assert scenario.workload[0].arrivals.process == "piecewise"
    # simulated, the fitted scenario reproduces the log's per-bin rates, CV and token quantiles
    v = fit["validation"]
    assert v["passed"] == {"rates": True, "cv": True, "quantiles": True}, v["checks"]
    assert "## Validation" in (out / "report.md").read_text()
    assert (out / "validation.csv").read_text().startswith("kind,quantity,observed")


# --- burstiness and the Poisson tests ----------------------------------------------------------------------
def test_poisson_log_is_not_rejected():
    t = poisson_times(5.0, 1_200_000, seed=11)
    a = fit_arrivals(t, t.max(), 60_000.0)
    assert a.cv == pytest.approx(1.0, abs=0.05)
    assert not a.poisson_rejected
    assert not a.poisson_per_bin_rejected
    assert a.process == "poisson"


def test_bursty_log_is_rejected_and_has_high_cv():
    t = hyperexponential_times(4000, seed=5)
    a = fit_arrivals(t, t.max(), 60_000.0)
    assert a.cv > 1.5
    assert a.poisson_rejected and a.poisson_constant.p_value < 1e-6
    assert a.poisson_per_bin_rejected


def test_timestamps_in_whole_seconds_are_spread_before_the_tests(tmp_path):
    # Poisson at 3 req/s written to whole seconds: many ties, still Poisson
    t = np.floor(poisson_times(3.0, 1_800_000, seed=3) / 1000)
    path = tmp_path / "seconds.csv"
    path.write_text("Timestamp,Request tokens,Response tokens\n" + "".join(f"{int(x)},100,20\n" for x in t))
    log = read_log(path)
    assert log.layout == "burstgpt" and log.resolution_ms == 1000.0
    a = fit_log(log).arrivals["interactive"]
    assert a.jittered and not a.poisson_rejected
    assert a.rate_per_s == pytest.approx(3.0, rel=0.1)


def test_microsecond_and_nanosecond_timestamps(tmp_path):
    # pandas picks the datetime unit from the text; spans must come out in ms either way
    for digits, name in ((6, "us.csv"), (7, "ns.csv"), (0, "s.csv")):
        stamps = ["2024-05-10 00:00:00", "2024-05-10 01:00:00", "2024-05-11 00:00:00"]
        if digits:
            stamps = [f"{s}.{'1' * digits}" for s in stamps]
        path = tmp_path / name
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{s},10,5\n" for s in stamps))
        log = read_log(path)
        assert log.span_ms == pytest.approx(86_400_000.0), name
        assert log.frame["arrival_ms"].tolist() == pytest.approx([0.0, 3_600_000.0, 86_400_000.0])
    assert log.resolution_ms == 1000.0


def test_workload_arrays_are_the_engines_draws(tmp_path):
    from simlab.calibration.validate import workload_arrays
    from simlab.world.workloads import open_loop_tasks

    t = poisson_times(2.0, 300_000, seed=12)
    fit = fit_log(read_log(write_log(tmp_path / "log.csv", t)), dist="empirical")
    s = load_scenario(write_scenario(fit, tmp_path / "out")[0])
    arrays = workload_arrays(s, 7)["interactive"]
    tasks = open_loop_tasks(s, 7)
    assert arrays["arrival_ms"].tolist() == [x.arrival_ms for x in tasks]
    assert arrays["prompt_tokens"].tolist() == [x.prompt_tokens for x in tasks]
    assert arrays["output_tokens"].tolist() == [x.output_tokens for x in tasks]


# --- lengths ------------------------------------------------------------------------------------------------
def test_lognormal_is_fitted_and_kept_when_it_fits():
    x = np.random.default_rng(2).lognormal(np.log(800), 0.6, 3000)
    f = fit_lengths(x, "service_ms")
    assert f.median == pytest.approx(800, rel=0.05) and f.sigma == pytest.approx(0.6, rel=0.05)
    assert f.choice == "lognormal" and not f.ks.rejected


def test_empirical_is_chosen_when_lognormal_is_rejected():
    x = np.concatenate([np.full(500, 100.0), np.full(500, 4000.0)])
    f = fit_lengths(x, "prompt_tokens")
    assert f.ks.rejected and f.choice == "empirical"


# --- classes, mappings, JSONL, the written scenario and its validation ----------------------------------------
def test_two_classes_fitted_scenario_reproduces_the_log(tmp_path):
    ti = poisson_times(3.0, 900_000, seed=1)
    tb = hyperexponential_times(1500, seed=2)
    tb = tb[tb < 900_000]
    times = np.concatenate([ti, tb])
    kinds = ["interactive"] * len(ti) + ["batch"] * len(tb)
    order = np.argsort(times)
    log_path = write_log(tmp_path / "two.csv", times[order], [kinds[i] for i in order], service=True)
    fit = fit_log(read_log(log_path))
    assert set(fit.arrivals) == {"interactive", "batch"}
    assert set(fit.lengths["batch"]) == {"prompt_tokens", "output_tokens", "service_ms"}
    path, _ = write_scenario(fit, tmp_path / "out")
    scenario = load_scenario(path)
    assert [w.kind for w in scenario.workload] == ["interactive", "batch"]
    assert scenario.workload[0].service is not None
    val = validate(fit, scenario, [1, 2, 3])
    assert val.passed["quantiles"], [c for c in val.checks if not c.ok]
    rates = [c for c in val.checks if c.quantity in ("bin_rate", "total_rate")]
    assert all(c.ok for c in rates if c.kind == "interactive"), rates
    cv = {c.kind: c for c in val.checks if c.quantity == "cv"}
    assert cv["interactive"].ok
    # bursts shorter than any step with 10+ requests: no piecewise Poisson process can copy them, so the batch
    # class replays the log's own arrivals block-bootstrapped, which keeps the CV. Its rates are judged against
    # its own resampling variability (KS on the per-bin counts, the seeds' spread of totals), not Poisson tests.
    assert scenario.workload[1].arrivals.process == "resampled"
    assert fit.arrivals["batch"].cv > 3 and cv["batch"].ok and val.passed["cv"]
    batch_rates = [c for c in rates if c.kind == "batch"]
    assert len(batch_rates) == 2 and all(c.method == "resampled" for c in batch_rates)
    assert all(c.ok for c in batch_rates), batch_rates
    assert val.passed["rates"]


def test_mapped_columns_units_and_class_labels(tmp_path):
    t = poisson_times(2.0, 600_000, seed=4) / 1000.0  # seconds
    rows = ["ts_s,queue,in_tok,out_tok,lat_s"]
    for i, x in enumerate(t):
        rows.append(f"{x:.4f},{'chat' if i % 4 else 'offline'},{100 + i % 50},{20 + i % 7},{0.5 + (i % 10) / 10}")
    path = tmp_path / "custom.csv"
    path.write_text("\n".join(rows) + "\n")
    log = read_log(path, "arrival=ts_s:s,class=queue,prompt_tokens=in_tok,output_tokens=out_tok,service_ms=lat_s:s",
                   "chat=interactive,offline=batch")
    assert log.span_ms == pytest.approx((t.max() - t.min()) * 1000, rel=1e-6)
    assert log.frame["service_ms"].min() == pytest.approx(500)
    assert set(log.kinds()) == {"interactive", "batch"}


def test_jsonl_mooncake_layout(tmp_path):
    t = poisson_times(4.0, 300_000, seed=9)
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": int(x), "input_length": 500 + i % 300, "output_length": 50 + i % 20,
                                        "hash_ids": [1, 2]}) + "\n" for i, x in enumerate(t)))
    log = read_log(path)
    assert log.layout == "mooncake" and len(log.frame) == len(t)
    assert log.frame["arrival_ms"].iloc[-1] == pytest.approx(int(t[-1]) - int(t[0]))


def test_template_world_is_copied(tmp_path):
    t = poisson_times(2.0, 300_000, seed=7)
    fit = fit_log(read_log(write_log(tmp_path / "log.csv", t)))
    path, _ = write_scenario(fit, tmp_path / "out", template=ROOT / "scenarios" / "nightly-backfill.toml")
    s = load_scenario(path)
    assert s.backend.kind == "slots" and s.backend.slots == 24 and s.slo_p95_ms == 4000
    assert s.options().max_concurrency == 24


def test_fit_report_figures(tmp_path):
    t = poisson_times(3.0, 600_000, seed=8)
    log_path = write_log(tmp_path / "small.csv", t)
    out = tmp_path / "fit"
    simlab("fit", log_path, "--out", out, "--validate-seeds", "2", "--bin", "1min")
    names = sorted(p.name for p in (out / "figures").iterdir())
    assert names == sorted(f"{n}.{ext}" for n in ("arrivals-interactive", "lengths-interactive", "validation-lengths",
                                                  "validation-rates") for ext in ("png", "svg"))
    report = (out / "report.md").read_text()
    assert "figures/arrivals-interactive.png" in report and "figures/validation-rates.png" in report
    assert len(json.loads((out / "fit.json").read_text())["classes"]["interactive"]["arrivals"]["bins"]) == 10


# --- bad input: one message naming the file, exit 2, no traceback -----------------------------------------
@pytest.mark.parametrize("name, fragment", [
    ("empty.csv", "empty file"),
    ("header-only.csv", "no requests"),
    ("bad-timestamp.csv", "line 4: TIMESTAMP '2023-11-16 25:61:51.2224670' is not a timestamp"),
    ("non-numeric-time.csv", "line 4: timestamp 'soon' is not a number"),
    ("unknown-class.csv", "line 4: class column 'kind': 'interactve'"),
    ("too-few-rows.csv", "only 5 request(s): at least 20"),
    ("no-arrival-column.csv", "no arrival time column"),
    ("negative-tokens.csv", "line 3: prompt_tokens '-120'"),
    ("bad-line.jsonl", "line 2: not valid JSON"),
    ("one-token-column.csv", "no output_tokens"),
])
def test_bad_logs_exit_2(tmp_path, name, fragment):
    proc = simlab("fit", MALFORMED / name, "--out", tmp_path / "out", check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {MALFORMED / name}")
    assert fragment in proc.stderr


def test_bad_flags_exit_2(tmp_path):
    for args, fragment in ((["--map", "arival=TIMESTAMP"], "unknown role 'arival'"),
                           (["--map", "arrival=Nope"], "no column 'Nope'"),
                           (["--bin", "fortnight"], "is not a duration"),
                           (["--classes", "chat=interactiv"], "is not interactive or batch")):
        proc = simlab("fit", AZURE, "--out", tmp_path / "o", *args, check=False)
        assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_fit_errors_are_input_errors():
    with pytest.raises(InputError, match="at least 20"):
        fit_arrivals(np.arange(5) * 100.0, 500.0, 100.0)
    with pytest.raises(InputError, match="at least 20"):
        fit_lengths(np.ones(3), "prompt_tokens")
    assert math.isfinite(fit_arrivals(np.arange(40) * 100.0, 3900.0, 1000.0).cv)
