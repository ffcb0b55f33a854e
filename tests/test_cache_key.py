"""A cache that cannot lie: cached runs and tuning studies are keyed on the bytes of every input file, the
settings and simlab's code, so editing a trace or a lengths file (or the code) never brings old numbers back."""

from __future__ import annotations

import contextlib
import csv
import json
import sqlite3
from pathlib import Path

import pytest

from simlab import fingerprint
from simlab.experiments import runner
from simlab.scenario import load_scenario
from tests.helpers import simlab

SCENARIO = """
name = "cache-key"
duration_ms = 6_000
slo_p95_ms = 2_000

[backend]
kind = "slots"
slots = 4
token_time = {{ base_ms = 20, per_prompt_token_ms = 0.05, per_output_token_ms = 2 }}

[scheduler]
maxConcurrency = 4
batchMaxConcurrency = 3
batchMinConcurrency = 1
interactiveRpsThreshold = 20
interactiveP95LatencyMs = 1_000

[[workload]]
name = "chat"
class = "interactive"
arrivals = {{ process = "trace", file = "chat.csv" }}

[[workload]]
name = "backfill"
class = "batch"
arrivals = {{ process = "burst", count = 40, at_ms = 0 }}
prompt_tokens = {{ dist = "empirical", file = "lengths.csv", column = "prompt" }}
output_tokens = {{ dist = "empirical", file = "lengths.csv", column = "output" }}

[experiment]
seed = 1
replications = 2
policies = ["priority", "static"]
{extra}
"""


def write_inputs(folder: Path, output_scale: int = 1, service_scale: float = 1.0, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["id,kind,arrival_ms,service_ms"] + [
        f"q{i},interactive,{i * 150},{(80 + 37 * (i % 7)) * service_scale}" for i in range(40)
    ]
    (folder / "chat.csv").write_text("\n".join(rows) + "\n")
    lengths = ["prompt,output"] + [f"{200 + 50 * i},{(40 + 10 * i) * output_scale}" for i in range(10)]
    (folder / "lengths.csv").write_text("\n".join(lengths) + "\n")
    path = folder / "cache-key.toml"
    path.write_text(SCENARIO.format(extra=extra))
    return path


def summary(out: Path) -> dict[tuple, dict]:
    with (out / "summary.csv").open(newline="") as f:
        return {(r["policy"], r["seed"]): r for r in csv.DictReader(f)}


def ab(scenario: Path, out: Path):
    return simlab("ab", scenario, "--out", out, "--quiet", "--no-figures")


def test_editing_input_files_between_two_runs_into_the_same_out_changes_the_results(tmp_path):
    scenario = write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    ab(scenario, out)
    first = summary(out)

    # every output length x5: batch throughput must move (it stayed to the last digit before the fix)
    write_inputs(tmp_path / "in", output_scale=5)
    ab(scenario, out)
    second = summary(out)
    fresh = tmp_path / "fresh"
    ab(scenario, fresh)
    assert second == summary(fresh)  # the same numbers as a run into a new folder
    for key in first:
        assert float(second[key]["batch_throughput_per_min"]) < float(first[key]["batch_throughput_per_min"])

    # the trace's service times doubled: interactive latencies move
    write_inputs(tmp_path / "in", output_scale=5, service_scale=2.0)
    ab(scenario, out)
    third = summary(out)
    for key in first:
        assert float(third[key]["interactive_p50_ms"]) > float(second[key]["interactive_p50_ms"])


def test_unchanged_inputs_reuse_the_cached_runs(tmp_path):
    scenario = write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    ab(scenario, out)
    marker = out / "runs" / "static" / "seed-1" / "run.json"
    before = marker.stat().st_mtime_ns
    ab(scenario, out)
    assert marker.stat().st_mtime_ns == before  # loaded, not run again


def test_key_covers_files_settings_options_seed_variant_and_code(tmp_path, monkeypatch):
    path = write_inputs(tmp_path / "in")
    scenario = load_scenario(path)
    options = scenario.options("static")
    job = runner.Job("static", options, 1)
    key = runner.job_key(scenario, job)
    assert runner.job_key(scenario, runner.Job("static", options, 2)) != key
    assert runner.job_key(scenario, runner.Job("static", options, 1, "no-batch")) != key
    assert runner.job_key(scenario, runner.Job("static", options.with_changes(batch_max_concurrency=2), 1)) != key
    assert runner.job_key(scenario.model_copy(update={"slo_p95_ms": 1_000.0}), job) != key
    # where the scenario was loaded from does not matter, only the bytes
    monkeypatch.chdir(tmp_path)
    assert runner.job_key(load_scenario("in/cache-key.toml"), job) == key
    # a file's bytes
    (tmp_path / "in" / "lengths.csv").write_text("prompt,output\n1,2\n")
    assert runner.job_key(scenario, job) != key
    write_inputs(tmp_path / "in")
    assert runner.job_key(scenario, job) == key
    # the code
    monkeypatch.setattr(fingerprint, "code_fingerprint", lambda: "another-simlab")
    assert runner.job_key(scenario, job) != key


def test_a_code_change_invalidates_the_cache(tmp_path, monkeypatch):
    scenario = load_scenario(write_inputs(tmp_path / "in"))
    job = runner.Job("static", scenario.options("static"), 1)
    runs = []
    real = runner.Engine

    class Counting(real):
        def run(self):
            runs.append(1)
            return super().run()

    monkeypatch.setattr(runner, "Engine", Counting)
    out = tmp_path / "out"
    runner.execute(scenario, job, out)
    runner.execute(scenario, job, out)
    assert len(runs) == 1  # cached
    monkeypatch.setattr(fingerprint, "code_fingerprint", lambda: "fixed-code")
    runner.execute(scenario, job, out)
    assert len(runs) == 2  # the old run.json no longer matches
    saved = json.loads((out / "runs" / "static" / "seed-1" / "run.json").read_text())
    assert saved["key"] == runner.job_key(scenario, job)


def test_code_fingerprint_covers_every_source_file():
    import simlab

    root = Path(simlab.__file__).parent
    assert len(list(root.rglob("*.py"))) > 20
    assert fingerprint.code_fingerprint() == fingerprint.code_fingerprint()


def test_scenario_files_finds_traces_distributions_and_profiles(tmp_path):
    scenario = load_scenario(write_inputs(tmp_path / "in"))
    assert fingerprint.scenario_files(scenario) == {
        "workload[0].arrivals.file": "chat.csv",
        "workload[1].prompt_tokens.file": "lengths.csv",
        "workload[1].output_tokens.file": "lengths.csv",
    }
    eval_sweep = load_scenario(Path(__file__).parents[1] / "scenarios" / "eval-sweep.toml")
    if eval_sweep.backend.step is not None and eval_sweep.backend.step.profile:
        assert "backend.step.profile" in fingerprint.scenario_files(eval_sweep)


TUNE = """
[tune]
trials = 4
seeds = 2
holdout_seeds = 2
batch_size = 2
"""


def test_tune_refuses_to_resume_a_study_whose_inputs_changed(tmp_path):
    scenario = write_inputs(tmp_path / "in", extra=TUNE)
    out = tmp_path / "tune"
    simlab("tune", scenario, "--out", out, "--quiet")
    db = out / "study.db"
    with contextlib.closing(sqlite3.connect(db)) as con:
        trials = con.execute("select count(*) from trials").fetchone()[0]
    # a finished tune leaves the study in one file, its write-ahead log folded in
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("study.db")) == ["study.db"]
    snapshot = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "study.db"}
    db_bytes = db.read_bytes()

    write_inputs(tmp_path / "in", output_scale=5, extra=TUNE)
    proc = simlab("tune", scenario, "--out", out, "--quiet", "--trials", "6", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot be resumed" in proc.stderr and "lengths.csv" in proc.stderr, proc.stderr
    assert "Nothing was changed" in proc.stderr
    assert db.read_bytes() == db_bytes
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "study.db"} == snapshot

    # a settings change is named as such
    write_inputs(tmp_path / "in", extra=TUNE + "throughput_fraction = 0.5\n")
    proc = simlab("tune", scenario, "--out", out, "--quiet", check=False)
    assert proc.returncode == 2 and "scenario settings" in proc.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from trials").fetchone()[0] == trials

    # restored inputs resume the study
    write_inputs(tmp_path / "in", extra=TUNE)
    simlab("tune", scenario, "--out", out, "--quiet", "--trials", "6")


def test_describe_changes_names_the_file_and_the_code():
    old = {"simlab_inputs": json.dumps({"workload[0].arrivals.file (a.csv)": "aa"}), "simlab_code": "c1",
           "simlab_settings": "s"}
    new = {"simlab_inputs": json.dumps({"workload[0].arrivals.file (a.csv)": "bb"}), "simlab_code": "c2",
           "simlab_settings": "s"}
    text = "; ".join(fingerprint.describe_changes(old, new))
    assert "input file changed: workload[0].arrivals.file (a.csv)" in text and "code changed" in text
    assert fingerprint.describe_changes(old, old) == []
