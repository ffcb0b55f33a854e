"""Columnar task records, the per-task files and their loader, the cap memo, and sweeps on a Dask cluster."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simlab.experiments.metrics import summarize, task_arrays
from simlab.experiments.runfiles import load_series, load_tasks, write_tasks
from simlab.experiments.runner import Job, run_jobs
from simlab.policies import Task, options_from_dict
from simlab.replay import replay
from simlab.scenario import load_scenario
from simlab.world.engine import Engine
from simlab.world.workloads import open_loop_columns, open_loop_tasks

ROOT = Path(__file__).resolve().parents[1]
ARTICLE = ROOT / "scenarios" / "seed-article.toml"


def test_columns_and_task_objects_agree():
    s = load_scenario(ROOT / "scenarios" / "nightly-backfill.toml")
    cols = open_loop_columns(s, 3)
    tasks = open_loop_tasks(s, 3)
    assert [t.id for t in tasks] == [cols.task_id(i) for i in range(len(cols))]
    assert np.array_equal([t.arrival_ms for t in tasks], cols.arrival_ms)
    a = Engine(s, s.options("adaptive"), 3).run()
    b = Engine(s, s.options("adaptive"), 3, tasks=tasks).run()  # the Task-list entry point gives the same run
    for key, value in task_arrays(a).items():
        assert np.array_equal(value, task_arrays(b)[key], equal_nan=True), key


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_task_file_round_trip_with_awkward_ids(tmp_path, fmt):
    s = load_scenario(ARTICLE)
    s = s.model_copy(update={"workload": [w for w in s.workload if w.kind == "batch"]})
    odd = ['a,b', 'say "hi"', "naïve ☃", "line\nbreak", "plain"]
    tasks = [Task(i, "batch", 10.0 * k, 5.0) for k, i in enumerate(odd)]
    for t in tasks:
        t.source = "trace, 1"
    result = Engine(s, s.options("fifo"), 1, tasks=tasks).run()
    path = write_tasks(result, tmp_path, fmt)
    assert path.name == f"tasks.{fmt}"
    df = load_tasks(tmp_path)
    assert df["id"].tolist() == odd
    assert set(df["source"]) == {"trace, 1"}
    assert np.array_equal(df["end_ms"].to_numpy(), result.table["end_ms"])
    assert df["outcome"].tolist() == ["ok"] * 5
    assert df["prompt_tokens"].isna().all()


def test_run_with_summaries_only_and_parquet(tmp_path):
    base = [sys.executable, "-m", "simlab", "run", str(ARTICLE), "--quiet", "--replications", "1"]
    subprocess.run([*base, "--out", str(tmp_path / "none"), "--tasks", "none"], check=True, capture_output=True)
    run = tmp_path / "none" / "runs" / "adaptive" / "seed-1"
    assert not list(run.glob("tasks.*")) and (run / "series.csv").is_file()
    assert len(load_series(run)) > 10
    subprocess.run([*base, "--out", str(tmp_path / "pq"), "--tasks", "parquet"], check=True, capture_output=True)
    subprocess.run([*base, "--out", str(tmp_path / "csv"), "--tasks", "csv"], check=True, capture_output=True)
    a = load_tasks(tmp_path / "pq" / "runs" / "adaptive" / "seed-1")
    b = load_tasks(tmp_path / "csv" / "runs" / "adaptive" / "seed-1")
    assert a.equals(b)
    summary = (tmp_path / "none" / "summary.csv").read_text()
    assert summary == (tmp_path / "pq" / "summary.csv").read_text()


def test_cap_memo_changes_no_decision():
    """The adaptive cap reused while the window is unchanged: every start time as with the memo off."""
    rng = random.Random(5)
    for case in range(30):
        t, tasks = 0.0, []
        for i in range(400):
            batch = rng.random() < 0.4
            tasks.append((f"t{i}", "batch" if batch else "interactive", t, rng.choice([1.0, 5.0, rng.expovariate(1 / 50)])))
            t += rng.choice([0.0, rng.expovariate(1 / 5)])
        o = options_from_dict({"maxConcurrency": rng.randint(2, 8), "batchMaxConcurrency": rng.randint(1, 6),
                               "batchMinConcurrency": rng.randint(0, 1), "interactiveRpsThreshold": rng.uniform(5, 200),
                               "interactiveP95LatencyMs": rng.uniform(5, 100), "windowMs": rng.choice([20.0, 100.0, 1000.0]),
                               "rpsSource": rng.choice(["completions", "arrivals"]),
                               "recheckOnExpiry": rng.random() < 0.5})

        def run(memo):
            from simlab.policies import adaptive

            seen = []
            original = adaptive.Adaptive.__init__

            def init(self, *a, **k):
                original(self, *a, **k)
                seen.append(self._memo)

            adaptive.Adaptive.__init__ = init
            adaptive.MEMO = memo
            try:
                r = replay([Task(*x) for x in tasks], o)
            finally:
                adaptive.Adaptive.__init__ = original
                adaptive.MEMO = True
            assert seen == [memo]
            return [(x.start_ms, x.end_ms) for x in r.tasks]

        assert run(True) == run(False), f"case {case}"


def _with_memo(memo, fn):
    from simlab.policies import adaptive

    adaptive.MEMO = memo
    try:
        return fn()
    finally:
        adaptive.MEMO = True


def test_lazy_cap_observed_anywhere_is_the_references():
    """The memo and the lazy evaluation (a cap computed only when it decides or is observed): at random
    points between task events, the cap, pressure, RPS and P95 a driver reads are those of a policy that
    evaluates afresh every time (MEMO = False), as is every start."""
    import heapq

    from simlab.policies import make_policy

    rng = random.Random(11)
    for case in range(40):
        o = options_from_dict({"maxConcurrency": rng.randint(1, 8), "batchMaxConcurrency": rng.randint(1, 6),
                               "batchMinConcurrency": rng.randint(0, 1), "interactiveRpsThreshold": rng.uniform(5, 200),
                               "interactiveP95LatencyMs": rng.uniform(5, 100), "windowMs": rng.choice([20.0, 100.0, 1000.0]),
                               "tieBreak": rng.choice(["fifo", "seed-heap"]), "recheckOnExpiry": rng.random() < 0.3})
        t, arrivals = 0.0, []
        for i in range(300):
            arrivals.append((t, i, rng.random() < 0.3, rng.choice([1.0, 5.0, rng.expovariate(1 / 50)])))
            t += rng.choice([0.0, rng.expovariate(1 / 5)])
        looks = [rng.random() < 0.15 for _ in range(2000)]

        def run():
            now = [0.0]
            policy = make_policy(o, lambda: now[0])
            events = [(a, 0, i, None) for a, i, _, _ in arrivals]  # (time, 0 arrival / 1 end / 2 wake, order, task)
            heapq.heapify(events)
            seq, seen, k = len(arrivals), [], 0
            while events:
                now[0], what, order, task = heapq.heappop(events)
                if what == 0:
                    _, i, batch, service = arrivals[order]
                    task = Task(i, "batch" if batch else "interactive", now[0], service)
                    started = policy.submit(task)
                elif what == 1:
                    started = policy.finish(task)
                else:
                    started = policy.wake()
                for s in started:
                    s.start_ms = now[0]
                    seen.append((s.id, now[0], s.cap_at_dispatch))
                    seq += 1
                    heapq.heappush(events, (now[0] + s.service_ms, 1, seq, s))
                check = policy.next_check_ms()
                if check is not None:
                    seq += 1
                    heapq.heappush(events, (check, 2, seq, None))
                if looks[k % len(looks)]:
                    seen.append(("look", now[0], policy.batch_cap(), policy.pressure(), policy.window_stats()))
                k += 1
            return seen

        assert _with_memo(True, run) == _with_memo(False, run), f"case {case}"


def test_lazy_cap_gives_the_same_series_and_records():
    """The engine's time series (cap, pressure, RPS, P95 as sampled) and every per-task column, memo on or off."""
    base = load_scenario(ROOT / "scenarios" / "bursty-chat.toml")
    for p95, window in ((2000.0, 10000.0), (300.0, 1000.0)):
        s = base.model_copy(update={"duration_ms": min(base.duration_ms, 600_000.0)})
        o = s.options("adaptive").model_copy(update={"interactive_p95_latency_ms": p95, "window_ms": window})
        a = _with_memo(True, lambda: Engine(s, o, 2).run())
        b = _with_memo(False, lambda: Engine(s, o, 2).run())
        for key in a.series:
            assert np.array_equal(a.series[key], b.series[key], equal_nan=True), key
        for key, value in a.table.columns.items():
            if value is not None:
                assert np.array_equal(value, b.table.columns[key], equal_nan=True), key


def test_dask_local_cluster_gives_identical_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    s = load_scenario(ARTICLE)
    jobs = [Job(p, s.options(p), seed, keep_tasks=True, tasks_format="csv") for p in ("static", "adaptive") for seed in (1, 2)]
    local = run_jobs(s, jobs, tmp_path / "local", workers=1, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = run_jobs(s, jobs, tmp_path / "dask", progress=False, scheduler=cluster.scheduler_address)
    assert json.dumps(remote, sort_keys=True) == json.dumps(local, sort_keys=True)  # NaN != NaN in ==
    for job in jobs:
        for name in ("tasks.csv", "series.csv", "run.json"):
            a = (tmp_path / "local" / "runs" / job.dirname() / name).read_bytes()
            assert a == (tmp_path / "dask" / "runs" / job.dirname() / name).read_bytes(), (job.dirname(), name)


def test_summary_reads_columns():
    s = load_scenario(ARTICLE)
    r = Engine(s, s.options("adaptive"), 1).run()
    m = summarize(r, s.slo_p95_ms)
    assert m["interactive_completed"] + m["batch_completed"] == int((r.table["outcome"] == 1).sum())


def test_decide_on_a_dask_cluster_gives_the_same_answer(tmp_path):
    """`simlab decide --scheduler-address`: the held-out sweep through Dask, every output file as run locally."""
    distributed = pytest.importorskip("distributed")
    from tests.helpers import simlab
    from tests.test_decision import SMALL

    scen = tmp_path / "tiny.toml"
    scen.write_text(SMALL)
    local = simlab("decide", scen, "--trials", "0", "--out", tmp_path / "local", "--quiet", check=False)
    assert local.returncode == 0, local.stderr  # tiny-decide exports static cap 3 (tests/test_decision.py)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = simlab("decide", scen, "--trials", "0", "--out", tmp_path / "dask", "--quiet",
                        "--scheduler-address", cluster.scheduler_address, check=False)
    assert remote.returncode == local.returncode, remote.stderr
    assert remote.stdout.replace(str(tmp_path / "dask"), "OUT") == local.stdout.replace(str(tmp_path / "local"), "OUT")
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*") if p.is_file())
    assert any(p.parts[0] == "selection" for p in files) and any(p.parts[0] == "confirmation" for p in files)
    for rel in files:
        a, b = (tmp_path / "local" / rel).read_bytes(), (tmp_path / "dask" / rel).read_bytes()
        assert a.replace(str(tmp_path / "local").encode(), b"OUT") == b.replace(str(tmp_path / "dask").encode(), b"OUT"), rel


def test_merge_orders_by_the_full_key_whatever_the_ties():
    """`_merge` sorts by arrival alone and then puts ties in key order: the same order, bit for bit, as a
    sort by the whole key (arrival, trace row, workload, copy, draw), on parts full of ties."""
    from simlab.world.workloads import _merge

    rng = np.random.default_rng(3)
    for case in range(200):
        parts, expect = [], []
        nparts = int(rng.integers(1, 5))
        ranks = rng.permutation(nparts)
        with_rows = rng.random() < 0.3
        for k in range(nparts):
            n = int(rng.integers(0, 60))
            times = rng.integers(0, 8, n).astype(float) if rng.random() < 0.7 else rng.uniform(0, 100, n)
            times[rng.random(n) < 0.1] = -0.0
            copies = rng.random() < 0.4
            number = rng.permutation(n) if copies else np.arange(n)
            copy = rng.integers(0, 3, n) if copies else None
            rows = rng.permutation(n).astype(float) if with_rows and rng.random() < 0.7 else None
            service = rng.uniform(1, 9, n) if rng.random() < 0.8 else None
            ids = [f"p{k}-{i}" for i in range(n)] if rng.random() < 0.3 else None
            parts.append({"times": times, "service": service, "prompt": None, "output": None, "ids": ids,
                          "rows": rows, "number": number, "copy": copy, "wi": int(ranks[k]), "label": f"w{k}",
                          "interactive": bool(k % 2)})
            for i in range(n):
                expect.append((times[i], rows[i] if rows is not None else np.inf, int(ranks[k]),
                               copy[i] if copy is not None else 0, number[i], k, i))
        got = _merge([dict(p) for p in parts])
        want = sorted(range(len(expect)), key=lambda j: expect[j][:5])
        assert [int(x) for x in got.number] == [int(expect[j][4]) for j in want], case
        assert [int(x) for x in got.source] == [expect[j][5] for j in want], case
        bits = [np.float64(parts[expect[j][5]]["times"][expect[j][6]]).tobytes() for j in want]
        assert [x.tobytes() for x in got.arrival_ms] == bits, case
        svc = [parts[expect[j][5]]["service"] for j in want]
        if any(p["service"] is not None for p in parts):
            want_s = [np.nan if s is None else s[expect[j][6]] for s, j in zip(svc, want)]
            assert np.array_equal(got.service_ms, np.array(want_s), equal_nan=True), case
        else:
            assert got.service_ms is None
        assert got.interactive.tolist() == [parts[expect[j][5]]["interactive"] for j in want], case
