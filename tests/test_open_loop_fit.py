"""The open-loop refit of the step model: on records the simulator itself produced with known step parameters,
it recovers them from a load-test fit that had them wrong; bad record files are named, row and field."""

from __future__ import annotations

import dataclasses

import pytest

from simlab.calibration.gpu import Row, fit_gpu
from simlab.calibration.openloop import read_runs, refit
from simlab.errors import InputError
from simlab.realcheck.drive import scenario_tasks, simulate
from simlab.realcheck.measures import RECORD_COLUMNS
from simlab.scenario import load_scenario

TRUE = {"base_ms": 3.0, "per_token_ms": 0.05, "per_seq_ms": 2.5, "request_ms": 0.0, "admit_ms": 12.0}


def simulated_runs(seed: int) -> dict[str, list[dict]]:
    scenario = load_scenario("scenarios/real-engine.toml")
    step = scenario.backend.step.model_copy(update=TRUE)
    scenario = scenario.model_copy(update={"backend": scenario.backend.model_copy(update={"step": step})})
    tasks = scenario_tasks(scenario, seed)
    return {p: simulate(scenario, scenario.options(p), tasks, seed) for p in ("unscheduled", "static", "adaptive")}


def load_test_fit(admit_ms: float):
    """A fit of a load-test table made from the model with every parameter true but admit_ms."""
    truth = dict(TRUE, admit_ms=admit_ms)
    theta = [truth[k] for k in ("base_ms", "per_token_ms", "per_seq_ms", "request_ms", "admit_ms")]
    rows = []
    for c in (1, 2, 4, 8, 12, 16):
        for p in (32, 1024):
            for o in (16, 64):
                for kind in ("tpot", "ttft", "latency"):
                    r = Row(f"{c}/{p}/{o}", kind, c, p, o, 0.0)
                    r.value = r.predict(__import__("numpy").array(theta))
                    rows.append(r)
    return fit_gpu(rows)


def test_refit_recovers_the_admission_cost_the_load_test_missed():
    fit = load_test_fit(admit_ms=3.0)
    assert fit.admit_ms == pytest.approx(3.0, rel=1e-3)  # the load-test fit reproduces its own table
    new, report = refit(fit, simulated_runs(7), max_num_seqs=16)
    assert new.admit_ms == pytest.approx(TRUE["admit_ms"], rel=0.10)
    assert new.per_seq_ms == pytest.approx(TRUE["per_seq_ms"], rel=0.05)
    assert new.base_ms == pytest.approx(TRUE["base_ms"], abs=1.0)
    assert (new.per_token_ms, new.request_ms) == (fit.per_token_ms, fit.request_ms)  # kept
    assert report.mean_abs_error_after < 0.03 < report.mean_abs_error_before
    assert all(r.error_refitted == pytest.approx(0.0, abs=0.03) and r.error_load_test_fit < -0.02 for r in report.runs)
    assert {r.run for r in report.runs} == {"unscheduled", "static", "adaptive"}
    assert new.profile == [] and new.notes[-1] == "open-loop-refit"
    # the load-test rows are now predicted with the refitted admission cost: no longer exact
    assert new.mean_rel_error > fit.mean_rel_error


def test_refit_needs_enough_requests():
    fit = load_test_fit(admit_ms=3.0)
    with pytest.raises(InputError, match="at least 20"):
        refit(fit, {"empty": []}, max_num_seqs=16)


def write(path, rows):
    path.write_text(",".join(RECORD_COLUMNS) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


GOOD = ("b1", "batch", 100, 20, 0.0, 5.0, 50.0, 400.0, "ok")


@pytest.mark.parametrize("column, value, where, what", [
    ("kind", "chat", "line 3, kind", "interactive or batch"),
    ("output_tokens", "x", "line 3, output_tokens", "whole number"),
    ("ttft_ms", "soon", "line 3, ttft_ms", "time in ms"),
    ("end_ms", "", "line 3, end_ms", "needs every time"),
    ("end_ms", 10.0, "line 3", "first token <= end"),
])
def test_bad_records_are_named_by_file_line_and_field(tmp_path, column, value, where, what):
    row = list(GOOD)
    row[RECORD_COLUMNS.index(column)] = value
    path = write(tmp_path / "run.csv", [GOOD, row])
    with pytest.raises(InputError) as err:
        read_runs([path])
    assert err.value.source == str(path) and err.value.where == where and what in err.value.message


def test_records_need_their_columns(tmp_path):
    path = tmp_path / "run.csv"
    path.write_text("id,kind\nx,batch\n")
    with pytest.raises(InputError, match="missing column"):
        read_runs([path])


def test_calibrate_gpu_open_loop_cli(tmp_path):
    """`simlab calibrate-gpu TABLE --open-loop RUN.csv ...`: the snippet carries the refitted step, the report
    both fits and the per-run errors; a bad records file exits 2 naming it, nothing half-written."""
    import csv
    import tomllib

    from helpers import simlab
    from simlab.store import csv_text

    table = tmp_path / "loadtest.csv"
    fit = load_test_fit(admit_ms=3.0)
    with open(table, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["batch_size", "prompt_tokens", "output_tokens", "tpot_ms", "ttft_ms", "latency_ms"])
        by = {}
        for r in fit.rows:
            by.setdefault((r.c, r.p, r.o), {})[r.kind] = r.value
        for (c, p, o), v in by.items():
            w.writerow([c, p, o, v["tpot"], v["ttft"], v["latency"]])
    runs = []
    for name, recs in simulated_runs(11).items():
        runs.append(tmp_path / "measured" / f"{name}-run1.csv")
        runs[-1].parent.mkdir(exist_ok=True)
        runs[-1].write_text(csv_text(recs, RECORD_COLUMNS))
    out = tmp_path / "cal"
    proc = simlab("calibrate-gpu", table, "--open-loop", *runs, "--out", out, "--no-figures")
    assert "load test(s) alone" in proc.stdout and "unscheduled-run1.csv" in proc.stdout
    step = tomllib.loads((out / "step.toml").read_text())["backend"]["step"]
    assert step["admit_ms"] == pytest.approx(TRUE["admit_ms"], rel=0.10)
    assert step["per_token_ms"] == pytest.approx(TRUE["per_token_ms"], rel=1e-3)
    report = (out / "report.md").read_text()
    assert "## Refitted on open-loop traffic" in report and "| adaptive-run1.csv |" in report
    assert len(list(csv.DictReader(open(out / "open-loop.csv")))) == 3
    assert not (out / "step-profile.csv").exists()  # the load test's profile does not belong to the refit

    bad = tmp_path / "bad.csv"
    bad.write_text(runs[0].read_text().replace("batch", "bulk", 1))
    proc = simlab("calibrate-gpu", table, "--open-loop", bad, "--out", tmp_path / "o2", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {bad}: line ") and "kind" in proc.stderr
    assert not (tmp_path / "o2").exists()
