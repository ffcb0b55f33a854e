"""Confidence intervals for replicated runs: Student t on per-seed values and on paired differences."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def mean_ci(values, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its Student-t interval at `level`; NaN bounds with fewer than two finite
    values (NaNs are left out).

    >>> [round(v, 3) for v in mean_ci([10.0, 12.0, 14.0])]
    [12.0, 7.032, 16.968]
    >>> mean_ci([5.0, float("nan")])
    (5.0, nan, nan)
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    if n >= 2 and np.all(x == x[0]):
        return float(x[0]), float(x[0]), float(x[0])  # exact: np.mean of a constant may round off it
    mean = float(np.mean(x))
    if n < 2:
        return mean, math.nan, math.nan
    sem = float(np.std(x, ddof=1)) / math.sqrt(n)
    if sem == 0:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sem
    return mean, mean - half, mean + half


def paired(candidate, baseline, level: float = 0.95) -> dict:
    """Paired comparison over common seeds: difference (candidate - baseline) and ratio (candidate / baseline),
    each with its Student-t interval over the pairs; significant when the difference's interval excludes 0.

    >>> d = paired([101.0, 103.0, 102.0], [100.0, 101.0, 101.0])
    >>> round(d["diff"], 3), round(d["diff_ci_low"], 3), d["significant"]
    (1.333, -0.101, False)
    """
    a = np.asarray(candidate, dtype=float)
    b = np.asarray(baseline, dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    diff, diff_lo, diff_hi = mean_ci(a - b, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b != 0, a / b, np.nan)
    ratio, ratio_lo, ratio_hi = mean_ci(ratios, level)
    return {
        "n": int(len(a)),
        "diff": diff,
        "diff_ci_low": diff_lo,
        "diff_ci_high": diff_hi,
        "ratio": ratio,
        "ratio_ci_low": ratio_lo,
        "ratio_ci_high": ratio_hi,
        "significant": bool(np.isfinite(diff_lo) and (diff_lo > 0 or diff_hi < 0)),
    }


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return not (a[1] < b[0] or b[1] < a[0])
