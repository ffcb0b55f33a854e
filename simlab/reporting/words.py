"""Sentences, made at render time from records that hold numbers and codes only. Each command's sentences have
their own section; a renderer (terminal, report.md, the review page) calls these and never stores what they
return."""

from __future__ import annotations

import math

from simlab.calibration.fit import ALPHA, MIN_PER_STEP, format_duration, format_span
from simlab.records import ScenarioFacts


def p_is(p: float | None) -> str:
    """'p = 0.031' or 'p < 0.0001'.

    >>> p_is(0.0312), p_is(0.004567), p_is(2e-7)
    ('p = 0.031', 'p = 0.0046', 'p < 0.0001')
    """
    text = fmt_p(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def fmt_p(p: float | None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    if p < 1e-4:
        return "< 0.0001"
    return f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def rejected(test) -> str:
    return "rejected" if test.rejected else "not rejected"


# --- fit (simlab fit) ---------------------------------------------------------------------------------------------

LENGTH_LABELS = {"prompt_tokens": "prompt tokens", "output_tokens": "output tokens", "service_ms": "latency (ms)"}
LOG_NOTES = {"unsorted": "rows were not in arrival order; sorted by arrival time"}
VALIDATION_LABELS = {"rates": "arrival rates", "cv": "inter-arrival CV", "quantiles": "quantiles"}


def log_summary(r) -> str:
    """The log in one sentence: its size and span, its layout and which column gave what."""
    return (f"{r.requests:,} requests over {format_span(r.span_ms)}" + (f", from {r.origin}" if r.origin else "")
            + f". Layout: {r.layout}. Columns: " + "; ".join(f"{c.role} <- {c.source}" for c in r.columns) + ".")


def resolution_note(r) -> str | None:
    if not r.resolution_ms:
        return None
    unit = "seconds" if r.resolution_ms >= 1000 else "milliseconds"
    return (f"Timestamps are written to whole {unit}: the Poisson tests spread each one uniformly within its tick "
            "(fixed seed) so that rounding ties are not taken for bursts; the CV is of the timestamps as written.")


def scenario_note(n) -> str:
    if n.code == "placeholder-token-time":
        return "the backend is a placeholder (`delay` with a made-up token_time): give --template to use yours"
    if n.code == "placeholder-delay":
        return "the backend is a placeholder (`delay`: unlimited capacity; latency = the fitted service time)"
    return f"{n.kind}: {n.values:,} values per column are summarised by {n.count:,} evenly spaced quantiles"


def _why_not_poisson(a) -> str:
    if a.reason == "rate-varies":
        return f"the rate varies across bins ({p_is(a.rate_varies.p_value)})"
    return (f"a Poisson process with a constant rate is rejected (KS {p_is(a.poisson_constant.p_value)}, "
            f"CV {a.cv:.3f})")


def process_reason(kind: str, a) -> str:
    """Why the scenario uses `a.process` for this class (records.ArrivalSummary's reason and its numbers)."""
    step = format_duration(a.step_ms)
    if a.reason == "burst":
        return f"all {a.requests} {kind} requests arrive at {a.first_arrival_ms / 1000:g} s: a burst"
    if a.reason == "arrivals-flag":
        more = {"resampled": f" (blocks of {step})",
                "piecewise": f" (a rate per {step}, predicted CV {a.predicted_cv:.3f})"}.get(a.process, "")
        return f"chosen with --arrivals {a.process}{more}"
    if a.reason == "step-flag":
        return f"a rate per {step}, chosen with --step"
    if a.reason == "poisson-fits":
        return (f"the rate does not vary across bins ({p_is(a.rate_varies.p_value)}) and a Poisson process is not "
                f"rejected (KS {p_is(a.poisson_constant.p_value)})")
    if a.process == "piecewise":
        return (f"{_why_not_poisson(a)}: a Poisson process whose rate changes every {step} (predicted CV "
                f"{a.predicted_cv:.3f}), which reproduces the log's inter-arrival CV")
    return (f"{_why_not_poisson(a)}; no piecewise rate reproduces the log's inter-arrival CV ({a.cv:.3f}; the "
            f"closest predicts {a.closest_cv:.3f}), so the scenario replays the log's own arrivals, block-bootstrapped "
            f"in blocks of {step} (each seed another resample; bursts shorter than a block survive)")


def per_bin_tests(a) -> str:
    """The Poisson tests with the rate per bin, in a line."""
    parts = []
    if a.poisson_rescaled is not None:
        parts.append(f"rescaled KS D = {a.poisson_rescaled.statistic:.3f}, {p_is(a.poisson_rescaled.p_value)}")
    if a.dispersion is not None:
        parts.append(f"dispersion {a.dispersion.statistic:.3f} per {format_duration(a.dispersion_window_ms)}, "
                     f"{p_is(a.dispersion.p_value)}")
    return "; ".join(parts)


def check_quantity(c, bin_ms: float) -> str:
    """A validation check's quantity, as its row is labelled."""
    if c.quantity == "bin_rate":
        return f"arrival rate in each {bin_ms / 1000:g} s bin (req/s)"
    if c.quantity == "total_rate":
        return "arrival rate, whole log (req/s)"
    if c.quantity == "cv":
        return "inter-arrival CV"
    return f"{LENGTH_LABELS.get(c.column, c.column)} p{round(c.q * 100)}"


def check_how(c) -> str:
    """How a validation check was judged."""
    yes = "yes" if c.ok else "no"
    if c.quantity == "bin_rate" and c.method == "poisson":
        return (f"{c.bins_within} of {c.bins} bins within sampling error (exact test at 5%; "
                f"{c.bins - c.bins_within} outside, chance allows this: {yes})")
    if c.quantity == "total_rate" and c.method == "poisson":
        return f"exact test of one rate, {p_is(c.p_value)}"
    if c.quantity == "bin_rate":
        return ("resampled class: the log's counts per bin and the seeds' (pooled) share one distribution (two-sample "
                f"KS, {p_is(c.p_value)}; intervals: 5th-95th percentile of the bins), not a Poisson test")
    if c.quantity == "total_rate":
        return ("resampled class: the log's total in the 95% prediction interval of the seeds' totals (their "
                f"block-resample variability): {yes}")
    if c.quantity == "cv":
        return f"log's CV in the seeds' 95% prediction interval: {yes}"
    return "95% order-statistic intervals overlap" if c.ok else "95% intervals do not overlap"


def validation_how(v) -> str:
    seeds = f"seeds {v.seeds[0]}..{v.seeds[-1]}"
    if v.policy is None:
        how = (f"generated with {seeds} (arrivals and lengths only: the log has no latency column to compare, so no "
               "server was simulated)")
    else:
        how = f"simulated with {seeds} (policy `{v.policy}`)"
    return f"The scenario's workload was {how}."


def reproduced(ok: bool) -> str:
    return "reproduced" if ok else "NOT reproduced"


FIT_METHOD = (
    "Fits use scipy.stats. Arrival rate per bin: count / width (the Poisson MLE), exact Garwood 95% interval. "
    f"Tests at {ALPHA:.0%}. Constant rate: chi-square of the counts per bin. Poisson: KS of the inter-arrival "
    "times against the fitted exponential (p is conservative because the mean is estimated). With the per-bin "
    "rate: the time-rescaling theorem maps a Poisson process with that rate to one of rate 1, whose gaps are "
    "Exp(1) (KS); and the counts in short sub-bins against their expected counts (index of dispersion, "
    "chi-square, two-sided); rejected when either rejects after a Bonferroni correction. The scenario's "
    "arrivals: `poisson` when neither the constant-rate test nor the Poisson test rejects; else `piecewise` with "
    f"the coarsest step whose rate variation reproduces the log's CV (at least {MIN_PER_STEP} requests per step on "
    "average; `--step` chooses it), or `resampled` (the log's own arrivals, block-bootstrapped) when no step does.")
LENGTHS_METHOD = (
    "Lognormal: `scipy.stats.lognorm.fit(x, floc=0)` on values above 0; KS against it. `auto` uses the lognormal "
    "unless KS rejects it at 5%, else the empirical distribution (the log's values, resampled). Drift: KS of the "
    "log's first half against its second half (a small p means the mix changes over the log). Prompt and output "
    "lengths are resampled independently.")
VALIDATION_METHOD = (
    "Rates: exact test that the log's count and the seeds' total share one rate, per bin; the rates are reproduced "
    "when no more bins fail than chance allows at 5%. CV: the log's CV lies in the 95% prediction interval of the "
    "seeds' CVs. Quantiles: the distribution-free order-statistic 95% intervals of the log and of the pooled "
    "simulation overlap.")


# --- calibrate (simlab calibrate) ---------------------------------------------------------------------------------

CURVE_LABELS = {
    "alone": "batch absent",
    "batch": "batch present, full cap (static)",
    "adaptive": "adaptive, recommended options",
}


def knee_parts(k) -> tuple[str, str]:
    """A knee in words, as (the rate, its detail in parentheses): ('7.4 req/s', '(95% CI 6.9 to 8.1)')."""
    if k.status == "above":
        return f"above {k.ci_low:.3g} req/s", "(P95 stays under the SLO at every rate tried)"
    if k.status == "below":
        return f"below {k.ci_high:.3g} req/s", "(P95 over the SLO at the lowest rate tried)"
    if k.status == "none":
        return "–", "(no points)"
    return f"{k.rps:.3g} req/s", (f"(95% CI {k.ci_low:.3g} to {k.ci_high:.3g})" if _finite(k.ci_low, k.ci_high)
                                  else "")


def knee_text(k) -> str:
    """'7.4 req/s (95% CI 6.9 to 8.1)', 'above 12 req/s (P95 stays under the SLO at every rate tried)'."""
    return " ".join(x for x in knee_parts(k) if x)


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(x) for x in xs)


def ramp_summary(r) -> str:
    rates = [p.offered_rps for p in r.points]
    return (f"Interactive rate ramped from {min(rates):.3g} to {max(rates):.3g} req/s (the scenario offers "
            f"{r.base_rps:.3g} req/s); {len(r.seeds)} seeds per point ({r.seeds[0]}..{r.seeds[-1]}); SLO: interactive "
            f"P95 {r.slo_p95_ms:,.0f} ms.")


def threshold_source(r) -> str:
    """Where interactiveRpsThreshold comes from: 'the batch-present knee, 95% CI 6.9 to 8.1', ..."""
    rec = r.recommendation
    if rec.basis == "highest-rate":
        return "the highest rate tried (the SLO held everywhere: ramp further with --rates)"
    if rec.basis == "lowest-rate":
        return "the lowest rate tried (P95 was already over the SLO there)"
    k = r.knee(rec.source)
    ci = f", 95% CI {k.ci_low:.3g} to {k.ci_high:.3g}" if _finite(k.ci_low, k.ci_high) else ""
    return f"the {'batch-present' if rec.source == 'batch' else 'batch-absent'} knee{ci}"


THRESHOLD_WHY = (
    "The adaptive policy's pressure is rps / threshold: at this rate the batch cap is at its minimum, which is "
    "needed from the rate where batch at its full cap breaks the SLO (below it the cap shrinks in proportion). The "
    "wider the knee's CI, the more seeds (--replications) it is worth.")
LATENCY_WHY = ("The SLO: the latency pressure p95 / threshold reaches 1 (batch at its minimum) when the window's P95 "
               "reaches the SLO.")


def threshold_why(r) -> str:
    source = threshold_source(r)
    return (f"{source[:1].upper()}{source[1:]}: {r.recommendation.raw_rps:.4g} req/s, rounded down to two "
            f"significant digits. {THRESHOLD_WHY}")


def calibration_note(code: str, r) -> str:
    curve = CURVE_LABELS[r.recommendation.source]
    return {
        "no-batch": "the scenario has no batch workload: only the batch-absent curve is measured, and the threshold "
                    "comes from it",
        "trace-arrivals": "the interactive arrivals replay a trace: with batch absent every seed sees the same "
                          "requests (zero-width CIs unless the backend draws randomness); seeds vary the batch draws",
        "never-crossed": f"the {curve} curve never crossed the SLO; the threshold is the highest rate tried and errs "
                         "on the safe side",
        "over-at-lowest": f"the {curve} curve is over the SLO at the lowest rate tried: the SLO cannot be met with "
                          "batch at full cap; the threshold is a floor",
    }[code]


def verification(r) -> str | None:
    adaptive, batch, alone = r.knee("adaptive"), r.knee("batch"), r.knee("alone")
    if adaptive is None or batch is None:
        return None
    return (f"Verification: with these options the adaptive scheduler's knee is {knee_text(adaptive)}; batch "
            f"present at full cap: {knee_text(batch)}; batch absent (the ceiling without preemption): "
            f"{knee_text(alone)}.")


CALIBRATION_METHOD = (
    "Each point is the scenario with every open-loop interactive workload's rate multiplied by a factor (a trace is "
    "compressed in time), simulated on the listed seeds; the P95 is the run's interactive end-to-end P95 and the "
    "interval a Student-t 95% CI over seeds. Batch absent: the batch workloads removed. Batch present: `static` "
    "with the scenario's batchMaxConcurrency (batch never throttled). The knee is where the mean P95 first crosses "
    "the SLO (interpolated in log P95); its CI is where the CI's upper and lower bounds cross. The ramp continues "
    "until a point's CI lies wholly above the SLO, then bisects the bracket. The offered rate is measured on the "
    "generated arrivals.")
TUNE_RANGES = ("These values are not exported as options: they set `simlab tune`'s search ranges "
               "(`tune-bounds.json`, read with `simlab tune SCENARIO --calibration DIR`), so each scenario gets one "
               "recommendation.")


# --- calibrate-gpu (simlab calibrate-gpu, and simlab loadtest's fit) -----------------------------------------------

def step_formula(p) -> str:
    """The fitted step model in one line."""
    return (f"step = {p.base_ms:.4g} ms + {p.per_token_ms:.4g} ms x tokens + {p.per_seq_ms:.4g} ms x sequences"
            + (f" + {p.admit_ms:.4g} ms per admitted request" if p.admit_ms else "")
            + f"; front end {p.request_ms:.4g} ms per request")


def gpu_note(code: str, r) -> str:
    if code == "not-identifiable":
        return ("the table cannot tell per-token from per-sequence cost (decode-only rows, or one prompt length and "
                "no TTFT): per_token_ms is set to 0 and the per-sequence slope carries both; prefill then costs "
                "nothing extra. Add TTFT or rows with other prompt lengths, or give --per-token-ms")
    if code == "per-token-fixed":
        return f"per_token_ms fixed at {r.parameters.per_token_ms:g} (--per-token-ms)"
    ol = r.open_loop
    return (f"base_ms, per_seq_ms and admit_ms refitted on {ol.requests} requests of open-loop runs (see 'Refitted "
            f"on open-loop traffic'; {ol.unstreamed} request(s) whose tokens came all at once left out); the "
            "load-test rows are predicted with the refitted values")


def open_loop_text(r) -> str:
    ol = r.open_loop
    return (f"The decode step and the admission cost refitted on {ol.requests} requests of {len(ol.runs)} open-loop "
            f"run(s) ({ol.unstreamed} left out: their tokens came all at once), each request's measured decode step "
            "against the model at the load it had (sequences in the engine, requests and prompt tokens joining "
            "meanwhile); per_token_ms and request_ms kept from the load test(s). `simlab.calibration.openloop` gives "
            "the method.")


def check_summary(c) -> str:
    """The held-out check in one sentence."""
    text = f"Held-out check on {c.table}: mean |error| {c.mean_abs_error:.1%} with the straight line"
    if c.profile:
        text += f", {c.mean_abs_error_profile:.1%} with the measured profile"
    text += "."
    if c.retest_mean_abs_difference is not None:
        text += (f" Test-retest: the same level measured in both tables differs by {c.retest_mean_abs_difference:.1%} "
                 "on average; no model can be checked more finely than this.")
    return text


JOIN_TEXT = (
    "Per concurrency and prompt length measured at two output lengths: the difference of the time per output token "
    "divided by the difference of joins per iteration ((C-1)/O), i.e. the prefill and admission of one request, "
    "paid by every running sequence. The model prices it admit_ms + per_token_ms x (prompt - 1), a straight line in "
    "the prompt length (`join-cost.csv`; `calibration.gpu.join_costs`).")
GPU_METHOD = (
    "The backend's iteration takes base_ms + per_token_ms x tokens + per_seq_ms x sequences, and a request reaches "
    "the engine request_ms after it is sent (the server's front end). Each measurement is written as a linear "
    "function of the four parameters for a closed-loop load test in steady state (see `simlab calibrate-gpu "
    "--help`), and the parameters are fitted by non-negative least squares on relative errors "
    "(`scipy.optimize.lsq_linear`). R\u00b2 is per measurement on its own scale.")
ADMIT_METHOD = ("With several output lengths, admit_ms (the engine's cost of taking a request in, paid in the "
                "iteration of its prefill) is fitted as a fifth parameter.")
PROFILE_CHECK = (
    "Two decode-step models are checked: the straight line `base_ms + per_seq_ms * sequences` of step.toml, and the "
    "fit table's measured decode step per batch size interpolated (step-profile.csv, the backend's `step.profile`); "
    "both price prefill with the same per_token_ms and admit_ms.")


# --- the scenario (ab, fit) ---------------------------------------------------------------------------------------

def describe(s: ScenarioFacts) -> str:
    """The scenario in one paragraph: the model of the backend, each workload and its arrivals, duration and SLO.

    >>> from simlab.records import WorkloadFacts
    >>> describe(ScenarioFacts("chat", "Chat and a backfill", 600_000, 2_000, "slots", slots=16, workloads=[
    ...     WorkloadFacts("interactive", "chat", "poisson", rate_per_s=20), WorkloadFacts("batch", "fill", "burst", count=500)]))
    'Chat and a backfill. The model: an inference server with 16 GPU slots and its own FIFO queue; interactive `chat` with Poisson arrivals at 20/s; batch `fill` with bursts of 500 jobs; arrivals for 600 s, interactive SLO P95 2000 ms.'
    """
    world = {
        "delay": "a backend with unlimited capacity (pure service times)",
        "slots": f"an inference server with {s.slots} GPU slots and its own FIFO queue",
        "continuous-batching": f"a continuous-batching GPU server (up to {s.max_num_seqs} sequences per step)",
        "api": f"a third-party API with a concurrency quota of {s.concurrency}"
        + (f", {s.rpm:g} requests/min" if s.rpm else "") + (f", {s.tpm:g} tokens/min" if s.tpm else ""),
    }.get(s.backend, f"a {s.backend} backend")
    parts = [f"{w.kind} `{w.name}` with {_arrivals(w)}" for w in s.workloads]
    return (f"{(s.description or s.name).rstrip('.')}. The model: {world}; " + "; ".join(parts)
            + f"; arrivals for {s.duration_ms / 1000:g} s, interactive SLO P95 {s.slo_p95_ms:g} ms.")


def _arrivals(w) -> str:
    return {
        "poisson": lambda: f"Poisson arrivals at {w.rate_per_s:g}/s",
        "piecewise": lambda: f"a piecewise rate ({w.steps} steps of {w.step_ms / 1000:g} s)",
        "diurnal": lambda: f"a diurnal rate around {w.rate_per_s:g}/s",
        "burst": lambda: f"bursts of {w.count} jobs",
        "closed-loop": lambda: f"{w.users} closed-loop users",
        "trace": lambda: f"a replayed trace ({w.file})",
        "resampled": lambda: f"arrivals resampled from {w.file} in {w.step_ms / 1000:g} s blocks",
    }.get(w.process, lambda: f"{w.process} arrivals")()  # a process added later still gets described
