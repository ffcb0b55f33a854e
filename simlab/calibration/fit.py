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
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from simlab.calibration.logs import RequestLog
from simlab.errors import InputError

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
class Test:
    name: str
    statistic: float
    p_value: float
    rejected: bool
    detail: str = ""

    def as_dict(self) -> dict:
        return {"test": self.name, "statistic": self.statistic, "p_value": self.p_value, "rejected": self.rejected,
                "detail": self.detail}


@dataclass
class ArrivalFit:
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
    poisson_rescaled: Test | None  # time-rescaling KS with the per-bin rate
    dispersion: Test | None  # counts in sub-bins against the per-bin rate
    process: str  # "poisson", "piecewise" or "burst"
    process_reason: str
    step_ms: float  # the scenario's piecewise step
    step_rates_per_s: np.ndarray  # the scenario's piecewise rates
    predicted_cv: float  # inter-arrival CV of the scenario's process
    steps: list[dict]  # the steps considered: step_ms, predicted_cv
    jittered: bool = False

    @property
    def poisson_per_bin_rejected(self) -> bool:
        tests = [t for t in (self.poisson_rescaled, self.dispersion) if t is not None]
        return any(t.p_value < ALPHA / len(tests) for t in tests) if tests else False

    @property
    def poisson_rejected(self) -> bool:
        """Is a Poisson process (constant rate) rejected? The textbook test: KS of the inter-arrival times."""
        return self.poisson_constant.rejected

    def as_dict(self) -> dict:
        return {
            "requests": self.n,
            "span_s": self.span_ms / 1000,
            "rate_per_s": self.rate_per_s,
            "interarrival_cv": self.cv,
            "bin_s": self.bin_ms / 1000,
            "rate_varies": self.rate_constant.as_dict(),
            "poisson_constant_rate": self.poisson_constant.as_dict(),
            "poisson_per_bin_rate": {
                "time_rescaled_ks": self.poisson_rescaled.as_dict() if self.poisson_rescaled else None,
                "dispersion": self.dispersion.as_dict() if self.dispersion else None,
                "rejected": self.poisson_per_bin_rejected,
            },
            "poisson_rejected": self.poisson_rejected,
            "process": self.process,
            "process_reason": self.process_reason,
            "step_s": self.step_ms / 1000,
            "predicted_cv": self.predicted_cv,
            "steps_considered": self.steps,
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
    reason: str
    values: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0))

    @property
    def p95(self) -> float:
        return self.median * math.exp(Z95 * self.sigma)

    @property
    def mu(self) -> float:
        return math.log(self.median)

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "zeros": self.zeros,
            "mean": self.mean,
            "quantiles": {f"p{round(q * 100)}": v for q, v in self.quantiles.items()},
            "lognormal": {"mu": self.mu, "sigma": self.sigma, "median": self.median, "p95": self.p95,
                          "ks": self.ks.as_dict()},
            "drift_first_vs_second_half": self.drift.as_dict() if self.drift else None,
            "choice": self.choice,
            "reason": self.reason,
        }


@dataclass
class LogFit:
    log: RequestLog
    bin_ms: float
    arrivals: dict[str, ArrivalFit]  # by kind
    lengths: dict[str, dict[str, LengthFit]]  # kind -> column -> fit

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


def dispersion_test(times: np.ndarray, edges: np.ndarray, counts: np.ndarray, width_ms: float) -> Test | None:
    """Chi-square of counts per sub-bin against the expected counts of the fitted per-bin rate (two-sided)."""
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
    return Test("dispersion of counts per sub-bin (chi-square)", stat / df, p, p < ALPHA,
                f"variance/mean of counts per {format_duration(width_ms)} = {stat / df:.3f} (Poisson: 1), df = {df}")


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


def choose_step(times: np.ndarray, span_ms: float, bin_ms: float, cv: float) -> tuple[float, list[dict]]:
    """The scenario's piecewise step: the coarsest step (at most the report bin, at least 10 requests per step
    on average) whose rate variation reproduces the log's inter-arrival CV; the closest one if none does."""
    n = len(times)
    candidates = sorted({float(b) for b in BIN_CHOICES_MS + (2_000,) if b < bin_ms} | {float(bin_ms)}, reverse=True)
    candidates = [c for c in candidates
                  if c == bin_ms or (n * c / span_ms >= MIN_PER_STEP and span_ms / c <= MAX_STEPS)]
    steps = []
    tol = cv_tolerance(n, cv)
    for c in candidates:
        steps.append({"step_ms": c, "predicted_cv": piecewise_cv(step_rates(times, span_ms, c), c, span_ms)})
        if abs(steps[-1]["predicted_cv"] - cv) <= tol:
            return c, steps
    if cv < steps[0]["predicted_cv"]:
        return steps[0]["step_ms"], steps  # smoother than even the coarsest step: nothing finer helps
    return min(steps, key=lambda s: abs(s["predicted_cv"] - cv))["step_ms"], steps


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
    edges = bin_edges(span_ms, bin_ms)
    widths = np.diff(edges)
    counts = counts_in(times, edges)
    rates = counts / widths * 1000.0
    lo, hi = poisson_interval(counts)
    gaps_raw = np.diff(times)
    burst = times[-1] - times[0] <= max(resolution_ms, 0.0)
    cv = float(stats.variation(gaps_raw, ddof=1)) if not burst else math.nan

    # rate constancy: counts against a constant rate (expected proportional to width)
    if len(counts) > 1:
        expected = n * widths / widths.sum()
        chi = stats.chisquare(counts, expected)
        rate_constant = Test("constant rate across bins (chi-square)", float(chi.statistic), float(chi.pvalue),
                             bool(chi.pvalue < ALPHA), f"{len(counts)} bins of {format_duration(bin_ms)}")
    else:
        rate_constant = Test("constant rate across bins (chi-square)", math.nan, 1.0, False, "one bin")

    jittered = resolution_ms > 0
    rescaled = dispersion = None
    if burst:
        nan = math.nan
        poisson_constant = Test("KS of inter-arrival times vs exponential", nan, 0.0, True,
                                f"all {n} requests arrive at once")
        return ArrivalFit(kind, n, float(span_ms), n / span_ms * 1000.0, cv, float(bin_ms), edges, counts, rates,
                          lo / widths * 1000.0, hi / widths * 1000.0, rate_constant, poisson_constant, None, None,
                          "burst", f"all {n} {kind} requests arrive at {times[0] / 1000:g} s: a burst", bin_ms,
                          rates, nan, [], jittered)
    t = spread_ticks(times, resolution_ms, span_ms)
    gaps = np.diff(t)
    scale = float(stats.expon.fit(gaps, floc=0)[1])
    ks = stats.kstest(gaps, "expon", args=(0, scale))
    poisson_constant = Test("KS of inter-arrival times vs exponential", float(ks.statistic), float(ks.pvalue),
                            bool(ks.pvalue < ALPHA), f"mean gap {scale:.4g} ms")
    if len(counts) > 1:
        lam = cumulative_rate(t, edges, counts)
        rgaps = np.diff(lam)
        ks2 = stats.kstest(rgaps, "expon")
        rescaled = Test("time-rescaling KS with the per-bin rate", float(ks2.statistic), float(ks2.pvalue),
                        bool(ks2.pvalue < ALPHA), f"CV of rescaled gaps {float(stats.variation(rgaps, ddof=1)):.3f}")
        dispersion = dispersion_test(t, edges, counts, _sub_bin(n / span_ms, bin_ms, resolution_ms))

    tol = cv_tolerance(n, cv)
    if step_ms is not None:
        chosen_step = float(step_ms)
        steps = [{"step_ms": chosen_step,
                  "predicted_cv": piecewise_cv(step_rates(times, span_ms, chosen_step), chosen_step, span_ms)}]
    else:
        chosen_step, steps = choose_step(times, span_ms, bin_ms, cv)
    if process != "auto":
        reason = f"chosen with --arrivals {process}"
    elif step_ms is not None:
        process, reason = "piecewise", f"a rate per {format_duration(chosen_step)}, chosen with --step"
    elif not rate_constant.rejected and not poisson_constant.rejected:
        process = "poisson"
        reason = (f"the rate does not vary across bins ({p_is(rate_constant.p_value)}) and a Poisson process is "
                  f"not rejected (KS {p_is(poisson_constant.p_value)})")
    else:
        process = "piecewise"
        reason = (f"the rate varies across bins ({p_is(rate_constant.p_value)})" if rate_constant.rejected
                  else f"a Poisson process with a constant rate is rejected (KS {p_is(poisson_constant.p_value)}, "
                       f"CV {cv:.3f})")
    if process == "piecewise" and step_ms is None and "--arrivals" not in reason:
        predicted = next((st["predicted_cv"] for st in steps if st["step_ms"] == chosen_step), math.nan)
        if not abs(predicted - cv) <= tol:  # the rate alone cannot make these bursts: resample the log itself
            process = "resampled"
            block = resample_block(span_ms, bin_ms)
            reason += (f"; no piecewise rate reproduces the log's inter-arrival CV ({cv:.3f}; the closest predicts "
                       f"{predicted:.3f}), so the scenario replays the log's own arrivals, block-bootstrapped in "
                       f"blocks of {format_duration(block)} (each seed another resample; bursts shorter than a block survive)")
            return ArrivalFit(kind, n, float(span_ms), n / span_ms * 1000.0, cv, float(bin_ms), edges, counts, rates,
                              lo / widths * 1000.0, hi / widths * 1000.0, rate_constant, poisson_constant, rescaled,
                              dispersion, process, reason, float(block), step_rates(times, span_ms, chosen_step),
                              cv, steps, jittered)
    if process == "resampled":
        block = resample_block(span_ms, bin_ms)
        return ArrivalFit(kind, n, float(span_ms), n / span_ms * 1000.0, cv, float(bin_ms), edges, counts, rates,
                          lo / widths * 1000.0, hi / widths * 1000.0, rate_constant, poisson_constant, rescaled,
                          dispersion, process, reason + f" (blocks of {format_duration(block)})", float(block),
                          step_rates(times, span_ms, chosen_step), cv, steps, jittered)
    if process == "poisson":
        rates_s = np.array([n / span_ms * 1000.0])
        predicted = 1.0
    else:
        rates_s = step_rates(times, span_ms, chosen_step)
        predicted = next((s["predicted_cv"] for s in steps if s["step_ms"] == chosen_step), math.nan)
        if "--arrivals" in reason:
            reason += f" (a rate per {format_duration(chosen_step)}, predicted CV {predicted:.3f})"
        elif step_ms is None:
            match = ("which reproduces the log's inter-arrival CV" if abs(predicted - cv) <= tol
                     else f"the closest to the log's CV ({cv:.3f}) with at least {MIN_PER_STEP} requests per step")
            reason += (f": a Poisson process whose rate changes every {format_duration(chosen_step)} "
                       f"(predicted CV {predicted:.3f}), {match}")
    return ArrivalFit(kind, n, float(span_ms), n / span_ms * 1000.0, cv, float(bin_ms), edges, counts, rates,
                      lo / widths * 1000.0, hi / widths * 1000.0, rate_constant, poisson_constant, rescaled,
                      dispersion, process, reason, float(chosen_step if process == "piecewise" else span_ms),
                      rates_s, predicted, steps, jittered)


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
    ks_test = Test("KS vs fitted lognormal", float(ks.statistic), float(ks.pvalue), bool(ks.pvalue < ALPHA))
    drift = None
    if n >= 2 * MIN_VALUES:
        half = n // 2
        d = stats.ks_2samp(x[:half], x[half:])
        drift = Test("KS first half vs second half", float(d.statistic), float(d.pvalue), bool(d.pvalue < ALPHA))
    if choice == "auto":
        if ks_test.rejected:
            choice = "empirical"
            reason = f"the lognormal is rejected (KS D = {ks_test.statistic:.3f}, {p_is(ks_test.p_value)})"
        else:
            choice = "lognormal"
            reason = f"the lognormal is not rejected (KS D = {ks_test.statistic:.3f}, {p_is(ks_test.p_value)})"
    else:
        reason = f"chosen with --dist {choice}"
    q = {p: float(v) for p, v in zip(QUANTILES, np.quantile(x, QUANTILES))}
    return LengthFit(column, kind, n, int((x <= 0).sum()), float(x.mean()), q, sigma, float(median), ks_test, drift,
                     choice, reason, x)


def p_is(p: float) -> str:
    """'p = 0.031' or 'p < 0.0001'."""
    text = fmt_p(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def fmt_p(p: float) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    if p < 1e-4:
        return "< 0.0001"
    return f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


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
