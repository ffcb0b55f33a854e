"""The generic trace CSV: `id,kind,arrival_ms,service_ms` (extra columns are kept)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from simlab.errors import DATA_MAX_BYTES, InputError, did_you_mean, read_text
from simlab.policies.base import KINDS, Task

REQUIRED_COLUMNS = ("id", "kind", "arrival_ms", "service_ms")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")  # the Azure LLM inference trace's header


def parse_ms(text: str, source, where: str, column: str, *, allow_empty: bool = False) -> float | None:
    """A finite, non-negative number of milliseconds, or an InputError that says which cell is wrong."""
    text = text.strip() if text is not None else ""
    if text == "" and allow_empty:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(source, where, f"{column} {text!r} is not a number (expected milliseconds, e.g. 1250.5)") from None
    if not math.isfinite(value):
        raise InputError(source, where, f"{column} {text!r} is not a finite number of milliseconds")
    if value < 0:
        raise InputError(source, where, f"{column} {text!r} is negative (expected milliseconds >= 0)")
    return value


def read_trace(path: str | Path, required=REQUIRED_COLUMNS) -> tuple[list[Task], list[str]]:
    """Tasks in file order, and the header. Each task's extra columns are in `task.payload` (a dict)."""
    path = Path(path)
    handle = io.StringIO(read_text(path, "trace file", "a CSV trace", DATA_MAX_BYTES), newline="")
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(path, None, f"empty file (expected a CSV header with {','.join(required)})") from None
        except csv.Error as exc:
            raise InputError(path, "line 1", f"not a readable CSV header ({exc})") from None
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            hints = "".join(did_you_mean(m, header) for m in missing)
            if all(c in header for c in AZURE_COLUMNS):
                hints += ("; these are the Azure LLM trace's columns: a scenario's trace arrivals read them with "
                          'format = "azure", and `simlab fit FILE` makes a scenario from them')
            raise InputError(
                path,
                "header",
                f"missing column(s) {', '.join(missing)}{hints}; found {','.join(header)}; "
                f"expected at least {','.join(required)}",
            )
        col = {name: header.index(name) for name in header}
        i_id, i_kind, i_arr, i_svc = (col[c] for c in REQUIRED_COLUMNS)
        extra = [(name, idx) for name, idx in col.items() if name not in REQUIRED_COLUMNS]
        tasks: list[Task] = []
        seen: dict[str, int] = {}
        line = 1
        try:
            for row in reader:
                line = reader.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                where = f"line {line}"
                if len(row) != len(header):
                    raise InputError(path, where, f"has {len(row)} fields, the header has {len(header)}")
                task_id = row[i_id].strip()
                if not task_id:
                    raise InputError(path, where, "id is empty")
                if task_id in seen:
                    raise InputError(path, where, f"duplicate id {task_id!r} (first on line {seen[task_id]})")
                seen[task_id] = line
                kind = row[i_kind].strip()
                if kind not in KINDS:
                    raise InputError(
                        path, where, f"kind {kind!r} is not one of {', '.join(KINDS)}{did_you_mean(kind, KINDS)}"
                    )
                arrival = parse_ms(row[i_arr], path, where, "arrival_ms")
                service = parse_ms(row[i_svc], path, where, "service_ms")
                payload = {name: row[idx] for name, idx in extra} if extra else None
                tasks.append(Task(task_id, kind, arrival, service, payload))
        except csv.Error as exc:
            raise InputError(path, f"line {reader.line_num}", f"not valid CSV ({exc})") from None
    if not tasks:
        raise InputError(path, None, "no rows after the header (expected at least one task)")
    return tasks, header


def format_ms(value: float | None) -> str:
    """Full float precision (shortest repr that round-trips); empty for a time that never came."""
    return "" if value is None else repr(float(value))
