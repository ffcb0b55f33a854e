"""validate-real --engine-priority: every request carries vLLM's `priority` (interactive 0, batch 1) and the
simulation schedules by priority (the KV backend), against the stand-in engine run with and without priority
scheduling; the run's key holds the priorities; the combinations that cannot be measured are refused (exit 2)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from simlab.cli import main
from simlab.realcheck import kept
from simlab.realcheck.fake_engine import start_in_thread
from simlab.realcheck.urls import check_url

# 24 batch jobs of 40 tokens at once fill the 4 sequences for about a second; chat meanwhile: under FCFS it waits
# behind the backlog, under priority for the next sequence to end (at most one batch job, ~0.2 s)
SCENARIO = """
name = "prio"
duration_ms = 900
[backend]
kind = "continuous-batching"
max_num_seqs = 4
step = {{ base_ms = 3.0, per_token_ms = 0.005, per_seq_ms = 0.5 }}
{engine}
[[workload]]
name = "chat"
class = "interactive"
arrivals = {{ process = "poisson", rate_per_s = 12 }}
prompt_tokens = {{ dist = "constant", value = 16 }}
output_tokens = {{ dist = "constant", value = 4 }}
[[workload]]
name = "jobs"
class = "batch"
arrivals = {{ process = "burst", count = 24, at_ms = 0 }}
prompt_tokens = {{ dist = "constant", value = 20 }}
output_tokens = {{ dist = "constant", value = 40 }}
"""
PRIORITY = 'kv_cache_tokens = 4096\nscheduling = "priority"'


def scenario(folder: Path, engine: str = PRIORITY) -> Path:
    path = folder / ("prio.toml" if engine else "fcfs.toml")
    path.write_text(SCENARIO.format(engine=engine))
    return path


def args(path, url, out, *more) -> list[str]:
    return ["validate-real", str(path), "--url", url, "--policies", "unscheduled", "--repeats", "1",
            "--max-seconds", "30", "--no-figures", "--out", str(out), *more]


def p95(summary: Path, column: str) -> float:
    rows = csv.DictReader(open(summary))
    return next(float(r[column]) for r in rows if r["class"] == "interactive" and r["metric"] == "p95_ms")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The priority arm on a stand-in run with priority scheduling, and the FCFS arm on one without."""
    folder = tmp_path_factory.mktemp("prio")
    out = {}
    for name, scheduling, engine, more in (("priority", "priority", PRIORITY, ("--engine-priority",)),
                                           ("fcfs", "fcfs", "", ())):
        url, eng, stop = start_in_thread(base_ms=3.0, per_seq_ms=0.5, per_token_ms=0.005, max_seqs=4,
                                         scheduling=scheduling)
        try:
            assert main(args(scenario(folder, engine), url, folder / name, *more)) == 0
        finally:
            stop()
        out[name] = (folder / name, eng, url)
    return folder, out


def test_requests_carry_their_class_priority(measured):
    _, out = measured
    folder, eng, _ = out["priority"]
    rows = list(csv.DictReader(open(folder / "measured" / "unscheduled-run1.csv")))
    n_i = sum(r["kind"] == "interactive" for r in rows)
    assert n_i > 3 and sorted(eng.priorities) == [0] * n_i + [1] * (len(rows) - n_i)
    assert out["fcfs"][1].priorities == [0] * len(eng.priorities)  # without the option no priority is sent
    key = json.loads((folder / "measured" / "unscheduled-run1.json").read_text())["key"]
    assert key["engine_priority"] == {"interactive": 0, "batch": 1}
    assert "engine_priority" not in json.loads((out["fcfs"][0] / "measured" / "unscheduled-run1.json")
                                               .read_text())["key"]
    record = json.loads((folder / "result.json").read_text())["record"]
    assert record["engine_priority"] is True and record["kv_cache_tokens"] == 4096
    assert "engine priority scheduling" in (folder / "report.md").read_text()


def test_priority_moves_chat_ahead_of_the_backlog_on_both_sides(measured):
    """Measured on the stand-in and simulated alike, chat's P95 under engine priority is well under FCFS's."""
    _, out = measured
    prio, fcfs = out["priority"][0] / "summary.csv", out["fcfs"][0] / "summary.csv"
    for column in ("measured", "predicted"):
        assert p95(prio, column) < 0.5 * p95(fcfs, column), column
    # the stand-in runs the simulator's rules, so the priority arm's prediction holds (a loose bound: real time)
    assert p95(prio, "predicted") == pytest.approx(p95(prio, "measured"), rel=0.5)


def test_a_priority_run_is_not_kept_for_a_run_without_priority(measured, tmp_path, capsys):
    folder, out = measured
    shutil.copytree(out["priority"][0] / "measured", tmp_path / "out" / "measured")
    fcfs = scenario(folder, "")
    assert main(args(fcfs, out["priority"][2], tmp_path / "out", "--kept-runs-only")) == 2
    assert "it differs in engine_priority" in capsys.readouterr().err


def test_the_key_names_engine_priority():
    base = dict(workload="a" * 64, tasks=10, policy="unscheduled", driver="runtime", options={}, target=check_url(
        "http://127.0.0.1:8011"), model="m", time_scale=1.0, until_ms=None, max_seconds=20.0)
    plain = kept.run_key(**base)
    prio = kept.run_key(**base, priorities={"interactive": 0, "batch": 1})
    assert set(prio) - set(plain) == {"engine_priority"}
    for saved, key in ((plain, prio), (prio, plain)):
        assert kept.differences(json.loads(kept.key_json(saved, None))["key"], key) == ["engine_priority"]


@pytest.mark.parametrize("engine, more, message", [
    (PRIORITY, (), 'backend.scheduling: is "priority": pass --engine-priority'),
    (PRIORITY, ("--engine-priority", "--node-policies", "unscheduled"),
     "--node-policies: the article's scheduler under Node.js sends no request priority"),
    (PRIORITY + '\npreempt_on = "kv-or-seqs"', ("--engine-priority",),
     'backend.preempt_on: is "kv-or-seqs", which vLLM as released does not do'),
])
def test_what_cannot_be_measured_is_refused(tmp_path, capsys, engine, more, message):
    out = tmp_path / "out"
    assert main(args(scenario(tmp_path, engine), "http://127.0.0.1:9", out, *more)) == 2
    assert message in capsys.readouterr().err and not out.exists()
