"""Direct tests of the numbers every table is made of: hand-computed expectations on tiny task lists, scipy on
known samples, and Hypothesis properties where a law exists."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from simlab.experiments.metrics import longest_over_slo, longest_stall, max_concurrent, summarize
from simlab.experiments.stats import mean_ci, paired
from simlab.policies import Task
from simlab.world.engine import SimResult
from simlab.world.tasktable import Arrivals, TaskTable

NAN = math.nan


def arr(*values) -> np.ndarray:
    return np.array(values, dtype=float)


# --- longest_stall: time batch work waits (arrived, not started) while no batch task completes -------------
def test_stall_is_waiting_time_between_completions():
    # two tasks at 0; the first runs 0-1000, the second waits until 1000 and ends at 3000; a third arrives at
    # 500 and waits until 3000: waiting runs 0-3000, cut by the completions at 1000 (and 3000, its end).
    assert longest_stall(arr(0, 0, 500), arr(0, 1000, 3000), arr(1000, 3000, 4000), 10_000) == 2000.0


def test_idle_time_with_nothing_waiting_is_not_a_stall():
    # The bench-1h shape: a burst is served without waiting long, then 180 s with no batch work at all.
    arrivals = arr(0, 0, 0, 180_000, 180_000, 180_000)
    starts = arr(0, 0, 1_500, 180_000, 180_000, 181_200)  # one task of each burst waits for a slot
    ends = arr(1_500, 2_000, 3_100, 181_200, 182_000, 183_000)
    assert longest_stall(arrivals, starts, ends, 400_000) == 1_500.0
    # the old definition (gaps between completions since the first arrival) called this a 178.1 s stall
    done = np.sort(ends)
    assert np.max(np.diff(np.concatenate([[0.0], done]))) == 178_100.0


def test_stall_to_the_millisecond_with_a_starved_queue():
    # Batch work waits from 10_000 to 73_456 (a cap of zero) while one long batch task runs 0-90_000:
    # no completion between 10_000 and 73_456, so the stall is 63_456 ms exactly.
    arrivals = arr(0, 10_000, 10_000)
    starts = arr(0, 73_456, 73_456)
    ends = arr(90_000, 74_000, 75_000)
    assert longest_stall(arrivals, starts, ends, 200_000) == 63_456.0


def test_completion_splits_a_waiting_run():
    # waiting 0-10_000; completions at 2_000 and 7_000: pieces 2_000, 5_000, 3_000
    assert longest_stall(arr(0, 0, 0), arr(0, 0, 10_000), arr(2_000, 7_000, 12_000), 20_000) == 5_000.0


def test_work_never_started_waits_until_the_horizon():
    assert longest_stall(arr(1_000), arr(NAN), arr(NAN), 61_000) == 60_000.0
    # and a completion in between splits it
    assert longest_stall(arr(0, 1_000), arr(0, NAN), arr(31_000, NAN), 61_000) == 30_000.0


def test_no_batch_work_no_stall():
    assert longest_stall(arr(), arr(), arr(), 1_000) == 0.0
    assert longest_stall(arr(5, 6), arr(5, 6), arr(10, 11), 1_000) == 0.0  # never waited


def test_touching_waiting_runs_merge_and_a_run_end_is_not_a_completion():
    # task A waits 0-100, task B 100-300 (arrives as A starts): one run 0-300, not cut at 100 (a start is not
    # a completion); A's completion at 250 cuts it into 250 and 50
    assert longest_stall(arr(0, 100), arr(100, 300), arr(250, 400), 1_000) == 250.0


intervals = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 5_000), st.integers(0, 5_000), st.booleans()),
    min_size=0, max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_stall_never_exceeds_the_time_batch_work_waited(rows):
    horizon = 30_000.0
    arrivals = arr(*(a for a, _, _, _ in rows))
    starts = arr(*((a + w) if started else NAN for a, w, _, started in rows))
    ends = arr(*((a + w + s) if started else NAN for a, w, s, started in rows))
    stall = longest_stall(arrivals, starts, ends, horizon)
    waited = np.where(np.isnan(starts), horizon, starts) - arrivals
    assert 0.0 <= stall <= waited.sum() + 1e-9
    # and no longer than the longest stretch of time in which some batch work waited
    assert stall <= horizon


# --- max_concurrent ----------------------------------------------------------------------------------
def test_max_concurrent_by_hand():
    assert max_concurrent(arr(0, 1, 2), arr(10, 3, 4)) == 3
    assert max_concurrent(arr(0, 5), arr(5, 9)) == 1  # an end and a start at one instant do not overlap
    assert max_concurrent(arr(0, 0, NAN), arr(NAN, 4, NAN)) == 2  # started, never ended: open to the end
    assert max_concurrent(arr(), arr()) == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1_000), st.integers(1, 500)), min_size=1, max_size=40))
def test_max_concurrent_laws(rows):
    starts = arr(*(s for s, _ in rows))
    ends = arr(*(s + d for s, d in rows))
    peak = max_concurrent(starts, ends)
    assert 1 <= peak <= len(rows)
    # brute force: the count of open intervals just after every start
    assert peak == max(int(((starts <= t) & (ends > t)).sum()) for t in starts)
    # disjoint copies shifted far apart do not add up; identical copies do
    assert max_concurrent(np.concatenate([starts, starts + 10_000]), np.concatenate([ends, ends + 10_000])) == peak
    assert max_concurrent(np.concatenate([starts, starts]), np.concatenate([ends, ends])) == 2 * peak


# --- longest_over_slo ---------------------------------------------------------------------------------
def test_longest_over_slo_by_hand():
    bin_ms = 1_000.0
    # bins 0,1,2 over (latency 900 > 500), bin 3 under, bin 5 over: longest run 3 bins
    times = arr(100, 1_100, 2_100, 3_100, 5_100)
    lat = arr(900, 900, 900, 100, 900)
    assert longest_over_slo(times, lat, 500.0, bin_ms) == 3_000.0
    # a gap (an empty bin 4) breaks a run even when both neighbours are over
    assert longest_over_slo(arr(3_100, 5_100), arr(900, 900), 500.0, bin_ms) == 1_000.0
    assert longest_over_slo(arr(), arr(), 500.0, bin_ms) == 0.0
    # P95 of a bin, not its mean: 19 fast and one slow request stay under (P95 interpolates to 100 + 0.05*...)
    assert longest_over_slo(arr(*([10] * 20)), arr(*([100] * 19 + [10_000])), 600.0, bin_ms) == 0.0


# --- summarize on a hand-made run -------------------------------------------------------------------------
def make_task(id, kind, arrival, dispatch, start, end, outcome="ok"):
    t = Task(id, kind, arrival, 1.0)
    t.dispatch_ms, t.start_ms, t.end_ms, t.outcome = dispatch, start, end, outcome
    return t


def run_of(tasks, end_ms, seed=1) -> SimResult:
    """A SimResult whose columns hold exactly these hand-made tasks (as the engine records them)."""
    tasks = sorted(tasks, key=lambda t: t.arrival_ms)
    a = Arrivals.from_tasks(tasks)

    def col(name):
        return np.array([NAN if getattr(t, name, None) is None else getattr(t, name) for t in tasks], dtype=float)

    outcome = [1 if t.outcome == "ok" else 2 if t.outcome == "failed" else 3 if t.dispatch_ms is not None else 0
               for t in tasks]
    columns = {
        "arrival_ms": a.arrival_ms, "service_ms": a.service_ms, "prompt_tokens": a.prompt_tokens,
        "output_tokens": a.output_tokens, "interactive": a.interactive, "source": a.source,
        "dispatch_ms": col("dispatch_ms"), "start_ms": col("start_ms"), "end_ms": col("end_ms"),
        "ttft_ms": col("ttft_ms"), "cap_at_dispatch": col("cap_at_dispatch"),
        "outcome": np.array(outcome, dtype=np.int8), "retries": np.zeros(len(tasks), dtype=np.int32),
    }
    return SimResult("hand", "static", seed, TaskTable(columns, a.labels, a), {}, end_ms=end_ms)


def test_summarize_by_hand():
    tasks = [
        make_task("i1", "interactive", 0, 0, 0, 100),
        make_task("i2", "interactive", 10, 10, 10, 310),
        make_task("i3", "interactive", 20, 20, 20, 220),
        make_task("b1", "batch", 0, 0, 0, 60_000),
        make_task("b2", "batch", 0, 60_000, 60_000, 120_000),
        make_task("b3", "batch", 0, None, None, None, outcome=None),  # stranded
    ]
    result = run_of(tasks, 200_000)
    m = summarize(result, slo_p95_ms=250.0, slo_bin_ms=10_000.0)
    lat = [100.0, 300.0, 200.0]
    assert m["interactive_p50_ms"] == 200.0
    assert m["interactive_p95_ms"] == pytest.approx(np.percentile(lat, 95)) == pytest.approx(290.0)
    assert m["interactive_mean_ms"] == pytest.approx(200.0)
    assert m["interactive_completed"] == 3 and m["batch_completed"] == 2
    assert m["batch_makespan_ms"] == 120_000.0
    assert m["batch_throughput_per_min"] == pytest.approx(1.0)  # 2 tasks in 2 minutes
    # b2 and b3 wait from 0; b1 completes at 60_000 (b2 starts then); b3 waits on to the horizon, with b2's
    # completion at 120_000 cutting it: pieces 60_000, 60_000 and 80_000
    assert m["longest_batch_stall_ms"] == 80_000.0
    assert m["stranded"] == 1 and m["unfinished"] == 0
    assert m["max_in_flight"] == 4 and m["max_batch_in_flight"] == 1
    assert m["p95_over_slo_longest_ms"] == 10_000.0  # one 10 s bin with P95 290 > 250


# --- stats against scipy ----------------------------------------------------------------------------------
SAMPLE = [12.0, 15.5, 9.25, 14.0, 11.0, 13.5]


def test_mean_ci_matches_scipy():
    mean, lo, hi = mean_ci(SAMPLE)
    ref = sps.t.interval(0.95, len(SAMPLE) - 1, loc=np.mean(SAMPLE), scale=sps.sem(SAMPLE))
    assert mean == pytest.approx(12.541666666666666)
    assert (lo, hi) == pytest.approx(ref, rel=1e-12)
    # by hand: t(0.975, 5) = 2.570581835636314, sd = 2.2173934... -> half width 2.32696...
    half = 2.570581835636314 * np.std(SAMPLE, ddof=1) / math.sqrt(6)
    assert hi - mean == pytest.approx(half, rel=1e-12)
    m90 = mean_ci(SAMPLE, 0.90)
    assert (m90[1], m90[2]) == pytest.approx(sps.t.interval(0.90, 5, loc=np.mean(SAMPLE), scale=sps.sem(SAMPLE)))


def test_mean_ci_edge_cases():
    assert mean_ci([]) == (NAN, NAN, NAN) or all(math.isnan(v) for v in mean_ci([]))
    m, lo, hi = mean_ci([3.0])
    assert m == 3.0 and math.isnan(lo) and math.isnan(hi)
    assert mean_ci([4.0, 4.0, 4.0]) == (4.0, 4.0, 4.0)
    assert mean_ci([1.0, NAN, 3.0, math.inf])[0] == 2.0  # non-finite values are left out


def test_paired_matches_scipy():
    a = [10.0, 12.0, 9.0, 11.5, 10.5]
    b = [11.0, 12.5, 10.5, 12.0, 12.0]
    p = paired(a, b)
    d = np.subtract(a, b)
    assert p["n"] == 5
    assert p["diff"] == pytest.approx(-1.0)  # differences -1, -0.5, -1.5, -0.5, -1.5
    lo, hi = sps.t.interval(0.95, 4, loc=d.mean(), scale=sps.sem(d))
    assert (p["diff_ci_low"], p["diff_ci_high"]) == pytest.approx((lo, hi), rel=1e-12)
    # significant exactly when scipy's paired t-test rejects at 5%
    assert sps.ttest_rel(a, b).pvalue < 0.05
    assert p["significant"] is True
    r = np.divide(a, b)
    rlo, rhi = sps.t.interval(0.95, 4, loc=r.mean(), scale=sps.sem(r))
    assert p["ratio"] == pytest.approx(r.mean()) and (p["ratio_ci_low"], p["ratio_ci_high"]) == pytest.approx((rlo, rhi))


def test_paired_not_significant_and_pairs_with_nan_dropped():
    a = [10.0, 12.0, NAN, 9.0]
    b = [11.0, 11.0, 5.0, 9.5]
    p = paired(a, b)
    assert p["n"] == 3
    assert sps.ttest_rel([10, 12, 9], [11, 11, 9.5]).pvalue > 0.05
    assert p["significant"] is False
    assert p["diff"] == pytest.approx(-0.5 / 3)  # differences -1, 1, -0.5


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1e7, allow_nan=False), st.integers(1, 200))
def test_p95_of_a_constant_is_the_constant(value, n):
    tasks = [make_task(f"i{k}", "interactive", float(k), float(k), float(k), float(k) + value) for k in range(n)]
    m = summarize(run_of(tasks, 1e9), slo_p95_ms=1.0)
    assert m["interactive_p95_ms"] == pytest.approx(value, abs=1e-6)
    assert m["interactive_p50_ms"] == pytest.approx(value, abs=1e-6)
    mean, lo, hi = mean_ci([value] * max(n, 2))
    assert mean == lo == hi == value  # exactly: a constant has no spread, whatever the rounding of a sum


def test_a_request_that_gave_up_no_longer_waits():
    # api backend: a batch request refused (429) until it fails at 30_000 never started; it waited 0-30_000,
    # not until the end of the run. The one completion at 10_000 cuts that: the stall is 20_000.
    tasks = [
        make_task("b1", "batch", 0, 0, 0, 10_000),
        make_task("b2", "batch", 0, 0, None, 30_000, outcome="failed"),
        make_task("i1", "interactive", 0, 0, 0, 100),
    ]
    m = summarize(run_of(tasks, 600_000), slo_p95_ms=1_000.0)
    assert m["longest_batch_stall_ms"] == 20_000.0 and m["batch_failed"] == 1


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 40), st.one_of(st.integers(0, 12).map(float),
                                                          st.floats(0, 2_000, allow_nan=False))), max_size=300),
    slo=st.sampled_from([3.0, 5.0, 6.0, 500.0, 1_000.0]),
    spread=st.sampled_from([1.0, 10.0, 1e7]),
)
def test_longest_over_slo_counting_matches_sorting(data, slo, spread):
    # Bins are decided from counts and only those near the SLO are computed exactly: the same answer as
    # np.percentile on every bin, ties and values at the SLO included (and sparse bins over a long span).
    from simlab.experiments.metrics import _longest_over_slo_sorted

    times = np.array([t * 1_000.0 * spread + 0.5 for t, _ in data], dtype=float)
    lat = np.array([v for _, v in data], dtype=float)
    got = longest_over_slo(times.copy(), lat, slo, 1_000.0)
    want = _longest_over_slo_sorted(times // 1_000.0, lat, slo, 1_000.0) if len(times) else 0.0
    assert got == want
    assert longest_over_slo(times.copy(), lat, slo, 1_000.0, own=True) == want


def test_summary_only_runs_summarize_the_same(tmp_path):
    """A summary-only run (no cap column, no names, columns freed as the summary reads them) gives the
    summary of a full run, bit for bit, on backends that fail, retry, stream tokens or close the loop."""
    from pathlib import Path

    from simlab.scenario import load_scenario
    from simlab.world.conditions import conditions_of
    from simlab.world.engine import Engine

    root = Path(__file__).resolve().parents[1] / "scenarios"
    for name in ("provider-quota", "eval-sweep", "seed-article", "nightly-backfill"):
        s = load_scenario(root / f"{name}.toml")
        for cond in conditions_of(s)[:3]:
            world = cond.apply(s)
            for policy in ("adaptive", "unscheduled"):
                full = summarize(Engine(world, world.options(policy), 2).run(), world.slo_p95_ms)
                lean = Engine(world, world.options(policy), 2, summary=True).run()
                assert "cap_at_dispatch" not in lean.table.columns and "source" not in lean.table.columns
                got = summarize(lean, world.slo_p95_ms, consume=True)
                assert repr(got) == repr(full), (name, cond.name, policy)


# --- too few requests for a P95 ------------------------------------------------------------------------------------
def test_p95_of_21_latencies_lies_between_the_two_largest_and_of_22_below():
    """The threshold of the few-requests warning is where np.percentile's P95 leaves the two largest latencies."""
    from simlab.experiments.metrics import P95_FROM_TWO_LARGEST

    for n in (2, 5, P95_FROM_TWO_LARGEST):
        x = np.arange(1.0, n + 1)
        assert n - 1 <= np.percentile(x, 95) <= n
    x = np.arange(1.0, P95_FROM_TWO_LARGEST + 2)
    assert np.percentile(x, 95) < P95_FROM_TWO_LARGEST


def test_few_requests_warning_on_the_median_run():
    from simlab.experiments.metrics import P95_FROM_TWO_LARGEST, few_requests_warning

    rows = [{"interactive_completed": n} for n in (3, 500, P95_FROM_TWO_LARGEST)]  # median 21
    said = few_requests_warning(rows, "run")
    assert said is not None and "the median run completes 21 interactive requests (of 3 runs)" in said
    assert "duration_ms" in said
    rows = [{"interactive_completed": n} for n in (3, 500, P95_FROM_TWO_LARGEST + 1)]  # median 22
    assert few_requests_warning(rows, "run") is None
    one = few_requests_warning([{"interactive_completed": 1}, {"interactive_completed": None}], "selection run")
    assert one is not None and "the median selection run completes 1 interactive request (of 1 runs)" in one
    assert few_requests_warning([{"policy": "x"}], "run") is None  # nothing counted: nothing said
