"""The committed real-engine results (results/reference/real-engine/) are what the commands make of the committed
measurements: the calibration is refitted from the kept load tests and open-loop runs, the scenario carries it,
and the validation's comparison is re-simulated from the kept runs (no server needed), table for table."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from helpers import RESULT_REL, ROOT, assert_csv_close, assert_record_close, simlab

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
    # as scripts/real-engine-results.sh ran it; --kept-runs-only: every run must be kept (its key matching the
    # workload, options, server address and limits of this command), and the server is never contacted
    proc = simlab("validate-real", ROOT / "scenarios" / "real-engine.toml", "--url", "http://127.0.0.1:8011",
                  "--repeats", "4", "--node-policies", "adaptive", "--max-seconds", "400", "--out", out,
                  "--no-figures", "--kept-runs-only", "--calibration", REF / "calibration" / "step.toml")
    assert "measuring" not in proc.stdout and proc.stdout.count("kept from") == 16
    assert_csv_close(out / "summary.csv", REF / "validate-real" / "summary.csv")
    # the step model checked alone (decode steps at the measured load, by window): in the record, not the summary
    assert_record_close(out / "result.json", REF / "validate-real" / "result.json", ("decode", "runs"))
    verdicts = [json.loads(p.read_text()) for p in (out / "verdict.json", REF / "validate-real" / "verdict.json")]
    for v in verdicts:
        v.pop("header")  # names the calibration file as given: an absolute path here
    assert verdicts[0] == verdicts[1]


@pytest.mark.parametrize("folder", ["validate-real", "open-loop-a", "open-loop-b"])
def test_every_output_is_rendered_from_the_committed_record(folder):
    """result.json loads back as the record, and report.md, summary.csv and verdict.json are what the renderers
    make of it: the record is the one source of every number in them."""
    from simlab import records
    from simlab.store import csv_text
    from simlab.reporting.blocks import validate_real as blocks
    from simlab.reporting.markdown import render_markdown

    here = REF / folder
    record = records.load(here / "result.json", "validate-real")
    assert render_markdown(blocks.document(record, here), here) == (here / "report.md").read_text()
    assert csv_text(blocks.summary_rows(record), blocks.SUMMARY_COLUMNS) == (here / "summary.csv").read_text()
    assert json.dumps(blocks.verdict_json(record), indent=1) + "\n" == (here / "verdict.json").read_text()


def test_the_review_page_names_a_validate_real_folder_it_does_not_render(tmp_path):
    proc = simlab("report", REF / "validate-real", "--out", tmp_path / "page", check=False)
    assert proc.returncode == 2 and "a simlab validate-real result; `simlab report` renders" in proc.stderr
