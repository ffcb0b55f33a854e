"""The committed real-engine results (results/reference/real-engine/) are what the commands make of the committed
measurements: the calibration is refitted from the kept load tests and open-loop runs, the scenario carries it,
and the validation's comparison is re-simulated from the kept runs (no server needed), table for table."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from helpers import RESULT_REL, ROOT, assert_csv_close, simlab

REF = ROOT / "results" / "reference" / "real-engine"


def step(path: Path) -> dict:
    data = tomllib.loads(path.read_text())
    return data["backend"]["step"]


def test_the_scenario_carries_the_committed_calibration():
    assert step(ROOT / "scenarios" / "real-engine.toml") == step(REF / "calibration" / "step.toml")


def test_the_calibration_is_refitted_from_the_kept_measurements(tmp_path):
    runs = sorted(REF.glob("open-loop-*/measured/*-run1.csv"))
    assert len(runs) == 6
    simlab("calibrate-gpu", REF / "loadtest-a" / "loadtest.csv", REF / "loadtest-b" / "loadtest.csv",
           "--open-loop", *runs, "--out", tmp_path / "cal", "--no-figures")
    # a fit: committed at 6 significant digits, compared within one unit of the 6th (another CPU's BLAS may
    # land a digit on the other side of a rounding boundary)
    assert step(tmp_path / "cal" / "step.toml") == pytest.approx(step(REF / "calibration" / "step.toml"), rel=RESULT_REL)
    for name in ("open-loop.csv", "fit.csv", "join-cost.csv"):
        assert_csv_close(tmp_path / "cal" / name, REF / "calibration" / name)


def test_the_validation_is_re_simulated_from_the_kept_runs(tmp_path):
    out = tmp_path / "validate-real"
    shutil.copytree(REF / "validate-real" / "measured", out / "measured")
    shutil.copy(REF / "validate-real" / "tasks.csv", out / "tasks.csv")
    proc = simlab("validate-real", ROOT / "scenarios" / "real-engine.toml", "--url", "http://127.0.0.1:8011",
                  "--repeats", "4", "--node-policies", "adaptive", "--out", out, "--no-figures",
                  "--calibration", REF / "calibration" / "step.toml")
    assert "measuring" not in proc.stdout  # every run kept: nothing was sent to a server
    assert_csv_close(out / "summary.csv", REF / "validate-real" / "summary.csv")
