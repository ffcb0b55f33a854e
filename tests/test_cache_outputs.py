"""A cached run is reused only when it is the run asked for AND its folder holds the outputs asked for: `run --tasks
csv` after `run --tasks none` into the same --out once reused the run and wrote no per-task file while saying it did.
Each input added to a cache key has its test here (the others: tests/test_cache_key.py)."""

from __future__ import annotations

import json
from pathlib import Path

from simlab import fingerprint
from simlab.experiments import runner
from simlab.scenario import scenario_from_dict
from tests.bad_input import simlab_in

SCENARIO = """name = "outputs"
duration_ms = 3000
slo_p95_ms = 500
[backend]
kind = "slots"
slots = 2
[scheduler]
maxConcurrency = 2
batchMaxConcurrency = 1
batchMinConcurrency = 1
interactiveRpsThreshold = 5
interactiveP95LatencyMs = 500
[[workload]]
class = "interactive"
arrivals = {{ process = "poisson", rate_per_s = {rate} }}
service = {{ dist = "constant", value = 5 }}
[[workload]]
class = "batch"
arrivals = {{ process = "burst", count = 4 }}
service = {{ dist = "constant", value = 50 }}
"""
RUN = Path("runs") / "static" / "seed-1"


def run(tmp_path, out, tasks, rate=5):
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(rate=rate))
    proc = simlab_in(tmp_path, "run", scenario, "--policy", "static", "--tasks", tasks, "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out / RUN


def test_tasks_csv_after_tasks_none_writes_the_per_task_file(tmp_path):
    folder = run(tmp_path, tmp_path / "out", "none")
    assert not (folder / "tasks.csv").exists() and (folder / "series.csv").is_file()
    run(tmp_path, tmp_path / "out", "csv")
    fresh = run(tmp_path, tmp_path / "fresh", "csv")
    assert (folder / "tasks.csv").read_bytes() == (fresh / "tasks.csv").read_bytes()
    assert (folder / "series.csv").read_bytes() == (fresh / "series.csv").read_bytes()


def test_a_run_that_has_what_is_asked_is_reused(tmp_path):
    folder = run(tmp_path, tmp_path / "out", "csv")
    before = (folder / "run.json").stat().st_mtime_ns
    run(tmp_path, tmp_path / "out", "none")  # nothing more is asked: reused
    run(tmp_path, tmp_path / "out", "csv")
    assert (folder / "run.json").stat().st_mtime_ns == before
    saved = json.loads((folder / "run.json").read_text())
    assert saved["outputs"] == {"tasks_format": "csv", "files": ["tasks.csv", "series.csv"]}


def test_a_deleted_output_is_written_again(tmp_path):
    folder = run(tmp_path, tmp_path / "out", "csv")
    (folder / "tasks.csv").unlink()
    run(tmp_path, tmp_path / "out", "csv")
    assert (folder / "tasks.csv").is_file()


def test_another_format_asked_is_written(tmp_path):
    folder = run(tmp_path, tmp_path / "out", "csv")
    run(tmp_path, tmp_path / "out", "parquet")
    assert (folder / "tasks.parquet").is_file() and not (folder / "tasks.csv").exists()


def test_a_new_run_without_tasks_leaves_no_older_per_task_file(tmp_path):
    folder = run(tmp_path, tmp_path / "out", "csv", rate=5)
    run(tmp_path, tmp_path / "out", "none", rate=7)  # another scenario: run again, and tasks.csv is the old one's
    assert not (folder / "tasks.csv").exists()


def test_the_key_covers_the_library_versions(monkeypatch):
    scenario = scenario_from_dict({"name": "s", "duration_ms": 1000, "backend": {"kind": "slots", "slots": 1},
                                   "workload": [{"class": "interactive", "arrivals": {"process": "poisson",
                                                                                      "rate_per_s": 1},
                                                 "service": {"dist": "constant", "value": 1}}]})
    job = runner.Job("fifo", scenario.options("unscheduled"), 1)
    key = runner.job_key(scenario, job)
    assert "numpy " in fingerprint.library_versions() and "simpy " in fingerprint.library_versions()
    monkeypatch.setattr(fingerprint, "library_versions", lambda: "python 3.11.0, numpy 0.0")
    assert runner.job_key(scenario, job) != key
    # a tuning study's identity too, and the reason a changed one is refused says so
    old = fingerprint.identity(scenario, {})
    monkeypatch.setattr(fingerprint, "library_versions", lambda: "python 3.11.0, numpy 0.1")
    assert fingerprint.describe_changes(old, fingerprint.identity(scenario, {})) == [
        "libraries changed (python 3.11.0, numpy 0.0 -> python 3.11.0, numpy 0.1)"]
