"""Workloads: who sends what, when. Open-loop arrivals are drawn up front; closed-loop users are processes.

Every workload draws from its own random streams, keyed by (seed, workload key, purpose), so every
policy sees the same arrivals and the same service draws for a given seed (common random numbers). The
workload key is its `name`, or for an unnamed workload its class and its index among the workloads of that
class ("interactive#0", "batch#1"): never its position in the file. So a bound run (one class removed)
draws exactly the tasks the policy runs draw, and reordering workload blocks changes nothing (except swapping
two unnamed workloads of the same class, which swaps their keys: name them to be safe). Within a
workload, the k-th task takes the k-th draw of each stream (a closed-loop user has its own stream).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from simlab.errors import DATA_MAX_BYTES, InputError, open_bytes
from simlab.policies.base import BATCH, INTERACTIVE, Task
from simlab.scenario import Burst, ClosedLoop, Diurnal, Piecewise, Poisson, Resampled, Scenario, Trace, Workload
from simlab.traces import read_trace
from simlab.world.distributions import make_draw, make_sampler
from simlab.world.tasktable import Arrivals

ARRIVALS, SERVICE, PROMPT, OUTPUT, LOAD, RESAMPLE = 0, 1, 2, 3, 4, 5


def stream(seed: int, *key: int | str) -> np.random.Generator:
    """An independent generator for (seed, *key); strings enter as four 32-bit words of their SHA-256."""
    words: list[int] = [seed]
    for part in key:
        if isinstance(part, str):
            digest = hashlib.sha256(part.encode()).digest()
            words += [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
        else:
            words.append(part)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def workload_keys(scenario: Scenario) -> list[str]:
    """The stable random-stream key of every workload: "name:<name>", or "class:<class>#<i>" when unnamed
    (i counts unnamed and named workloads of that class before it, so removing the other class changes nothing)."""
    keys, seen = [], {"interactive": 0, "batch": 0}
    for w in scenario.workload:
        keys.append(f"name:{w.name}" if w.name else f"class:{w.kind}#{seen[w.kind]}")
        seen[w.kind] += 1
    return keys


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
    import pandas as pd  # lazy: a run without trace or empirical files never loads pandas
    try:
        with open_bytes(path, "trace file", DATA_MAX_BYTES) as handle:
            frame = pd.read_csv(handle, dtype=str)
    except InputError:
        raise
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


_PARSED: dict = {}  # (format, path, size, mtime) -> the parsed trace, read once per process
_PARSED_MAX = 8


def parsed_trace(path: Path, fmt: str) -> pd.DataFrame:
    """The whole trace file as a frame (every class), parsed once per process: every arm and seed of a plan
    reads the same file, and parsing it is a sixth of a short run. A file changed since (size or mtime) is read
    again. Callers must not modify the frame they get."""
    st = path.stat()
    key = (fmt, str(path), st.st_size, st.st_mtime_ns)
    frame = _PARSED.get(key)
    if frame is None:
        frame = read_azure(path) if fmt == "azure" else _read_simlab_trace(path)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = frame
    return frame


def _read_simlab_trace(path: Path) -> pd.DataFrame:
    import pandas as pd  # lazy: a run without trace or empirical files never loads pandas

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
    return frame


def trace_rows(spec: Trace, kind: str, scenario: Scenario) -> pd.DataFrame:
    """Rows of a trace for one class: arrival_ms and service_ms and/or token counts."""
    path = scenario.resolve(spec.file)
    if spec.format == "azure":
        frame = parsed_trace(path, "azure")
    else:
        frame = parsed_trace(path, "simlab")
        frame = frame[frame["kind"] == kind].sort_values("arrival_ms", kind="stable")
    t = frame["arrival_ms"].to_numpy() - spec.offset_ms
    keep = t >= 0
    if spec.limit_ms is not None:
        keep &= t < spec.limit_ms
    frame = frame[keep].copy()
    frame["arrival_ms"] = (frame["arrival_ms"] - spec.offset_ms) * spec.time_scale
    frame = frame.reset_index(drop=True)
    if spec.resample_block_ms is not None:
        span = spec.limit_ms * spec.time_scale if spec.limit_ms is not None else scenario.duration_ms
        frame = block_bootstrap(frame, spec.resample_block_ms, span, stream(spec.resample, kind, RESAMPLE))
    return frame


def block_bootstrap(frame: pd.DataFrame, block_ms: float, span_ms: float, rng: np.random.Generator) -> pd.DataFrame:
    """The window [0, span) rebuilt from blocks of `block_ms` drawn with replacement (a moving-block
    bootstrap on a grid: bursts shorter than a block survive whole). Ids get a "~slot" suffix."""
    import pandas as pd
    n_blocks = max(1, math.ceil(span_ms / block_ms))
    which = rng.integers(0, n_blocks, n_blocks)
    block_of = np.minimum((frame["arrival_ms"].to_numpy() // block_ms).astype(int), n_blocks - 1)
    parts = []
    for slot, src in enumerate(which):
        part = frame[block_of == src].copy()
        part["arrival_ms"] = part["arrival_ms"] + (slot - src) * block_ms
        if "id" in part:
            part["id"] = part["id"].astype(str) + f"~{slot}"
        parts.append(part)
    out = pd.concat(parts, ignore_index=True) if parts else frame.iloc[:0]
    out = out[out["arrival_ms"] < span_ms]
    return out.sort_values("arrival_ms", kind="stable").reset_index(drop=True)


def resampled_log(spec: Resampled, scenario: Scenario) -> np.ndarray:
    """The log's own arrival times (the `arrival_ms` column), checked: finite, >= 0, at least one."""
    import pandas as pd
    path = scenario.resolve(spec.file)
    try:
        with open_bytes(path, "arrivals file", DATA_MAX_BYTES) as handle:
            frame = pd.read_csv(handle, usecols=["arrival_ms"])
        times = pd.to_numeric(frame["arrival_ms"], errors="raise").to_numpy(dtype=float)
    except (ValueError, KeyError, OSError) as exc:
        raise InputError(path, None, f"expected one numeric column arrival_ms ({exc})") from None
    if len(times) == 0 or (times < 0).any() or not np.isfinite(times).all():
        raise InputError(path, "arrival_ms", "expected at least one finite arrival time >= 0 (ms)")
    return times


def resampled_times(spec: Resampled, scenario: Scenario, rng: np.random.Generator) -> np.ndarray:
    """The log's arrival times, block-bootstrapped with this seed's stream (bursts shorter than a block survive)."""
    import pandas as pd
    times = resampled_log(spec, scenario)
    span = spec.span_ms or scenario.duration_ms
    out = block_bootstrap(pd.DataFrame({"arrival_ms": np.sort(times)}), spec.block_ms, span, rng)
    return out["arrival_ms"].to_numpy(dtype=float)


def load_and_shift(times: np.ndarray, load: float, shift_ms: float, span_ms: float, rng: np.random.Generator,
                   diurnal: tuple[float, float, float] | None = None):
    """Arrival times after a load multiplier and a delay, and for each the index of the task it copies and
    the copy number. Below 1: independent thinning. Above 1: the whole stream plus copies of itself shifted
    cyclically by a random offset over [0, span) (superposition keeps each copy's bursts), the last copy thinned.
    `diurnal` (amplitude, period, phase): the load is raised to load x (1 + amplitude), then each arrival at
    time t is kept with probability (1 + amplitude sin(2 pi (t - phase) / period)) / (1 + amplitude), so the
    rate follows the profile and its mean over whole periods stays load x the original."""
    n = len(times)
    amp = diurnal[0] if diurnal else 0.0
    if amp > 0:
        t, i, c = load_and_shift(times, load * (1 + amp), 0.0, span_ms, rng)
        _, period, phase = diurnal
        keep = rng.uniform(0, 1, len(t)) * (1 + amp) < 1 + amp * np.sin(2 * np.pi * (t - phase) / period)
        return t[keep] + shift_ms, i[keep], c[keep]
    if load == 1.0 and shift_ms == 0.0:
        return times, np.arange(n), np.zeros(n, dtype=int)
    span = max(span_ms, float(times.max()) + 1.0) if n else span_ms
    full, frac = int(load), load - int(load)
    out_t, out_i, out_c = [], [], []
    for c in range(full + (1 if frac > 0 else 0)):
        offset = 0.0 if c == 0 else float(rng.uniform(0, span))
        keep = np.ones(n, dtype=bool) if c < full else rng.uniform(0, 1, n) < frac
        idx = np.flatnonzero(keep)
        out_t.append((times[idx] + offset) % span if c else times[idx])
        out_i.append(idx)
        out_c.append(np.full(len(idx), c))
    t, i, c = np.concatenate(out_t), np.concatenate(out_i), np.concatenate(out_c)
    order = np.lexsort((i, c, t))
    return t[order] + shift_ms, i[order], c[order]


# --- tasks -----------------------------------------------------------------------------------------
def _label(workload: Workload, key: str) -> str:
    return workload.name or key.split(":", 1)[1].replace("#", "")


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


# --- the event budget ------------------------------------------------------------------------------------------
def expected_open_loop(scenario: Scenario) -> tuple[float, float]:
    """A lower bound of the mean number of open-loop tasks the generated arrival processes (Poisson, piecewise,
    diurnal, bursts) draw, and its standard deviation, before drawing them. A lower bound (a diurnal swing counted
    at its trough), so that refusing on it never refuses a draw that could fit. Traces and resampled logs, bounded
    by their files, are not counted here."""
    mean = var = 0.0
    for w in scenario.workload:
        a = w.arrivals
        if isinstance(a, Poisson):
            end = a.end_ms if a.end_ms is not None else scenario.duration_ms
            m = a.rate_per_s / 1000.0 * max(0.0, end - a.start_ms)
        elif isinstance(a, Piecewise):
            rates, end = a.rates_per_s, scenario.duration_ms
            whole = int(end // a.step_ms)  # steps wholly before the end; the pattern repeats
            cycles, rest = divmod(whole, len(rates))
            m = ((cycles * sum(rates) + sum(rates[:rest])) * a.step_ms
                 + rates[rest % len(rates)] * (end - whole * a.step_ms)) / 1000.0
        elif isinstance(a, Diurnal):
            m = a.mean_rate_per_s * (1 - a.amplitude) / 1000.0 * scenario.duration_ms
        elif isinstance(a, Burst):
            m = float(a.count * (len(a.at_ms) if isinstance(a.at_ms, list) else 1))
        else:
            continue
        factor = w.load * (1 - w.diurnal_amplitude)  # superposed copies, and a diurnal swing at its trough
        mean += m * factor
        var += m * max(factor, factor**2)  # Poisson counts; thinning and copies of a draw (generous for a burst)
    return mean, math.sqrt(var)


def _over_budget(scenario: Scenario, count: str) -> InputError:
    return InputError(
        scenario.path, "max_tasks",
        f"the open-loop arrivals {count}, more than max_tasks = {scenario.max_tasks:,} (the event budget, which "
        "counts every task): shorten duration_ms, lower the rates or counts, or raise max_tasks",
    )


def check_budget(scenario: Scenario) -> None:
    """Refuse, before drawing, arrivals that would certainly exceed max_tasks (their mean 10 standard deviations
    above it): a day at a million requests per second must not be drawn to find out."""
    mean, sd = expected_open_loop(scenario)
    if mean - 10 * sd > scenario.max_tasks:
        raise _over_budget(scenario, f"would number about {mean:,.0f}")


def open_loop_columns(scenario: Scenario, seed: int) -> Arrivals:
    """All open-loop tasks of all workloads as columns, sorted by arrival; more than max_tasks is an InputError
    (checked on the expected count before drawing, and on the count drawn).

    Ties keep a trace file's row order (so a trace split into classes replays exactly as `simlab replay`),
    then workload key (not file order: reordering blocks changes nothing), then draw order.
    """
    check_budget(scenario)
    parts: list[dict] = []
    keys = workload_keys(scenario)
    rank = {k: r for r, k in enumerate(sorted(keys))}
    for wkey, w in zip(keys, scenario.workload):
        if isinstance(w.arrivals, ClosedLoop):
            continue
        label = _label(w, wkey)
        if isinstance(w.arrivals, Trace):
            frame = trace_rows(w.arrivals, w.kind, scenario)
            times = frame["arrival_ms"].to_numpy(dtype=float)
            n = len(times)
            service = frame["service_ms"].to_numpy(dtype=float) if "service_ms" in frame else None
            prompt = frame["prompt_tokens"].to_numpy(dtype=float) if "prompt_tokens" in frame else None
            output = frame["output_tokens"].to_numpy(dtype=float) if "output_tokens" in frame else None
            ids = frame["id"].tolist() if "id" in frame else None
            rows = frame["row"].tolist() if "row" in frame else None
        elif isinstance(w.arrivals, Resampled):
            times = resampled_times(w.arrivals, scenario, stream(seed, wkey, ARRIVALS))
            n = len(times)
            service = prompt = output = ids = rows = None
        else:
            times = open_loop_times(stream(seed, wkey, ARRIVALS), w.arrivals, scenario.duration_ms)
            n = len(times)
            service = prompt = output = ids = rows = None
        resolve = scenario.resolve
        if w.service is not None:
            service = make_sampler(w.service, resolve)(stream(seed, wkey, SERVICE), n)
        if w.prompt_tokens is not None:
            prompt = np.maximum(1, np.rint(make_sampler(w.prompt_tokens, resolve)(stream(seed, wkey, PROMPT), n)))
            output = np.maximum(1, np.rint(make_sampler(w.output_tokens, resolve)(stream(seed, wkey, OUTPUT), n)))
        # the k-th task keeps its own draws whatever the load: thinning and copies act on whole tasks
        diurnal = (w.diurnal_amplitude, w.diurnal_period_ms or scenario.duration_ms, w.diurnal_phase_ms)
        times, src, copy = load_and_shift(times, w.load, w.shift_ms, scenario.duration_ms, stream(seed, wkey, LOAD),
                                          diurnal if w.diurnal_amplitude > 0 else None)
        # Narrow integer columns and no copies where nothing changed: a day at 50 RPS builds these at its peak.
        src = np.asarray(src, dtype=np.int32 if n < 2**31 else np.int64)
        copies = copy.any()
        if ids is not None or copies:  # explicit ids: a trace's, or LABEL-N*C for load copies
            base = [ids[k] if ids is not None else f"{label}-{k}" for k in src.tolist()]
            ids = [f"{x}*{c}" if c else x for x, c in zip(base, copy.tolist())]
        same = len(src) == n and not copies and bool((src == np.arange(n, dtype=src.dtype)).all())

        def pick(x):  # the draws of the tasks kept, in their order
            return x if same or x is None else x[src]

        rows = None if rows is None else pick(np.asarray(rows, dtype=float))
        parts.append({"times": np.asarray(times, dtype=float), "service": pick(service), "prompt": pick(prompt),
                      "output": pick(output), "ids": ids, "rows": rows, "number": src,
                      "copy": copy if copies else None, "wi": rank[wkey], "label": label,
                      "interactive": w.kind == INTERACTIVE})
        drawn = sum(len(p["times"]) for p in parts)
        if drawn > scenario.max_tasks:  # counted as drawn, before the columns are joined (the peak of memory)
            raise _over_budget(scenario, f"number {drawn:,} or more at seed {seed}")
    return _merge(parts)


def _merge(parts: list[dict]) -> Arrivals:
    """One sorted set of columns: by arrival, then trace row, then workload key, then copy, then draw order.

    That key is unique, so any sort by it gives the same order: a stable sort by arrival alone (the parts
    are sorted runs), then the ties, if any, put in key order among themselves. Columns are joined and
    reordered one at a time, each part's dropped as it is joined: a day at 50 RPS peaks at about three
    columns' worth above the result, not six."""
    for p in parts:
        p["n"] = len(p["times"])
    total = sum(p["n"] for p in parts)

    def cat(key, fill=math.nan, dtype=float):
        columns = [p.pop(key) for p in parts]
        if all(c is None for c in columns):
            return None
        return np.concatenate([np.full(p["n"], fill, dtype=dtype) if c is None else np.asarray(c, dtype=dtype)
                               for p, c in zip(parts, columns)] or [np.empty(0, dtype=dtype)])

    joined = cat("times")
    if joined is None:
        joined = np.empty(0)
    order = np.argsort(joined, kind="stable")
    arrival = joined[order]
    tied = np.flatnonzero(arrival[1:] == arrival[:-1])
    narrow = np.int32 if total < 2**31 else np.int64
    number = cat("number", dtype=narrow)
    number = np.empty(0, narrow) if number is None else number
    copy = cat("copy", 0, dtype=np.int64)
    rows = cat("rows", math.inf)
    if len(tied):
        at = np.union1d(tied, tied + 1)  # every position in a run of equal arrivals
        sub = order[at]
        keys = [number[sub]]  # least significant first
        if copy is not None:
            keys.append(copy[sub])
        if len(parts) > 1:
            keys.append(np.concatenate([np.full(p["n"], p["wi"], dtype=np.int16) for p in parts])[sub])
        if rows is not None:
            keys.append(rows[sub])
        order[at] = sub[np.lexsort((*keys, arrival[at]))]
        arrival = joined[order]  # the same values; bit for bit too where -0.0 and 0.0 tie
        del at, sub, keys
    del joined, tied, copy, rows

    def take(x):
        return None if x is None else x[order]

    service = take(cat("service"))
    prompt = take(cat("prompt"))
    output = take(cat("output"))
    number = take(number)
    ids = None
    if any(p["ids"] is not None for p in parts):
        ids = np.empty(total, dtype=object)
        start = 0
        for p in parts:
            if p["ids"] is not None:
                ids[start:start + p["n"]] = p["ids"]
            start += p["n"]
        ids = ids[order]
    labels = [p["label"] for p in parts]
    source = take(np.concatenate([np.full(p["n"], k, dtype=np.int32) for k, p in enumerate(parts)]
                                 or [np.empty(0, np.int32)]))
    interactive = take(np.concatenate([np.full(p["n"], p["interactive"]) for p in parts] or [np.empty(0, bool)]))
    return Arrivals(arrival, service, prompt, output, interactive, source, number, labels, ids)


class ClosedLoopUser:
    """One user of a closed-loop workload: think, send, wait for the answer, repeat until the end."""

    def __init__(self, scenario: Scenario, seed: int, wi: int, user: int):
        w, wkey = scenario.workload[wi], workload_keys(scenario)[wi]
        self.workload, self.label, self.user = w, _label(w, wkey), user
        self.rng = stream(seed, wkey, 100 + user)
        resolve = scenario.resolve
        self.think = make_draw(w.arrivals.think, resolve)  # think(rng): the next think time, ms
        self.service = make_draw(w.service, resolve) if w.service is not None else None
        self.prompt = make_draw(w.prompt_tokens, resolve) if w.prompt_tokens is not None else None
        self.output = make_draw(w.output_tokens, resolve) if w.output_tokens is not None else None
        self.end_ms = scenario.duration_ms
        self.limit = w.arrivals.requests_per_user  # None: no limit
        self.count = 0

    def make_task(self, now: float) -> Task:
        w = self.workload
        service = self.service(self.rng) if self.service is not None else None
        task = Task(f"{self.label}-u{self.user}-{self.count}", w.kind, now, service)
        if self.prompt is not None:
            task.prompt_tokens = int(max(1, round(self.prompt(self.rng))))
            task.output_tokens = int(max(1, round(self.output(self.rng))))
        task.source = self.label
        self.count += 1
        return task

    def more(self, now: float) -> bool:
        return now < self.end_ms and (self.limit is None or self.count < self.limit)
