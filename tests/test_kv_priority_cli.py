"""Issue 23's acceptance check for engine priority, as a user runs it: on a continuous-batching GPU with a batch
backlog and no gateway cap (`unscheduled`), vLLM's priority scheduling with kv-or-seqs preemption gives chat a
lower P95 than FCFS, paired over common seeds, and the runs report the work preemption threw away."""

from __future__ import annotations

import csv

from simlab.experiments.stats import paired
from tests.helpers import simlab

SCENARIO = """
name = "{name}"
duration_ms = 60_000
slo_p95_ms = 5_000

[backend]
kind = "continuous-batching"
max_num_seqs = 16
max_batched_tokens = 8192
step = {{ base_ms = 12, per_token_ms = 0.05, per_seq_ms = 0.4 }}
kv_cache_tokens = 20_000
{engine}

[[workload]]
name = "chat"
class = "interactive"
arrivals = {{ process = "poisson", rate_per_s = 2 }}
prompt_tokens = {{ dist = "lognormal", median = 200, p95 = 800 }}
output_tokens = {{ dist = "lognormal", median = 60, p95 = 200 }}

[[workload]]
name = "backlog"
class = "batch"
arrivals = {{ process = "burst", count = 150, at_ms = 2_000 }}
prompt_tokens = {{ dist = "uniform", low = 500, high = 3_000 }}
output_tokens = {{ dist = "uniform", low = 50, high = 600 }}
"""


def run(tmp_path, name, engine):
    path = tmp_path / f"{name}.toml"
    path.write_text(SCENARIO.format(name=name, engine=engine))
    out = tmp_path / name
    simlab("ab", path, "--policies", "unscheduled", "--replications", 8, "--quiet", "--no-figures", "--no-frontier",
           "--out", out)
    with open(out / "summary.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["seed"]))
    with open(out / "policies.csv", newline="") as f:
        assert "recomputed_tokens_mean" in next(csv.reader(f))
    return rows


def test_engine_priority_lowers_chat_p95_against_fcfs_on_common_seeds(tmp_path):
    fcfs = run(tmp_path, "fcfs", 'scheduling = "fcfs"')
    prio = run(tmp_path, "priority", 'scheduling = "priority"\npreempt_on = "kv-or-seqs"')
    assert [r["seed"] for r in fcfs] == [r["seed"] for r in prio]
    p95 = lambda rows: [float(r["interactive_p95_ms"]) for r in rows]  # noqa: E731
    pc = paired(p95(prio), p95(fcfs))
    assert pc["n"] == 8 and pc["diff"] < 0 and pc["diff_ci_high"] < 0, pc
    # the wasted work is reported for every run, and preemption by recompute did throw some away
    assert all(int(r["preemptions"]) >= 0 and int(r["recomputed_tokens"]) >= 0 for r in fcfs + prio)
    assert sum(int(r["recomputed_tokens"]) for r in prio) > 0
    assert all(0 < float(r["kv_use_mean"]) <= float(r["kv_use_peak"]) <= 1 for r in fcfs + prio)
