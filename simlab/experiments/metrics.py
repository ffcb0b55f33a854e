"""Per-run metrics, computed once from the recorded tasks with numpy (never per event)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from simlab.world.engine import SimResult
from simlab.world.tasktable import OUTCOMES

OUTCOME_OK, OUTCOME_FAILED, OUTCOME_TIMEOUT = OUTCOMES.index("ok"), OUTCOMES.index("failed"), OUTCOMES.index("timeout")

SUMMARY_COLUMNS = (
    "policy",
    "seed",
    "interactive_p50_ms",
    "interactive_p95_ms",
    "interactive_p99_ms",
    "interactive_mean_ms",
    "interactive_completed",
    "interactive_failed",
    "batch_completed",
    "batch_failed",
    "batch_throughput_per_min",
    "batch_makespan_ms",
    "batch_p95_ms",
    "longest_batch_stall_ms",
    "max_in_flight",
    "max_batch_in_flight",
    "stranded",
    "unfinished",
    "p95_over_slo_longest_ms",
    "interactive_ttft_p95_ms",
    "retries",
)
# Columns of a continuous-batching engine with a KV cache or engine scheduling (world/backends/kv_batching.py),
# present only in its runs: every other scenario's tables keep their columns.
ENGINE_COLUMNS = ("preemptions", "recomputed_tokens", "kv_use_mean", "kv_use_peak")
# Batch lifecycle (timeouts, eviction, deadlines): in a run's row only when its scenario or options use them, so
# tables of runs without them keep their columns; `metric_columns` gives the columns for a set of rows.
LIFECYCLE_COLUMNS = (
    "batch_deadline_share",  # of the batch jobs of workloads with deadline_ms: done by arrival + deadline_ms
    "wasted_tokens",  # thrown away by stopped attempts (timeouts, evictions): prompt once prefilled + output
    "wasted_ms",  # service time of stopped attempts
    "timeouts",  # attempts stopped by their workload's timeout_ms
    "evictions",  # attempts stopped by the policy (evict = "newest")
)
# Gateway instances and their crashes ([gateway], simlab/world/gateway.py): in a run's row only when its scenario has
# more than one instance or crashes. `global_cap` is maxConcurrency (one instance's), `time_above_cap_ms` how long
# the backend held more than it; lost/resubmitted: queued work a crash lost and clients sent again; abandoned:
# running work a crash stopped for good; redelivered/duplicated: running work sent again, and not idempotent.
GATEWAY_COLUMNS = (
    "gateway_instances",
    "global_cap",
    "backend_peak_in_flight",
    "time_above_cap_ms",
    "crashes",
    "lost",
    "resubmitted",
    "abandoned",
    "redelivered",
    "duplicated",
    "abandoned_work_ms",
)
LIFECYCLE_FILL = {"batch_deadline_share": math.nan, "wasted_tokens": 0, "wasted_ms": 0.0, "timeouts": 0, "evictions": 0}


# With n <= 21 latencies, a P95 (np.percentile, linear) lies between the two largest: the run's P95 is then
# its slowest requests, not a tail of many.
P95_FROM_TWO_LARGEST = 21


def few_requests_warning(runs, where: str) -> str | None:
    """A warning when the median of `runs` (metric rows) completes so few interactive requests that its P95 is
    little more than its slowest one; None otherwise, or when no row counts its requests."""
    counts = [r["interactive_completed"] for r in runs if r.get("interactive_completed") is not None]
    if not counts:
        return None
    median = statistics.median(counts)
    if median > P95_FROM_TWO_LARGEST:
        return None
    requests = "request" if median == 1 else "requests"
    return (f"few requests: the median {where} completes {median:g} interactive {requests} (of {len(counts)} runs); "
            f"with {P95_FROM_TWO_LARGEST} or fewer a run's P95 lies between its two slowest requests, so every P95 "
            "compared here rests on a handful of requests. Lengthen duration_ms or add interactive traffic.")


def metric_columns(rows) -> list[str]:
    """The summary columns of these rows: SUMMARY_COLUMNS, then the engine's columns (ENGINE_COLUMNS) and the
    lifecycle ones (LIFECYCLE_COLUMNS) and the gateway's (GATEWAY_COLUMNS) when any row has them."""
    out = list(SUMMARY_COLUMNS)
    for group in (ENGINE_COLUMNS, LIFECYCLE_COLUMNS, GATEWAY_COLUMNS):
        if any(group[0] in r for r in rows):
            out += group
    return out


def lifecycle(result: SimResult) -> dict:
    """The lifecycle metrics of a run (LIFECYCLE_COLUMNS; empty when it had no timeout, eviction or deadline)."""
    counters = result.counters
    if not counters:
        return {}
    c = result.table.columns
    out = dict(LIFECYCLE_FILL)
    deadline = c.get("deadline_ms")
    if deadline is not None:
        has = ~c["interactive"] & ~np.isnan(deadline)
        if has.any():
            met = has & (c["outcome"] == OUTCOME_OK) & (c["end_ms"] - c["arrival_ms"] <= deadline)
            out["batch_deadline_share"] = float(np.count_nonzero(met) / np.count_nonzero(has))
    if c.get("wasted_tokens") is not None:
        out["wasted_tokens"] = int(c["wasted_tokens"].sum())
        out["wasted_ms"] = float(c["wasted_ms"].sum())
    out["timeouts"] = int(counters.get("timeouts", 0))
    out["evictions"] = int(counters.get("evictions", 0))
    return out


def task_arrays(result: SimResult) -> dict[str, np.ndarray]:
    """A SimResult's per-task arrays (views of its columns where they exist), for comparisons in tests."""
    c = result.table.columns
    outcome = c["outcome"]
    n = len(outcome)
    return {
        "interactive": c["interactive"],
        "arrival_ms": c["arrival_ms"],
        "dispatch_ms": c["dispatch_ms"],
        "start_ms": c["start_ms"],
        "end_ms": c["end_ms"],
        "ttft_ms": c["ttft_ms"] if c["ttft_ms"] is not None else np.full(n, math.nan),
        "ok": outcome == OUTCOME_OK,
        "failed": outcome == OUTCOME_FAILED,
        "retries": (c["retries"] if c["retries"] is not None else np.zeros(n)).astype(float),
    }


def max_concurrent(starts: np.ndarray, ends: np.ndarray, in_place: bool = False) -> int:
    """Most intervals [start, end) open at once; an end and a start at one instant do not overlap.

    After the i-th start in time order, i + 1 intervals have started and every end at or before it has
    closed: two sorted copies and a search in chunks, not a sort of the 2n events (a day at 50 RPS: about
    250 MB less at the peak). `in_place=True` sorts the arrays given (a summary that owns them)."""
    if in_place:  # the caller's arrays are sorted where they are (NaN last) and cut: no copies
        starts.sort()
        starts = starts[:len(starts) - np.count_nonzero(np.isnan(starts))]
        ends.sort()
        ends = ends[:len(ends) - np.count_nonzero(np.isnan(ends))]
    else:
        starts = starts[~np.isnan(starts)]
        starts.sort()
        ends = ends[~np.isnan(ends)]
        ends.sort()
    if len(starts) == 0:
        return 0
    most = 0
    for lo in range(0, len(starts), _CHUNK):
        chunk = starts[lo:lo + _CHUNK]
        open_ = np.arange(lo + 1, lo + len(chunk) + 1) - np.searchsorted(ends, chunk, side="right")
        most = max(most, int(open_.max()))
    return most


_CHUNK = 1 << 18


def waiting_intervals(arrivals: np.ndarray, starts: np.ndarray, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """The union of [arrival, start) over tasks, as sorted disjoint (low, high) arrays. A task that never
    started waits until `horizon`."""
    starts = np.where(np.isnan(starts), horizon, starts)
    keep = starts > arrivals
    lo, hi = arrivals[keep], starts[keep]
    if len(lo) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    new = np.concatenate([[True], lo[1:] > hi[:-1]])  # a gap before this interval: a new run of waiting
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [len(lo) - 1]])
    return lo[first], hi[last]


def longest_stall(arrivals: np.ndarray, starts: np.ndarray, ends: np.ndarray, horizon: float) -> float:
    """Longest time during which batch work waited (arrived, not yet started: queued in the scheduler or in the
    server) and no batch task completed. Idle time with nothing waiting is not a stall.

    `arrivals`, `starts` and `ends` are per batch task (NaN: never started / never completed); `ends` should
    hold successful completions only; `horizon` is when the run stopped."""
    lo, hi = waiting_intervals(np.asarray(arrivals, float), np.asarray(starts, float), horizon)
    if len(lo) == 0:
        return 0.0
    done = np.asarray(ends, float)
    done = np.sort(done[~np.isnan(done)])
    # A completion splits the waiting run it falls in; pieces are measured between consecutive marks.
    seg = np.searchsorted(lo, done, side="right") - 1
    inside = (seg >= 0) & (done > lo[np.maximum(seg, 0)]) & (done < hi[np.maximum(seg, 0)])
    marks = np.concatenate([lo, hi, done[inside]])
    is_hi = np.concatenate([np.zeros(len(lo), bool), np.ones(len(hi), bool), np.zeros(int(inside.sum()), bool)])
    order = np.lexsort((~is_hi, marks))  # at one instant, a run's end comes before the next run's start
    marks, is_hi = marks[order], is_hi[order]
    pieces = np.diff(marks)[~is_hi[:-1]]  # a piece starting at a run's end is a gap with nothing waiting
    return float(np.max(pieces)) if len(pieces) else 0.0


def longest_over_slo(times: np.ndarray, latencies: np.ndarray, slo: float, bin_ms: float, own: bool = False) -> float:
    """Longest stretch of consecutive bins whose interactive P95 (`np.percentile`, linear) exceeds the SLO.

    Counted, not sorted: in a bin of m latencies of which k are at most the SLO, numpy's P95 interpolates
    between the sorted values at g and g + 1, g = floor(0.95 (m - 1)) give or take one for rounding, and
    lies between them. So it is over when k <= g - 1 and not over when k > g + 2 (both neighbours on one
    side); only bins between are computed exactly from their latencies. A day at 50 RPS: a few bytes a
    request instead of a sorted copy of every column. `own=True`: `times` may be overwritten."""
    if len(times) == 0:
        return 0.0
    bins = np.floor_divide(times, bin_ms, out=times if own else None)
    first, last = bins.min(), bins.max()
    if last - first > 2 * len(bins) + 4096:  # sparse bins over a long span: counting arrays would be too long
        return _longest_over_slo_sorted(bins, latencies, slo, bin_ms)
    bins -= first
    bins = bins.astype(np.int32 if last - first < 2**31 else np.int64)
    m = np.bincount(bins)
    k = np.bincount(bins[latencies <= slo], minlength=len(m))
    g = (95 * (m - 1)) // 100
    over = (m > 0) & (k <= g - 1)
    unsure = (m > 0) & ~over & (k <= np.minimum(g + 2, m - 1))
    if unsure.any():
        pick = unsure[bins]
        sub_bins, sub_lat = bins[pick], latencies[pick]
        del pick
        order = np.argsort(sub_bins, kind="stable")
        sub_bins, sub_lat = sub_bins[order], sub_lat[order]
        edges = np.flatnonzero(np.diff(sub_bins)) + 1
        for b, chunk in zip(sub_bins[np.concatenate([[0], edges])], np.split(sub_lat, edges)):
            over[b] = np.percentile(chunk, 95) > slo
    return float(_longest_true_run(over) * bin_ms)


def _longest_true_run(flags: np.ndarray) -> int:
    edges = np.flatnonzero(np.diff(np.concatenate([[False], flags, [False]]).astype(np.int8)))
    return int((edges[1::2] - edges[::2]).max()) if len(edges) else 0


def _longest_over_slo_sorted(bins: np.ndarray, latencies: np.ndarray, slo: float, bin_ms: float) -> float:
    """`longest_over_slo` by sorting the bins (for sparse bins over a long span)."""
    bins = bins.astype(np.int64)
    order = np.argsort(bins, kind="stable")
    latencies = latencies[order]
    bins = bins[order]
    del order
    edges = np.flatnonzero(np.diff(bins)) + 1
    longest = run = 0
    previous = None
    for b, chunk in zip(bins[np.concatenate([[0], edges])], np.split(latencies, edges)):
        if np.percentile(chunk, 95) > slo:
            run = run + 1 if run and b == previous + 1 else 1
        else:
            run = 0
        longest = max(longest, run)
        previous = b
    return float(longest * bin_ms)


def _interactive_latencies(end: np.ndarray, arrival: np.ndarray, done: np.ndarray) -> np.ndarray:
    """`end[done] - arrival[done]`, in chunks: no full-length temporary."""
    out = np.empty(int(np.count_nonzero(done)))
    k = 0
    for lo in range(0, len(done), _CHUNK):
        d = done[lo:lo + _CHUNK]
        e = end[lo:lo + _CHUNK][d]
        np.subtract(e, arrival[lo:lo + _CHUNK][d], out=out[k:k + len(e)])
        k += len(e)
    return out


def summarize(result: SimResult, slo_p95_ms: float, slo_bin_ms: float = 10_000.0, consume: bool = False) -> dict:
    """The run's summary row. `consume=True` drops the table's columns as they are used (the caller needs
    the table no more): a long run's peak memory is then about its columns, not twice them."""
    c = result.table.columns
    take = c.pop if consume else c.__getitem__
    lifecycle_row = lifecycle(result)  # before columns are consumed
    outcome, inter = c["outcome"], c["interactive"]
    ok = outcome == OUTCOME_OK
    failed = outcome == OUTCOME_FAILED
    if lifecycle_row:
        failed |= outcome == OUTCOME_TIMEOUT  # a task that timed out for good failed
    end = c["end_ms"]
    ended = ~np.isnan(end)
    done_i = inter & ok & ended
    batch = np.flatnonzero(~inter)  # few: batch columns are taken out once
    b_ok = ok[batch]
    done_b = b_ok & ended[batch]
    del ended
    interactive_failed = int(np.count_nonzero(inter & failed))
    batch_failed = int(np.count_nonzero(failed[batch]))
    del ok, failed
    arrival = take("arrival_ms")
    lat_i = _interactive_latencies(end, arrival, done_i)
    b_arrivals = arrival[batch]
    del arrival
    b_ends = end[batch]
    b_done = np.where(b_ok, b_ends, math.nan)  # a failure is not progress
    b_starts = take("start_ms")[batch]
    b_left_queue = np.where(np.isnan(b_starts), b_ends, b_starts)  # started, or gave up (failed) without starting
    lat_b = (b_ends - b_arrivals)[done_b]
    makespan = float(np.nanmax(b_ends) - np.min(b_arrivals)) if done_b.any() else math.nan
    ttft = c["ttft_ms"]
    ttft = ttft[done_i] if ttft is not None else np.empty(0)
    ttft = ttft[~np.isnan(ttft)]
    retries = c["retries"]
    retries = int(retries.sum()) if retries is not None else 0
    retries += int(result.counters.get("timeout_retries", 0))  # 429 retries and timed-out attempts sent again
    for name in ("ttft_ms", "retries", "interactive", "outcome"):
        take(name)
    del inter, outcome

    def pct(x, q):
        return float(np.percentile(x, q)) if len(x) else math.nan

    dispatch = c["dispatch_ms"]
    row = {
        "policy": result.policy,
        "seed": result.seed,
        "interactive_p50_ms": pct(lat_i, 50),
        "interactive_p95_ms": pct(lat_i, 95),
        "interactive_p99_ms": pct(lat_i, 99),
        "interactive_mean_ms": float(np.mean(lat_i)) if len(lat_i) else math.nan,
        "interactive_completed": int(np.count_nonzero(done_i)),
        "interactive_failed": interactive_failed,
        "batch_completed": int(done_b.sum()),
        "batch_failed": batch_failed,
        "batch_throughput_per_min": float(done_b.sum() / (makespan / 60_000.0)) if makespan > 0 else math.nan,
        "batch_makespan_ms": makespan,
        "batch_p95_ms": pct(lat_b, 95),
        "longest_batch_stall_ms": longest_stall(b_arrivals, b_left_queue, b_done, result.end_ms),
        "max_in_flight": None,
        "max_batch_in_flight": max_concurrent(dispatch[batch], b_ends),
        "stranded": int(np.count_nonzero(np.isnan(dispatch))),
        "unfinished": int(np.count_nonzero(~np.isnan(dispatch) & np.isnan(end))),
        "p95_over_slo_longest_ms": longest_over_slo(end[done_i], lat_i, slo_p95_ms, slo_bin_ms, own=True),
        "interactive_ttft_p95_ms": pct(ttft, 95),
        "retries": retries,
    }
    del lat_i, done_i
    take("dispatch_ms"), take("end_ms")
    row["max_in_flight"] = max_concurrent(dispatch, end, in_place=consume)
    row.update(lifecycle_row)
    row.update(result.gateway)  # empty without gateway instances
    stats = result.backend_stats
    if ENGINE_COLUMNS[0] in stats:  # no KV cache: its two columns are NaN
        row.update({c: math.nan if stats[c] is None else stats[c] for c in ENGINE_COLUMNS})
    return row
