"""Reading request logs (CSV or JSON Lines) into one table: arrival_ms, kind, and the optional
service_ms, prompt_tokens and output_tokens.

Columns are found by name. Known layouts are recognised on their own:

| layout | arrival | prompt tokens | output tokens | other |
|---|---|---|---|---|
| generic (simlab's trace CSV) | `arrival_ms` (ms) | `prompt_tokens` | `output_tokens` | `kind`, `service_ms` |
| Azure LLM inference trace | `TIMESTAMP` (date-time) | `ContextTokens` | `GeneratedTokens` | |
| Mooncake (JSONL) | `timestamp` (ms) | `input_length` | `output_length` | |
| BurstGPT | `Timestamp` (s) | `Request tokens` | `Response tokens` | |

Any other names are given with `--map ROLE=COLUMN[:UNIT],...`, e.g.
`--map arrival=ts:s,prompt_tokens=in_tok,output_tokens=out_tok,class=queue,service_ms=latency:s`.
Roles: `arrival` (a date-time string, or a number in UNIT, ms unless told), `class` (interactive or batch;
other labels are mapped with `--classes chat=interactive,offline=batch`), `service_ms` (latency or service
time; UNIT ms unless told), `prompt_tokens`, `output_tokens`. Units: ns, us, ms, s, min, h. Roles left out of
`--map` are still looked for by their usual names. Arrival times are made relative to the first request;
the rows are sorted by arrival.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simlab.errors import DATA_MAX_BYTES, InputError, did_you_mean, read_text

KINDS = ("interactive", "batch")
ROLES = ("arrival", "class", "service_ms", "prompt_tokens", "output_tokens")
ROLE_ALIASES = {
    "arrival": "arrival", "arrival_ms": "arrival", "arrival_time": "arrival", "timestamp": "arrival", "time": "arrival",
    "class": "class", "kind": "class",
    "service_ms": "service_ms", "service": "service_ms", "latency": "service_ms", "latency_ms": "service_ms",
    "prompt_tokens": "prompt_tokens", "prompt": "prompt_tokens", "input_tokens": "prompt_tokens",
    "output_tokens": "output_tokens", "output": "output_tokens", "completion_tokens": "output_tokens",
}  # fmt: skip
UNITS_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0, "min": 60_000.0, "h": 3_600_000.0}

# Usual names of each role, in order of preference (matched case-insensitively), with the unit of a number.
CANDIDATES = {
    "arrival": [("arrival_ms", "ms"), ("timestamp", None), ("arrival_time", None), ("arrival_s", "s"),
                ("time", None), ("created_at", None), ("start_time", None)],
    "class": [("kind", None), ("class", None)],
    "service_ms": [("service_ms", "ms"), ("latency_ms", "ms"), ("duration_ms", "ms"), ("e2e_latency_ms", "ms")],
    "prompt_tokens": [("prompt_tokens", None), ("contexttokens", None), ("input_length", None),
                      ("request tokens", None), ("input_tokens", None), ("num_prefill_tokens", None)],
    "output_tokens": [("output_tokens", None), ("generatedtokens", None), ("output_length", None),
                      ("response tokens", None), ("completion_tokens", None), ("num_decode_tokens", None)],
}  # fmt: skip

MIN_ROWS = 2


@dataclass
class RequestLog:
    path: Path
    layout: str  # which layout was recognised, or "mapped"
    frame: pd.DataFrame  # line, arrival_ms (from 0), kind, and optional service_ms, prompt_tokens, output_tokens
    sources: dict[str, str]  # role -> "column (unit)", for the report
    origin: str | None = None  # the first request's timestamp as written, when the log has date-times
    resolution_ms: float = 0.0  # timestamp granularity (1000 for whole seconds, 1 for whole ms, 0 if finer)
    notes: list[str] = field(default_factory=list)  # codes of records.FitRecord.log_notes

    @property
    def span_ms(self) -> float:
        return float(self.frame["arrival_ms"].max()) if len(self.frame) else 0.0

    def kinds(self) -> list[str]:
        present = set(self.frame["kind"])
        return [k for k in KINDS if k in present]

    def of(self, kind: str) -> pd.DataFrame:
        return self.frame[self.frame["kind"] == kind]

    def has(self, column: str) -> bool:
        return column in self.frame.columns


def parse_map(text: str | None) -> dict[str, tuple[str, str | None]]:
    """`arrival=ts:s,prompt_tokens=in` -> {"arrival": ("ts", "s"), "prompt_tokens": ("in", None)}."""
    out: dict[str, tuple[str, str | None]] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise InputError(None, "--map", f"{part!r} is not ROLE=COLUMN (e.g. arrival=TIMESTAMP)")
        role, column = (s.strip() for s in part.split("=", 1))
        key = ROLE_ALIASES.get(role.lower())
        if key is None:
            raise InputError(None, "--map", f"unknown role {role!r}{did_you_mean(role, ROLE_ALIASES)}; roles: {', '.join(ROLES)}")
        unit = None
        if ":" in column:
            name, maybe = column.rsplit(":", 1)
            if maybe.strip() in UNITS_MS:
                column, unit = name.strip(), maybe.strip()
            elif key in ("arrival", "service_ms"):
                raise InputError(None, "--map", f"unknown unit {maybe!r} in {part!r}; units: {', '.join(UNITS_MS)}")
        if not column:
            raise InputError(None, "--map", f"no column name in {part!r}")
        if unit is not None and key not in ("arrival", "service_ms"):
            raise InputError(None, "--map", f"a unit only applies to arrival and service_ms (found {part!r})")
        out[key] = (column, unit)
    return out


def parse_classes(text: str | None) -> dict[str, str]:
    """`chat=interactive,offline=batch` -> {"chat": "interactive", "offline": "batch"} (labels lower-cased)."""
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise InputError(None, "--classes", f"{part!r} is not LABEL=interactive or LABEL=batch")
        label, kind = (s.strip() for s in part.split("=", 1))
        if kind.lower() not in KINDS:
            raise InputError(None, "--classes", f"{kind!r} is not interactive or batch{did_you_mean(kind.lower(), KINDS)}")
        out[label.lower()] = kind.lower()
    return out


# --- reading the raw table --------------------------------------------------------------------------
def _is_jsonl(path: Path, head: str) -> bool:
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return True
    if path.suffix.lower() in (".csv", ".tsv", ".txt"):
        return False
    return head.lstrip()[:1] == "{"


def _read_csv(path: Path, text: str) -> tuple[list[str], "callable"]:
    """The header, and a loader that reads the given columns as strings with each row's line number."""
    try:
        header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])))
    except (StopIteration, csv.Error):
        raise InputError(path, "line 1", "not a readable CSV header") from None
    header = [h.strip() for h in header]
    if not any(header):
        raise InputError(path, "line 1", "empty header (expected column names, e.g. TIMESTAMP,ContextTokens,GeneratedTokens)")

    def load(columns: list[str]) -> pd.DataFrame:
        try:
            wanted = set(columns)
            frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False,
                                skipinitialspace=True, usecols=lambda c: str(c).strip() in wanted)
        except pd.errors.ParserError as exc:
            raise InputError(path, None, f"not a valid CSV ({str(exc).strip()})") from None
        except Exception as exc:  # pandas raises many types for a bad file
            raise InputError(path, None, f"cannot read CSV ({exc})") from None
        frame.columns = [str(c).strip() for c in frame.columns]
        frame = frame[columns].copy()
        frame["line"] = np.arange(len(frame)) + 2
        blank = np.ones(len(frame), dtype=bool)
        for c in columns:
            blank &= frame[c].str.strip().to_numpy() == ""
        return frame[~blank]

    return header, load


def _read_jsonl(path: Path, text: str) -> tuple[list[str], "callable"]:
    rows: list[tuple[int, dict]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {number}", f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(path, f"line {number}", f"expected a JSON object per line, found {type(obj).__name__}")
        rows.append((number, obj))
    if not rows:
        raise InputError(path, None, "no requests in the file (expected one JSON object per line)")
    header = list(rows[0][1].keys())

    def load(columns: list[str]) -> pd.DataFrame:
        data: dict[str, list] = {c: [] for c in columns}
        lines = []
        for number, obj in rows:
            for c in columns:
                if c not in obj:
                    raise InputError(path, f"line {number}", f"no key {c!r} (the first line has it)")
                v = obj[c]
                data[c].append("" if v is None else str(v))
            lines.append(number)
        frame = pd.DataFrame(data, dtype=str)
        frame["line"] = lines
        return frame

    return header, load


def _detect(header: list[str], mapping: dict[str, tuple[str, str | None]], path: Path) -> tuple[dict, str]:
    """role -> (column, unit) for every role found, and the layout's name."""
    lower = {h.lower(): h for h in reversed(header)}
    chosen: dict[str, tuple[str, str | None]] = {}
    for role, (column, unit) in mapping.items():
        if column not in header:
            actual = lower.get(column.lower())
            if actual is None:
                raise InputError(path, "header", f"--map {role}={column}: no column {column!r}{did_you_mean(column, header)}; "
                                                 f"columns are {', '.join(header)}")
            column = actual
        chosen[role] = (column, unit)
    taken = {c for c, _ in chosen.values()}
    for role, candidates in CANDIDATES.items():
        if role in chosen:
            continue
        for name, unit in candidates:
            if name in lower and lower[name] not in taken:
                chosen[role] = (lower[name], unit)
                taken.add(lower[name])
                break
    names = {h.lower() for h in header}
    if {"timestamp", "contexttokens", "generatedtokens"} <= names:
        layout = "azure"
    elif {"timestamp", "request tokens", "response tokens"} <= names:
        layout = "burstgpt"
        if "arrival" in chosen and chosen["arrival"][1] is None and "arrival" not in mapping:
            chosen["arrival"] = (chosen["arrival"][0], "s")  # BurstGPT's Timestamp is in seconds
    elif {"timestamp", "input_length", "output_length"} <= names:
        layout = "mooncake"
    elif "arrival_ms" in names:
        layout = "generic"
    else:
        layout = "mapped" if mapping else "recognised by column names"
    if "arrival" not in chosen:
        raise InputError(
            path, "header",
            f"no arrival time column among {', '.join(header)}; expected arrival_ms, TIMESTAMP or timestamp, "
            f"or say which with --map arrival=COLUMN (add :s for seconds)",
        )
    if mapping and layout in ("generic", "azure", "burstgpt", "mooncake"):
        layout += " (with --map)"
    return chosen, layout


# --- converting columns ---------------------------------------------------------------------------
def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _arrivals(path: Path, frame: pd.DataFrame, column: str, unit: str | None) -> tuple[np.ndarray, str, str | None, float]:
    """Milliseconds from the first request, how they were read, the first timestamp as written, resolution."""
    raw = frame[column].str.strip()
    lines = frame["line"].to_numpy()
    empty = (raw == "").to_numpy()
    if empty.any():
        i = _first_bad(empty)
        raise InputError(path, f"line {lines[i]}", f"{column} is empty (expected an arrival time)")
    numbers = pd.to_numeric(raw, errors="coerce")
    first_is_number = not math.isnan(numbers.iloc[0])
    if first_is_number and unit is None and numbers.notna().all():
        unit = "ms"
    if first_is_number or unit is not None:
        bad = (numbers.isna() | ~np.isfinite(numbers)).to_numpy()
        if bad.any():
            i = _first_bad(bad)
            raise InputError(path, f"line {lines[i]}",
                             f"{column} {raw.iloc[i]!r} is not a number (the first rows are numbers, read as {unit or 'ms'})")
        scale = UNITS_MS[unit or "ms"]
        values = numbers.to_numpy(dtype=float)
        origin = values.min()
        rel = (values - origin) * scale
        resolution = 0.0
        for step in (1.0, 1e-3):  # whole units, whole thousandths of a unit
            if np.all(np.abs(values / step - np.rint(values / step)) < 1e-6):
                resolution = step * scale
                break
        return rel, f"{column} (number, {unit or 'ms'})", None, resolution
    stamps = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
    bad = stamps.isna().to_numpy()
    if bad.any():
        i = _first_bad(bad)
        raise InputError(
            path, f"line {lines[i]}",
            f"{column} {raw.iloc[i]!r} is not a timestamp (expected a date-time like 2023-11-16 18:15:46.680 "
            f"or a number of ms; say the unit with --map arrival={column}:s)",
        )
    ns = stamps.dt.as_unit("ns").astype("int64").to_numpy()  # the unit pandas picks depends on the input
    first = int(np.argmin(ns))
    rel = (ns - ns[first]) / 1e6
    resolution = 0.0
    for step_ns, res in ((1_000_000_000, 1000.0), (1_000_000, 1.0)):
        if np.all(ns % step_ns == 0):
            resolution = res
            break
    return rel, f"{column} (date-time)", raw.iloc[first], resolution


def _counts(path: Path, frame: pd.DataFrame, column: str, what: str) -> np.ndarray:
    raw = frame[column].str.strip()
    values = pd.to_numeric(raw, errors="coerce")
    bad = (values.isna() | ~np.isfinite(values) | (values < 0)).to_numpy()
    if bad.any():
        i = _first_bad(bad)
        raise InputError(path, f"line {frame['line'].iloc[i]}", f"{column} {raw.iloc[i]!r} is not a non-negative {what}")
    return values.to_numpy(dtype=float)


def _classes(path: Path, frame: pd.DataFrame, column: str, classes: dict[str, str]) -> np.ndarray:
    raw = frame[column].str.strip()
    lowered = raw.str.lower()
    table = {k: k for k in KINDS}
    table.update(classes)
    mapped = lowered.map(table)
    bad = mapped.isna().to_numpy()
    if bad.any():
        i = _first_bad(bad)
        value = raw.iloc[i]
        unknown = sorted(set(raw[bad]))
        shown = ", ".join(repr(u) for u in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise InputError(
            path, f"line {frame['line'].iloc[i]}",
            f"class column {column!r}: {value!r} is not one of {', '.join(sorted(table))}"
            f"{did_you_mean(value.lower(), KINDS)} (unknown values: {shown}); "
            f"map labels with --classes {value}=interactive or {value}=batch",
        )
    return mapped.to_numpy(dtype=object)


def read_log(path: str | Path, mapping: dict | str | None = None, classes: dict | str | None = None,
             default_class: str = "interactive") -> RequestLog:
    """Read a request log; every problem is an InputError naming the file and the line."""
    path = Path(path)
    mapping = parse_map(mapping) if isinstance(mapping, str) or mapping is None else mapping
    classes = parse_classes(classes) if isinstance(classes, str) or classes is None else classes
    text = read_text(path, "log file", "a CSV or JSON Lines log", DATA_MAX_BYTES)
    if not text.strip():
        raise InputError(path, None, "empty file (expected a CSV with a header, or JSON Lines)")
    jsonl = _is_jsonl(path, text[:64])
    header, load = (_read_jsonl if jsonl else _read_csv)(path, text)
    chosen, layout = _detect(header, mapping, path)
    frame = load(sorted({c for c, _ in chosen.values()}, key=header.index))
    if len(frame) == 0:
        raise InputError(path, None, "no requests after the header")
    out = pd.DataFrame({"line": frame["line"].to_numpy()})
    sources: dict[str, str] = {}
    col, unit = chosen["arrival"]
    out["arrival_ms"], sources["arrival"], origin, resolution = _arrivals(path, frame, col, unit)
    if "class" in chosen:
        col = chosen["class"][0]
        out["kind"] = _classes(path, frame, col, classes)
        sources["class"] = col
    else:
        out["kind"] = default_class
        sources["class"] = f"none: every request is {default_class}"
    if "service_ms" in chosen:
        col, unit = chosen["service_ms"]
        out["service_ms"] = _counts(path, frame, col, "number") * UNITS_MS[unit or "ms"]
        sources["service_ms"] = f"{col} ({unit or 'ms'})"
    for role in ("prompt_tokens", "output_tokens"):
        if role in chosen:
            col = chosen[role][0]
            out[role] = _counts(path, frame, col, "token count")
            sources[role] = col
    if ("prompt_tokens" in out) != ("output_tokens" in out):
        have, missing = ("prompt_tokens", "output_tokens") if "prompt_tokens" in out else ("output_tokens", "prompt_tokens")
        raise InputError(path, "header", f"found {have} ({sources[have]}) but no {missing}; give both token columns "
                                         f"(--map {missing}=COLUMN) or neither")
    if "prompt_tokens" not in out and "service_ms" not in out:
        raise InputError(path, "header", f"no token or latency columns among {', '.join(header)}: expected prompt_tokens "
                                         f"and output_tokens, or service_ms (say which with --map)")
    notes = []
    order = np.argsort(out["arrival_ms"].to_numpy(), kind="stable")
    if np.any(np.diff(out["arrival_ms"].to_numpy()) < 0):
        notes.append("unsorted")  # rows were not in arrival order: sorted by arrival time
    out = out.iloc[order].reset_index(drop=True)
    return RequestLog(path, layout, out, sources, origin, resolution, notes)
