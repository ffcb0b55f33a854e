"""Workloads: who sends what, when. Open-loop arrivals are drawn up front; closed-loop users are processes.

Every workload draws from its own random streams, keyed by (seed, workload index, purpose), so every
policy sees the same arrivals and the same service draws for a given seed (common random numbers).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from simlab.errors import InputError
from simlab.policies.base import BATCH, INTERACTIVE, Task
from simlab.scenario import Burst, ClosedLoop, Diurnal, Piecewise, Poisson, Scenario, Trace, Workload
from simlab.traces import read_trace
from simlab.world.distributions import make_sampler
from simlab.world.tasktable import Arrivals

ARRIVALS, SERVICE, PROMPT, OUTPUT = 0, 1, 2, 3


def stream(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *key])))


# --- arrival times --------------------------------------------------------------------------------
def poisson_times(rng: np.random.Generator, rate_per_ms: float, start: float, end: float) -> np.ndarray:
    """Event times of a Poisson process on [start, end)."""
    out, t = [], start
    expected = rate_per_ms * (end - start)
    chunk = int(expected + 6 * math.sqrt(expected) + 16)
    while True:
        times = t + np.cumsum(rng.exponential(1.0 / rate_per_ms, chunk))
        out.append(times[times < end])
        if times[-1] >= end:
            break
        t = times[-1]
    return np.concatenate(out)


def piecewise_times(rng, rates_per_s: list[float], step_ms: float, end: float) -> np.ndarray:
    """Non-homogeneous Poisson with a piecewise-constant rate; the pattern repeats until `end`."""
    out = []
    k = 0
    while k * step_ms < end:
        lo, hi = k * step_ms, min((k + 1) * step_ms, end)
        rate = rates_per_s[k % len(rates_per_s)] / 1000.0
        n = rng.poisson(rate * (hi - lo))
        out.append(np.sort(rng.uniform(lo, hi, n)))
        k += 1
    return np.concatenate(out) if out else np.empty(0)


def diurnal_times(rng, spec: Diurnal, end: float) -> np.ndarray:
    """Thinning (Lewis and Shedler) of a Poisson process at the peak rate."""
    peak = spec.mean_rate_per_s * (1 + spec.amplitude) / 1000.0
    candidates = poisson_times(rng, peak, 0.0, end)
    rate = spec.mean_rate_per_s / 1000.0 * (
        1 + spec.amplitude * np.sin(2 * np.pi * (candidates - spec.phase_ms) / spec.period_ms)
    )
    keep = rng.uniform(0, 1, len(candidates)) * peak < rate
    return candidates[keep]


def open_loop_times(rng, arrivals, duration_ms: float) -> np.ndarray:
    if isinstance(arrivals, Poisson):
        end = arrivals.end_ms if arrivals.end_ms is not None else duration_ms
        return poisson_times(rng, arrivals.rate_per_s / 1000.0, arrivals.start_ms, end)
    if isinstance(arrivals, Piecewise):
        return piecewise_times(rng, arrivals.rates_per_s, arrivals.step_ms, duration_ms)
    if isinstance(arrivals, Diurnal):
        return diurnal_times(rng, arrivals, duration_ms)
    if isinstance(arrivals, Burst):
        at = arrivals.at_ms if isinstance(arrivals.at_ms, list) else [arrivals.at_ms]
        return np.repeat(np.sort(np.asarray(at, dtype=float)), arrivals.count)
    raise TypeError(arrivals)


# --- traces -------------------------------------------------------------------------------------------
def read_azure(path: Path) -> pd.DataFrame:
    """The Azure LLM inference trace: TIMESTAMP, ContextTokens, GeneratedTokens -> arrival_ms, tokens."""
    try:
        frame = pd.read_csv(path, dtype=str)
    except Exception as exc:
        raise InputError(path, None, f"cannot read CSV ({exc})") from None
    missing = [c for c in ("TIMESTAMP", "ContextTokens", "GeneratedTokens") if c not in frame.columns]
    if missing:
        raise InputError(path, "header", f"missing column(s) {', '.join(missing)} (Azure trace format)")
    if frame.empty:
        raise InputError(path, None, "no rows after the header")
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="%Y-%m-%d %H:%M:%S.%f", errors="coerce")
    for col, values in (("TIMESTAMP", stamps),):
        bad = values.isna().to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(path, f"line {row + 2}", f"{col} {frame[col].iloc[row]!r} is not a timestamp like 2023-11-16 18:15:46.6805900")
    out = pd.DataFrame({"arrival_ms": (stamps - stamps.min()).dt.total_seconds().to_numpy() * 1000.0})
    for col, name in (("ContextTokens", "prompt_tokens"), ("GeneratedTokens", "output_tokens")):
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = (values.isna() | (values < 0) | ~np.isfinite(values)).to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(path, f"line {row + 2}", f"{col} {frame[col].iloc[row]!r} is not a non-negative integer")
        out[name] = values.to_numpy(dtype=float)
    return out.sort_values("arrival_ms", kind="stable").reset_index(drop=True)


def trace_rows(spec: Trace, kind: str, scenario: Scenario) -> pd.DataFrame:
    """Rows of a trace for one class: arrival_ms and service_ms and/or token counts."""
    path = scenario.resolve(spec.file)
    if spec.format == "azure":
        frame = read_azure(path)
    else:
        tasks, header = read_trace(path)
        frame = pd.DataFrame(
            {
                "id": [t.id for t in tasks],
                "row": np.arange(len(tasks)),
                "arrival_ms": [t.arrival_ms for t in tasks],
                "service_ms": [t.service_ms for t in tasks],
                "kind": [t.kind for t in tasks],
            }
        )
        for col in ("prompt_tokens", "output_tokens"):
            if col in header:
                raw = [t.payload[col] for t in tasks]
                values = np.asarray(pd.to_numeric(raw, errors="coerce"), dtype=float)
                bad = np.flatnonzero(np.isnan(values) | (values < 0) | ~np.isfinite(values))
                if len(bad):
                    k = int(bad[0])
                    raise InputError(path, f"id {tasks[k].id!r}", f"{col} {raw[k]!r} is not a non-negative number")
                frame[col] = values
        frame = frame[frame["kind"] == kind].sort_values("arrival_ms", kind="stable")
    t = frame["arrival_ms"].to_numpy() - spec.offset_ms
    keep = t >= 0
    if spec.limit_ms is not None:
        keep &= t < spec.limit_ms
    frame = frame[keep].copy()
    frame["arrival_ms"] = (frame["arrival_ms"] - spec.offset_ms) * spec.time_scale
    return frame.reset_index(drop=True)


# --- tasks -----------------------------------------------------------------------------------------
def _label(workload: Workload, index: int) -> str:
    return workload.name or f"{workload.kind}{index}"


def open_loop_tasks(scenario: Scenario, seed: int) -> list[Task]:
    """All open-loop tasks of all workloads as Task objects, sorted by arrival (see `open_loop_columns`)."""
    a = open_loop_columns(scenario, seed)
    tasks = []
    for i in range(len(a)):
        service = None if a.service_ms is None or math.isnan(a.service_ms[i]) else float(a.service_ms[i])
        task = Task(a.task_id(i), INTERACTIVE if a.interactive[i] else BATCH, float(a.arrival_ms[i]), service)
        if a.prompt_tokens is not None and not math.isnan(a.prompt_tokens[i]):
            task.prompt_tokens = int(a.prompt_tokens[i])
            task.output_tokens = int(a.output_tokens[i])
        task.source = a.labels[a.source[i]]
        tasks.append(task)
    return tasks


def open_loop_columns(scenario: Scenario, seed: int) -> Arrivals:
    """All open-loop tasks of all workloads as columns, sorted by arrival.

    Ties keep a trace file's row order (so a trace split into classes replays exactly as `simlab replay`),
    then workload order, then draw order.
    """
    parts: list[dict] = []
    for wi, w in enumerate(scenario.workload):
        if isinstance(w.arrivals, ClosedLoop):
            continue
        label = _label(w, wi)
        if isinstance(w.arrivals, Trace):
            frame = trace_rows(w.arrivals, w.kind, scenario)
            times = frame["arrival_ms"].to_numpy(dtype=float)
            n = len(times)
            service = frame["service_ms"].to_numpy(dtype=float) if "service_ms" in frame else None
            prompt = frame["prompt_tokens"].to_numpy(dtype=float) if "prompt_tokens" in frame else None
            output = frame["output_tokens"].to_numpy(dtype=float) if "output_tokens" in frame else None
            ids = frame["id"].tolist() if "id" in frame else None
            rows = frame["row"].tolist() if "row" in frame else None
        else:
            times = open_loop_times(stream(seed, wi, ARRIVALS), w.arrivals, scenario.duration_ms)
            n = len(times)
            service = prompt = output = ids = rows = None
        resolve = scenario.resolve
        if w.service is not None:
            service = make_sampler(w.service, resolve)(stream(seed, wi, SERVICE), n)
        if w.prompt_tokens is not None:
            prompt = np.maximum(1, np.rint(make_sampler(w.prompt_tokens, resolve)(stream(seed, wi, PROMPT), n)))
            output = np.maximum(1, np.rint(make_sampler(w.output_tokens, resolve)(stream(seed, wi, OUTPUT), n)))
        parts.append({"times": np.asarray(times, dtype=float), "service": service, "prompt": prompt, "output": output,
                      "ids": ids, "rows": rows, "wi": wi, "label": label, "interactive": w.kind == INTERACTIVE})
    return _merge(parts)


def _merge(parts: list[dict]) -> Arrivals:
    """One sorted set of columns: by arrival, then trace row, then workload order, then draw order."""
    def cat(key, fill=math.nan, dtype=float):
        if all(p[key] is None for p in parts):
            return None
        return np.concatenate([np.full(len(p["times"]), fill, dtype=dtype) if p[key] is None
                               else np.asarray(p[key], dtype=dtype) for p in parts] or [np.empty(0, dtype=dtype)])

    arrival = cat("times")
    if arrival is None:
        arrival = np.empty(0)
    number = np.concatenate([np.arange(len(p["times"]), dtype=np.int64) for p in parts] or [np.empty(0, np.int64)])
    wi = np.concatenate([np.full(len(p["times"]), p["wi"], dtype=np.int32) for p in parts] or [np.empty(0, np.int32)])
    rows = cat("rows", math.inf)
    order = np.lexsort((number, wi, np.full(len(arrival), math.inf) if rows is None else rows, arrival))
    ids = None
    if any(p["ids"] is not None for p in parts):
        ids = np.empty(len(arrival), dtype=object)
        start = 0
        for p in parts:
            if p["ids"] is not None:
                ids[start:start + len(p["times"])] = p["ids"]
            start += len(p["times"])
        ids = ids[order]
    labels = [p["label"] for p in parts]
    source = np.concatenate([np.full(len(p["times"]), k, dtype=np.int32) for k, p in enumerate(parts)]
                            or [np.empty(0, np.int32)])
    interactive = np.concatenate([np.full(len(p["times"]), p["interactive"]) for p in parts] or [np.empty(0, bool)])

    def take(x):
        return None if x is None else x[order]

    prompt, output = cat("prompt"), cat("output")
    return Arrivals(arrival[order], take(cat("service")), take(prompt), take(output), interactive[order], source[order],
                    number[order], labels, ids)


class ClosedLoopUser:
    """One user of a closed-loop workload: think, send, wait for the answer, repeat until the end."""

    def __init__(self, scenario: Scenario, seed: int, wi: int, user: int):
        w = scenario.workload[wi]
        self.workload, self.label, self.user = w, _label(w, wi), user
        self.rng = stream(seed, wi, 100 + user)
        resolve = scenario.resolve
        self.think = make_sampler(w.arrivals.think, resolve)
        self.service = make_sampler(w.service, resolve) if w.service is not None else None
        self.prompt = make_sampler(w.prompt_tokens, resolve) if w.prompt_tokens is not None else None
        self.output = make_sampler(w.output_tokens, resolve) if w.output_tokens is not None else None
        self.end_ms = scenario.duration_ms
        self.count = 0

    def next_think_ms(self) -> float:
        return float(self.think(self.rng, 1)[0])

    def make_task(self, now: float) -> Task:
        w = self.workload
        service = float(self.service(self.rng, 1)[0]) if self.service is not None else None
        task = Task(f"{self.label}-u{self.user}-{self.count}", w.kind, now, service)
        if self.prompt is not None:
            task.prompt_tokens = int(max(1, round(float(self.prompt(self.rng, 1)[0]))))
            task.output_tokens = int(max(1, round(float(self.output(self.rng, 1)[0]))))
        task.source = self.label
        self.count += 1
        return task

    def more(self, now: float) -> bool:
        limit = self.workload.arrivals.requests_per_user
        return now < self.end_ms and (limit is None or self.count < limit)
