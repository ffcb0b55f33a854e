"""Validation the user can see: simulate the fitted scenario for a few seeds and compare it with the log.

What is compared, per class, and when it counts as reproduced (all at 95%):
- arrivals per bin (the report's bins): the log's count n and the seeds' total M come from the same rate
  if n ~ Binomial(n + M, 1 / (S + 1)) (S seeds; exact test). The rates are reproduced when no more bins
  fail than chance allows (a one-sided binomial test of the failures against 5%, at 1%);
- the overall rate: the same exact test on the whole log;
  for a class fitted as `resampled` (block bootstrap of the log's own arrivals) both are Poisson tests it must
  fail: resampled bursts put far more variance in a bin than Poisson does, and blocks land anywhere in the span,
  so bin k of a seed is not meant to copy bin k of the log. Against its own resampling variability instead:
  the per-bin counts of the log and of the seeds come from one distribution (two-sample Kolmogorov-Smirnov on
  the counts per bin, pooled over seeds), and the log's total lies in the prediction interval of the seeds'
  totals (mean +- t * sd * sqrt(1 + 1/S));
- the inter-arrival CV: the log's CV lies in the prediction interval of the seeds' CVs
  (mean +- t * sd * sqrt(1 + 1/S)). Simulated times are rounded down to the log's timestamp tick first;
- quantiles (p10, p50, p90, p95, p99) of token counts and of latency (when the log has one): the
  distribution-free order-statistic intervals of the log's and of the pooled simulated quantile overlap.
The simulated latency is end - arrival in the fitted scenario's world (with the placeholder `delay` backend
it is the fitted service time itself; with a template's backend it includes queueing on that server).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from simlab import records
from simlab.calibration.fit import QUANTILES, LogFit, bin_edges, counts_in
from simlab.records import ValidationCheck as Check

LEVEL = 0.95


@dataclass
class Validation:
    seeds: list[int]
    policy: str | None  # None: the workload alone was generated (the log has no latency to compare)
    checks: list[Check]
    bins: dict[str, dict]  # kind -> {"edges", "observed", "simulated" (S x bins), "p"}
    samples: dict[str, dict]  # kind -> quantity -> {"observed": array, "simulated": array}
    passed: dict[str, bool]  # "rates", "cv", "quantiles" -> verdict

    @property
    def ok(self) -> bool:
        return all(self.passed.values())

    def record(self) -> records.FitValidation:
        rows = [records.ValidationBin(kind, float(b["edges"][i]), float(b["edges"][i + 1]), int(b["observed"][i]),
                                      float(b["simulated"][:, i].mean()), float(b["p"][i]))
                for kind, b in self.bins.items() for i in range(len(b["observed"]))]
        return records.FitValidation(list(self.seeds), self.policy, self.passed["rates"], self.passed["cv"],
                                     self.passed["quantiles"], list(self.checks), rows)


def quantile_ci(sorted_x: np.ndarray, q: float, level: float = LEVEL) -> tuple[float, float, float]:
    """Point estimate and distribution-free (order statistic) interval of the q-quantile."""
    n = len(sorted_x)
    a = (1 - level) / 2
    lo_rank = int(stats.binom.ppf(a, n, q))  # 1-based rank of the lower order statistic
    hi_rank = int(stats.binom.ppf(1 - a, n, q)) + 1
    lo = sorted_x[min(max(lo_rank - 1, 0), n - 1)]
    hi = sorted_x[min(max(hi_rank - 1, 0), n - 1)]
    return float(np.quantile(sorted_x, q)), float(lo), float(hi)


def count_test(observed: int, simulated_total: int, seeds: int) -> float:
    """p-value of 'the log and the seeds share one rate' (exact, conditional on the total)."""
    total = observed + simulated_total
    if total == 0:
        return 1.0
    return float(stats.binomtest(int(observed), int(total), 1.0 / (seeds + 1)).pvalue)


def simulate(scenario, seeds: list[int], latency: bool = True):
    """Per seed and class: arrival_ms, token counts and latency (end - arrival, in `service_ms`) of the fitted
    scenario. Without `latency` only the workload is generated (the same arrivals and lengths, no engine run)."""
    from simlab.policies import options_from_dict
    from simlab.world.engine import Engine

    options = scenario.options() if scenario.scheduler else options_from_dict({"policy": "unscheduled"}, "validation")
    runs = []
    for seed in seeds:
        if not latency:
            runs.append(workload_arrays(scenario, seed))
            continue
        all_tasks = Engine(scenario, options, seed).run().tasks
        per_kind: dict[str, dict[str, np.ndarray]] = {}
        for kind in ("interactive", "batch"):
            tasks = [t for t in all_tasks if t.kind == kind]
            if not tasks:
                continue

            def col(get):
                return np.array([math.nan if (v := get(t)) is None else v for t in tasks], dtype=float)

            end = col(lambda t: t.end_ms if t.outcome == "ok" else None)
            per_kind[kind] = {
                "arrival_ms": col(lambda t: t.arrival_ms),
                "prompt_tokens": col(lambda t: t.prompt_tokens),
                "output_tokens": col(lambda t: t.output_tokens),
                "service_ms": end - col(lambda t: t.arrival_ms),
            }
        runs.append(per_kind)
    return options.policy, runs


def workload_arrays(scenario, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """The open-loop arrivals and lengths the engine generates for `seed` (its own columns, so the same random
    streams), per class and sorted by arrival: fast on logs of millions of requests."""
    from simlab.scenario import ClosedLoop, Trace
    from simlab.world.workloads import open_loop_columns

    if any(isinstance(w.arrivals, (ClosedLoop, Trace)) for w in scenario.workload):
        raise ValueError("workload_arrays covers generated open-loop arrivals only")
    a = open_loop_columns(scenario, seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    for kind, mask in (("interactive", a.interactive), ("batch", ~a.interactive)):
        if not mask.any():
            continue
        cols = {"arrival_ms": a.arrival_ms[mask]}
        if a.prompt_tokens is not None:
            prompt, output = a.prompt_tokens[mask], a.output_tokens[mask]
            if not np.isnan(prompt).any():
                cols["prompt_tokens"], cols["output_tokens"] = prompt, output
        out[kind] = cols
    return out


def _poisson_rates(kind, p, observed_counts, mean_rates, widths_s, n_obs, n_sim, span_s, S) -> list[Check]:
    """The exact Poisson tests per bin and on the whole log (synthetic processes)."""
    fails = int((p < 1 - LEVEL).sum())
    allowed = stats.binomtest(fails, len(p), 1 - LEVEL, alternative="greater").pvalue >= 0.01
    nan = math.nan
    per_bin = Check(kind, "bin_rate", None, None, float(np.mean(observed_counts / widths_s)), nan, nan,
                    float(np.mean(mean_rates)), nan, nan, bool(allowed), "poisson", bins_within=len(p) - fails,
                    bins=len(p))
    lo, hi = stats.poisson.interval(LEVEL, n_obs) if n_obs else (0, 0)
    p_total = count_test(n_obs, int(n_sim.sum()), S)
    sim_lo, sim_hi = stats.poisson.interval(LEVEL, n_sim.sum()) if n_sim.sum() else (0, 0)
    total = Check(kind, "total_rate", None, None, n_obs / span_s, lo / span_s, hi / span_s, n_sim.mean() / span_s,
                  sim_lo / S / span_s, sim_hi / S / span_s, bool(p_total >= 1 - LEVEL), "poisson", p_value=p_total)
    return [per_bin, total]


def _prediction_interval(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% prediction interval of one more seed: mean +- t * sd * sqrt(1 + 1/S)."""
    S = len(values)
    m = float(np.nanmean(values))
    sd = float(np.nanstd(values, ddof=1)) if S > 1 else 0.0
    half = float(stats.t.ppf(0.5 + LEVEL / 2, max(S - 1, 1))) * sd * math.sqrt(1 + 1 / S) if S > 1 else 0.0
    return m, m - half, m + half


def _resampled_rates(kind, observed_counts, sim_counts, widths_s, n_obs, n_sim, span_s) -> list[Check]:
    """A block-resampled class against its own resampling variability (see the module docstring)."""
    pooled = sim_counts.ravel()
    p_bins = float(stats.ks_2samp(observed_counts, pooled).pvalue) if len(pooled) and len(observed_counts) else 1.0
    width = float(np.mean(widths_s))
    nan = math.nan
    per_bin = Check(kind, "bin_rate", None, None, float(np.mean(observed_counts / widths_s)),
                    float(np.quantile(observed_counts, 0.05) / width), float(np.quantile(observed_counts, 0.95) / width),
                    float(np.mean(sim_counts / widths_s)),
                    float(np.quantile(pooled, 0.05) / width) if len(pooled) else nan,
                    float(np.quantile(pooled, 0.95) / width) if len(pooled) else nan, bool(p_bins >= 1 - LEVEL),
                    "resampled", p_value=p_bins)
    m, lo, hi = _prediction_interval(n_sim.astype(float))
    total = Check(kind, "total_rate", None, None, n_obs / span_s, nan, nan, m / span_s, lo / span_s, hi / span_s,
                  bool(lo <= n_obs <= hi), "resampled")
    return [per_bin, total]


def _cv_check(kind, cv: float, sims: list[np.ndarray], resolution_ms: float) -> Check:
    """The log's inter-arrival CV in the seeds' prediction interval (simulated times on the log's tick)."""
    cvs = []
    for s in sims:
        t = np.sort(s)
        if resolution_ms > 0:
            t = np.floor(t / resolution_ms) * resolution_ms
        g = np.diff(t)
        cvs.append(float(stats.variation(g, ddof=1)) if len(g) > 1 and g.mean() > 0 else math.nan)
    m, lo, hi = _prediction_interval(np.array(cvs))
    return Check(kind, "cv", None, None, cv, math.nan, math.nan, m, lo, hi, bool(lo <= cv <= hi),
                 "prediction-interval")


def _quantile_checks(kind, col, observed: np.ndarray, simulated: np.ndarray) -> list[Check]:
    checks = []
    for q in QUANTILES:
        o, olo, ohi = quantile_ci(observed, q)
        s, slo, shi = quantile_ci(simulated, q)
        checks.append(Check(kind, "quantile", col, q, o, olo, ohi, s, slo, shi, not (ohi < slo or shi < olo),
                            "order-statistics"))
    return checks


def validate(fit: LogFit, scenario, seeds: list[int]) -> Validation:
    latency = any("service_ms" in cols for cols in fit.lengths.values())
    policy, runs = simulate(scenario, seeds, latency)
    S = len(seeds)
    checks: list[Check] = []
    bins: dict[str, dict] = {}
    samples: dict[str, dict] = {}
    edges = bin_edges(fit.log.span_ms, fit.bin_ms)
    widths_s = np.diff(edges) / 1000
    span_s = fit.log.span_ms / 1000
    for kind, a in fit.arrivals.items():
        obs = fit.log.of(kind)
        observed_counts = counts_in(obs["arrival_ms"].to_numpy(), edges)
        sims = [run.get(kind, {}).get("arrival_ms", np.empty(0)) for run in runs]
        sim_counts = np.array([counts_in(s[s <= edges[-1]], edges) for s in sims])
        p = np.array([count_test(o, s, S) for o, s in zip(observed_counts, sim_counts.sum(axis=0))])
        bins[kind] = {"edges": edges, "observed": observed_counts, "simulated": sim_counts, "p": p}
        n_sim = np.array([len(s) for s in sims])
        if a.process == "resampled":
            checks += _resampled_rates(kind, observed_counts, sim_counts, widths_s, len(obs), n_sim, span_s)
        else:
            checks += _poisson_rates(kind, p, observed_counts, sim_counts / widths_s, widths_s, len(obs), n_sim,
                                     span_s, S)
        if a.process != "burst":
            checks.append(_cv_check(kind, a.cv, sims, fit.log.resolution_ms))
        samples[kind] = {}
        for col in fit.lengths.get(kind, {}):
            observed = np.sort(obs[col].to_numpy(dtype=float))
            simulated = np.concatenate([run[kind][col] for run in runs if kind in run])
            simulated = np.sort(simulated[np.isfinite(simulated)])
            samples[kind][col] = {"observed": observed, "simulated": simulated}
            if len(simulated):
                checks += _quantile_checks(kind, col, observed, simulated)
    passed = {"rates": all(c.ok for c in checks if c.quantity in ("bin_rate", "total_rate")),
              "cv": all(c.ok for c in checks if c.quantity == "cv"),
              "quantiles": all(c.ok for c in checks if c.quantity == "quantile")}
    return Validation(list(seeds), policy if latency else None, checks, bins, samples, passed)
