"""Paired one-sided tests between arms measured on common units, and the claims the decision makes from them.

Every arm runs on the same units (traffic condition x seed: common random numbers), so comparing two arms is a
one-sample Student t-test on their per-unit differences; units where either arm has no value (not run, or no
finite metric) are left out. A margin is a fraction of the anchor's value, applied unit by unit: "X's P95 is
within 2% of C's" is the test of mean(X - 1.02 C) < 0, which carries C's own noise into the comparison.

A claim is a rejected null hypothesis. Each family of claims (every arm against the same anchor) is
Holm-corrected at the family-wise level alpha (Holm's step-down procedure): the chance that the family holds
even one false claim is at most alpha, however many arms there are.

Domination of C by X, the claim that moves or blocks an answer, is two routes, each an intersection-union test
(both parts must reject; its p-value is the larger of the two):
  route P95:        X's P95 is lower than C's by more than the margin (superior) and X's throughput is no lower
                    than C's by the margin or more (non-inferior)
  route throughput: X's throughput is higher by more than the margin, and X's P95 is no higher by the margin
The margins say which differences matter: a gain smaller than the margin does not count, as a loss smaller
than it does not.
X dominates C when either route is rejected after Holm over both routes of every arm compared with C.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special, stats

P95, THR = "p95", "throughput"


@dataclass
class Arm:
    """One configuration measured on the plan's units: values per unit in the plan's unit order, NaN where the
    arm was not run (racing stops arms) or the run gave no finite value."""

    label: str  # "static-14", "adaptive-tuned", "adaptive-defaults", "priority", ...
    options: dict  # the production SchedulerOptions (camelCase) that reproduce it; simlab's options for baselines
    p95: np.ndarray
    throughput: np.ndarray
    family: str = "adaptive"  # static | adaptive | holdback | aimd | gradient2 | engine-priority | baseline
    # (baselines: priority, unscheduled; measured for the record, not deployable)
    cap: int | None = None  # the batch cap of a static arm
    deadline_share: np.ndarray | None = None  # per unit: batch jobs done by their deadline (None: not measured)

    def __post_init__(self):
        self.p95 = np.asarray(self.p95, dtype=float)
        self.throughput = np.asarray(self.throughput, dtype=float)
        if self.deadline_share is not None:
            self.deadline_share = np.asarray(self.deadline_share, dtype=float)

    def values(self, axis: str) -> np.ndarray:
        return self.p95 if axis == P95 else self.throughput

    def on(self, units) -> "Arm":
        """The same arm on a subset of the units (a boolean mask or a slice)."""
        share = None if self.deadline_share is None else self.deadline_share[units]
        return Arm(self.label, self.options, self.p95[units], self.throughput[units], self.family, self.cap, share)

    @property
    def deployable(self) -> bool:
        return self.family not in ("baseline", "bound")

    @property
    def measured(self) -> int:
        return int(np.sum(np.isfinite(self.p95) & np.isfinite(self.throughput)))


@dataclass(frozen=True)
class Axis:
    """One of the two things compared, and its non-inferiority margin (a fraction of the anchor's value)."""

    name: str  # P95 or THR
    margin: float

    @property
    def lower_is_better(self) -> bool:
        return self.name == P95

    def better(self, a: float, b: float) -> bool:
        return a < b if self.lower_is_better else a > b


def axes(rule) -> tuple[Axis, Axis]:
    """(P95 axis, throughput axis) with the margins of a scenario's [decision] table."""
    return Axis(P95, rule.p95_margin), Axis(THR, rule.throughput_margin)


def alpha_of(rule) -> float:
    return 1.0 - rule.level


# --- one-sided paired t-tests ---------------------------------------------------------------------------------

def _finite(d) -> np.ndarray:
    d = np.asarray(d, dtype=float)
    return d[np.isfinite(d)]


def p_above(d) -> float:
    """p-value of H1: mean(d) > 0 (Student t); 1 with fewer than two values. A constant d is exact: 0 when it is
    above zero, 1 otherwise."""
    d = _finite(d)
    if len(d) < 2:
        return 1.0
    m = float(np.mean(d))
    sd = float(np.std(d, ddof=1))
    if sd == 0 or sd <= 1e-12 * max(1.0, abs(m)):
        return 0.0 if m > 0 else 1.0
    return float(special.stdtr(len(d) - 1, -m / (sd / math.sqrt(len(d)))))  # Student t survival function


def p_below(d) -> float:
    """p-value of H1: mean(d) < 0."""
    return p_above(-np.asarray(d, dtype=float))


def superior(x: Arm, c: Arm, axis: Axis) -> float:
    """p of H1: x is better than c on `axis` by more than the margin (a smaller gain is no gain, as a smaller loss
    is no loss)."""
    if axis.lower_is_better:
        return p_below(x.p95 - (1 - axis.margin) * c.p95)
    return p_above(x.throughput - (1 + axis.margin) * c.throughput)


def noninferior(x: Arm, c: Arm, axis: Axis) -> float:
    """p of H1: x is not worse than c by the margin or more (within margin x c's value)."""
    if axis.lower_is_better:
        return p_below(x.p95 - (1 + axis.margin) * c.p95)
    return p_above(x.throughput - (1 - axis.margin) * c.throughput)


def worse_beyond(x: Arm, anchor: Arm, axis: Axis) -> float:
    """p of H1: x is worse than the anchor by more than the margin."""
    if axis.lower_is_better:
        return p_above(x.p95 - (1 + axis.margin) * anchor.p95)
    return p_below(x.throughput - (1 - axis.margin) * anchor.throughput)


def equivalent(x: Arm, anchor: Arm, axis: Axis) -> float:
    """p of H1: x is within +-margin of the anchor (two one-sided tests; the larger p)."""
    v, a = x.values(axis.name), anchor.values(axis.name)
    return max(p_below(v - (1 + axis.margin) * a), p_above(v - (1 - axis.margin) * a))


def holm(pvalues, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(rejected, adjusted p-values) of Holm's step-down procedure over one family: the k-th smallest p-value is
    multiplied by (m - k + 1), made monotone, and compared with alpha. The same numbers as statsmodels'
    `multipletests(p, alpha, "holm")` (a test checks it), written out because statsmodels runs gc.collect() on
    every call (~70 ms in a process holding a study) and the rule corrects hundreds of families per decision."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    if m == 0:
        return np.zeros(0, dtype=bool), np.zeros(0)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(m, 0, -1)))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted <= alpha, adjusted


# --- domination -----------------------------------------------------------------------------------------------

@dataclass
class Domination:
    """Every arm compared with the choice: whether it dominates it, with the Holm-adjusted p-value of its better
    route (the smaller)."""

    dominators: list[str] = field(default_factory=list)
    adjusted_p: dict[str, float] = field(default_factory=dict)


def route_pvalues(x: Arm, c: Arm, p95: Axis, thr: Axis) -> tuple[float, float]:
    """(route P95, route throughput) p-values of "x dominates c": each the larger of its two parts."""
    by_p95 = max(superior(x, c, p95), noninferior(x, c, thr))
    by_thr = max(superior(x, c, thr), noninferior(x, c, p95))
    return by_p95, by_thr


def dominators(choice: Arm, others: list[Arm], p95: Axis, thr: Axis, alpha: float) -> Domination:
    """Which of `others` dominate `choice`, family-wise at alpha (Holm over both routes of every arm)."""
    others = [o for o in others if o.label != choice.label]
    routes = [p for o in others for p in route_pvalues(o, choice, p95, thr)]
    rejected, adjusted = holm(routes, alpha)
    out = Domination()
    for i, o in enumerate(others):
        out.adjusted_p[o.label] = float(min(adjusted[2 * i], adjusted[2 * i + 1]))
        if rejected[2 * i] or rejected[2 * i + 1]:
            out.dominators.append(o.label)
    return out


# --- sample size ----------------------------------------------------------------------------------------------

def units_to_decide(d, threshold_alpha: float) -> float:
    """Units a one-sided test on differences like `d` needs for its CI to clear zero at `threshold_alpha`,
    if the mean and spread stay as measured: (t x sd / |mean|)^2; inf when the mean is zero."""
    d = _finite(d)
    if len(d) < 2:
        return math.inf
    m, sd = abs(float(np.mean(d))), float(np.std(d, ddof=1))
    if m == 0:
        return math.inf
    z = float(stats.norm.isf(threshold_alpha))
    return max(float(len(d)), (z * sd / m) ** 2)
