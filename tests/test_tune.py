"""`simlab tune` end to end: reproducible whatever the workers, resumable after kill -9, clear errors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, sigint_as_a_terminal_gives_it, simlab

SMALL = """
name = "tune-small"
duration_ms = 30_000
slo_p95_ms = 800

[backend]
kind = "slots"
slots = 8

[scheduler]
maxConcurrency = 8
batchMaxConcurrency = 6
batchMinConcurrency = 1
interactiveRpsThreshold = 20
interactiveP95LatencyMs = 500

[[workload]]
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 12 }
service = { dist = "lognormal", median = 150, p95 = 600 }

[[workload]]
class = "batch"
arrivals = { process = "burst", count = 300, at_ms = [0, 10000] }
service = { dist = "exponential", mean = 600 }

[tune]
trials = 10
seeds = 2
holdout_seeds = 3
batch_size = 4
"""

OUTPUTS = ("trials.csv", "best-options.json", "validation.csv", "validation-summary.csv")


@pytest.fixture()
def scenario(tmp_path) -> Path:
    path = tmp_path / "tune-small.toml"
    path.write_text(SMALL)
    return path


def tune(scenario, out, *extra, check=True):
    return simlab("tune", scenario, "--out", out, "--quiet", *extra, check=check)


def completed_trials(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=30) as con:
            return con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # tables not created yet


def all_trials(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as con:
        return con.execute("select count(*) from trials").fetchone()[0]


def test_same_outputs_with_one_and_two_workers(scenario, tmp_path):
    tune(scenario, tmp_path / "w1", "--workers", "1")
    tune(scenario, tmp_path / "w2", "--workers", "2")
    for name in OUTPUTS:
        assert (tmp_path / "w1" / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name
    best = json.loads((tmp_path / "w1" / "best-options.json").read_text())
    assert {"maxConcurrency", "batchMaxConcurrency", "batchMinConcurrency", "interactiveRpsThreshold",
            "interactiveP95LatencyMs", "windowMs", "smoothingAlpha"} <= best.keys()
    assert best["batchMaxConcurrency"] <= best["maxConcurrency"] - 1 and best["batchMinConcurrency"] >= 1
    # the exported file is what the other commands load
    simlab("run", scenario, "--options", tmp_path / "w1" / "best-options.json", "--out", tmp_path / "run", "--quiet")
    report = (tmp_path / "w1" / "report.md").read_text()
    assert "Held-out validation" in report and "## Verdict" in report
    for fig in ("optimization_history", "param_importances", "slices", "pareto_front"):
        assert (tmp_path / "w1" / "figures" / f"{fig}.png").stat().st_size > 10_000, fig
    trials = (tmp_path / "w1" / "trials.csv").read_text().splitlines()
    assert trials[1].split(",")[2] == "defaults"  # the production defaults are measured first


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_interrupted_study_resumes_to_the_same_result(scenario, tmp_path, sig):
    reference = tmp_path / "uninterrupted"
    tune(scenario, reference, "--workers", "2")
    out = tmp_path / "interrupted"
    db = out / "study.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simlab", "tune", str(scenario), "--out", str(out), "--quiet", "--workers", "2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=sigint_as_a_terminal_gives_it,
    )
    deadline = time.time() + 300
    while completed_trials(db) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the study finished before it could be interrupted"
    os.killpg(proc.pid, sig)
    proc.wait(timeout=60)
    before = all_trials(db)
    assert completed_trials(db) >= 3
    tune(scenario, out, "--workers", "2")
    assert all_trials(db) >= before  # the trial count only grows
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_more_trials_continue_the_study_into_the_longer_studys_trials(scenario, tmp_path):
    """A study grown from 14 to 20 trials holds the 20-trial study's trials: 14 ends inside a batch of 4, and
    slots 14 and 15 are proposed from the batches before theirs (12 trials, past the random start-up), not
    from the 14 stored when the study grew."""
    out = tmp_path / "grow"
    tune(scenario, out, "--trials", "14")
    assert completed_trials(out / "study.db") == 14
    tune(scenario, out, "--trials", "20")
    assert completed_trials(out / "study.db") == 20
    tune(scenario, tmp_path / "direct", "--trials", "20")
    assert (out / "trials.csv").read_bytes() == (tmp_path / "direct" / "trials.csv").read_bytes()


def test_bad_tuning_input_exits_2_and_keeps_trials(scenario, tmp_path):
    out = tmp_path / "keep"
    tune(scenario, out, "--trials", "4")
    db = out / "study.db"
    stored = all_trials(db)
    # same study name, different objective: refused, nothing overwritten
    proc = tune(scenario, out, "--trials", "6", "--objective", "p99", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "different" in proc.stderr and "tune-small" in proc.stderr
    assert all_trials(db) == stored
    proc = tune(scenario, out, "--trials", "6", "--mode", "multi", check=False)
    assert proc.returncode == 2 and all_trials(db) == stored
    # an unreachable storage URL
    proc = tune(scenario, tmp_path / "x", "--storage", "postgresql://nobody:pw@127.0.0.1:9/none", check=False)
    assert proc.returncode == 2 and "cannot open storage" in proc.stderr and "pw" not in proc.stderr
    # inverted and out-of-range bounds
    for bounds, expect in (
        ('windowMs = [5000, 1000]', "inverted"),
        ('batchMaxConcurrency = [1, 8]', "leaves no slot"),
        ('batchMinConcurrency = [0, 3]', "allow_zero_min"),
        ('smoothingAlpha = [0.1, 2]', "<= 1"),
        ('windowMS = [1, 2]', "did you mean"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(SMALL + f"\n[tune.bounds]\n{bounds}\n")
        proc = tune(bad, tmp_path / "bad", check=False)
        assert proc.returncode == 2, bounds
        assert "Traceback" not in proc.stderr and expect in proc.stderr and "bad.toml" in proc.stderr, proc.stderr


def test_a_default_outside_the_searched_range_is_said_once_in_simlabs_words(tmp_path):
    path = tmp_path / "narrow.toml"
    path.write_text(SMALL.replace("interactiveP95LatencyMs = 500", "interactiveP95LatencyMs = 500\nwindowMs = 3000")
                    + "\n[tune.bounds]\nwindowMs = [5000, 20000]\nbatchMaxConcurrency = [1, 4]\n")
    proc = tune(path, tmp_path / "out", "--trials", "6")
    assert "Fixed parameter" not in proc.stderr and "optuna" not in proc.stderr, proc.stderr
    for key, value, lo, hi in (("windowMs", "3000", "5000", "20000"), ("batchMaxConcurrency", "6", "1", "4")):
        said = f"narrow.toml: the scenario's {key} = {value} lies outside the searched range [{lo}, {hi}]"
        assert proc.stderr.count(said) == 1, proc.stderr
    trials = (tmp_path / "out" / "trials.csv").read_text()
    assert len(trials.splitlines()) == 1 + 6  # the out-of-range defaults were measured as a trial, not refused


def test_multi_objective_mode_writes_a_pareto_front(scenario, tmp_path):
    out = tmp_path / "multi"
    tune(scenario, out, "--mode", "multi", "--trials", "8")
    summary = (out / "validation-summary.csv").read_text()
    assert "pareto-1" in summary
    assert (out / "pareto" / "pareto-1.json").exists() and (out / "best-options.json").exists()


def test_30_and_60_trials_export_options_that_agree_on_held_out_traffic(tmp_path):
    """Acceptance (issue 11): more trials must not move the exported options' held-out performance outside the
    CIs. Searched on two traffic conditions, validated on a third (held out) and on fresh seeds."""
    import pandas as pd

    path = tmp_path / "tune-conditions.toml"
    path.write_text(SMALL.replace("[tune]", "[conditions]\nload = [0.7, 1.3]\nsearch = 2\n\n[tune]"))
    out = tmp_path / "grow"
    summaries = {}
    for n in (30, 60):  # a study continued to 60 proposes exactly what a fresh 60-trial study would
        tune(path, out, "--trials", str(n))
        rec = json.loads((out / "result.json").read_text())["record"]
        assert rec["search_conditions"] == ["base", "load-x0.7"] and rec["holdout_conditions"] == ["load-x1.3"]
        rows = pd.read_csv(out / "validation.csv")
        assert set(rows["condition"]) == {"load-x1.3"}
        summaries[n] = pd.read_csv(out / "validation-summary.csv").set_index("config").loc["best"]
    a, b = summaries[30], summaries[60]
    for key in ("holdout_objective", "holdout_throughput"):
        lo = max(a[f"{key}_ci_low"], b[f"{key}_ci_low"])
        hi = min(a[f"{key}_ci_high"], b[f"{key}_ci_high"])
        assert lo <= hi, (key, a.to_dict(), b.to_dict())


def test_a_joining_peer_never_sees_a_half_written_study_identity(tmp_path, monkeypatch):
    """Joined workers race: one creates the study and writes its identity one attribute at a time while the
    other loads it. Whatever write the peer lands after, it must join, not refuse a 'changed' study."""
    from types import SimpleNamespace

    import optuna

    from simlab.tuning import study as study_mod

    identity = {"simlab_objective": "single:p95", "simlab_scenario": "s", "simlab_settings": "a",
                "simlab_inputs": "{}", "simlab_code": "c", "simlab_version": "v"}
    ctx = SimpleNamespace(storage_url=f"sqlite:///{tmp_path / 'study.db'}", study_name="race", multi=False,
                          tune=SimpleNamespace(sampler_seed=1), identity=identity, reference_throughput=1.0)
    write = optuna.Study.set_user_attr
    peer_joins = []  # the creator's writes after which the peer joined
    in_peer = False  # the peer's own writes (it may take the study for new) do not start another peer

    def write_then_peer_loads(self, key, value):
        nonlocal in_peer
        write(self, key, value)
        if not in_peer:
            in_peer = True
            study_mod.refuse_changed_study(ctx)
            study_mod.load_or_create(ctx)
            in_peer = False
            peer_joins.append(key)

    monkeypatch.setattr(optuna.Study, "set_user_attr", write_then_peer_loads)
    study_mod.load_or_create(ctx)
    assert set(peer_joins) >= set(identity)  # the peer came in after every one of the creator's writes
    stored = optuna.load_study(study_name="race", storage=study_mod.open_storage(ctx.storage_url)).user_attrs
    assert {k: stored[k] for k in identity} == identity


def test_a_sqlite_study_commits_through_a_write_ahead_log_other_processes_read(tmp_path):
    """Commits append to a WAL instead of an fsync each (a joined worker makes a dozen per trial); another connection, as
    a second process or a watcher has, still reads every committed trial."""
    import optuna

    from simlab.tuning.study import open_storage

    db = tmp_path / "study.db"
    storage = open_storage(f"sqlite:///{db}")
    with storage.engine.connect() as con:
        assert con.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert con.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    study = optuna.create_study(storage=storage, study_name="wal")
    for value in (1.0, 2.0):
        study.tell(study.ask(), value)
    assert completed_trials(db) == 2


def test_the_controller_stores_trials_in_the_order_proposed_whatever_order_they_finish(tmp_path):
    """The controller proposes and records in memory and writes a trial to the storage once it and every trial
    proposed before it are done, so the stored numbers follow the slots at any --workers and a kill leaves no
    trial running there (a rerun proposes the missing slots again, to the same parameters)."""
    import optuna
    from optuna.trial import TrialState

    from simlab.tuning.study import Search, open_storage

    durable = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'study.db'}"), study_name="order")
    search = Search.__new__(Search)  # only its write-back: the rest needs a scenario
    search.study, search.durable, search._written = optuna.create_study(), durable, 0
    live = [search.study.ask() for _ in range(3)]
    for t in live:
        t.suggest_float("x", 0.0, 1.0)
        t.set_user_attr("slot", t.number)
    search.study.tell(live[2], 3.0)
    search.write()
    assert durable.get_trials() == []  # slot 2 waits for slots 0 and 1
    search.study.tell(live[0], 1.0)
    search.write()
    assert [t.user_attrs["slot"] for t in durable.get_trials()] == [0]
    search.study.tell(live[1], state=TrialState.FAIL)
    search.write()
    stored = durable.get_trials()
    assert [(t.number, t.user_attrs["slot"], t.state, t.values) for t in stored] == [
        (0, 0, TrialState.COMPLETE, [1.0]), (1, 1, TrialState.FAIL, None), (2, 2, TrialState.COMPLETE, [3.0])]
    assert [t.params for t in stored] == [t.params for t in search.study.get_trials()]
