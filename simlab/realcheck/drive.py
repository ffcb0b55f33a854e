"""Sim-to-real: the same arrivals through simlab.runtime to a real server and through the simulator.

The scenario's open-loop tasks (seeded arrivals, prompt and output token counts) are generated once. Each
policy drives them through `simlab.runtime.Scheduler` to the server, every request streamed and timed; the
simulator runs exactly the same task list with the scenario's (calibrated) continuous-batching backend. Both
give, per request, arrival, start, first token and end in ms from the run's origin; the same code turns
either into metrics, so predicted and measured are computed alike.
"""

from __future__ import annotations

import asyncio
import copy
import math

import numpy as np

from simlab.policies import SchedulerOptions, Task
from simlab.realcheck.client import Client
from simlab.runtime.scheduler import Scheduler

RECORD_COLUMNS = ("id", "kind", "prompt_tokens", "output_tokens", "arrival_ms", "start_ms", "ttft_ms", "end_ms",
                  "outcome")
CLASS_METRICS = ("p50_ms", "p95_ms", "p99_ms", "ttft_p95_ms")
METRIC_LABELS = {"p50_ms": "P50 (ms)", "p95_ms": "P95 (ms)", "p99_ms": "P99 (ms)", "ttft_p95_ms": "TTFT P95 (ms)",
                 "throughput_tok_s": "batch throughput (tokens/s)", "completed": "completed"}


def read_records(path) -> list[dict]:
    """Request records (RECORD_COLUMNS, as validate-real writes them to measured/*.csv) from a CSV, checked:
    a bad file, column or value is an InputError naming the file, the row's line and the field."""
    import csv
    import io
    from pathlib import Path

    from simlab.errors import InputError, read_text

    path = Path(path)
    text = read_text(path, "request records", "a CSV of request records (validate-real's measured/*.csv)")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in RECORD_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(path, "header", f"missing column(s) {', '.join(missing)}; expected {', '.join(RECORD_COLUMNS)}")
    out = []
    for r in reader:
        line = f"line {reader.line_num}"
        if r["kind"] not in ("interactive", "batch"):
            raise InputError(path, f"{line}, kind", f"expected interactive or batch, found {r['kind']!r}")
        for k in ("prompt_tokens", "output_tokens"):
            try:
                r[k] = int(r[k])
            except (TypeError, ValueError):
                raise InputError(path, f"{line}, {k}", f"expected a whole number of tokens, found {r[k]!r}") from None
            if r[k] < 0:
                raise InputError(path, f"{line}, {k}", f"expected 0 or more, found {r[k]}")
        for k in ("arrival_ms", "start_ms", "ttft_ms", "end_ms"):
            v = r[k]
            try:
                r[k] = float(v) if v not in ("", None) else None
            except ValueError:
                raise InputError(path, f"{line}, {k}", f"expected a time in ms or nothing, found {v!r}") from None
            if r[k] is not None and not math.isfinite(r[k]):
                raise InputError(path, f"{line}, {k}", f"expected a finite time in ms, found {v!r}")
        if r["outcome"] == "ok":
            for k in ("arrival_ms", "start_ms", "ttft_ms", "end_ms"):
                if r[k] is None:
                    raise InputError(path, f"{line}, {k}", "a completed request (outcome ok) needs every time")
            if not r["arrival_ms"] <= r["start_ms"] <= r["end_ms"] or r["arrival_ms"] + r["ttft_ms"] > r["end_ms"]:
                raise InputError(path, line, "expected arrival <= start <= first token <= end, found arrival "
                                 f"{r['arrival_ms']:g}, start {r['start_ms']:g}, first token "
                                 f"{r['arrival_ms'] + r['ttft_ms']:g}, end {r['end_ms']:g}")
        out.append(r)
    return out


def scenario_tasks(scenario, seed: int, time_scale: float = 1.0, until_ms: float | None = None) -> list[Task]:
    """The scenario's open-loop tasks, arrivals multiplied by `time_scale`, those arriving before `until_ms`
    (after scaling) kept. Needs token counts (prompt_tokens/output_tokens) on every workload."""
    from simlab.world.workloads import open_loop_tasks

    tasks = open_loop_tasks(scenario, seed)
    out = []
    for t in tasks:
        a = t.arrival_ms * time_scale
        if until_ms is not None and a >= until_ms:
            continue
        n = Task(t.id, t.kind, a, t.service_ms)
        n.prompt_tokens, n.output_tokens, n.source = t.prompt_tokens, t.output_tokens, t.source
        out.append(n)
    return out


async def drive(url: str, options: SchedulerOptions, tasks: list[Task], max_seconds: float, lead_ms: float = 300.0,
                progress=None) -> list[dict]:
    """Submit every task at its arrival time through the runtime scheduler to the server; one record each.
    Requests still open after `max_seconds` are cancelled (outcome 'cancelled')."""
    loop = asyncio.get_running_loop()
    client = Client(url)
    await client.model_name()
    sched = Scheduler(options)
    t0 = loop.time() * 1000.0 + lead_ms
    records = {t.id: {"id": t.id, "kind": t.kind, "prompt_tokens": t.prompt_tokens,
                      "output_tokens": t.output_tokens, "arrival_ms": None, "start_ms": None, "ttft_ms": None,
                      "end_ms": None, "outcome": "not sent"} for t in tasks}

    async def call(rec, p, o):
        rec["start_ms"] = loop.time() * 1000.0 - t0
        done = await client.complete(p, o)
        rec["ttft_ms"] = done.first_ms - t0 - rec["arrival_ms"]
        return done

    async def one(task: Task):
        rec = records[task.id]
        rec["arrival_ms"] = loop.time() * 1000.0 - t0
        try:
            await sched.submit(task.kind, call, rec, task.prompt_tokens, task.output_tokens)
            rec["outcome"] = "ok"
        except asyncio.CancelledError:
            rec["outcome"] = "cancelled"
            raise
        except Exception as exc:  # a failed request is a result too: recorded, not fatal
            rec["outcome"] = f"error: {type(exc).__name__}: {exc}"[:200]
        finally:
            rec["end_ms"] = loop.time() * 1000.0 - t0

    running: list[asyncio.Task] = []
    for t in tasks:
        loop.call_at((t0 + t.arrival_ms) / 1000.0, lambda t=t: running.append(asyncio.ensure_future(one(t))))
    end = t0 / 1000.0 + max_seconds
    last_arrival = (t0 + (tasks[-1].arrival_ms if tasks else 0)) / 1000.0
    next_report = loop.time() + 15
    while True:
        await asyncio.sleep(0.2)
        now = loop.time()
        if now >= last_arrival and len(running) == len(tasks) and all(r.done() for r in running):
            break
        if now >= end:
            for r in running:
                r.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            break
        if progress is not None and now >= next_report:
            s = sched.snapshot()
            progress(f"    t={now - t0 / 1000:6.0f} s  in flight {s.in_flight_interactive}i/{s.in_flight_batch}b, "
                     f"queued {s.queued_interactive}i/{s.queued_batch}b, cap {s.batch_cap:g}, done {s.completed}")
            next_report = now + 15
    assert sched.policy.running == 0 and sched.policy.queued() == (0, 0), "a slot leaked"
    return [records[t.id] for t in tasks]


def simulate(scenario, options: SchedulerOptions, tasks: list[Task], seed: int) -> list[dict]:
    """The simulator on exactly these tasks (copies), with the scenario's backend."""
    from simlab.world.engine import Engine

    mine = [copy.copy(t) for t in tasks]
    result = Engine(scenario, options, seed, tasks=mine).run()
    out = []
    for t in result.tasks:
        ok = t.end_ms is not None
        out.append({"id": t.id, "kind": t.kind, "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens,
                    "arrival_ms": t.arrival_ms, "start_ms": t.start_ms, "ttft_ms": t.ttft_ms, "end_ms": t.end_ms,
                    "outcome": "ok" if ok else "not finished"})
    return out


def metrics(records: list[dict]) -> dict:
    """Per class: latency P50/P95/P99 and TTFT P95 over completed requests (ms, end-to-end, queueing included);
    batch throughput: batch output tokens completed / (last batch end - first batch arrival), tokens/s."""
    out = {}
    for kind in ("interactive", "batch"):
        ok = [r for r in records if r["kind"] == kind and r["outcome"] == "ok"]
        lat = np.array([r["end_ms"] - r["arrival_ms"] for r in ok], dtype=float)
        ttft = np.array([r["ttft_ms"] for r in ok if r["ttft_ms"] is not None], dtype=float)
        m = {"completed": len(ok), "sent": sum(r["kind"] == kind for r in records)}
        for name, q in (("p50_ms", 50), ("p95_ms", 95), ("p99_ms", 99)):
            m[name] = float(np.percentile(lat, q)) if len(lat) else math.nan
        m["ttft_p95_ms"] = float(np.percentile(ttft, 95)) if len(ttft) else math.nan
        if ok:
            first = min(r["arrival_ms"] for r in records if r["kind"] == kind)
            span = max(r["end_ms"] for r in ok) - first
            m["throughput_tok_s"] = sum(r["output_tokens"] for r in ok) / span * 1000.0 if span > 0 else math.nan
        else:
            m["throughput_tok_s"] = math.nan
        out[kind] = m
    return out


def decode_ms_per_token(records: list[dict], kind: str) -> float:
    """Median over completed requests of (end - first token) / (output tokens - 1): the decode step each one saw.
    Separates the engine's step time (the step model) from queueing and prefill (the scheduler, the TTFT model)."""
    v = [(r["end_ms"] - r["arrival_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in records
         if r["kind"] == kind and r["outcome"] == "ok" and r["ttft_ms"] is not None and r["output_tokens"] > 4]
    return float(np.median(v)) if v else math.nan


def load_during_decode(records: list[dict], kind: str, max_num_seqs: int) -> np.ndarray:
    """What each completed request of `kind` (more than 4 output tokens) saw during its decode phase (first
    token to end): rows of (decode start ms, mean sequences in the engine, measured decode step ms, prompt tokens
    that joined per step, requests that joined per step). Sequences in the engine: requests sent and not ended,
    at most max_num_seqs; joined: requests whose first token came meanwhile (their prefill ran then)."""
    ok = [r for r in records if r["outcome"] == "ok" and r["ttft_ms"] is not None]
    mine = [r for r in ok if r["kind"] == kind and r["output_tokens"] > 4]
    if not mine:
        return np.empty((0, 5))
    starts = np.sort([r["start_ms"] for r in ok])
    ends = np.sort([r["end_ms"] for r in ok])
    first = np.array([r["arrival_ms"] + r["ttft_ms"] for r in ok])
    order = np.argsort(first)
    first = first[order]
    prefill = np.concatenate([[0.0], np.cumsum(np.array([r["prompt_tokens"] for r in ok], dtype=float)[order])])
    out = np.empty((len(mine), 5))
    for i, r in enumerate(mine):
        a, b = r["arrival_ms"] + r["ttft_ms"], r["end_ms"]
        grid = np.linspace(a, b, 64, endpoint=False)
        n = np.minimum(max_num_seqs, np.searchsorted(starts, grid, "right") - np.searchsorted(ends, grid, "right"))
        steps = r["output_tokens"] - 1
        lo, hi = np.searchsorted(first, a, "right"), np.searchsorted(first, b)
        out[i] = (a, n.mean(), (b - a) / steps, (prefill[hi] - prefill[lo]) / steps, (hi - lo) / steps)
    return out


def model_step(step, n, tokens_per_step, joined_per_step, profile=None):
    """The continuous-batching step model at that load: the decode step (each decoding sequence is one token,
    priced per_token_ms like a prefill token, as the backend does), plus the joining requests' prefill tokens
    and admission spread over the steps. `profile` (batch sizes, step ms) replaces the decode step, as
    `step.profile` does in the backend."""
    decode = np.interp(n, *profile) if profile else step.base_ms + (step.per_seq_ms + step.per_token_ms) * n
    return decode + step.per_token_ms * tokens_per_step + step.admit_ms * joined_per_step


def step_per_request(records: list[dict], backend, kind: str) -> np.ndarray:
    """The step model checked on its own, request by request: rows of (decode start ms, mean sequences in the
    engine, measured decode step, model step) for the run's completed requests of `kind`. For each request the
    model is evaluated at the load it actually had during its decode (load_during_decode), so scheduling
    differences between the simulation and the run drop out and only the step model is left."""
    rows = load_during_decode(records, kind, backend.max_num_seqs)
    profile = _profile(backend.step.profile) if backend.step.profile else None
    model = model_step(backend.step, rows[:, 1], rows[:, 3], rows[:, 4], profile)
    return np.column_stack([rows[:, :3], model])


def step_at_measured_load(records: list[dict], backend, kind: str) -> tuple[float, float, float]:
    """Over one run's requests of `kind` (see step_per_request): (mean sequences in the engine, median measured
    decode step, median model step)."""
    rows = step_per_request(records, backend, kind)
    if not len(rows):
        return math.nan, math.nan, math.nan
    return float(rows[:, 1].mean()), float(np.median(rows[:, 2])), float(np.median(rows[:, 3]))


def step_error_by_window(records: list[dict], backend, kind: str, window_ms: float = 10_000.0,
                         min_requests: int = 5) -> dict[int, float]:
    """The engine's speed through one run: per window of decode start (index k covers [k, k+1) * window_ms), the
    median over its requests of model step / measured step - 1 (negative: the engine was slower than the model at
    the load it had). Windows with fewer than `min_requests` requests are left out."""
    rows = step_per_request(records, backend, kind)
    out = {}
    if not len(rows):
        return out
    idx = (rows[:, 0] // window_ms).astype(int)
    for k in np.unique(idx):
        sel = rows[idx == k]
        if len(sel) >= min_requests:
            out[int(k)] = float(np.median(sel[:, 3] / sel[:, 2]) - 1)
    return out


def _profile(path):
    from simlab.world.backends.continuous_batching import read_profile

    return read_profile(path)
