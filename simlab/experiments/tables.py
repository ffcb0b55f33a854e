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


# Results (summaries, fits, comparisons) are written at this many significant digits: another CPU's last bits
# (a BLAS kernel, a solver's stopping point) must not change a committed file. Raw records (per-task times,
# time series, streamed tokens) are written exactly (`digits=None`).
PRECISION = 6


def significant(x: float, digits: int = PRECISION) -> float:
    """`x` rounded to `digits` significant digits.

    >>> significant(1234567.891), significant(0.000123456789), significant(-2.5)
    (1234570.0, 0.000123457, -2.5)
    """
    return float(f"{x:.{digits}g}") if math.isfinite(x) else x


def csv_cell(value, digits: int | None = PRECISION) -> str:
    """A CSV cell: a float at `digits` significant digits (None: exactly, repr), empty for None or NaN (a time
    that never came).

    >>> csv_cell(2/3), csv_cell(2/3, None), csv_cell(float("nan")), csv_cell(7), csv_cell(None)
    ('0.666667', '0.6666666666666666', '', '7', '')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(significant(value, digits) if digits else float(value))
    return str(value)


def csv_text(rows: list[dict], columns, digits: int | None = PRECISION) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([csv_cell(r.get(c), digits) for c in columns])
    return buf.getvalue()
