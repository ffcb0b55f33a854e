"""`simlab ab` and `simlab run` killed mid-way continue to exactly the result of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT, sigint_as_a_terminal_gives_it, simlab

TABLES = ("summary.csv", "policies.csv", "comparison.csv", "verdicts.csv", "bounds.csv", "report.md")
ARGS = ["ab", "scenarios/nightly-backfill.toml", "--replications", "6", "--quiet", "--no-figures", "--workers", "2"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_interrupted_ab_resumes_to_the_same_outputs(tmp_path, sig):
    simlab(*ARGS, "--out", tmp_path / "whole")
    out = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "simlab", *ARGS, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_as_a_terminal_gives_it)
    deadline = time.time() + 120
    while len(list(out.glob("runs/*/*/run.json"))) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "finished before it could be interrupted"
    os.killpg(proc.pid, sig)
    ended(proc, 60)
    done = len(list(out.glob("runs/*/*/run.json")))
    assert 6 <= done < 36
    assert not (out / "summary.csv").exists()
    for marker in out.glob("runs/*/*/run.json"):  # written atomically: never half a file
        json.loads(marker.read_text())
    again = simlab(*ARGS, "--out", out)
    assert again.returncode == 0
    for name in TABLES:
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_run_is_byte_identical_across_workers_and_reruns(tmp_path):
    args = ["run", "scenarios/seed-article.toml", "--policy", "adaptive", "--replications", "3", "--quiet"]
    simlab(*args, "--out", tmp_path / "a", "--workers", "1")
    simlab(*args, "--out", tmp_path / "b", "--workers", "2")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert any(f.name == "tasks.csv" for f in files) and any(f.name == "series.csv" for f in files)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def ended(proc, timeout: float) -> None:
    """Wait for `proc` (its stderr read meanwhile, so a full pipe cannot block it); past `timeout`, fail with
    what it wrote, the stacks of its group (SIGUSR1, where it registered faulthandler) included."""
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGUSR1)
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"still running {timeout:g} s after the signal; its stderr:\n{err.decode(errors='replace')[-8000:]}")


# A pool of slow runs, interrupted as a terminal's Ctrl-C does (SIGINT to the whole process group).
SLOW_POOL = """
import faulthandler, signal, sys, time
from pathlib import Path
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hang's stacks, for `ended`
from simlab.experiments import runner

marks = Path(sys.argv[1])

def slow(scenario, job, out):
    time.sleep(0.3)
    (marks / str(job)).touch()
    return {}

runner.execute = slow  # the forked workers inherit it
runner.run_cells([(None, i, None) for i in range(40)], workers=2, progress=False)
"""


def test_ctrl_c_starts_no_more_runs(tmp_path):
    # A worker that takes the SIGINT inside a run reports it as that run's error and would go on to the next:
    # without cancelling what is queued, all 40 runs (6 s) would still be made after the Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-c", SLOW_POOL, str(tmp_path)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=sigint_as_a_terminal_gives_it)
    deadline = time.time() + 60
    while len(list(tmp_path.iterdir())) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    ended(proc, 30)
    at_exit = len(list(tmp_path.iterdir()))
    time.sleep(1)
    assert len(list(tmp_path.iterdir())) == at_exit  # nothing runs on after the command has returned
    assert at_exit < 12, f"{at_exit} of 40 runs were made: the interrupt did not stop the pool"


def _handler_between_runs(_):
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _handler_in_a_run(scenario, job, out):
    return {"in_run": signal.getsignal(signal.SIGINT) is signal.default_int_handler}


def test_a_pool_worker_takes_ctrl_c_inside_a_run_only(monkeypatch):
    # Between runs a worker is in the pool's own loop (reading the next job, sending a result back): a
    # KeyboardInterrupt there can leave the result queue's lock held, and every worker and the command's exit
    # then wait on it for ever. Inside a run it must stop the run.
    from simlab.experiments import runner

    monkeypatch.setattr(runner, "execute", _handler_in_a_run)  # the forked workers inherit it
    with runner.one_pool(2):
        pool = runner.shared_pool(2)
        in_runs = [f.result(timeout=60) for f in [pool.submit(runner.execute_cell, (None, i, None)) for i in range(4)]]
        between = [f.result(timeout=60) for f in [pool.submit(_handler_between_runs, i) for i in range(4)]]
    assert in_runs == [{"in_run": True}] * 4
    assert between == [False] * 4


def test_decides_search_report_drawn_aside_leaves_ctrl_c_to_the_command(tmp_path, monkeypatch, capfd):
    # The forked renderer shares the terminal's process group: a Ctrl-C while it draws must not print its
    # traceback under the command's "interrupted: ..." line; the command answers it, and the daemon ends with it.
    import simlab.records
    import simlab.reporting.blocks.tune as tune_blocks
    from simlab.commands import decide

    (tmp_path / "result.json").write_text("{}")
    monkeypatch.setattr(simlab.records, "load", lambda path, kind: None)

    def drawn_through_a_ctrl_c(record, folder, elapsed):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        (folder / "drawn").touch()

    monkeypatch.setattr(tune_blocks, "write_files", drawn_through_a_ctrl_c)
    proc = decide._render_search_aside(tmp_path)
    proc.join(30)
    assert proc.exitcode == 0
    assert (tmp_path / "drawn").exists()
    assert "Traceback" not in capfd.readouterr().err
