"""Plain-text and Markdown tables for the terminal and reports."""

from __future__ import annotations

import math


def fmt_num(x, digits: int = 1) -> str:
    """A number as tables show it: thousands separated, whole from 100 up, `digits` decimals below; a nonzero
    value that would read as 0.0 there (from 1e-6 up), with two significant digits, so its sign and size show.

    >>> fmt_num(1234567.8), fmt_num(42.25), fmt_num(3.0), fmt_num(float("nan")), fmt_num(True)
    ('1,234,568', '42.2', '3', '–', 'yes')
    >>> fmt_num(-0.0312), fmt_num(0.049), fmt_num(0.05), fmt_num(1e-9)
    ('-0.031', '0.049', '0.1', '0.0')
    """
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, int) or x == int(x):
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1e-6 and round(x, digits) == 0:
        return f"{x:.{1 - math.floor(math.log10(abs(x)))}f}"
    return f"{x:,.{digits}f}"


def fmt_ci(mean, lo, hi, digits: int = 1) -> str:
    """'mean [low, high]'; the mean alone when there is no interval or every seed gave the same value.

    >>> fmt_ci(812.4, 790.0, 835.2), fmt_ci(5.0, float("nan"), float("nan")), fmt_ci(7.0, 7.0, 7.0)
    ('812 [790, 835]', '5', '7')
    """
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
