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

from simlab.calibration.fit import QUANTILES, LogFit, bin_edges, counts_in, p_is

LEVEL = 0.95


@dataclass
class Check:
    kind: str
    quantity: str
    observed: float
    observed_lo: float
    observed_hi: float
    simulated: float
    simulated_lo: float
    simulated_hi: float
    ok: bool
    how: str

    def row(self) -> dict:
        return {k: getattr(self, k) for k in ("kind", "quantity", "observed", "observed_lo", "observed_hi",
                                                "simulated", "simulated_lo", "simulated_hi", "ok", "how")}


@dataclass
class Validation:
    seeds: list[int]
    policy: str
    checks: list[Check]
    bins: dict[str, dict]  # kind -> {"edges", "observed", "simulated" (S x bins), "p"}
    samples: dict[str, dict]  # kind -> quantity -> {"observed": array, "simulated": array}
    passed: dict[str, bool]  # "rates", "cv", "quantiles" -> verdict

    @property
    def ok(self) -> bool:
        return all(self.passed.values())


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


def _poisson_rates(kind, fit, p, observed_counts, mean_rates, widths_s, n_obs, n_sim, span_s, S, checks) -> bool:
    """The exact Poisson tests per bin and on the whole log (synthetic processes); True when both pass."""
    fails = int((p < 1 - LEVEL).sum())
    allowed = stats.binomtest(fails, len(p), 1 - LEVEL, alternative="greater").pvalue >= 0.01
    checks.append(Check(
        kind, f"arrival rate in each {fit.bin_ms / 1000:g} s bin (req/s)",
        float(np.mean(observed_counts / widths_s)), math.nan, math.nan,
        float(np.mean(mean_rates)), math.nan, math.nan, bool(allowed),
        f"{len(p) - fails} of {len(p)} bins within sampling error (exact test at 5%; "
        f"{fails} outside, chance allows this: {'yes' if allowed else 'no'})"))
    lo, hi = stats.poisson.interval(LEVEL, n_obs) if n_obs else (0, 0)
    p_total = count_test(n_obs, int(n_sim.sum()), S)
    sim_lo, sim_hi = stats.poisson.interval(LEVEL, n_sim.sum()) if n_sim.sum() else (0, 0)
    checks.append(Check(kind, "arrival rate, whole log (req/s)", n_obs / span_s, lo / span_s, hi / span_s,
                        n_sim.mean() / span_s, sim_lo / S / span_s, sim_hi / S / span_s, p_total >= 1 - LEVEL,
                        f"exact test of one rate, {p_is(p_total)}"))
    return bool(allowed) and p_total >= 1 - LEVEL


def _resampled_rates(kind, fit, observed_counts, sim_counts, widths_s, n_obs, n_sim, span_s):
    """A block-resampled class against its own resampling variability (see the module docstring)."""
    S = len(n_sim)
    pooled = sim_counts.ravel()
    p_bins = float(stats.ks_2samp(observed_counts, pooled).pvalue) if len(pooled) and len(observed_counts) else 1.0
    ok_bins = p_bins >= 1 - LEVEL
    width = float(np.mean(widths_s))
    bin_check = Check(
        kind, f"arrival rate in each {fit.bin_ms / 1000:g} s bin (req/s)",
        float(np.mean(observed_counts / widths_s)), float(np.quantile(observed_counts, 0.05) / width),
        float(np.quantile(observed_counts, 0.95) / width), float(np.mean(sim_counts / widths_s)),
        float(np.quantile(pooled, 0.05) / width) if len(pooled) else math.nan,
        float(np.quantile(pooled, 0.95) / width) if len(pooled) else math.nan, bool(ok_bins),
        f"resampled class: the log's counts per bin and the seeds' (pooled) share one distribution (two-sample KS, "
        f"{p_is(p_bins)}; intervals: 5th-95th percentile of the bins), not a Poisson test")
    m = float(n_sim.mean())
    sd = float(np.std(n_sim, ddof=1)) if S > 1 else 0.0
    half = float(stats.t.ppf(0.5 + LEVEL / 2, max(S - 1, 1))) * sd * math.sqrt(1 + 1 / S) if S > 1 else 0.0
    ok_total = m - half <= n_obs <= m + half
    total_check = Check(kind, "arrival rate, whole log (req/s)", n_obs / span_s, math.nan, math.nan, m / span_s,
                        (m - half) / span_s, (m + half) / span_s, bool(ok_total),
                        "resampled class: the log's total in the 95% prediction interval of the seeds' totals "
                        f"(their block-resample variability): {'yes' if ok_total else 'no'}")
    return bool(ok_bins), bool(ok_total), bin_check, total_check


def validate(fit: LogFit, scenario, seeds: list[int]) -> Validation:
    latency = any("service_ms" in cols for cols in fit.lengths.values())
    policy, runs = simulate(scenario, seeds, latency)
    if not latency:
        policy = "none (workload only: the log has no latency to compare)"
    S = len(seeds)
    checks: list[Check] = []
    bins: dict[str, dict] = {}
    samples: dict[str, dict] = {}
    rates_ok = cv_ok = q_ok = True
    res = fit.log.resolution_ms
    for kind, a in fit.arrivals.items():
        obs = fit.log.of(kind)
        edges = bin_edges(fit.log.span_ms, fit.bin_ms)
        widths_s = np.diff(edges) / 1000
        observed_counts = counts_in(obs["arrival_ms"].to_numpy(), edges)
        sims = [run.get(kind, {}).get("arrival_ms", np.empty(0)) for run in runs]
        sim_counts = np.array([counts_in(s[s <= edges[-1]], edges) for s in sims])
        p = np.array([count_test(o, s, S) for o, s in zip(observed_counts, sim_counts.sum(axis=0))])
        bins[kind] = {"edges": edges, "observed": observed_counts, "simulated": sim_counts, "p": p}
        mean_rates = sim_counts / widths_s
        n_obs = len(obs)
        n_sim = np.array([len(s) for s in sims])
        span_s = fit.log.span_ms / 1000
        if a.process == "resampled":
            ok_bins, ok_total, bin_check, total_check = _resampled_rates(kind, fit, observed_counts, sim_counts,
                                                                         widths_s, n_obs, n_sim, span_s)
            rates_ok &= ok_bins and ok_total
            checks += [bin_check, total_check]
        else:
            rates_ok &= _poisson_rates(kind, fit, p, observed_counts, mean_rates, widths_s, n_obs, n_sim, span_s, S, checks)
        if a.process != "burst":
            cvs = []
            for s in sims:
                t = np.sort(s)
                if res > 0:
                    t = np.floor(t / res) * res
                g = np.diff(t)
                cvs.append(float(stats.variation(g, ddof=1)) if len(g) > 1 and g.mean() > 0 else math.nan)
            cvs = np.array(cvs)
            m, sd = float(np.nanmean(cvs)), float(np.nanstd(cvs, ddof=1)) if S > 1 else 0.0
            half = float(stats.t.ppf(0.5 + LEVEL / 2, max(S - 1, 1))) * sd * math.sqrt(1 + 1 / S) if S > 1 else 0.0
            ok = m - half <= a.cv <= m + half
            cv_ok &= bool(ok)
            checks.append(Check(kind, "inter-arrival CV", a.cv, math.nan, math.nan, m, m - half, m + half, bool(ok),
                                f"log's CV in the seeds' 95% prediction interval: {'yes' if ok else 'no'}"))
        samples[kind] = {}
        for col in fit.lengths.get(kind, {}):
            observed = np.sort(obs[col].to_numpy(dtype=float))
            simulated = np.concatenate([run[kind][col] for run in runs if kind in run])
            simulated = np.sort(simulated[np.isfinite(simulated)])
            samples[kind][col] = {"observed": observed, "simulated": simulated}
            if len(simulated) == 0:
                continue
            name = "latency (ms)" if col == "service_ms" else col.replace("_", " ")
            for q in QUANTILES:
                o, olo, ohi = quantile_ci(observed, q)
                s, slo, shi = quantile_ci(simulated, q)
                ok = not (ohi < slo or shi < olo)
                q_ok &= ok
                checks.append(Check(kind, f"{name} p{round(q * 100)}", o, olo, ohi, s, slo, shi, ok,
                                    "95% order-statistic intervals overlap" if ok else "95% intervals do not overlap"))
    passed = {"rates": bool(rates_ok), "cv": bool(cv_ok), "quantiles": bool(q_ok)}
    return Validation(list(seeds), policy, checks, bins, samples, passed)
