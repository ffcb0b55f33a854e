"""Samplers for service times (ms) and token counts, built from a scenario's distribution tables."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Callable

import numpy as np

from simlab.errors import DATA_MAX_BYTES, InputError, open_bytes
from simlab.scenario import Constant, Empirical, Exponential, Lognormal, Uniform

Z95 = 1.6448536269514722  # standard normal 95th percentile

Sampler = Callable[[np.random.Generator, int], np.ndarray]


def lognormal_params(median: float, p95: float) -> tuple[float, float]:
    mu = math.log(median)
    return mu, (math.log(p95) - mu) / Z95


def empirical_values(path: Path, column: str) -> np.ndarray:
    """The column's values; read again when the file changes (size or modification time)."""
    try:
        st = Path(path).stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None  # read_csv reports the missing file
    return _empirical_values(path, column, stamp)


empirical_values.cache_clear = lambda: _empirical_values.cache_clear()


@functools.lru_cache(maxsize=32)
def _empirical_values(path: Path, column: str, stamp) -> np.ndarray:
    import pandas as pd  # lazy: a run without trace or empirical files never loads pandas
    try:
        with open_bytes(path, "empirical distribution file", DATA_MAX_BYTES) as handle:
            frame = pd.read_csv(handle)
    except InputError:
        raise
    except Exception as exc:  # pandas raises many types for a bad file
        raise InputError(path, None, f"cannot read CSV ({exc})") from None
    if column not in frame.columns:
        raise InputError(path, "header", f"no column {column!r}; columns are {', '.join(map(str, frame.columns))}")
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() | (values < 0) | ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, f"line {row + 2}", f"{column} {frame[column].iloc[row]!r} is not a non-negative number")
    if len(values) == 0:
        raise InputError(path, None, f"column {column!r} has no values")
    return values.to_numpy(dtype=float)


def make_sampler(dist, resolve: Callable[[str], Path]) -> Sampler:
    """A function (rng, n) -> n draws."""
    if isinstance(dist, Constant):
        value = float(dist.value)
        return lambda rng, n: np.full(n, value)
    if isinstance(dist, Exponential):
        mean = dist.mean
        return lambda rng, n: rng.exponential(mean, n)
    if isinstance(dist, Lognormal):
        mu, sigma = lognormal_params(dist.median, dist.p95)
        return lambda rng, n: rng.lognormal(mu, sigma, n)
    if isinstance(dist, Uniform):
        low, high = dist.low, dist.high
        return lambda rng, n: rng.uniform(low, high, n)
    if isinstance(dist, Empirical):
        values = empirical_values(resolve(dist.file), dist.column) * dist.scale
        return lambda rng, n: values[rng.integers(0, len(values), n)]
    raise TypeError(f"unknown distribution {dist!r}")


def make_draw(dist, resolve: Callable[[str], Path]) -> Callable[[np.random.Generator], float]:
    """A function rng -> one draw, as a float: the value `make_sampler(dist, resolve)(rng, 1)[0]` gives and the
    same use of the generator (numpy's scalar form runs the same routine once), without making an array; for
    what draws one value at a time (a closed-loop user's think times and requests)."""
    if isinstance(dist, Constant):
        value = float(dist.value)
        return lambda rng: value
    if isinstance(dist, Exponential):
        mean = dist.mean
        return lambda rng: rng.exponential(mean)
    if isinstance(dist, Lognormal):
        mu, sigma = lognormal_params(dist.median, dist.p95)
        return lambda rng: rng.lognormal(mu, sigma)
    if isinstance(dist, Uniform):
        low, high = dist.low, dist.high
        return lambda rng: rng.uniform(low, high)
    if isinstance(dist, Empirical):
        values = (empirical_values(resolve(dist.file), dist.column) * dist.scale).tolist()
        n = len(values)
        return lambda rng: values[rng.integers(0, n)]
    raise TypeError(f"unknown distribution {dist!r}")
