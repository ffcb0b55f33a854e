"""The step model checked on its own, on measured runs: what each request's decode saw, and what the continuous-
batching step model says at exactly that load (so the scheduling differences between simulation and run drop out).
"""

from __future__ import annotations

import math

import numpy as np

UNSTREAMED = 0.05  # a decode step under this share of the median was not streamed: its tokens came all at once


def decode_ms_per_token(records: list[dict], kind: str) -> float:
    """Median over completed requests of (end - first token) / (output tokens - 1): the decode step each one saw.
    Separates the engine's step time (the step model) from queueing and prefill (the scheduler, the TTFT model).
    Requests whose decode was not observed (`streamed`: every token at once) are left out; NaN when none is left."""
    v = np.array([(r["end_ms"] - r["arrival_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in records
                  if r["kind"] == kind and r["outcome"] == "ok" and r["ttft_ms"] is not None and r["output_tokens"] > 4])
    v = v[_observed(v)] if len(v) else v
    return float(np.median(v)) if len(v) else math.nan


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


def streamed(rows: np.ndarray) -> np.ndarray:
    """Which rows of load_during_decode had their decode observed: a measured step above 0 and at least
    UNSTREAMED of the rows' median. Otherwise a request's tokens came (nearly) all at once (on the real engine, 45
    and 106 tokens within 0.2 ms; with the Node driver's 1 ms clock, an exact 0), and as a relative error it would
    outweigh every other request, or divide by zero."""
    if not len(rows):
        return np.ones(0, bool)
    return _observed(rows[:, 2])


def _observed(step: np.ndarray) -> np.ndarray:
    """Measured decode steps above 0 and at least UNSTREAMED of their median (see `streamed`)."""
    return (step > 0) & (step >= UNSTREAMED * np.median(step))


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
    differences between the simulation and the run drop out and only the step model is left. Requests whose
    decode was not observed (`streamed`) are left out."""
    rows = load_during_decode(records, kind, backend.max_num_seqs)
    rows = rows[streamed(rows)]
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
