"""Plain-text and Markdown tables for the terminal and reports."""

from __future__ import annotations

import csv
import io
import math


def fmt_num(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, int) or x == int(x):
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def fmt_ci(mean, lo, hi, digits: int = 1) -> str:
    """'mean [low, high]'; the mean alone when there is no interval or every seed gave the same value."""
    if not (isinstance(lo, float) and math.isfinite(lo)) or lo == hi:
        return fmt_num(mean, digits)
    return f"{fmt_num(mean, digits)} [{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]"


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def csv_cell(value) -> str:
    """A CSV cell: full float precision (repr), empty for None or NaN (a time that never came)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def csv_text(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([csv_cell(r.get(c)) for c in columns])
    return buf.getvalue()
