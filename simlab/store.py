"""Where results go: atomic file writes, and numbers and rows as the files hold them.

A killed run leaves the old file or the new one, never half of one. Results (summaries, fits, comparisons,
result.json) are written at `PRECISION` significant digits, so another CPU's last bits change no committed file;
raw records (per-task times, time series, streamed tokens) are written exactly."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import tempfile
from pathlib import Path


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, durable: bool = True, **kwargs):
    """Open a temporary file beside `path`; on success fsync it (unless not `durable`) and rename it over `path`.
    Not durable: for caches whose reader treats a damaged file as absent (after a power cut the rename may
    reach the disk before the bytes); a kill leaves the old file or the new one either way."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are for sharing like any other file
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, durable: bool = True) -> None:
    with atomic_open(path, "w", durable=durable, encoding="utf-8", newline="") as handle:
        handle.write(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as handle:
        handle.write(data)


PRECISION = 6  # significant digits of every result a command writes


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
