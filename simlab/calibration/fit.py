"""Fitting a request log with scipy.stats: arrival rate per bin, burstiness and Poisson tests, and the
distributions of token counts and service times (lognormal and empirical, with goodness of fit).

Arrivals. The rate per bin is the count over the bin's width (the Poisson MLE) with an exact (Garwood)
95% interval. Whether the rate varies is a chi-square test of the counts against a constant rate; if it
does, the scenario uses a `piecewise` Poisson process with the per-bin rates, else `poisson`.
Burstiness is the coefficient of variation (CV) of inter-arrival times (1 for Poisson). Two Poisson tests:
- constant rate: Kolmogorov-Smirnov of the inter-arrival times against the fitted exponential;
- the fitted per-bin rate: the time-rescaling theorem (Brown et al., 2002) maps a Poisson process with the
  fitted rate to a unit-rate one, whose gaps are Exp(1) (KS test), and a dispersion test of counts in short
  sub-bins against their expected counts (chi-square of the index of dispersion; clustering inflates it).
  Rejected when either test rejects at 5% after a Bonferroni correction.
The headline verdict ("Poisson rejected") is the first, the textbook test; the second says whether the
scenario's rate-varying Poisson process explains the log once the drift over time is taken out.
The scenario's arrivals: `poisson` when neither the constant-rate chi-square nor the KS test rejects; else
`piecewise` with the coarsest step whose rate variation reproduces the log's CV (see `choose_step`).
Timestamps written to whole seconds or milliseconds are spread uniformly within their tick (a fixed seed)
before the tests, so that ties made by rounding are not taken for bursts; the CV is of the log as written.

Lengths. `scipy.stats.lognorm.fit(x, floc=0)` on the positive values (zeros are counted and left out of
the lognormal), KS goodness of fit; the empirical distribution is the values themselves. `auto` picks the
lognormal when KS does not reject it at 5%, else the empirical. A KS test of the log's first half against
its second half says whether the distribution drifts over time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from simlab import records
from simlab.calibration.logs import RequestLog
from simlab.errors import InputError
from simlab.records import StepCandidate
from simlab.records import TestResult as Test

Z95 = float(stats.norm.ppf(0.95))
ALPHA = 0.05
MIN_ARRIVALS = 20  # requests of a class needed to fit its arrivals
MIN_VALUES = 20  # values needed to fit a length or service-time distribution
MIN_PER_STEP = 10  # requests per piecewise step, on average, at the finest step considered
MAX_STEPS = 20_000  # rates in the scenario's piecewise list, at most
QUANTILES = (0.1, 0.5, 0.9, 0.95, 0.99)
BIN_CHOICES_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
                  3_600_000, 7_200_000, 21_600_000, 86_400_000)  # fmt: skip
SUB_BIN_CHOICES_MS = (1, 10, 100, 250, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000)


def parse_duration_ms(text: str, flag: str = "--bin") -> float:
    """'1h', '5min', '30s', '250ms' or a plain number of ms."""
    units = (("ms", 1.0), ("min", 60_000.0), ("s", 1000.0), ("h", 3_600_000.0), ("d", 86_400_000.0))
    t = text.strip().lower()
    for suffix, scale in units:
        if t.endswith(suffix):
            number = t[: -len(suffix)].strip()
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise InputError(None, flag, f"{text!r} is not a duration (e.g. 1h, 5min, 30s, 500ms)") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(None, flag, f"{text!r} must be a positive duration")
    return value


def format_duration(ms: float) -> str:
    for scale, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms >= scale and abs(ms / scale - round(ms / scale)) < 1e-9:
            return f"{round(ms / scale)} {unit}"
    return f"{ms:g} ms"


def format_span(ms: float) -> str:
    """A log's length in the unit people would say: 45.0 s, 58.4 min, 7.3 h, 7.2 days."""
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3 * 3_600_000:
        return f"{ms / 60_000:.1f} min"
    if ms < 3 * 86_400_000:
        return f"{ms / 3_600_000:.1f} h"
    return f"{ms / 86_400_000:.1f} days"


def choose_bin(span_ms: float, n: int) -> float:
    """Hourly for logs of 10 h or more; else the largest usual bin giving at least 10 bins, made coarser
    while the bins would hold fewer than 20 requests on average."""
    fits = [b for b in BIN_CHOICES_MS if span_ms / b >= 10]
    if span_ms >= 10 * 3_600_000:
        fits = [b for b in fits if b <= 3_600_000]
    i = BIN_CHOICES_MS.index(fits[-1]) if fits else 0
    while i + 1 < len(BIN_CHOICES_MS) and n * BIN_CHOICES_MS[i] / max(span_ms, 1.0) < 20 and BIN_CHOICES_MS[i] < span_ms:
        i += 1
    return float(BIN_CHOICES_MS[i])


def poisson_interval(count: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Garwood) interval for a Poisson mean given an observed count."""
    a = (1 - level) / 2
    count = np.asarray(count, dtype=float)
    lo = np.where(count > 0, stats.chi2.ppf(a, 2 * count) / 2, 0.0)
    hi = stats.chi2.ppf(1 - a, 2 * count + 2) / 2
    return lo, hi


@dataclass
class ArrivalFit:
    """One class's arrivals: the bins (for rates.csv and the figures), the tests, and the scenario's process.
    `reason` and the numbers beside it say why that process (see records.ArrivalSummary)."""
    kind: str
    n: int
    span_ms: float
    rate_per_s: float
    cv: float
    bin_ms: float
    edges: np.ndarray  # bin edges, ms (the last one is the span)
    counts: np.ndarray
    rates_per_s: np.ndarray
    rate_lo: np.ndarray
    rate_hi: np.ndarray
    rate_constant: Test  # chi-square of counts against a constant rate
    poisson_constant: Test  # KS of inter-arrival times against an exponential
    mean_gap_ms: float
    poisson_rescaled: Test | None  # time-rescaling KS with the per-bin rate
    rescaled_gap_cv: float | None
    dispersion: Test | None  # counts in sub-bins against the per-bin rate
    dispersion_window_ms: float | None
    dispersion_df: int | None
    process: str  # "poisson", "piecewise", "resampled" or "burst"
    reason: str  # records.ARRIVAL_REASONS
    step_ms: float  # the scenario's piecewise step (resampled: its block; poisson: the span)
    rate_step_ms: float  # the piecewise step chosen (resampled: the closest one)
    step_rates_per_s: np.ndarray  # the scenario's piecewise rates
    predicted_cv: float  # inter-arrival CV of the scenario's process
    closest_cv: float  # predicted at rate_step_ms
    steps: list[StepCandidate]  # the steps considered
    jittered: bool = False
    first_arrival_ms: float = 0.0

    @property
    def poisson_per_bin_rejected(self) -> bool:
        tests = [t for t in (self.poisson_rescaled, self.dispersion) if t is not None]
        return any(t.p_value < ALPHA / len(tests) for t in tests) if tests else False

    @property
    def poisson_rejected(self) -> bool:
        """Is a Poisson process (constant rate) rejected? The textbook test: KS of the inter-arrival times."""
        return self.poisson_constant.rejected

    def summary(self) -> records.ArrivalSummary:
        return records.ArrivalSummary(
            requests=self.n, span_ms=self.span_ms, rate_per_s=self.rate_per_s, cv=self.cv, bin_ms=self.bin_ms,
            bins=len(self.counts), bin_rate_min_per_s=float(self.rates_per_s.min()),
            bin_rate_max_per_s=float(self.rates_per_s.max()), rate_varies=self.rate_constant,
            poisson_constant=self.poisson_constant, mean_gap_ms=self.mean_gap_ms,
            poisson_rescaled=self.poisson_rescaled, rescaled_gap_cv=self.rescaled_gap_cv,
            dispersion=self.dispersion, dispersion_window_ms=self.dispersion_window_ms,
            dispersion_df=self.dispersion_df, poisson_per_bin_rejected=self.poisson_per_bin_rejected,
            process=self.process, reason=self.reason, step_ms=self.step_ms, rate_step_ms=self.rate_step_ms,
            predicted_cv=self.predicted_cv, closest_cv=self.closest_cv, steps=list(self.steps),
            timestamps_spread=self.jittered, first_arrival_ms=self.first_arrival_ms)

    def as_dict(self) -> dict:
        """fit.json's arrivals: the summary and every bin."""
        return {
            "requests": self.n,
            "span_s": self.span_ms / 1000,
            "rate_per_s": self.rate_per_s,
            "interarrival_cv": self.cv,
            "bin_s": self.bin_ms / 1000,
            "rate_varies": asdict(self.rate_constant),
            "poisson_constant_rate": asdict(self.poisson_constant) | {"mean_gap_ms": self.mean_gap_ms},
            "poisson_per_bin_rate": {
                "time_rescaled_ks": (asdict(self.poisson_rescaled) | {"rescaled_gap_cv": self.rescaled_gap_cv}
                                     if self.poisson_rescaled else None),
                "dispersion": (asdict(self.dispersion) | {"window_ms": self.dispersion_window_ms,
                                                          "df": self.dispersion_df} if self.dispersion else None),
                "rejected": self.poisson_per_bin_rejected,
            },
            "poisson_rejected": self.poisson_rejected,
            "process": self.process,
            "reason": self.reason,
            "step_s": self.step_ms / 1000,
            "rate_step_s": self.rate_step_ms / 1000,
            "predicted_cv": self.predicted_cv,
            "closest_cv": self.closest_cv,
            "steps_considered": [asdict(s) for s in self.steps],
            "timestamps_spread_within_tick": self.jittered,
            "bins": [
                {"start_s": float(a / 1000), "end_s": float(b / 1000), "count": int(c), "rate_per_s": float(r),
                 "rate_ci_low": float(lo), "rate_ci_high": float(hi)}
                for a, b, c, r, lo, hi in zip(self.edges[:-1], self.edges[1:], self.counts, self.rates_per_s,
                                              self.rate_lo, self.rate_hi)
            ],
        }


@dataclass
class LengthFit:
    column: str  # prompt_tokens, output_tokens or service_ms
    kind: str
    n: int
    zeros: int
    mean: float
    quantiles: dict[float, float]
    sigma: float  # lognormal shape (log-space standard deviation)
    median: float  # lognormal scale (= its median)
    ks: Test
    drift: Test | None
    choice: str  # "lognormal" or "empirical"
    reason: str  # "lognormal-fits", "lognormal-rejected" or "dist-flag"
    values: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))

    @property
    def p95(self) -> float:
        return self.median * math.exp(Z95 * self.sigma)

    @property
    def mu(self) -> float:
        return math.log(self.median)

    def summary(self) -> records.LengthSummary:
        q = self.quantiles
        return records.LengthSummary(
            column=self.column, n=self.n, zeros=self.zeros, mean=self.mean, p10=q[0.1], p50=q[0.5], p90=q[0.9],
            p95=q[0.95], p99=q[0.99], lognormal_median=self.median, lognormal_sigma=self.sigma,
            lognormal_p95=self.p95, ks=self.ks, drift=self.drift, choice=self.choice, reason=self.reason)

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "zeros": self.zeros,
            "mean": self.mean,
            "quantiles": {f"p{round(q * 100)}": v for q, v in self.quantiles.items()},
            "lognormal": {"mu": self.mu, "sigma": self.sigma, "median": self.median, "p95": self.p95,
                          "ks": asdict(self.ks)},
            "drift_first_vs_second_half": asdict(self.drift) if self.drift else None,
            "choice": self.choice,
            "reason": self.reason,
        }


@dataclass
class LogFit:
    log: RequestLog
    bin_ms: float
    arrivals: dict[str, ArrivalFit]  # by kind
    lengths: dict[str, dict[str, LengthFit]]  # kind -> column -> fit

    def classes(self) -> list[records.FitClass]:
        return [records.FitClass(kind, a.summary(), [f.summary() for f in self.lengths[kind].values()])
                for kind, a in self.arrivals.items()]

    def as_dict(self) -> dict:
        return {
            "log": str(self.log.path),
            "layout": self.log.layout,
            "columns": self.log.sources,
            "first_request": self.log.origin,
            "requests": int(len(self.log.frame)),
            "span_s": self.log.span_ms / 1000,
            "bin_s": self.bin_ms / 1000,
            "classes": {
                kind: {"arrivals": self.arrivals[kind].as_dict(),
                       **{col: f.as_dict() for col, f in self.lengths[kind].items()}}
                for kind in self.arrivals
            },
            "notes": self.log.notes,
        }


# --- arrivals -------------------------------------------------------------------------------------
def bin_edges(span_ms: float, bin_ms: float) -> np.ndarray:
    k = max(1, math.ceil(span_ms / bin_ms - 1e-9))
    edges = np.arange(k + 1, dtype=float) * bin_ms
    edges[-1] = max(span_ms, edges[-2] + 1e-9) if k > 1 else max(span_ms, 1e-9)
    return edges


def counts_in(times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(edges, times, side="right") - 1
    idx = np.clip(idx, 0, len(edges) - 2)  # the last request sits on the last edge
    return np.bincount(idx, minlength=len(edges) - 1)


def cumulative_rate(times: np.ndarray, edges: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Lambda(t) of the piecewise-constant rate fitted per bin (expected count up to t)."""
    return np.interp(times, edges, np.concatenate([[0.0], np.cumsum(counts)]))


def spread_ticks(times: np.ndarray, resolution_ms: float, span_ms: float) -> np.ndarray:
    if resolution_ms <= 0:
        return times
    rng = np.random.default_rng(20231116)
    return np.sort(np.clip(times + rng.uniform(0, resolution_ms, len(times)), 0, max(span_ms, resolution_ms)))


def _sub_bin(rate_per_ms: float, bin_ms: float, resolution_ms: float) -> float:
    target = 3.0 / rate_per_ms if rate_per_ms > 0 else bin_ms
    options = [w for w in SUB_BIN_CHOICES_MS if w <= bin_ms / 5 and w >= resolution_ms]
    if not options:
        return bin_ms / 5
    return float(min(options, key=lambda w: abs(math.log(w / target))))


def dispersion_test(times: np.ndarray, edges: np.ndarray, counts: np.ndarray,
                    width_ms: float) -> tuple[Test, int] | None:
    """Chi-square of counts per sub-bin against the expected counts of the fitted per-bin rate (two-sided):
    (the test, its statistic being variance / mean of the counts, and its degrees of freedom)."""
    span = edges[-1]
    sub = np.arange(0.0, span + width_ms, width_ms)
    sub[-1] = span
    sub = np.unique(sub)
    if len(sub) < 3:
        return None
    expected = np.diff(cumulative_rate(sub, edges, counts))
    observed = counts_in(times, sub)
    keep = expected > 1e-12
    if keep.sum() <= (counts > 0).sum() + 1:
        return None
    stat = float(np.sum((observed[keep] - expected[keep]) ** 2 / expected[keep]))
    df = int(keep.sum() - (counts > 0).sum())
    p = float(min(1.0, 2 * min(stats.chi2.sf(stat, df), stats.chi2.cdf(stat, df))))
    return Test(stat / df, p, p < ALPHA), df


def piecewise_cv(rates_per_s: np.ndarray, step_ms: float, span_ms: float, repeats: int = 3) -> float:
    """Inter-arrival CV of the scenario's piecewise Poisson process with these rates, by simulating it with
    simlab's own generator (a fixed seed): gaps spanning quiet steps count, as they do in the simulation."""
    from simlab.world.workloads import piecewise_times

    cvs = []
    for r in range(repeats):
        t = piecewise_times(np.random.default_rng([20231116, r]), list(map(float, rates_per_s)), step_ms, span_ms)
        g = np.diff(t)
        if len(g) > 1 and g.mean() > 0:
            cvs.append(float(stats.variation(g, ddof=1)))
    return float(np.mean(cvs)) if cvs else math.nan


def step_rates(times: np.ndarray, span_ms: float, step_ms: float) -> np.ndarray:
    edges = bin_edges(span_ms, step_ms)
    return counts_in(times, edges) / np.diff(edges) * 1000.0


def cv_tolerance(n: int, cv: float = 1.0) -> float:
    """How close a predicted CV must be to the log's: about two standard errors of the log's CV."""
    return max(0.02, 2 * max(cv, 1.0) / math.sqrt(max(n, 1)))


def candidate(times: np.ndarray, span_ms: float, step_ms: float) -> StepCandidate:
    return StepCandidate(step_ms, piecewise_cv(step_rates(times, span_ms, step_ms), step_ms, span_ms))


def choose_step(times: np.ndarray, span_ms: float, bin_ms: float, cv: float) -> tuple[float, list[StepCandidate]]:
    """The scenario's piecewise step: the coarsest step (at most the report bin, at least 10 requests per step
    on average) whose rate variation reproduces the log's inter-arrival CV; the closest one if none does."""
    n = len(times)
    candidates = sorted({float(b) for b in BIN_CHOICES_MS + (2_000,) if b < bin_ms} | {float(bin_ms)}, reverse=True)
    candidates = [c for c in candidates
                  if c == bin_ms or (n * c / span_ms >= MIN_PER_STEP and span_ms / c <= MAX_STEPS)]
    steps = []
    tol = cv_tolerance(n, cv)
    for c in candidates:
        steps.append(candidate(times, span_ms, c))
        if abs(steps[-1].predicted_cv - cv) <= tol:
            return c, steps
    if cv < steps[0].predicted_cv:
        return steps[0].step_ms, steps  # smoother than even the coarsest step: nothing finer helps
    return min(steps, key=lambda s: abs(s.predicted_cv - cv)).step_ms, steps


def resample_block(span_ms: float, bin_ms: float) -> float:
    """Block length of the bootstrap: the report bin, at least 10 s, and at most a quarter of the log."""
    return float(max(min(bin_ms, span_ms / 4), min(10_000.0, span_ms / 4)))


def fit_arrivals(times_ms, span_ms: float, bin_ms: float, kind: str = "interactive", resolution_ms: float = 0.0,
                 process: str = "auto", step_ms: float | None = None, source=None) -> ArrivalFit:
    times = np.sort(np.asarray(times_ms, dtype=float))
    n = len(times)
    if n < MIN_ARRIVALS:
        raise InputError(source, None, f"only {n} {kind} request(s): at least {MIN_ARRIVALS} are needed to fit arrivals")
    if span_ms <= 0:
        raise InputError(source, None, f"all {n} {kind} requests have the same arrival time: no rate can be fitted")
    common = dict(kind=kind, n=n, span_ms=float(span_ms), rate_per_s=n / span_ms * 1000.0, bin_ms=float(bin_ms),
                  jittered=resolution_ms > 0, first_arrival_ms=float(times[0]), **_bins(times, span_ms, bin_ms))
    if times[-1] - times[0] <= max(resolution_ms, 0.0):
        return _burst(common)
    cv = float(stats.variation(np.diff(times), ddof=1))
    tests = _poisson_tests(times, span_ms, bin_ms, resolution_ms, common["edges"], common["counts"])
    chosen = _scenario_process(times, span_ms, bin_ms, cv, process, step_ms, common["rate_constant"],
                               tests["poisson_constant"])
    return ArrivalFit(cv=cv, **common, **tests, **chosen)


def _bins(times: np.ndarray, span_ms: float, bin_ms: float) -> dict:
    """The rate per bin with its exact 95% interval, and the chi-square of the counts against a constant rate."""
    edges = bin_edges(span_ms, bin_ms)
    widths = np.diff(edges)
    counts = counts_in(times, edges)
    lo, hi = poisson_interval(counts)
    if len(counts) > 1:
        chi = stats.chisquare(counts, len(times) * widths / widths.sum())  # expected: proportional to width
        rate_constant = Test(float(chi.statistic), float(chi.pvalue), bool(chi.pvalue < ALPHA))
    else:
        rate_constant = Test(math.nan, 1.0, False)
    return dict(edges=edges, counts=counts, rates_per_s=counts / widths * 1000.0, rate_lo=lo / widths * 1000.0,
                rate_hi=hi / widths * 1000.0, rate_constant=rate_constant)


def _burst(common: dict) -> ArrivalFit:
    """Every request at once (within a timestamp tick): a burst, no inter-arrival tests."""
    nan = math.nan
    return ArrivalFit(cv=nan, poisson_constant=Test(nan, 0.0, True), mean_gap_ms=nan, poisson_rescaled=None,
                      rescaled_gap_cv=None, dispersion=None, dispersion_window_ms=None, dispersion_df=None,
                      process="burst", reason="burst", step_ms=common["bin_ms"], rate_step_ms=common["bin_ms"],
                      step_rates_per_s=common["rates_per_s"], predicted_cv=nan, closest_cv=nan, steps=[], **common)


def _poisson_tests(times, span_ms, bin_ms, resolution_ms, edges, counts) -> dict:
    """KS of the gaps against the fitted exponential; with two bins or more, the time-rescaling KS and the
    dispersion test with the rate per bin. On timestamps spread within their tick (see the module docstring)."""
    t = spread_ticks(times, resolution_ms, span_ms)
    gaps = np.diff(t)
    scale = float(stats.expon.fit(gaps, floc=0)[1])
    ks = stats.kstest(gaps, "expon", args=(0, scale))
    out = dict(poisson_constant=Test(float(ks.statistic), float(ks.pvalue), bool(ks.pvalue < ALPHA)),
               mean_gap_ms=scale, poisson_rescaled=None, rescaled_gap_cv=None, dispersion=None,
               dispersion_window_ms=None, dispersion_df=None)
    if len(counts) > 1:
        rgaps = np.diff(cumulative_rate(t, edges, counts))
        ks2 = stats.kstest(rgaps, "expon")
        out["poisson_rescaled"] = Test(float(ks2.statistic), float(ks2.pvalue), bool(ks2.pvalue < ALPHA))
        out["rescaled_gap_cv"] = float(stats.variation(rgaps, ddof=1))
        window = _sub_bin(len(times) / span_ms, bin_ms, resolution_ms)
        found = dispersion_test(t, edges, counts, window)
        if found is not None:
            out["dispersion"], out["dispersion_df"] = found
            out["dispersion_window_ms"] = window
    return out


def _scenario_process(times, span_ms, bin_ms, cv, process, step_ms, rate_constant: Test,
                      poisson_constant: Test) -> dict:
    """The scenario's arrival process and why (module docstring): the flags first, then `poisson` when neither
    test rejects, else `piecewise` with the chosen step when its predicted CV is the log's, else `resampled`."""
    n = len(times)
    if step_ms is not None:
        chosen, steps = float(step_ms), [candidate(times, span_ms, float(step_ms))]
    else:
        chosen, steps = choose_step(times, span_ms, bin_ms, cv)
    closest = next((s.predicted_cv for s in steps if s.step_ms == chosen), math.nan)
    if process != "auto":
        reason = "arrivals-flag"
    elif step_ms is not None:
        process, reason = "piecewise", "step-flag"
    elif not rate_constant.rejected and not poisson_constant.rejected:
        process, reason = "poisson", "poisson-fits"
    else:
        reason = "rate-varies" if rate_constant.rejected else "poisson-rejected"
        # the rate alone cannot make these bursts: resample the log itself
        process = "piecewise" if abs(closest - cv) <= cv_tolerance(n, cv) else "resampled"
    out = dict(process=process, reason=reason, rate_step_ms=chosen, closest_cv=closest, steps=steps,
               step_ms=chosen, step_rates_per_s=step_rates(times, span_ms, chosen), predicted_cv=closest)
    if process == "resampled":
        out |= dict(step_ms=resample_block(span_ms, bin_ms), predicted_cv=cv)
    elif process == "poisson":
        out |= dict(step_ms=float(span_ms), step_rates_per_s=np.array([n / span_ms * 1000.0]), predicted_cv=1.0)
    return out


# --- lengths and service times --------------------------------------------------------------------------
def fit_lengths(values, column: str, kind: str = "interactive", choice: str = "auto", source=None) -> LengthFit:
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < MIN_VALUES:
        raise InputError(source, None, f"only {n} {kind} value(s) of {column}: at least {MIN_VALUES} are needed to fit a distribution")
    positive = x[x > 0]
    if len(positive) < MIN_VALUES:
        raise InputError(source, None, f"{column}: only {len(positive)} {kind} value(s) above 0; at least {MIN_VALUES} are needed")
    sigma, _, median = stats.lognorm.fit(positive, floc=0)
    sigma = max(float(sigma), 1e-6)
    ks = stats.kstest(x, "lognorm", args=(sigma, 0, median))
    ks_test = Test(float(ks.statistic), float(ks.pvalue), bool(ks.pvalue < ALPHA))
    drift = None
    if n >= 2 * MIN_VALUES:
        half = n // 2
        d = stats.ks_2samp(x[:half], x[half:])
        drift = Test(float(d.statistic), float(d.pvalue), bool(d.pvalue < ALPHA))
    if choice == "auto":
        choice, reason = ("empirical", "lognormal-rejected") if ks_test.rejected else ("lognormal", "lognormal-fits")
    else:
        reason = "dist-flag"
    q = {p: float(v) for p, v in zip(QUANTILES, np.quantile(x, QUANTILES))}
    return LengthFit(column, kind, n, int((x <= 0).sum()), float(x.mean()), q, sigma, float(median), ks_test, drift,
                     choice, reason, x)


def fit_log(log: RequestLog, bin_ms: float | None = None, dist: str = "auto", process: str = "auto",
            step_ms: float | None = None) -> LogFit:
    span = log.span_ms
    if len(log.frame) < MIN_ARRIVALS:
        raise InputError(log.path, None, f"only {len(log.frame)} request(s): at least {MIN_ARRIVALS} are needed to fit a workload")
    if span <= 0:
        raise InputError(log.path, None, "every request has the same arrival time: no rate can be fitted")
    bin_ms = bin_ms if bin_ms is not None else choose_bin(span, len(log.frame))
    if bin_ms > span:
        bin_ms = span
    arrivals, lengths = {}, {}
    for kind in log.kinds():
        rows = log.of(kind)
        arrivals[kind] = fit_arrivals(rows["arrival_ms"].to_numpy(), span, bin_ms, kind, log.resolution_ms, process,
                                      step_ms, log.path)
        lengths[kind] = {}
        for col in ("prompt_tokens", "output_tokens", "service_ms"):
            if col in rows:
                lengths[kind][col] = fit_lengths(rows[col].to_numpy(), col, kind, dist, log.path)
    return LogFit(log, float(bin_ms), arrivals, lengths)
