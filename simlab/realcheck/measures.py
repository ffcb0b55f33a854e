"""Request records, measured or simulated, and the metrics both sides are judged by (computed alike).

A record: id, kind, prompt_tokens, output_tokens, arrival_ms, start_ms, ttft_ms, end_ms, outcome (ms from the run's
origin; ttft from arrival). validate-real writes them to measured/*.csv and simulated/*.csv.
"""

from __future__ import annotations

import math

import numpy as np

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
