"""The committed priority-arm results (results/reference/real-engine-priority/) are what the commands make of the
committed measurements, re-simulated from the kept runs without the engine: the FCFS control, the priority arm with
the scenario's step model, the step model refitted on the session's load test and control runs, and the priority arm
with that refit; the scenario carries the KV cache size the server logged."""

from __future__ import annotations

import json
import re
import shutil
import tomllib

import pytest

from helpers import RESULT_REL, ROOT, assert_csv_close, assert_record_close, simlab

REF = ROOT / "results" / "reference" / "real-engine-priority"
URL = "http://127.0.0.1:8031"  # the address the runs were measured at (part of each kept run's key)
PRIO = ["validate-real", ROOT / "scenarios" / "real-engine-priority.toml", "--url", URL, "--engine-priority",
        "--policies", "unscheduled,adaptive", "--repeats", "3", "--max-seconds", "400", "--no-figures",
        "--kept-runs-only"]


def backend(path):
    return tomllib.loads(path.read_text())["backend"]


def test_the_scenario_carries_the_servers_kv_cache_and_the_fcfs_scenarios_step():
    logged = int(re.fullmatch(r"kv_cache_tokens = (\d+)\n", (REF / "engine.txt").read_text()).group(1))
    prio, fcfs = backend(ROOT / "scenarios" / "real-engine-priority.toml"), backend(ROOT / "scenarios" /
                                                                                      "real-engine.toml")
    assert prio["kv_cache_tokens"] == logged and prio["scheduling"] == "priority"
    assert prio["step"] == fcfs["step"] and prio["max_num_seqs"] == fcfs["max_num_seqs"]


def kept_copy(folder, tmp_path):
    out = tmp_path / folder
    shutil.copytree(REF / folder / "measured", out / "measured")
    return out


def same_verdict(out, folder):
    # and the step model checked alone (decode steps at the measured load, by window), which only the record holds
    assert_record_close(out / "result.json", REF / folder / "result.json", ("decode", "runs"))
    verdicts = [json.loads(p.read_text()) for p in (out / "verdict.json", REF / folder / "verdict.json")]
    for v in verdicts:
        v.pop("header")  # names the scenario and calibration files as given: absolute paths here
    assert verdicts[0] == verdicts[1]


def test_the_priority_arm_is_re_simulated_from_the_kept_runs(tmp_path):
    out = kept_copy("validate-real", tmp_path)
    proc = simlab(*PRIO, "--out", out)
    assert "measuring" not in proc.stdout and proc.stdout.count("kept from") == 6
    assert_csv_close(out / "summary.csv", REF / "validate-real" / "summary.csv")
    same_verdict(out, "validate-real")


def test_the_fcfs_control_is_re_simulated_from_the_kept_runs(tmp_path):
    out = kept_copy("fcfs-control", tmp_path)
    proc = simlab("validate-real", ROOT / "scenarios" / "real-engine.toml", "--url", URL, "--policies", "unscheduled",
                  "--repeats", "4", "--max-seconds", "400", "--no-figures", "--kept-runs-only", "--out", out)
    assert proc.stdout.count("kept from") == 4
    assert_csv_close(out / "summary.csv", REF / "fcfs-control" / "summary.csv")
    same_verdict(out, "fcfs-control")


def test_the_session_refit_and_the_recalibrated_priority_arm(tmp_path):
    """The step model refitted on the session's load test and FCFS control runs (never the priority arm's), and
    the priority arm re-simulated with it."""
    runs = sorted((REF / "fcfs-control" / "measured").glob("unscheduled-run*.csv"))
    assert len(runs) == 4
    simlab("calibrate-gpu", REF / "loadtest" / "loadtest.csv", "--open-loop", *runs, "--max-num-seqs", "16",
           "--out", tmp_path / "cal", "--no-figures")
    fresh = tomllib.loads((tmp_path / "cal" / "step.toml").read_text())["backend"]["step"]
    assert fresh == pytest.approx(backend(REF / "calibration" / "step.toml")["step"], rel=RESULT_REL)
    out = kept_copy("validate-real-recalibrated", tmp_path)
    simlab(*PRIO, "--calibration", REF / "calibration" / "step.toml", "--out", out)
    assert_csv_close(out / "summary.csv", REF / "validate-real-recalibrated" / "summary.csv")
    same_verdict(out, "validate-real-recalibrated")


@pytest.mark.parametrize("folder", ["validate-real", "validate-real-recalibrated", "fcfs-control"])
def test_every_output_is_rendered_from_the_committed_record(folder):
    from simlab import records
    from simlab.store import csv_text
    from simlab.reporting.blocks import validate_real as blocks
    from simlab.reporting.markdown import render_markdown

    here = REF / folder
    record = records.load(here / "result.json", "validate-real")
    assert record.engine_priority == (folder != "fcfs-control")
    assert render_markdown(blocks.document(record, here), here) == (here / "report.md").read_text()
    assert csv_text(blocks.summary_rows(record), blocks.SUMMARY_COLUMNS) == (here / "summary.csv").read_text()
