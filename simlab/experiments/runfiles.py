"""A run's per-task and time-series files: written once from columns through pyarrow, read back by one loader.

Per task (`runs/POLICY/seed-N/`): `tasks.parquet` (default for runs of `PARQUET_FROM` tasks or more) or
`tasks.csv` (smaller runs, or on request); none with `--tasks none` (summaries and time series only).
Time series: `series.csv`, a row per sampling instant. Reports and figures read both through `load_tasks`
and `load_series`, whatever the format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.store import atomic_open
from simlab.policies.base import BATCH, INTERACTIVE
from simlab.world.engine import SimResult
from simlab.world.tasktable import OUTCOMES

TASK_COLUMNS = ("id", "kind", "source", "arrival_ms", "dispatch_ms", "start_ms", "end_ms", "ttft_ms", "outcome",
                "retries", "service_ms", "prompt_tokens", "output_tokens")
LIFECYCLE_TASK_COLUMNS = ("attempts", "wasted_tokens", "wasted_ms")  # runs with timeouts or eviction only
TASK_FORMATS = ("auto", "parquet", "csv", "none")
TASK_FILES = ("tasks.parquet", "tasks.csv")  # the loader's search order
PARQUET_FROM = 100_000  # tasks: below, CSV (small, readable anywhere); from here, Parquet (5-10x faster, smaller)


def task_table(result: SimResult):
    """The per-task columns of a run as a pyarrow Table (ids and names as strings, NaN as null).

    Built from the numpy buffers and with pyarrow compute, not `pa.array`: `pa.array` imports pandas (its
    check for categoricals), which costs a `simlab run` 0.2 s of CPU it otherwise never needs.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = result.table
    c = t.columns
    n = len(t)

    def numbers(col, typ, np_type):  # NaN -> null; float columns stay float, token counts become whole numbers
        if col is None:
            return pa.nulls(n, typ)
        col = np.ascontiguousarray(col, dtype=np.float64)
        missing = np.isnan(col)
        values = col if np_type is np.float64 else np.where(missing, 0, col).astype(np_type)
        return _from_numpy(values, typ, missing)

    def floats(name):
        return numbers(c[name], pa.float64(), np.float64)

    def ints(name):
        return numbers(c[name], pa.int64(), np.int64)

    def named(codes, names):  # small integer codes into a list of names
        return pc.take(_strings(names), _from_numpy(np.ascontiguousarray(codes, dtype=np.int32), pa.int32()))

    lifecycle = [] if c.get("attempts") is None else [
        _from_numpy(np.ascontiguousarray(c["attempts"], dtype=np.int32), pa.int32()),
        ints("wasted_tokens"),
        floats("wasted_ms"),
    ]
    return pa.Table.from_arrays([
        _ids(t),
        named(c["interactive"], [BATCH, INTERACTIVE]),
        named(c["source"], [str(x) for x in t.labels]),
        floats("arrival_ms"),
        floats("dispatch_ms"),
        floats("start_ms"),
        floats("end_ms"),
        floats("ttft_ms"),
        named(c["outcome"], OUTCOMES),
        _from_numpy(np.ascontiguousarray(c["retries"], dtype=np.int32), pa.int32()),
        floats("service_ms"),
        ints("prompt_tokens"),
        ints("output_tokens"),
        *lifecycle,
    ], names=list(TASK_COLUMNS) + (list(LIFECYCLE_TASK_COLUMNS) if lifecycle else []))


def _from_numpy(values: np.ndarray, typ, missing: np.ndarray | None = None):
    """A pyarrow array on a contiguous numpy buffer (no copy); `missing` marks nulls."""
    import pyarrow as pa

    validity = None
    if missing is not None and missing.any():
        validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(values)])


def _strings(values: list[str]):
    import pyarrow as pa

    data = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    big = offsets[-1] >= 2**31  # past 32-bit offsets: build a large_string, cast (and fail clearly) at the end
    if not big:
        offsets = offsets.astype(np.int32)
    array = pa.Array.from_buffers(pa.large_string() if big else pa.string(), len(data),
                                  [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
    return array.cast(pa.string()) if big else array


def _ids(t):
    """Task ids as strings: `LABEL-N` joined in pyarrow when every id is generated, else one by one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    a = t.arrivals
    if a.ids is not None or t.extra_ids:
        return _strings([str(x) for x in t.ids()])
    source = _from_numpy(np.ascontiguousarray(a.source, dtype=np.int32), pa.int32())
    number = _from_numpy(np.ascontiguousarray(a.number, dtype=np.int64), pa.int64())
    return pc.binary_join_element_wise(pc.take(_strings([str(x) for x in a.labels]), source),
                                       pc.cast(number, pa.string()), _strings(["-"])[0])


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
            # Dictionary pages for the few-valued name columns only: trying them on every float column (the
            # default) costs a bench-1h write 3x the CPU for a bigger file.
            pq.write_table(table, f, compression="zstd", use_dictionary=["kind", "source", "outcome"])
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
                         na_values={c: [""] for c in TASK_COLUMNS + LIFECYCLE_TASK_COLUMNS
                                    if c not in ("id", "kind", "source", "outcome")})
    for col in ("id", "kind", "source", "outcome"):
        if col in df:
            df[col] = df[col].astype("string")
    for col in ("arrival_ms", "dispatch_ms", "start_ms", "end_ms", "ttft_ms", "service_ms", "prompt_tokens", "output_tokens"):
        if col in df:
            df[col] = df[col].astype("float64")  # token counts too: NaN where a task has none
    for col in ("retries", "attempts"):
        if col in df:
            df[col] = df[col].astype("int64")
    return df


def load_series(path: Path, columns: list[str] | None = None) -> "pd.DataFrame":
    """A run's time series (a run folder or its series.csv), float64 columns sorted by time."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        path = path / "series.csv"
    df = pd.read_csv(path, usecols=columns, dtype="float64")
    return df.sort_values("t_ms", kind="stable").reset_index(drop=True) if "t_ms" in df else df
