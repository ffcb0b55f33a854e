"""`simlab ab` with the gateway gates and the batch lifecycle, as a user types it: every policy runs, the source
defaults are noted, the lifecycle metrics reach the CSVs, the report and the decision rule, and results do not
depend on --workers."""

from __future__ import annotations

import csv
import json

from tests.helpers import simlab

POLICIES = "unscheduled,static,adaptive,holdback,aimd,gradient2"
SCENARIO = """
name = "gates-cli"
duration_ms = 20000
slo_p95_ms = 1500

[backend]
kind = "slots"
slots = 3

[scheduler]
maxConcurrency = 3
batchMaxConcurrency = 2
batchMinConcurrency = 1
interactiveRpsThreshold = 5
interactiveP95LatencyMs = 500
evict = "newest"
evictAfterMs = 400

[decision]
rule = "slo"
batch_deadline_share = 0.2

[[workload]]
name = "chat"
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 3 }
service = { dist = "lognormal", median = 200, p95 = 600 }

[[workload]]
name = "backfill"
class = "batch"
arrivals = { process = "burst", count = 40, at_ms = 0 }
service = { dist = "lognormal", median = 1000, p95 = 3000 }
timeout_ms = 2500
max_retries = 1
deadline_ms = 30000
"""


def test_ab_with_gates_and_lifecycle(tmp_path):
    scenario = tmp_path / "gates.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "ab"
    proc = simlab("ab", scenario, "--policies", POLICIES, "--replications", "3", "--out", out, "--quiet",
                  "--no-figures", "--workers", "2")
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert [n.split()[1] for n in notes] == ["holdback", "aimd", "gradient2"]
    assert "evict does not apply to policy 'unscheduled'" not in proc.stderr  # the base options are adaptive's
    with open(out / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["policy"] for r in rows} == set(POLICIES.split(","))
    for column in ("batch_deadline_share", "wasted_tokens", "wasted_ms", "timeouts", "evictions"):
        assert column in rows[0]
    by = {p: [r for r in rows if r["policy"] == p] for p in POLICIES.split(",")}
    assert all(r["evictions"] == "0" for r in by["unscheduled"])  # no batch queue: nothing evicted
    assert any(int(r["evictions"]) > 0 for r in by["static"])
    assert any(int(r["timeouts"]) > 0 for r in rows)
    for r in rows:
        assert 0 <= float(r["batch_deadline_share"]) <= 1
    report = (out / "report.md").read_text()
    assert "batch by deadline %" in report and "evictions" in report
    comparisons = {(r["candidate"], r["metric"]) for r in csv.DictReader(open(out / "comparison.csv"))}
    assert ("holdback", "batch_deadline_share") in comparisons and ("gradient2", "wasted_ms") in comparisons
    decision = json.loads((out / "decision.json").read_text())
    assert decision["record"]["batch_deadline_share"] == 0.2
    shares = {a["label"]: a["deadline_share"] for a in decision["record"]["selection"]}
    assert all(v is not None and 0 <= v["mean"] <= 1 for v in shares.values())
    assert "batch jobs done by their deadline is shown at least 20%" in (out / "report.md").read_text()
    frontier = list(csv.DictReader(open(out / "frontier.csv")))
    assert {r["arm"] for r in frontier} >= {"static-1", "static-2", "holdback", "aimd", "gradient2"}
    # the same answer with one worker
    again = simlab("ab", scenario, "--policies", POLICIES, "--replications", "3", "--out", tmp_path / "one",
                   "--quiet", "--no-figures", "--workers", "1")
    assert again.returncode == 0
    for name in ("summary.csv", "policies.csv", "comparison.csv", "frontier.csv"):
        assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name


def test_run_writes_the_per_task_lifecycle_columns(tmp_path):
    scenario = tmp_path / "gates.toml"
    scenario.write_text(SCENARIO)
    simlab("run", scenario, "--policy", "holdback", "--out", tmp_path / "run", "--quiet")
    with open(tmp_path / "run" / "runs" / "holdback" / "seed-1" / "tasks.csv") as f:
        tasks = list(csv.DictReader(f))
    assert {"attempts", "wasted_tokens", "wasted_ms"} <= set(tasks[0])
    stopped = [t for t in tasks if int(t["attempts"]) > 1]
    assert stopped and all(float(t["wasted_ms"]) > 0 for t in stopped)
    assert {t["outcome"] for t in tasks} <= {"ok", "timeout"}


def test_a_bad_gate_option_is_one_clear_message(tmp_path):
    scenario = tmp_path / "bad.toml"
    scenario.write_text(SCENARIO.replace("evictAfterMs = 400", "evictAfterMs = 400\nminCeilling = 0.3"))
    proc = simlab("ab", scenario, "--policies", "holdback", "--quiet", "--out", tmp_path / "x", check=False)
    assert proc.returncode == 2
    assert "scheduler.minCeilling" in proc.stderr and "did you mean 'minCeiling'" in proc.stderr
    assert "Traceback" not in proc.stderr
