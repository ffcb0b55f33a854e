"""Sentences, made at render time from records that hold numbers and codes only. Each command's sentences have
their own section; a renderer (terminal, report.md, the review page) calls these and never stores what they
return."""

from __future__ import annotations

import math
from dataclasses import asdict

from simlab.calibration.fit import ALPHA, MIN_PER_STEP, format_duration, format_span
from simlab.experiments.tables import fmt_ci, fmt_num
from simlab.records import ScenarioFacts
from simlab.tuning import STARTUP_TRIALS


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


# --- numbers in sentences -----------------------------------------------------------------------------------------


def ci(i, unit: str = "", sign: bool = False) -> str:
    """'59 [58, 60] ms' from an Interval (the mean alone when the interval is missing or a point)."""
    if i is None or not math.isfinite(i.mean):
        return "–"
    text = ("+" if sign and i.mean > 0 else "") + fmt_num(i.mean)
    if math.isfinite(i.ci_low) and math.isfinite(i.ci_high) and i.ci_low != i.ci_high:
        lo, hi = (("+" if sign and v > 0 else "") + fmt_num(v) for v in (i.ci_low, i.ci_high))
        text += f" [{lo}, {hi}]"
    return text + (f" {unit}" if unit else "")


def pct(x: float) -> str:
    return f"{100 * x:g}%"


# --- shared: capacity and the backend ---------------------------------------------------------------------------

def capacity_verdict(slo_bin_ms: float, p95_stay_ms: float) -> str:
    """The A/B's criterion-1 verdict when even the batch-absent run fails it: what was judged, in words."""
    return (f"capacity: even with batch absent, P95 in {slo_bin_ms / 1000:g} s bins stays above the SLO for "
            f"{p95_stay_ms / 1000:g} s or more")


def cap_beyond_backend(max_concurrency: int, slots: int) -> str:
    return (f"maxConcurrency = {max_concurrency} lets more tasks in flight than the backend serves at once "
            f"({slots}); the rest wait in the backend's own queue, where the scheduler cannot order them. The static "
            f"frontier sweeps batch caps 1..{min(max_concurrency - 1, slots)} only.")


# --- decide (simlab decide, and the frontier verdict of simlab ab) ------------------------------------------------

def caps_text(caps: list[int]) -> str:
    """[3, 4, 5, 7] -> '3-5 and 7'."""
    caps = sorted(caps)
    runs, start = [], None
    for i, c in enumerate(caps):
        start = c if start is None else start
        if i + 1 == len(caps) or caps[i + 1] != c + 1:
            runs.append(f"{start}" if start == c else f"{start}-{c}")
            start = None
    return runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + " and " + runs[-1]


def arms_text(r, labels: list[str]) -> str:
    """'static caps 3-6 and adaptive-tuned' for a list of arm labels."""
    caps = [a.cap for a in r.selection if a.label in labels and a.family == "static" and a.cap is not None]
    rest = [lab for lab in labels if not any(a.label == lab and a.family == "static" for a in r.selection)]
    parts = []
    if caps:
        parts.append(("static cap " if len(caps) == 1 else "static caps ") + caps_text(caps))
    return listed(parts + rest)


def listed(parts: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def depends_text(r) -> str:
    """What an unsettled pick depends on: the other arms that could move it, and its own standing when that is
    undecided too ('static cap 5 and its own standing')."""
    others = [label for label in r.unsettling if label != r.choice]
    parts = [arms_text(r, others)] if others else []
    if r.choice in r.unsettling:
        parts.append("its own standing")
    return " and ".join(parts) if parts else "arms"


def arm_name(r, label: str | None) -> str:
    a = r.arm(label) if label else None
    if a is not None and a.family == "static" and a.cap is not None:
        return f"static cap {a.cap}"
    return label or "–"


def margins_text(r) -> str:
    return f"P95 {pct(r.p95_margin)}, throughput {pct(r.throughput_margin)}"


def required_text(r, confirmation: bool) -> str:
    """'0.9 x static-6 (550 jobs/min)' from the reference arm's throughput on the units the sentence speaks of:
    the confirmation units (where the reference ran there) or the selection units."""
    ref = (r.arm(r.reference, confirmation=True) if confirmation else None) or r.arm(r.reference)
    need = f" ({fmt_num(r.throughput_fraction * ref.throughput.mean)} jobs/min)" if ref is not None else ""
    return f"{r.throughput_fraction:g} x {r.reference}{need}"


def _reported(r, label: str | None):
    """The arm's result on the confirmation units when it ran there, else on the selection units."""
    return r.arm(label, confirmation=True) or r.arm(label)


def _counted(r, standing_of, anchor: str | None, axis: str) -> list[str]:
    """The arms the rule counted in a tie set: shown within the margin, or undecided with the point estimate
    inside it (simlab/decision/rule.py)."""
    ref = r.arm(anchor)
    out = []
    for a in r.selection:
        s = standing_of(a)
        if s in ("leader", "equivalent"):
            out.append(a.label)
        elif s == "undecided" and ref is not None:
            v, w = (a.p95.mean, ref.p95.mean) if axis == "P95" else (a.throughput.mean, ref.throughput.mean)
            margin = r.p95_margin if axis == "P95" else r.throughput_margin
            if (v <= (1 + margin) * w) if axis == "P95" else (v >= (1 - margin) * w):
                out.append(a.label)
    return out


def _why(r) -> str:
    """How the rule got from the tie set to the choice."""
    first, second = ("P95", "throughput") if r.rule == "constrained" else ("throughput", "P95")
    best = "highest" if second == "throughput" else "lowest"
    if r.pick and r.pick != r.choice:
        return (f"which dominates {arm_name(r, r.pick)}, the simplest of the ties (better on one axis, within the "
                "margin on the other)")
    ties = _counted(r, lambda a: a.tie, r.leader, first)
    tied = [x for x in _counted(r, lambda a: a.second, r.second_leader, second) if x in ties]
    if len(ties) <= 1:
        return f"the {'lowest' if first == 'P95' else 'highest'} {first}"
    if len(tied) > 1:
        return (f"the simplest of those within the {second} margin of the {best} ({arms_text(r, tied)}; undecided "
                "arms counted on their point estimates)")
    undecided = [a.label for a in r.selection if a.label in ties and a.tie == "undecided"]
    note = " (undecided arms counted on their point estimates)" if undecided else ""
    return f"the {best} {second} of those within the {first} margin{note}"


def _slo_text(r, c) -> str:
    slo = f"{fmt_num(r.slo_p95_ms)} ms SLO"
    return {"yes": f"under the {slo}", "no": f"above the {slo}", "undecided": f"its CI straddles the {slo}"}.get(
        r.slo_met, f"against the {slo}: {'under' if c.p95.mean <= r.slo_p95_ms else 'above'} on the mean")


def constraint_text(r) -> str:
    """What the rule's feasibility asks of an arm, as a verb phrase ('keep interactive P95 under 9,050 ms (...)')."""
    if r.rule == "constrained":
        return f"deliver the required {required_text(r, False)}" if r.reference else "meet the rule's constraint"
    bound = (f" (the batch-absent bound x {1 + r.bound_tolerance:g}, since no arm can meet the "
             f"{fmt_num(r.slo_p95_ms)} ms SLO)" if r.limit_kind == "bound" else "")
    return f"keep interactive P95 under {fmt_num(r.limit_ms)} ms{bound}"


def trade_text(r, other: str | None) -> str:
    """The choice against another arm in numbers ('adaptive-tuned: P95 -40 [-52, -28] ms but 186 jobs/min, under
    the 0.9 x static-14 required'), on the confirmation units when both ran there; '' without that arm."""
    if not other or other == r.choice:
        return ""
    conf = r.arm(other, confirmation=True) is not None and r.arm(r.choice, confirmation=True) is not None
    a = r.arm(other, confirmation=conf)
    if a is None or a.p95_vs_choice is None:
        return ""
    parts = []
    for d, name, unit in ((a.p95_vs_choice, "P95", "ms"), (a.throughput_vs_choice, "throughput", "jobs/min")):
        parts.append(f"{name} {ci(d, unit, sign=True)}" + ("" if _excludes_zero(d) else " (no measurable difference)"))
    text = f"against the choice, {arm_name(r, other)} has " + " and ".join(parts)
    if r.rule == "constrained" and a.feasible == "no" and r.reference:
        text += (f"; at {fmt_num(a.throughput.mean)} jobs/min it misses the required {required_text(r, conf)}"
                 if a.required_margin is None or a.required_margin.mean < 0 else
                 f"; its throughput is not shown to meet the required {required_text(r, conf)}")
    elif r.rule == "slo" and a.feasible == "no" and r.limit_ms is not None:
        text += f"; it is shown above the {fmt_num(r.limit_ms)} ms P95 limit"
    elif a.feasible == "undecided":
        text += "; the units cannot tell whether it meets the constraint"
    return text + (" (fresh units)" if conf else " (selection units)")


def _excludes_zero(i) -> bool:
    return i is not None and math.isfinite(i.ci_low) and math.isfinite(i.ci_high) and (i.ci_low > 0 or i.ci_high < 0)


def decide_headline(r) -> str:
    """The answer in one sentence: what to deploy, or why nothing is."""
    if r.choice is None:
        what = (f"batch throughput at {required_text(r, False)}" if r.rule == "constrained" else
                f"interactive P95 under {fmt_num(r.limit_ms)} ms" + (" (the batch-absent bound, since no arm can meet "
                                                                      "the SLO)" if r.limit_kind == "bound" else ""))
        kept = [a for a in r.selection if a.family != "baseline" and a.constraint in ("yes", "undecided")]
        if r.batch_deadline_share is None or not kept:
            return f"No recommendation: no deployable arm is shown to keep {what} on the selection units."
        return (f"No recommendation: no deployable arm is shown both to keep {what} and to finish at least "
                f"{pct(r.batch_deadline_share)} of batch jobs by their deadline on the selection units: "
                f"{deadline_trade_text(r, kept)}.")
    c = r.arm(r.choice)
    if not r.settled:
        if r.command == "ab":
            return (f"Not settled on the A/B's {len(r.selection_units)} seeds: the pick ({arm_name(r, r.choice)} for "
                    f"now) depends on {depends_text(r)}, which these seeds cannot yet place inside or "
                    "outside the margins.")
        return (f"Not settled after {r.seeds_budget} selection seeds per held-out condition: the pick ("
                f"{arm_name(r, r.choice)} for now) depends on {depends_text(r)}, which the units cannot "
                "yet place inside or outside the margins; no options exported.")
    if c.family == "baseline":
        return f"{c.label} is best here, but it is not a production scheduler setting."
    what = family_choice_text(c)
    if r.command == "ab":
        return f"On the A/B's seeds the rule picks {what}."
    if r.exported:
        return f"Deploy {what} with best-options.json."
    return f"The rule picks {what}, but it is not exported."


def deadline_trade_text(r, kept) -> str:
    """Why no arm is feasible when some keep the rule's constraint: the best share on time among them, and what the
    arms shown to reach the share give up on the constraint's axis."""
    best = max(kept, key=_share_mean)
    text = (f"the arms not shown to miss it finish at most {_share(best)} on time ({arm_name(r, best.label)})"
            if len(kept) > 1 else f"{arm_name(r, best.label)}, the one arm not shown to miss it, finishes "
                                  f"{_share(best)} on time")
    reach = [a for a in r.selection if a.family != "baseline" and a.on_time == "yes"]
    if r.rule == "constrained":
        if reach:
            top = max(reach, key=lambda a: a.throughput.mean)
            return text + (f"; of those shown to reach the share, {arm_name(r, top.label)} has the most batch throughput, "
                           f"{fmt_num(top.throughput.mean)} jobs/min")
    elif reach:
        low = min(reach, key=lambda a: a.p95.mean)
        return text + (f"; of those shown to reach the share, {arm_name(r, low.label)} has the lowest P95, "
                       f"{fmt_num(low.p95.mean)} ms")
    deployable = [a for a in r.selection if a.family != "baseline" and a.deadline_share is not None]
    most = max(deployable, key=_share_mean) if deployable else None
    return text + ("; no arm is shown to reach the share" +
                   (f" (the most: {arm_name(r, most.label)}, {_share(most)})" if most is not None else ""))


def _share_mean(a) -> float:
    return a.deadline_share.mean if a.deadline_share is not None else -math.inf


def _share(a) -> str:
    return "–" if a.deadline_share is None else f"{100 * a.deadline_share.mean:.0f}%"


GATE_RUNTIME = "simlab's own options file, for simlab.runtime.Scheduler: not the article's production scheduler"


def family_choice_text(c) -> str:
    """What deploying arm `c` means, by its family: which setting, and for which gateway (or engine)."""
    if c.family == "static":
        return f"a static cap of {c.cap} (batchMinConcurrency = batchMaxConcurrency = {c.cap})"
    if c.family == "adaptive":
        return f"adaptive ({c.label})"
    if c.family == "engine-priority":
        return ("engine priority (no gateway cap: the engine serves interactive requests first, vLLM's "
                "--scheduling-policy priority, each request sending its class's priority)")
    return f"the {c.family} gate ({c.label}; {GATE_RUNTIME})"


def options_for_text(c) -> str:
    """Which gateway (or engine) the exported options file is for."""
    if c.family in ("static", "adaptive"):
        return "for the production scheduler"
    if c.family == "engine-priority":
        return ("for simlab.runtime.Scheduler with policy \"unscheduled\" (no gateway cap), in front of an engine "
                "started with --scheduling-policy priority")
    return f"{GATE_RUNTIME} (policy \"{c.family}\")"


def families_text(r) -> str | None:
    """Which families were ranked and the budget each got (None when decide tuned none)."""
    t = r.tuning
    if t is None or len(t.families) < 2:  # the adaptive cap alone: the report says what it always said
        return None
    names = ", ".join(f.family for f in t.families)
    per = t.trials_per_family if t.trials_per_family is not None else t.trials
    return (f"Families tuned: {names}, each with {per} trials on the same search units "
            f"({', '.join(r.search_conditions)} x the same seeds) and the same sampler seed; each family's defaults "
            "and tuned candidates race on the same selection units and are confirmed on the same confirmation "
            "units.")


def decide_sentences(r) -> list[str]:
    """The answer as a paragraph: the headline, then the tie set, the numbers reported, the trade-offs, and what
    stands in the way of exporting."""
    out = [decide_headline(r)]
    if r.choice is None:
        if r.unsettling:
            out.append(f"{arms_text(r, r.unsettling)} may be feasible: {seeds_text(r.seeds_needed)} selection "
                       "seeds per held-out condition would decide.")
        return out
    c = _reported(r, r.choice)
    first = "P95" if r.rule == "constrained" else "throughput"
    shown = [a.label for a in r.selection if a.tie in ("leader", "equivalent")]
    open_ = [a.label for a in r.selection if a.tie == "undecided"]
    # the leader is the best of the arms shown feasible only: say so wherever another arm was not shown feasible
    eligible = [a.label for a in r.selection if a.feasible == "yes"]
    scoped = any(a.family != "baseline" and a.feasible != "yes" for a in r.selection)
    among = f"of the arms shown to {constraint_text(r)}, " if scoped else ""
    if len(shown) > 1:
        text = (f"On the selection units, {among}{arms_text(r, shown)} are equivalent on {first} within the margins "
                f"({margins_text(r)})")
    elif scoped and eligible == [r.leader] and not open_:
        text = f"On the selection units, {arm_name(r, r.leader)} is the only arm shown to {constraint_text(r)}"
    else:
        text = (f"On the selection units, {among}{arm_name(r, r.leader)} has the best {first}; no other arm is shown "
                f"within the margins ({margins_text(r)})")
    if open_:
        text += (f"; {arms_text(r, open_)} {'is' if len(open_) == 1 else 'are'} not told apart from the best yet (neither "
                 "shown within the margin nor beyond)")
    why = "the one arm eligible" if eligible == [r.choice] and not open_ else _why(r)
    out.append(f"{text}. The rule picks {arm_name(r, r.choice)}, {why}"
               + (", and would whatever the undecided arms turn out to be." if open_ and r.settled_by == "decided"
                  else "."))
    if r.settled_by == "unchanged" and len(r.rounds) >= 2:
        a, b = r.rounds[-2].seeds, r.rounds[-1].seeds
        text = f"The tie set and the choice did not change from {a} to {b} selection seeds per held-out condition"
        if r.unsettling:
            text += (f"; {arms_text(r, r.unsettling)} could still move it, and {seeds_text(r.seeds_needed)} seeds "
                     "per condition would decide")
            if r.seeds_needed is not None and r.seeds_needed > r.seeds_budget > b:  # racing stopped before the budget
                text += f", more than the budget's {r.seeds_budget}"
        out.append(text + ".")
    if (grown := steps_sentence(r)) is not None:
        out.append(grown)
    if not r.settled:
        if r.command == "ab":
            out.append("`simlab decide` races the contenders on more seeds and held-out traffic, and confirms on "
                       "fresh ones.")
        else:
            out.append(f"{_upper(seeds_text(r.seeds_needed))} selection seeds per held-out condition (--replications) "
                       "would settle it.")
        if (budget := budget_sentence(r)) is not None:
            out.append(budget)
        return out
    where = (f"On {len(r.confirmation_units)} fresh confirmation units" if r.confirmation_units
             else "On the A/B's seeds (no confirmation units)")
    thr = f"{ci(c.throughput, 'jobs/min')}"
    if r.rule == "constrained" and r.reference and c.required_margin is not None:
        required = required_text(r, bool(r.confirmation_units))
        thr += (f", above the required {required}" if c.required_margin.mean >= 0 else
                f", within the {pct(r.throughput_margin)} margin of the required {required}")
    out.append(f"{where}: P95 {ci(c.p95, 'ms')}, {_slo_text(r, c)}; {thr}.")
    versus = r.best_adaptive if r.arm(r.choice).family == "static" else r.best_static
    trade = trade_text(r, versus)
    if trade:
        out.append(trade[:1].upper() + trade[1:] + ".")
    dom = [a.label for a in r.confirmation if a.dominates]
    if dom:
        out.append(f"But on the fresh units {arms_text(r, dom)} dominates it (Holm, family-wise "
                   f"{pct(1 - r.level)}): not exported.")
    if r.constraint_missed:
        out.append("But on the fresh units it is shown to miss the constraint: not exported.")
    for sentence in condition_sentences(r):
        out.append(sentence)
    if (moved := trials_sentence(r)) is not None:
        out.append(moved)
    elif (budget := budget_sentence(r)) is not None:
        out.append(budget)
    if r.command == "ab":
        out.append("Judged on the A/B's own seeds and traffic; `simlab decide` races on held-out traffic conditions "
                   "and confirms on fresh seeds, so its answer can differ.")
    return out


def condition_sentences(r) -> list[str]:
    """Per held-out condition: where an arm dominates the choice, and whether that is a trade-off (the choice
    dominates it elsewhere) or a contradiction of the pooled pick (it does not)."""
    dom: dict[str, list[str]] = {}
    beaten: dict[str, list[str]] = {}
    for c in r.per_condition:
        for a in c.dominators:
            dom.setdefault(a, []).append(c.condition)
        for a in c.worse_than_choice:
            beaten.setdefault(a, []).append(c.condition)
    groups: dict[tuple, list[str]] = {}
    for a, where in dom.items():
        groups.setdefault((tuple(where), tuple(beaten.get(a, ()))), []).append(a)
    out = []
    for (where, lost), arms in groups.items():
        many = len(arms) > 1
        who = arms_text(r, arms)
        if lost:
            out.append(f"On {listed(list(where))}, {who} {'dominate' if many else 'dominates'} the choice, but on "
                       f"{listed(list(lost))} {'they are' if many else 'it is'} worse than it beyond a margin: a fixed "
                       "setting trades one condition for another.")
        else:
            out.append(f"On {listed(list(where))}, {who} {'dominate' if many else 'dominates'} the choice and "
                       f"{'are' if many else 'is'} shown worse on no other held-out condition: the pooled pick is "
                       "contradicted there; not exported.")
    return out


def seeds_text(seeds: float | None) -> str:
    """'about 40', or why no number of seeds would do."""
    if seeds is None:
        return "–"
    if not math.isfinite(seeds) or seeds > 10_000:
        return "more than 10,000 (an arm sits on a margin itself)"
    return f"about {fmt_num(math.ceil(seeds))}"


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def twins_sentence(r) -> str:
    """How many arm x unit results were another arm's simulation (empty when none)."""
    if not r.runs_shared:
        return ""
    return (f" {r.runs_shared} arm x unit results were another arm's simulation: options that provably make the same "
            "decisions there (a gate whose limit or saturation cannot move runs as its static cap) are simulated once.")


def method_text(r) -> str:
    """How the answer was reached, for the report."""
    alpha = pct(1 - r.level)
    rule = ("lowest interactive P95 among the arms shown to keep batch throughput at "
            f"{r.throughput_fraction:g} x {r.reference}; throughput decides the ties"
            if r.rule == "constrained" else
            "highest batch throughput among the arms shown to meet the SLO (or the batch-absent bound x "
            f"{1 + r.bound_tolerance:g} when none can and that is above the SLO); P95 decides the ties")
    if r.batch_deadline_share is not None:
        rule += (f"; feasible only when the share of batch jobs done by their deadline is shown at least "
                 f"{pct(r.batch_deadline_share)}")
    racing = (f"Racing: {len(r.rounds)} round(s) on {len(r.selection_units)} selection units (held-out conditions "
              f"{', '.join(r.conditions)} x seeds), up to {r.seeds_budget} seeds per condition; arms shown out "
              f"stop being measured ({r.runs} simulations, {r.runs_exhaustive} for every arm on every unit)."
              + twins_sentence(r) if r.command == "decide" else f"One round on the A/B's {len(r.selection_units)} seeds.")
    confirm = (" The reported numbers come from fresh confirmation units (the same conditions, new seeds) that "
               "played no part in choosing." if r.confirmation_units else "")
    if r.command == "decide":
        confirm += " " + tuning_text(r)
    others = (" before the other families" if any(a.family not in ("static", "adaptive", "baseline")
                                                   for a in r.selection) else "")
    return (f"Rule `{r.rule}`: {rule}. Arms within the margins ({margins_text(r)} of the best arm's value, unit by "
            f"unit) are equivalent; the simplest of them is picked (static before adaptive{others}, fewer options "
            f"changed from production, rounder values), and no arm of the tie set may dominate it (better on one axis, "
            f"within the margin on the other). Every claim is a paired one-sided t-test on common random numbers, "
            f"Holm-corrected over the arms compared at a family-wise {alpha}. {racing}{confirm}"
            + (f" {families_text(r)}" if families_text(r) else ""))


def tuning_text(r) -> str:
    """What `decide`'s searches did: 'Tuning: 20 trials (20 complete, 14 feasible) on the search units; candidates:
    adaptive-tuned.', per family when several were tuned, or that nothing was tuned."""
    t = r.tuning
    if t is None:
        return "Tuning: not tuned (--trials 0): every family races with its defaults alone."

    def found(candidates) -> str:
        return ", ".join(candidates) if candidates else "none new (every proposal is an arm already compared)"

    if len(t.families) >= 2:
        each = "; ".join(f"{f.family} {f.trials} trials ({f.complete} complete, {f.feasible} feasible; candidates: "
                         f"{found(f.candidates)}{_found_at(f)})" for f in t.families)
        return f"Tuning, on the search units only: {each}."
    return (f"Tuning: {t.trials} trials ({t.complete} complete, {t.feasible} feasible) on the search units, never "
            f"on the selection or confirmation units; candidates: {found(t.candidates)}.")


LATE_SHARE = 0.75  # a pick from a trial past this share of the budget: the search was still improving


def still_improving(r) -> list:
    """The families whose search found its pick in the last quarter of its trials: a longer search may find better
    options, so the answer may depend on the tuning budget (`--trials`)."""
    t = r.tuning
    if t is None:
        return []
    return [f for f in t.families if f.found_at is not None and f.trials >= 4 and f.found_at + 1 > LATE_SHARE * f.trials]


def budget_sentence(r) -> str | None:
    """What the searches' budget may change: None when every search found its pick early."""
    late = still_improving(r)
    if not late:
        return None
    each = ", ".join(f"{f.family} in trial {f.found_at + 1} of {f.trials}" for f in late)
    one = len(late) == 1
    return (f"The tuning budget may matter: the {'search' if one else 'searches'} found "
            f"{'its pick' if one else 'their picks'} late ({each}), so {'it was' if one else 'they were'} still "
            "improving; a larger --trials may find better options and change the answer.")


def budget_case(r) -> str:
    """How the answer hangs on the tuning budget (`budget_why`); a record saved before the field knew only the
    tie-set case."""
    return getattr(r, "budget_why", "") or "tie-set"


def budget_text(r) -> str | None:
    """Why the answer hangs on the tuning budget (`r.budget_why`), e.g. 'the tie set is holdback-tuned alone,
    found only in the second half of its search: a run with 10 of the 20 trials would not race it'."""
    if not r.trials_needed or not r.budget_arms or r.tuning is None or not r.tuning.families:
        return None
    why = budget_case(r)
    arms = arms_text(r, r.budget_arms)
    if why == "start-up":
        f = r.tuning.families[0]
        return (f"every search ran {f.trials} trials, all within the sampler's random start-up (its first "
                f"{STARTUP_TRIALS} trials are drawn at random), so the tuned "
                f"{'arm' if len(r.budget_arms) == 1 else 'arms'} of the tie set ({arms}) "
                f"{'is a chance draw' if len(r.budget_arms) == 1 else 'are chance draws'} that a longer search may "
                "beat")
    halves = [f for f in r.tuning.families if f.half is not None]
    if not halves:
        return None
    f = halves[0]
    shorter = f"a run with {f.half} of the {f.trials} trials"
    if why == "choice":
        return (f"the choice, {arms}, was found only in the second half of its search and no arm shown "
                f"equivalent to it is one {shorter} would race: that run would not give this answer")
    if len(r.budget_arms) == 1:
        return (f"the tie set is {arms} alone, found only in the second half of its search: "
                f"{shorter} would not race it")
    return (f"every arm of the tie set ({arms}) was found only in the second half of the "
            f"searches: {shorter} would race none of them")


BUDGET_CASES = {"start-up": "every search within the sampler's random start-up",
                "tie-set": "a tie set of picks the search with half its trials would not race",
                "choice": "a choice the search with half its trials would not race"}


def steps_sentence(r) -> str | None:
    """How decide grew the searches while the answer hung on the tuning budget (`r.budget_steps`), or why it
    did not; None when the first budget's answer did not hang on it."""
    steps = list(getattr(r, "budget_steps", None) or [])
    if not steps or not steps[0].why or r.max_trials is None:
        return None
    first, last = steps[0], steps[-1]
    # decide stops growing at the ceiling, or where the answer is not settled on the selection seeds
    beyond = r.trials_needed is not None and r.trials_needed > r.max_trials
    unsettled = ("the answer is not settled on the selection seeds, and an unsettled answer asks for seeds before "
                 "trials")
    if len(steps) == 1:
        if not r.trials_needed:
            return None
        if beyond:
            return (f"The searches were not grown past {first.trials} trials per family: the {r.trials_needed} "
                    f"that would tell is more than --max-trials ({r.max_trials}).")
        return f"The searches were not grown past {first.trials} trials per family: {unsettled}."
    chain = " → ".join(str(s.trials) for s in steps)
    text = (f"At {first.trials} trials per family the answer hung on the tuning budget "
            f"({BUDGET_CASES.get(first.why, first.why)}), so decide doubled every search ({chain} trials)")
    if not last.why:
        text += f"; at {last.trials} it does not, and this is that budget's answer"
    elif beyond:
        text += f", up to --max-trials ({r.max_trials})"
    else:
        text += f"; at {last.trials} {unsettled}"
    return text + "."


def trials_sentence(r) -> str | None:
    """Why a tuned choice is held back: the answer hangs on the tuning budget (`budget_text`)."""
    text = budget_text(r)
    if text is None:
        return None
    if budget_case(r) == "start-up":
        return (f"The tuning budget matters: {text}; --trials {r.trials_needed} would tell whether the answer "
                "holds. Not exported.")
    return (f"The tuning budget matters: {text}, so the answer moved with the budget and may move again; "
            f"--trials {r.trials_needed} would tell whether it still does. Not exported.")


def _found_at(f) -> str:
    return f"; its pick from trial {f.found_at + 1}" if f.found_at is not None else ""


def not_exported(r) -> str:
    """Why decide wrote no best-options.json (stderr, beside exit code 3)."""
    if r.choice is None:
        return "no deployable arm is feasible on the selection units"
    if not r.settled:
        needed = r.seeds_needed if r.seeds_needed is not None and math.isfinite(r.seeds_needed) else math.inf
        rerun = f"; rerun with --replications {math.ceil(needed)}" if needed <= 10_000 else ""
        return (f"the answer is not settled after {r.seeds_budget} selection seeds per held-out condition "
                f"({arms_text(r, r.unsettling)} could still move it); {seeds_text(r.seeds_needed)} would settle it"
                + rerun)
    if r.arm(r.choice).family == "baseline":
        return f"{r.choice} is not a production scheduler setting"
    if (text := budget_text(r)) is not None:
        return f"the answer depends on the tuning budget: {text}; rerun with --trials {r.trials_needed}"
    dom = [a.label for a in r.confirmation if a.dominates]
    if dom:
        return f"{arms_text(r, dom)} dominates the choice on the fresh confirmation units"
    if r.constraint_missed:
        return "the choice misses the constraint on the fresh confirmation units"
    return "per-condition results contradict the pooled pick (see report.md)"


def ab_verdict(r) -> str:
    """The frontier's verdict line in an A/B report (the record's other sentences follow in its section)."""
    caps = [a.cap for a in r.selection if a.family == "static" and a.cap is not None]
    if not caps:
        swept = "no static cap swept"
    elif len(set(caps)) == max(caps) - min(caps) + 1:
        swept = f"static caps {min(caps)}..{max(caps)} swept"
    else:
        swept = f"{len(set(caps))} static caps of {min(caps)}..{max(caps):,} swept"
    return f"{decide_headline(r).rstrip('.')} ({r.rule} rule, {swept})."


# --- tune (simlab tune, and the search inside simlab decide) ------------------------------------------------------

def tune_verdict(r) -> tuple[str, list[str]]:
    """Says plainly whether the tuned options beat the defaults on held-out seeds, and if not, why: (headline,
    further sentences), from the TuneRecord's numbers and its status."""
    if r.decision.status == "in-decide":
        return ("Not validated here: `simlab decide` judges these candidates on its own held-out units.", [])
    metric, reference_name = r.metric, r.reference
    summary = [asdict(c) for c in r.validation]
    chosen = r.config(r.pick) if r.pick else None
    pick = asdict(chosen) if chosen is not None else None
    by = {s["config"]: s for s in summary}
    defaults, bound = by["defaults"], by.get("bound-no-batch")
    if pick is None:
        return ("No configuration can be recommended: no trial kept batch throughput at the required level. Loosen "
                "`throughput_fraction` or widen the bounds.", [])
    ms = lambda s: f"{fmt_num(s['holdout_objective_ms'])} ms"  # noqa: E731
    need = fmt_num(pick["required_throughput_per_min"])
    status = r.decision.status  # decided once, from the numbers (simlab/tuning/report.py: tune_status)
    if status == "beaten":
        head = (f"**The tuned options beat the production defaults on held-out seeds**: {metric} {ms(pick)} vs "
                f"{ms(defaults)}, non-overlapping 95% CIs, with batch throughput "
                f"{fmt_num(pick['holdout_throughput_per_min'])}/min (required {need}).")
    elif status == "not-validated":
        head = (f"**Not validated**: on held-out seeds the tuned options miss the batch-throughput constraint "
                f"({fmt_num(pick['holdout_throughput_per_min'])} < {need}/min); the search seeds flattered them.")
    elif status == "at-bound":
        head = (
            f"**The defaults cannot be beaten on {metric} here**: they already reach {ms(defaults)}, the lower bound "
            f"set by the interactive traffic alone ({ms(bound)} with batch absent, which no scheduler can beat "
            "without preempting running work). "
            + (f"They pay for it in batch throughput: {fmt_num(defaults['holdout_throughput_per_min'])}/min, below the "
               f"required {need}/min. The tuned options meet the constraint "
               f"({fmt_num(pick['holdout_throughput_per_min'])}/min) at {metric} {ms(pick)}, "
               f"{_tune_pct(pick['holdout_objective_ms'], bound['holdout_objective_ms'])} above the bound."
               if not defaults["meets_constraint"] else "The tuned options match them within the noise.")
        )
    elif status == "overlap":
        head = (f"**The defaults cannot be beaten with confidence**: held-out {metric} {ms(pick)} tuned vs "
                f"{ms(defaults)} defaults, and the 95% CIs overlap.")
    else:  # defaults-lower, keep-defaults
        head = (
            f"**The defaults have the lower {metric}** ({ms(defaults)} vs {ms(pick)} tuned), "
            + ("but they miss the batch-throughput constraint "
               f"({fmt_num(defaults['holdout_throughput_per_min'])} < {need}/min): the tuned options are the best "
               "latency that keeps batch work at the required pace." if not defaults["meets_constraint"]
               else "and meet the constraint too: keep the defaults.")
        )
    reference = by["reference"]
    details = [
        f"Against the reference arm (`{reference_name}` at the production options, "
        f"{fmt_num(reference['holdout_throughput_per_min'])} batch/min): tuned {metric} {ms(pick)} vs {ms(reference)}, "
        f"paired difference {fmt_ci(pick['vs_reference_diff_ms'], pick['vs_reference_ci_low'], pick['vs_reference_ci_high'])} ms."
    ]
    so = pick["search_objective_ms"]
    if so is not None and math.isfinite(pick["holdout_objective_ci_low"]) and so < pick["holdout_objective_ci_low"]:
        details.append(
            f"Noise-fitting: the search measured {fmt_num(so)} ms for these options, below their held-out 95% CI "
            f"[{fmt_num(pick['holdout_objective_ci_low'])}, {fmt_num(pick['holdout_objective_ci_high'])}]: the search "
            "picked them partly for the luck of its seeds. More search seeds (`[tune] seeds`) make it more honest."
        )
    return head, details


def _tune_pct(value: float, base: float) -> str:
    return f"{100 * (value - base) / base:.1f}%" if base else "–"
