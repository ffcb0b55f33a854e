"""A run's per-task and time-series files: written once from columns through pyarrow, read back by one loader.

Per task (`runs/POLICY/seed-N/`): `tasks.parquet` (default for runs of `PARQUET_FROM` tasks or more) or
`tasks.csv` (smaller runs, or on request); none with `--tasks none` (summaries and time series only).
Time series: `series.csv`, a row per sampling instant. Reports and figures read both through `load_tasks`
and `load_series`, whatever the format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.atomic import atomic_open
from simlab.world.engine import SimResult

TASK_COLUMNS = ("id", "kind", "source", "arrival_ms", "dispatch_ms", "start_ms", "end_ms", "ttft_ms", "outcome",
                "retries", "service_ms", "prompt_tokens", "output_tokens")
TASK_FORMATS = ("auto", "parquet", "csv", "none")
TASK_FILES = ("tasks.parquet", "tasks.csv")  # the loader's search order
PARQUET_FROM = 100_000  # tasks: below, CSV (small, readable anywhere); from here, Parquet (5-10x faster, smaller)


def task_table(result: SimResult):
    """The per-task columns of a run as a pyarrow Table (ids and names as strings, NaN as null)."""
    import pyarrow as pa

    t = result.table
    c = t.columns
    n = len(t)

    def floats(name):
        col = c[name]
        if col is None:
            return pa.nulls(n, pa.float64())
        return pa.array(col, type=pa.float64(), from_pandas=True)  # from_pandas: NaN -> null

    def ints(name):  # token counts: whole numbers, null where absent
        col = c[name]
        if col is None:
            return pa.nulls(n, pa.int64())
        mask = np.isnan(col)
        return pa.array(np.where(mask, 0, col).astype(np.int64), mask=mask)

    outcome = t.outcomes()
    return pa.table({
        "id": pa.array([str(x) for x in t.ids()], type=pa.string()),
        "kind": pa.array(t.kinds(), type=pa.string()),
        "source": pa.array(t.sources(), type=pa.string()),
        "arrival_ms": floats("arrival_ms"),
        "dispatch_ms": floats("dispatch_ms"),
        "start_ms": floats("start_ms"),
        "end_ms": floats("end_ms"),
        "ttft_ms": floats("ttft_ms"),
        "outcome": pa.array(outcome, type=pa.string()),
        "retries": pa.array(c["retries"], type=pa.int32()),
        "service_ms": floats("service_ms"),
        "prompt_tokens": ints("prompt_tokens"),
        "output_tokens": ints("output_tokens"),
    })


def choose_format(fmt: str, n_tasks: int) -> str:
    if fmt == "auto":
        return "parquet" if n_tasks >= PARQUET_FROM else "csv"
    return fmt


def write_tasks(result: SimResult, run_dir: Path, fmt: str = "auto") -> Path | None:
    """Write the run's per-task file in `fmt` (see TASK_FORMATS); returns its path (None for "none")."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    fmt = choose_format(fmt, len(result.table))
    if fmt == "none":
        return None
    table = task_table(result)
    for stale in TASK_FILES:  # a rerun in another format must not leave the old file to be read instead
        (Path(run_dir) / stale).unlink(missing_ok=True)
    path = Path(run_dir) / f"tasks.{fmt}"
    with atomic_open(path, "wb") as f:
        if fmt == "parquet":
            pq.write_table(table, f, compression="zstd")
        else:  # quoting where needed (commas, quotes, newlines in ids), UTF-8, shortest round-trip floats
            pcsv.write_csv(table, f)
    return path


def task_file(run_dir: Path) -> Path | None:
    for name in TASK_FILES:
        if (Path(run_dir) / name).is_file():
            return Path(run_dir) / name
    return None


def load_tasks(path: Path, columns: list[str] | None = None) -> "pd.DataFrame":
    """A per-task file (a run folder, or a tasks.parquet / tasks.csv path) as a DataFrame.

    Strings come back as pandas "string", times and token counts as float64 (NaN where absent), retries as int64. Raises OSError or ValueError
    on a missing or unreadable file, so callers decide how to report it.
    """
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        found = task_file(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no {' or '.join(TASK_FILES)}")
        path = found
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        df = pq.read_table(path, columns=columns).to_pandas()
    else:
        df = pd.read_csv(path, usecols=columns, dtype={"id": "string"}, keep_default_na=False,
                         na_values={c: [""] for c in TASK_COLUMNS if c not in ("id", "kind", "source", "outcome")})
    for col in ("id", "kind", "source", "outcome"):
        if col in df:
            df[col] = df[col].astype("string")
    for col in ("arrival_ms", "dispatch_ms", "start_ms", "end_ms", "ttft_ms", "service_ms", "prompt_tokens", "output_tokens"):
        if col in df:
            df[col] = df[col].astype("float64")  # token counts too: NaN where a task has none
    if "retries" in df:
        df["retries"] = df["retries"].astype("int64")
    return df


def load_series(path: Path, columns: list[str] | None = None) -> "pd.DataFrame":
    """A run's time series (a run folder or its series.csv), float64 columns sorted by time."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        path = path / "series.csv"
    df = pd.read_csv(path, usecols=columns, dtype="float64")
    return df.sort_values("t_ms", kind="stable").reset_index(drop=True) if "t_ms" in df else df
