#!/usr/bin/env python3
"""Generate randomized conformance cases for `simlab replay` (stdlib only, Python 3.11).

Each case is a folder holding
  trace.csv     id,kind,arrival_ms,service_ms (+ sometimes extra columns, other column order, unsorted rows)
  options.json  the article's SchedulerOptions plus tieBreak / policy / smoothingAlpha / windowMs
  expected.csv  id,kind,arrival_ms,start_ms,end_ms as produced by the article's own scheduler code
                (article_scheduler.js) under a virtual clock (replay.js), via `node replay.js`.

    python tests/conformance/make_cases.py --out tests/conformance/cases --seed 1 --count 14

With --count >= the number of templates the templates are used in order (cycling); with fewer, a
seed-dependent sample of templates is used. Everything is a pure function of (--seed, case index).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPLAY_JS = HERE / "replay.js"

REQUIRED_COLUMNS = ["id", "kind", "arrival_ms", "service_ms"]


# --------------------------------------------------------------------------------------------- model
@dataclass
class Task:
    kind: str
    arrival: float
    service: float
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class Case:
    template: str
    tasks: list[Task]
    options: dict
    columns: list[str] = field(default_factory=lambda: list(REQUIRED_COLUMNS))
    id_style: str = "prefixed"  # "prefixed" (i000001/b000002) or "numeric"
    shuffle_fraction: float = 0.0  # fraction of rows moved out of time order in the written trace


# ----------------------------------------------------------------------------------- time quantizing
def quantize(t: float, mode: str) -> float:
    """mode: 'int' (whole ms), 'q<N>' (multiples of N ms), 'float' (full double), 'float3' (0.001 ms)."""
    if t < 0:
        t = 0.0
    if mode == "int":
        return float(math.floor(t + 0.5))
    if mode.startswith("q"):
        q = int(mode[1:])
        return float(q * math.floor(t / q + 0.5))
    if mode == "float3":
        return round(t, 3)
    if mode == "float":
        return t
    raise ValueError(mode)


def fmt_num(x: float) -> str:
    """Integers without a decimal point, other floats with Python's shortest round-trip repr."""
    if x == int(x) and abs(x) < 2**53:
        return str(int(x))
    return repr(float(x))


# -------------------------------------------------------------------------------------- generators
def uniform_arrivals(rng: random.Random, n: int, t0: float, t1: float) -> list[float]:
    """A Poisson process on [t0, t1) conditioned on n arrivals (= n sorted uniforms)."""
    return sorted(rng.uniform(t0, t1) for _ in range(n))


def lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, median * math.exp(rng.gauss(0.0, sigma))))


def interactive_stream(
    rng: random.Random,
    n: int,
    t0: float,
    t1: float,
    burst_share: float,
    n_bursts: int,
    burst_len: tuple[float, float],
) -> list[float]:
    """Poisson background plus n_bursts Poisson bursts, n arrivals in all, within [t0, t1)."""
    n_burst_total = int(n * burst_share) if n_bursts else 0
    times = uniform_arrivals(rng, n - n_burst_total, t0, t1)
    if n_bursts:
        weights = [rng.uniform(0.5, 1.5) for _ in range(n_bursts)]
        total = sum(weights)
        counts = [int(n_burst_total * w / total) for w in weights]
        counts[0] += n_burst_total - sum(counts)
        for c in counts:
            length = rng.uniform(*burst_len)
            b0 = rng.uniform(t0, max(t0, t1 - length))
            times += uniform_arrivals(rng, c, b0, b0 + length)
    return sorted(times)


def batch_clusters(
    rng: random.Random, n: int, t0: float, t1: float, n_clusters: int, spread_ms: float
) -> list[float]:
    """n batch arrivals in n_clusters bursts; each burst within spread_ms of its instant (0 = same instant)."""
    if n <= 0:
        return []
    centers = [rng.uniform(t0, t1) for _ in range(n_clusters)]
    out = []
    for i in range(n):
        c = centers[i % n_clusters] if i < n_clusters else rng.choice(centers)
        out.append(c + (rng.uniform(0, spread_ms) if spread_ms > 0 else 0.0))
    return sorted(out)


def make_tasks(
    rng: random.Random,
    mode: str,
    inter_times: list[float],
    batch_times: list[float],
    inter_median: float,
    batch_median: float,
    p_zero: float = 0.0,
) -> list[Task]:
    tasks = []
    for t in inter_times:
        s = 0.0 if rng.random() < p_zero else lognormal(rng, inter_median, 0.6, 0.5, 20 * inter_median)
        tasks.append(Task("interactive", quantize(t, mode), quantize(s, mode)))
    for t in batch_times:
        s = 0.0 if rng.random() < p_zero else lognormal(rng, batch_median, 0.7, 1.0, 20 * batch_median)
        tasks.append(Task("batch", quantize(t, mode), quantize(s, mode)))
    # Python's sort is stable: equal arrivals keep interactive-before-batch generation order, so shuffle
    # first to interleave kinds at equal instants.
    rng.shuffle(tasks)
    tasks.sort(key=lambda k: k.arrival)
    return tasks


def base_options(rng: random.Random, inter_rate_rps: float, inter_median: float, nice: bool = False) -> dict:
    """Options whose thresholds sit near the trace's own interactive load, so pressure moves over [0, 1].
    nice=True gives integer thresholds (P95 a multiple of 10 ms) so that, with integer times, the batch cap
    `batchMax - range * pressure` often lands exactly on .5 (JavaScript's Math.round rounds it up)."""
    max_c = rng.choice([4, 6, 8, 8, 12, 16])
    bmax = rng.randint(2, max(2, max_c - 1))
    bmin = rng.randint(1, bmax - 1)
    rps_thr = inter_rate_rps * rng.uniform(0.5, 2.0)
    p95_thr = inter_median * rng.uniform(2.0, 8.0)
    if nice:
        rps_thr = float(max(1, round(rps_thr)))
        p95_thr = float(max(10, 10 * round(p95_thr / 10)))
    else:
        rps_thr = round(rps_thr, 3)
        p95_thr = round(p95_thr, 1)
    return {
        "maxConcurrency": max_c,
        "batchMaxConcurrency": bmax,
        "batchMinConcurrency": bmin,
        "interactiveRpsThreshold": rps_thr,
        "interactiveP95LatencyMs": p95_thr,
    }


def total_tasks(rng: random.Random, lo: int = 1000, hi: int = 4000) -> int:
    return rng.randint(lo, hi)


# --------------------------------------------------------------------------------------- templates
def t_poisson_bursts_int(rng: random.Random) -> Case:
    """Integer ms, Poisson interactive with bursts, batch backlog at 0 plus bursts; FIFO; default window."""
    n = total_tasks(rng, 1500, 4000)
    n_b = int(n * rng.uniform(0.2, 0.4))
    dur = rng.uniform(60_000, 120_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.4, rng.randint(2, 5), (1000, 5000))
    backlog = rng.randint(50, n_b // 2)
    batch = [0.0] * backlog + batch_clusters(rng, n_b - backlog, 0, dur, rng.randint(3, 8), 0)
    im = rng.uniform(20, 150)
    tasks = make_tasks(rng, "int", inter, batch, im, rng.uniform(300, 2000), p_zero=0.01)
    opts = base_options(rng, (n - n_b) / dur * 1000, im, nice=True)
    opts["tieBreak"] = "fifo"
    return Case("poisson_bursts_int", tasks, opts)


def t_poisson_bursts_int_seedheap(rng: random.Random) -> Case:
    """As above with the article's heap (LIFO among equals) and the window key left out."""
    c = t_poisson_bursts_int(rng)
    c.options["tieBreak"] = "seed-heap"
    c.options["batchMinConcurrency"] = min(c.options["batchMaxConcurrency"], 2)
    return Case("poisson_bursts_int_seedheap", c.tasks, c.options)


def t_float_smoothing(rng: random.Random) -> Case:
    """Full-precision float times, per-evaluation EMA, 5 s window, FIFO."""
    n = total_tasks(rng, 1000, 2200)
    n_b = int(n * rng.uniform(0.15, 0.35))
    dur = rng.uniform(30_000, 60_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, rng.randint(2, 4), (500, 3000))
    batch = batch_clusters(rng, n_b, 0, dur * 0.7, rng.randint(2, 5), rng.uniform(0, 50))
    im = rng.uniform(30, 200)
    tasks = make_tasks(rng, "float", inter, batch, im, rng.uniform(300, 1500))
    opts = base_options(rng, (n - n_b) / dur * 1000, im)
    opts.update(windowMs=5000, smoothingAlpha=round(rng.uniform(0.02, 0.25), 3), tieBreak="fifo")
    return Case("float_smoothing", tasks, opts)


def t_float_seedheap_smoothing(rng: random.Random) -> Case:
    """Times at 0.001 ms resolution, seed-heap, EMA, 20 s window."""
    n = total_tasks(rng, 1200, 3000)
    n_b = int(n * rng.uniform(0.25, 0.45))
    dur = rng.uniform(40_000, 90_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, rng.randint(2, 6), (800, 4000))
    backlog = rng.randint(30, 300)
    batch = [0.0] * backlog + batch_clusters(rng, n_b - backlog, 0, dur, rng.randint(3, 6), 0)
    im = rng.uniform(30, 120)
    tasks = make_tasks(rng, "float3", inter, batch, im, rng.uniform(500, 2500))
    opts = base_options(rng, (n - n_b) / dur * 1000, im)
    opts.update(windowMs=20000, smoothingAlpha=rng.choice([0.02, 0.05, 0.1, 0.2]), tieBreak="seed-heap")
    return Case("float_seedheap_smoothing", tasks, opts)


def _stranding_trace(rng: random.Random, mode: str, max_c: int) -> tuple[list[Task], float, float]:
    """Moderate interactive traffic, a heavy interactive burst, then silence, with a batch backlog still
    queued: the last evaluations see full pressure, and nothing wakes the batch queue afterwards.
    Rates are relative to the interactive capacity max_c / median service."""
    n = total_tasks(rng, 1500, 3500)
    n_b = int(n * rng.uniform(0.25, 0.45))
    n_i = n - n_b
    im = rng.uniform(40, 150)
    capacity = max_c * 1000 / (1.2 * im)  # tasks per second with every slot busy (lognormal mean)
    n_final = int(n_i * rng.uniform(0.1, 0.25))
    rate = capacity * rng.uniform(0.2, 0.5)
    moderate = (n_i - n_final) / rate * 1000
    final_len = n_final / (capacity * rng.uniform(1.5, 3.0)) * 1000
    busy = moderate + final_len
    inter = interactive_stream(rng, n_i - n_final, 0, moderate, 0.3, rng.randint(1, 3), (1000, 3000))
    inter += uniform_arrivals(rng, n_final, moderate, busy)
    backlog = rng.randint(n_b // 3, n_b // 2)
    rest = n_b - backlog
    early = rest // 2
    # some batch bursts during the busy phase, the rest shortly after interactive traffic stops
    batch = (
        [0.0] * backlog
        + batch_clusters(rng, early, 0, busy, rng.randint(2, 4), 0)
        + batch_clusters(rng, rest - early, busy, busy + 3000, rng.randint(1, 3), 0)
    )
    tasks = make_tasks(rng, mode, sorted(inter), batch, im, rng.uniform(1000, 4000), p_zero=0.005)
    return tasks, rate, im


def t_stranded_fifo(rng: random.Random) -> Case:
    """batchMinConcurrency = 0, interactive traffic ending in a heavy burst then silence, long window:
    batch work is stranded."""
    max_c = rng.choice([6, 8, 10])
    tasks, rate, im = _stranding_trace(rng, "int", max_c)
    opts = {
        "maxConcurrency": max_c,
        "batchMaxConcurrency": rng.randint(3, max_c - 1),
        "batchMinConcurrency": 0,
        "interactiveRpsThreshold": float(max(1, round(rate * rng.uniform(0.8, 2.0)))),
        "interactiveP95LatencyMs": float(max(10, 10 * round(im * rng.uniform(2.5, 6.0) / 10))),
        "windowMs": rng.choice([30000, 60000]),
        "tieBreak": "fifo",
    }
    return Case("stranded_fifo", tasks, opts)


def t_stranded_seedheap_smoothing(rng: random.Random) -> Case:
    """batchMinConcurrency = 0 with the EMA and the article's heap; float times."""
    max_c = rng.choice([8, 12])
    tasks, rate, im = _stranding_trace(rng, "float3", max_c)
    opts = {
        "maxConcurrency": max_c,
        "batchMaxConcurrency": rng.randint(3, 6),
        "batchMinConcurrency": 0,
        "interactiveRpsThreshold": round(rate * rng.uniform(0.8, 2.0), 3),
        "interactiveP95LatencyMs": round(im * rng.uniform(2.5, 6.0), 1),
        "windowMs": 45000,
        "smoothingAlpha": round(rng.uniform(0.003, 0.015), 4),  # per-evaluation EMA: tiny alpha to matter
        "tieBreak": "seed-heap",
    }
    return Case("stranded_seedheap_smoothing", tasks, opts)


def t_small_window_ties(rng: random.Random) -> Case:
    """Tiny window, times on a 10 ms grid, many zero service times: ties of every kind."""
    n = total_tasks(rng, 1500, 3500)
    n_b = int(n * rng.uniform(0.3, 0.5))
    dur = rng.uniform(20_000, 40_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, rng.randint(3, 6), (300, 2000))
    batch = [0.0] * rng.randint(20, 200)
    batch += batch_clusters(rng, n_b - len(batch), 0, dur, rng.randint(4, 10), 0)
    im = rng.uniform(20, 80)
    tasks = make_tasks(rng, "q10", inter, batch, im, rng.uniform(100, 600), p_zero=0.08)
    opts = base_options(rng, (n - n_b) / dur * 1000, im, nice=True)
    window = rng.choice([50, 100, 200, 250])
    opts["maxConcurrency"] = max(opts["maxConcurrency"], 6)
    opts["batchMaxConcurrency"] = max(opts["batchMaxConcurrency"], 3)
    opts["batchMinConcurrency"] = rng.randint(1, opts["batchMaxConcurrency"] - 2)
    rng_ = opts["batchMaxConcurrency"] - opts["batchMinConcurrency"]
    # Each sample in the window adds 1000/window to rps; with this threshold range * pressure = n / (2j),
    # so the cap `batchMax - range * pressure` is exactly x.5 whenever n = j (mod 2j): Math.round ties.
    opts["interactiveRpsThreshold"] = float(2 * rng_ * (1000 // window) * rng.choice([1, 2]))
    opts["interactiveP95LatencyMs"] = float(10 * round(im * rng.uniform(4.0, 10.0) / 10))
    opts.update(windowMs=window, tieBreak="fifo")
    return Case("small_window_ties", tasks, opts)


def t_batchmax_ge_max(rng: random.Random) -> Case:
    """batchMaxConcurrency >= maxConcurrency: batch can take every slot when pressure is low."""
    n = total_tasks(rng, 1000, 3000)
    n_b = int(n * rng.uniform(0.3, 0.5))
    dur = rng.uniform(30_000, 80_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.4, rng.randint(2, 4), (1000, 3000))
    batch = [0.0] * rng.randint(100, 400)
    batch += batch_clusters(rng, n_b - len(batch), 0, dur, rng.randint(2, 6), 0)
    im = rng.uniform(30, 150)
    tasks = make_tasks(rng, "int", inter, batch, im, rng.uniform(200, 1200), p_zero=0.01)
    opts = base_options(rng, (n - n_b) / dur * 1000, im, nice=True)
    max_c = rng.choice([2, 3, 4, 6])
    opts.update(
        maxConcurrency=max_c,
        batchMaxConcurrency=max_c + rng.randint(0, 3),
        batchMinConcurrency=rng.randint(1, max_c),
        windowMs=rng.choice([2000, 10000]),
        tieBreak=rng.choice(["fifo", "seed-heap"]),
    )
    return Case("batchmax_ge_max", tasks, opts)


def t_batch_bursts_coarse(rng: random.Random) -> Case:
    """Batch bursts of hundreds at one instant, 50 ms grid: finishes coincide with arrivals; seed-heap."""
    n = total_tasks(rng, 1500, 3500)
    n_b = int(n * rng.uniform(0.4, 0.6))
    dur = rng.uniform(30_000, 60_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.3, rng.randint(1, 3), (1000, 3000))
    batch = batch_clusters(rng, n_b, 0, dur, rng.randint(3, 6), 0)
    im = rng.uniform(50, 200)
    tasks = make_tasks(rng, "q50", inter, batch, im, rng.uniform(200, 800), p_zero=0.03)
    opts = base_options(rng, (n - n_b) / dur * 1000, im, nice=True)
    opts.update(tieBreak="seed-heap", windowMs=rng.choice([1000, 10000]))
    return Case("batch_bursts_coarse", tasks, opts)


def t_unscheduled_int(rng: random.Random) -> Case:
    """policy unscheduled (the article's Promise.all arm); scheduler options present but unused."""
    c = t_poisson_bursts_int(rng)
    c.options["policy"] = "unscheduled"
    return Case("unscheduled_int", c.tasks, c.options)


def t_unscheduled_float(rng: random.Random) -> Case:
    """policy unscheduled with full-precision float times and no other options."""
    n = total_tasks(rng, 1000, 2000)
    n_b = int(n * 0.3)
    dur = rng.uniform(20_000, 40_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, 2, (500, 2000))
    batch = [0.0] * 100 + batch_clusters(rng, n_b - 100, 0, dur, 3, 20.0)
    tasks = make_tasks(rng, "float", inter, batch, rng.uniform(20, 100), rng.uniform(200, 1000))
    return Case("unscheduled_float", tasks, {"policy": "unscheduled"})


def t_range_zero_large_window(rng: random.Random) -> Case:
    """batchMinConcurrency == batchMaxConcurrency (cap fixed) with a 60 s window; 0.001 ms times."""
    n = total_tasks(rng, 1000, 3000)
    n_b = int(n * rng.uniform(0.2, 0.4))
    dur = rng.uniform(40_000, 100_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, rng.randint(2, 4), (1000, 5000))
    batch = [0.0] * rng.randint(50, 300)
    batch += batch_clusters(rng, n_b - len(batch), 0, dur, rng.randint(2, 5), 5.0)
    im = rng.uniform(30, 150)
    tasks = make_tasks(rng, "float3", inter, batch, im, rng.uniform(300, 1500))
    opts = base_options(rng, (n - n_b) / dur * 1000, im)
    opts["batchMinConcurrency"] = opts["batchMaxConcurrency"]
    opts.update(windowMs=60000, tieBreak="fifo")
    return Case("range_zero_large_window", tasks, opts)


def t_quirks(rng: random.Random) -> Case:
    """Extra and reordered columns, numeric ids, partly unsorted rows, explicit defaults, dyadic EMA."""
    n = total_tasks(rng, 1000, 2500)
    n_b = int(n * rng.uniform(0.25, 0.4))
    dur = rng.uniform(30_000, 60_000)
    inter = interactive_stream(rng, n - n_b, 0, dur, 0.5, rng.randint(2, 5), (500, 3000))
    batch = [0.0] * rng.randint(50, 200)
    batch += batch_clusters(rng, n_b - len(batch), 0, dur, rng.randint(3, 6), 0)
    im = rng.uniform(20, 120)
    tasks = make_tasks(rng, "int", inter, batch, im, rng.uniform(300, 1500), p_zero=0.02)
    for t in tasks:
        t.extra = {
            "prompt_tokens": str(rng.randint(10, 4000)),
            "tenant": rng.choice(["alpha", "beta", "gamma"]),
        }
    opts = base_options(rng, (n - n_b) / dur * 1000, im, nice=True)
    # dyadic alpha and a power-of-two cap range: pressure is often exactly 0 or 1, so the EMA takes dyadic
    # values and `batchMax - range * pressure` regularly lands exactly on .5 (Math.round rounds half up)
    opts["batchMinConcurrency"] = rng.choice([0, 1])
    opts["batchMaxConcurrency"] = opts["batchMinConcurrency"] + rng.choice([2, 4])
    opts["maxConcurrency"] = max(opts["maxConcurrency"], opts["batchMaxConcurrency"] + 2)
    opts.update(
        smoothingAlpha=rng.choice([0.5, 0.5, 0.25]),
        tieBreak="fifo",
        policy="adaptive",
    )
    cols = ["tenant", "service_ms", "id", "prompt_tokens", "arrival_ms", "kind"]
    return Case("quirks", tasks, opts, columns=cols, id_style="numeric", shuffle_fraction=0.3)


def t_min0_recovery_small_window(rng: random.Random) -> Case:
    """batchMinConcurrency = 0, 1-3 s window, interactive on/off phases and batch arrivals in the lulls:
    a queue stranded during a lull is woken only by the next event after the window empties."""
    n = total_tasks(rng, 1500, 3500)
    n_b = int(n * rng.uniform(0.3, 0.45))
    phases = rng.randint(3, 6)
    on = [rng.uniform(3000, 10000) for _ in range(phases)]
    off = [rng.uniform(3000, 15000) for _ in range(phases)]
    inter, batch = [], []
    t = 0.0
    n_i = n - n_b
    per_phase = n_i // phases
    for k in range(phases):
        cnt = per_phase if k < phases - 1 else n_i - per_phase * (phases - 1)
        inter += interactive_stream(rng, cnt, t, t + on[k], 0.4, 1, (500, 1500))
        t += on[k]
        # a batch burst inside the lull
        batch += [t + rng.uniform(0, off[k])] * rng.randint(5, 40)
        t += off[k]
    batch = batch[: n_b // 2]
    batch += [0.0] * rng.randint(30, 150)
    batch += batch_clusters(rng, max(0, n_b - len(batch)), 0, t, rng.randint(3, 6), 0)
    im = rng.uniform(40, 120)
    tasks = make_tasks(rng, "int", inter, batch, im, rng.uniform(500, 2500), p_zero=0.01)
    rate = n_i / sum(on) * 1000
    opts = {
        "maxConcurrency": rng.choice([6, 8, 10]),
        "batchMaxConcurrency": rng.randint(3, 6),
        "batchMinConcurrency": 0,
        "interactiveRpsThreshold": float(max(1, round(rate * rng.uniform(0.8, 2.0)))),
        "interactiveP95LatencyMs": float(max(10, 10 * round(im * rng.uniform(2.5, 6.0) / 10))),
        "windowMs": rng.choice([1000, 2000, 3000]),
        "tieBreak": "seed-heap",
    }
    return Case("min0_recovery_small_window", tasks, opts)


TEMPLATES: list[Callable[[random.Random], Case]] = [
    t_poisson_bursts_int,
    t_poisson_bursts_int_seedheap,
    t_float_smoothing,
    t_float_seedheap_smoothing,
    t_stranded_fifo,
    t_stranded_seedheap_smoothing,
    t_small_window_ties,
    t_batchmax_ge_max,
    t_batch_bursts_coarse,
    t_unscheduled_int,
    t_unscheduled_float,
    t_range_zero_large_window,
    t_quirks,
    t_min0_recovery_small_window,
]


# ------------------------------------------------------------------------------------------ output
def write_trace(case: Case, path: Path, rng: random.Random) -> None:
    rows = []
    for i, t in enumerate(case.tasks, start=1):
        if case.id_style == "numeric":
            tid = str(i)
        else:
            tid = f"{'i' if t.kind == 'interactive' else 'b'}{i:06d}"
        row = {"id": tid, "kind": t.kind, "arrival_ms": fmt_num(t.arrival), "service_ms": fmt_num(t.service)}
        row.update(t.extra)
        rows.append(row)
    if case.shuffle_fraction > 0:
        # move a fraction of rows to random places: the replay must stable-sort by arrival_ms
        k = int(len(rows) * case.shuffle_fraction)
        for _ in range(k):
            r = rows.pop(rng.randrange(len(rows)))
            rows.insert(rng.randrange(len(rows) + 1), r)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=case.columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def run_replay(case_dir: Path, node: str = "node") -> str:
    """Run the article's scheduler on case_dir/trace.csv + options.json -> expected.csv; returns stderr."""
    exe = shutil.which(node) if not Path(node).is_file() else node
    if exe is None:
        raise RuntimeError(
            f"make_cases.py needs Node.js ('{node}' not found on PATH) to run the article's scheduler"
        )
    p = subprocess.run(
        [exe, str(REPLAY_JS), str(case_dir / "trace.csv"), str(case_dir / "options.json"),
         str(case_dir / "expected.csv")],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"replay.js failed for {case_dir}:\n{p.stderr}")
    return p.stderr


def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(seed * 1_000_003 + index)


def pick_templates(seed: int, count: int) -> list[Callable[[random.Random], Case]]:
    if count >= len(TEMPLATES):
        return [TEMPLATES[i % len(TEMPLATES)] for i in range(count)]
    return random.Random(seed).sample(TEMPLATES, count)


def generate_cases(out: Path, seed: int, count: int, node: str = "node", quiet: bool = False) -> list[Path]:
    """Write `count` case folders under `out` and return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dirs = []
    for index, template in enumerate(pick_templates(seed, count)):
        rng = case_rng(seed, index)
        case = template(rng)
        d = out / f"{index:02d}-{case.template}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        write_trace(case, d / "trace.csv", rng)
        (d / "options.json").write_text(json.dumps(case.options, indent=2) + "\n")
        log = run_replay(d, node)
        dirs.append(d)
        if not quiet:
            summary = summarize(d)
            print(f"{d.name}: {summary}  [{log.strip()}]", file=sys.stderr)
    return dirs


# ----------------------------------------------------------------------------- reading / comparing
def read_rows(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def summarize(case_dir: Path) -> str:
    rows = read_rows(case_dir / "expected.csv")
    stranded = sum(1 for r in rows if r["start_ms"] == "")
    waited = sum(1 for r in rows if r["start_ms"] != "" and float(r["start_ms"]) > float(r["arrival_ms"]))
    return f"{len(rows)} rows, {stranded} stranded, {waited} waited"


def compare_outputs(expected_csv: Path, actual_csv: Path, tol: float = 1e-6) -> str | None:
    """None if actual matches expected (same ids in order; start/end both empty or within tol ms),
    otherwise a message describing the first differing row."""
    exp = read_rows(expected_csv)
    try:
        act = read_rows(actual_csv)
    except FileNotFoundError:
        return f"{actual_csv} was not written"
    if act and not {"id", "start_ms", "end_ms"} <= set(act[0]):
        return f"{actual_csv}: header lacks id/start_ms/end_ms: {list(act[0])}"

    def num(s: str | None) -> float | None:
        s = (s or "").strip()
        return None if s == "" else float(s)

    for i, e in enumerate(exp):
        if i >= len(act):
            return f"row {i + 1} (id {e['id']}): missing; actual has only {len(act)} rows, expected {len(exp)}"
        a = act[i]
        if a["id"].strip() != e["id"]:
            return f"row {i + 1}: id {a['id']!r}, expected {e['id']!r}"
        for col in ("start_ms", "end_ms"):
            ev, av = num(e[col]), num(a.get(col))
            bad = (ev is None) != (av is None) or (ev is not None and not abs(ev - av) <= tol)
            if bad:
                return (
                    f"row {i + 1} (id {e['id']}, kind {e['kind']}, arrival {e['arrival_ms']}): "
                    f"{col} = {a.get(col)!r}, expected {e[col]!r} "
                    f"(expected start/end {e['start_ms']!r}/{e['end_ms']!r}, "
                    f"actual {a.get('start_ms')!r}/{a.get('end_ms')!r})"
                )
    if len(act) != len(exp):
        return f"actual has {len(act)} rows, expected {len(exp)}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="directory to write case folders into")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=len(TEMPLATES))
    ap.add_argument("--node", default="node", help="Node.js executable (default: node on PATH)")
    args = ap.parse_args(argv)
    generate_cases(args.out, args.seed, args.count, node=args.node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
