"""Predicted vs measured: one record per (policy, class, metric), and the policy rankings on both sides.

Measured values are the mean over repeat runs; the spread is (max - min) / mean across them; the relative error
is (predicted - measured mean) / measured mean; with two runs or more, the 95% confidence interval of the measured
mean (Student's t over runs) says whether an error is larger than these runs can resolve.

Rankings, by interactive P95 (lower is better) and batch throughput (higher is better), are compared pair by
pair. On the simulated side two policies closer than the tolerance (10%) are a tie: a model held to 10% makes
no claim about a smaller difference. On the measured side a pair is ordered when Welch's t-test over the runs
separates them (p < 0.05); with a single run on either side, by the means (there is no noise estimate). The
rankings agree when no pair is ordered one way predicted and the other way measured; the report also says
whether the two orders (by the values alone) are the same, and whether every pair has the same relation
(better, worse or tie) on both sides.
"""

from __future__ import annotations

import math
import warnings

from simlab.realcheck.measures import CLASS_METRICS
from simlab.records import RUNTIME, RankingPair, RealMetricRow, RealVerdict

WATCHED = (("interactive", "p95_ms"), ("batch", "throughput_tok_s"))
TOLERANCE = 0.10


def compare(predicted: dict, measured: dict) -> list[RealMetricRow]:
    """predicted[(policy, driver)] = metrics(); measured[(policy, driver)] = [metrics() per run] -> rows."""
    rows = []
    for (policy, driver), pred in predicted.items():
        runs = measured.get((policy, driver), [])
        for kind in ("interactive", "batch"):
            names = CLASS_METRICS if kind == "interactive" else CLASS_METRICS + ("throughput_tok_s",)
            for name in names:
                vals = [r[kind][name] for r in runs if not math.isnan(r[kind][name])]
                mean = sum(vals) / len(vals) if vals else math.nan
                p = pred[kind][name]
                low, high = _mean_ci(vals)
                rows.append(RealMetricRow(
                    policy, driver, kind, name, p, mean, min(vals) if vals else math.nan,
                    max(vals) if vals else math.nan,
                    (max(vals) - min(vals)) / mean if len(vals) > 1 and mean else math.nan,
                    (p - mean) / mean if vals and mean else math.nan, len(vals), low, high, vals))
    return rows


def _mean_ci(vals: list[float], level: float = 0.95) -> tuple[float, float]:
    if len(vals) < 2:
        return math.nan, math.nan
    from scipy import stats

    mean = sum(vals) / len(vals)
    half = float(stats.t.ppf(0.5 + level / 2, len(vals) - 1) * stats.sem(vals))  # zero for identical runs
    return mean - half, mean + half


def watched_key(kind: str, name: str) -> str:
    return f"{kind} {name}"


def _watched(rows, kind, name) -> list[RealMetricRow]:
    """The rows ranked: the runtime driver's. Another driver of a policy (the article's JS) shares its
    prediction, so it is compared with it, not ranked."""
    return [r for r in rows if r.kind == kind and r.metric == name and r.driver == RUNTIME]


def ranking(rows: list[RealMetricRow], side: str) -> dict[str, list[str]]:
    """Policies best first, per watched metric, from 'predicted' or 'measured'."""
    out = {}
    for kind, name in WATCHED:
        vals = {r.policy: getattr(r, side) for r in _watched(rows, kind, name)}
        out[watched_key(kind, name)] = sorted(vals, key=lambda p: vals[p], reverse=(name == "throughput_tok_s"))
    return out


def pairs(rows: list[RealMetricRow], tolerance: float = TOLERANCE, alpha: float = 0.05) -> list[RankingPair]:
    """Per watched metric, every pair of policies, each relation '>' (a better), '<' (b better) or '~' (a tie:
    closer than the tolerance predicted, not separated measured)."""
    from scipy import stats

    found = []
    for kind, name in WATCHED:
        higher = name == "throughput_tok_s"
        mine = _watched(rows, kind, name)
        for i, ra in enumerate(mine):
            for rb in mine[i + 1:]:
                pa, pb = ra.predicted, rb.predicted
                pred = "~" if abs(pa - pb) <= tolerance * max(abs(pa), abs(pb)) else _better(pa, pb, higher)
                va, vb = ra.run_values, rb.run_values
                p_value = math.nan
                meas = _better(ra.measured, rb.measured, higher)
                if len(va) >= 2 and len(vb) >= 2 and (len(set(va)) > 1 or len(set(vb)) > 1):
                    with warnings.catch_warnings():  # one side's runs identical: scipy warns, Welch still holds
                        warnings.simplefilter("ignore", RuntimeWarning)
                        p_value = float(stats.ttest_ind(va, vb, equal_var=False).pvalue)
                    meas = meas if p_value < alpha else "~"
                found.append(RankingPair(watched_key(kind, name), ra.policy, rb.policy, pred, meas, p_value))
    return found


def _better(a: float, b: float, higher: bool) -> str:
    if a == b:
        return "~"
    return ">" if (a > b) == higher else "<"


def verdict(rows: list[RealMetricRow], tolerance: float = TOLERANCE) -> RealVerdict:
    """The rankings compared pair by pair; the watched rows marked within the tolerance or not, and (outside it)
    whether the prediction lies inside the measured mean's 95% CI (these runs cannot tell the error from noise)."""
    for r in rows:
        if (r.kind, r.metric) in WATCHED:
            r.within_tolerance = abs(r.relative_error) <= tolerance
            r.within_noise = r.measured_ci_low <= r.predicted <= r.measured_ci_high
    found = pairs(rows, tolerance)
    pred, meas = ranking(rows, "predicted"), ranking(rows, "measured")
    return RealVerdict(
        tolerance, pred, meas, found,
        rankings_agree=not any({q.predicted, q.measured} == {">", "<"} for q in found),
        same_order=pred == meas, rankings_same=all(q.predicted == q.measured for q in found),
        all_within=all(r.within_tolerance for r in rows if r.within_tolerance is not None))
