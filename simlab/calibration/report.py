"""The fit report: `report.md`, `fit.json`, `validation.csv`, `rates.csv` and figures (PNG and SVG).

Figures (under figures/, one set per class):
- arrivals-CLASS      rate per bin with its 95% interval, the scenario's fitted rate; inter-arrival times
                      against the exponential of a Poisson process (survival function, log scale)
- lengths-CLASS       histograms of token counts (and latency) with the fitted lognormal
- validation-rates    arrival rate per bin: the log against the simulated fitted scenario (every seed)
- validation-lengths  the log's distribution against the simulation's, quantiles compared marked
No timestamps in any file: the same log gives the same bytes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simlab import records
from simlab.atomic import atomic_write_text
from simlab.experiments.tables import csv_cell
from simlab.calibration.fit import ALPHA, LogFit, fmt_p, format_duration, format_span, p_is
from simlab.calibration.validate import Validation
from simlab.reporting.figures.fit import (LABELS, arrivals_figure, lengths_figure, validation_lengths_figure,
                                        validation_rates_figure)
from simlab.reporting.figures.gpu import gpu_figure
from simlab.reporting.figures.knee import knee_figure

# --- tables and text ------------------------------------------------------------------------------------
def _f(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    v = float(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def rates_csv(fit: LogFit) -> str:
    lines = ["kind,start_s,end_s,count,rate_per_s,rate_ci_low,rate_ci_high"]
    for kind, a in fit.arrivals.items():
        for s, e, c, r, lo, hi in zip(a.edges[:-1], a.edges[1:], a.counts, a.rates_per_s, a.rate_lo, a.rate_hi):
            lines.append(",".join([kind] + [csv_cell(float(v)) for v in (s / 1000, e / 1000)] + [str(int(c))]
                                  + [csv_cell(float(v)) for v in (r, lo, hi)]))
    return "\n".join(lines) + "\n"


def validation_csv(val: Validation) -> str:
    cols = ["kind", "quantity", "observed", "observed_lo", "observed_hi", "simulated", "simulated_lo", "simulated_hi", "ok", "how"]
    lines = [",".join(cols)]
    for c in val.checks:
        row = c.row()
        cells = []
        for k in cols:
            v = row[k]
            if isinstance(v, (bool, np.bool_)):
                cells.append("true" if v else "false")
            elif isinstance(v, float):
                cells.append(csv_cell(float(v)))
            else:
                cells.append('"' + str(v).replace('"', '""') + '"' if ("," in str(v) or '"' in str(v)) else str(v))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def summary_lines(fit: LogFit) -> list[str]:
    """The terminal summary: the headline numbers per class."""
    out = []
    for kind, a in fit.arrivals.items():
        verdict = "rejected" if a.poisson_rejected else "not rejected"
        out.append(f"{kind}: {a.n:,} requests over {format_span(a.span_ms)}: {a.rate_per_s:.3f} req/s, "
                   f"inter-arrival CV {a.cv:.3f}; Poisson {verdict} (KS {p_is(a.poisson_constant.p_value)})")
        per_bin = "rejected" if a.poisson_per_bin_rejected else "not rejected"
        if a.poisson_rescaled is not None:
            out.append(f"  with the rate per {format_duration(a.bin_ms)}: Poisson {per_bin} "
                       f"(time-rescaled KS {p_is(a.poisson_rescaled.p_value)}"
                       + (f", dispersion {p_is(a.dispersion.p_value)}" if a.dispersion else "") + ")")
        out.append(f"  scenario arrivals: {a.process}"
                   + (f", rate per {format_duration(a.step_ms)} (predicted CV {a.predicted_cv:.3f})" if a.process == "piecewise" else ""))
        for col, lf in fit.lengths[kind].items():
            out.append(f"  {LABELS.get(col, col)}: median {lf.quantiles[0.5]:,.0f}, p95 {lf.quantiles[0.95]:,.0f}, "
                       f"p99 {lf.quantiles[0.99]:,.0f}; lognormal median {lf.median:,.1f} sigma {lf.sigma:.3f} "
                       f"(KS D {lf.ks.statistic:.3f}, {p_is(lf.ks.p_value)}) -> {lf.choice}")
    return out


def write_report(fit: LogFit, out: Path, scenario_path: Path, notes: list[str], val: Validation | None,
                 figures: bool = True) -> Path:
    out = Path(out)
    figdir = out / "figures"
    written: list[str] = []
    if figures:
        for kind in fit.arrivals:
            arrivals_figure(fit, kind, figdir)
            lengths_figure(fit, kind, figdir)
            written += [f"arrivals-{kind}", f"lengths-{kind}"]
        if val is not None:
            validation_rates_figure(fit, val, figdir)
            written.append("validation-rates")
            if validation_lengths_figure(val, figdir):
                written.append("validation-lengths")
    log = fit.log
    md = [f"# Fit of {log.path.name}\n"]
    summary = (f"{len(log.frame):,} requests over {format_span(log.span_ms)}"
               + (f", from {log.origin}" if log.origin else "")
               + f". Layout: {log.layout}. Columns: " + "; ".join(f"{k} <- {v}" for k, v in log.sources.items()) + ".")
    md.append(summary + "\n")
    if log.resolution_ms:
        md.append(f"Timestamps are written to whole {'seconds' if log.resolution_ms >= 1000 else 'milliseconds'}: "
                  "the Poisson tests spread each one uniformly within its tick (fixed seed) so that rounding ties "
                  "are not taken for bursts; the CV is of the timestamps as written.\n")
    for n in log.notes:
        md.append(f"Note: {n}.\n")
    md.append(f"Scenario written: `{scenario_path.name}` (load it with any simlab command). Machine-readable fit: "
              "`fit.json`; rate per bin: `rates.csv`; validation: `validation.csv` and `validation-bins.csv`.\n")
    md.append("## Summary\n")
    md.append("```\n" + "\n".join(summary_lines(fit)) + "\n```\n")
    for kind, a in fit.arrivals.items():
        md.append(f"## {kind}: arrivals\n")
        rows = [
            ["requests", f"{a.n:,}"],
            ["mean rate", f"{a.rate_per_s:.4g} req/s"],
            ["inter-arrival CV", f"{a.cv:.4f} (Poisson: 1)"],
            ["rate bins", f"{len(a.counts)} of {format_duration(a.bin_ms)}; rate from {a.rates_per_s.min():.3g} to {a.rates_per_s.max():.3g} req/s"],
            ["rate varies across bins?", f"{'yes' if a.rate_constant.rejected else 'no'} (chi-square {p_is(a.rate_constant.p_value)})"],
            ["Poisson, constant rate", f"{'rejected' if a.poisson_constant.rejected else 'not rejected'}: KS D = {_f(a.poisson_constant.statistic)}, {p_is(a.poisson_constant.p_value)}"],
        ]
        if a.poisson_rescaled is not None:
            rows.append([f"Poisson with the rate per {format_duration(a.bin_ms)}",
                         f"{'rejected' if a.poisson_per_bin_rejected else 'not rejected'}: time-rescaled KS D = "
                         f"{_f(a.poisson_rescaled.statistic)}, {p_is(a.poisson_rescaled.p_value)} ({a.poisson_rescaled.detail})"
                         + (f"; {a.dispersion.detail}, {p_is(a.dispersion.p_value)}" if a.dispersion else "")])
        rows.append(["scenario arrivals", f"`{a.process}`: {a.process_reason}"])
        md.append(md_table(["", ""], rows))
        if a.steps:
            md.append("Steps considered for the scenario's rate (the CV a piecewise Poisson process with the log's "
                      "rate per step would show; finer steps copy more of the log's short-term bursts, and more of "
                      "its counting noise):\n")
            md.append(md_table(["step", "predicted CV", "log's CV"],
                               [[format_duration(s["step_ms"]), f"{s['predicted_cv']:.3f}", f"{a.cv:.3f}"] for s in a.steps]))
        if figures:
            md.append(f"![arrivals]({'figures/arrivals-' + kind + '.png'})\n")
        md.append(f"## {kind}: lengths\n")
        rows = []
        for col, lf in fit.lengths[kind].items():
            rows.append([LABELS.get(col, col), f"{lf.n:,}", _f(lf.mean), _f(lf.quantiles[0.5]), _f(lf.quantiles[0.9]),
                         _f(lf.quantiles[0.95]), _f(lf.quantiles[0.99]), f"{lf.median:,.1f}", f"{lf.sigma:.3f}",
                         f"{lf.p95:,.0f}", f"{lf.ks.statistic:.3f} / {fmt_p(lf.ks.p_value)}",
                         (f"{fmt_p(lf.drift.p_value)}" if lf.drift else ""), f"**{lf.choice}**"])
        md.append(md_table(["quantity", "n", "mean", "p50", "p90", "p95", "p99", "lognormal median", "sigma",
                            "lognormal p95", "KS D / p", "drift p", "used"], rows))
        md.append("Lognormal: `scipy.stats.lognorm.fit(x, floc=0)` on values above 0; KS against it. `auto` uses the "
                  "lognormal unless KS rejects it at 5%, else the empirical distribution (the log's values, "
                  "resampled). Drift: KS of the log's first half against its second half (a small p means the "
                  "mix changes over the log). Prompt and output lengths are resampled independently.\n")
        if figures:
            md.append(f"![lengths]({'figures/lengths-' + kind + '.png'})\n")
    if val is not None:
        verdict = ", ".join(f"{k} {'reproduced' if v else 'NOT reproduced'}" for k, v in val.passed.items())
        md.append("## Validation: the fitted scenario against the log\n")
        how = (f"simulated with seeds {val.seeds[0]}..{val.seeds[-1]} (policy `{val.policy}`)"
               if not val.policy.startswith("none") else
               f"generated with seeds {val.seeds[0]}..{val.seeds[-1]} (arrivals and lengths only: the log has no "
               "latency column to compare, so no server was simulated)")
        md.append(f"The scenario's workload was {how}. Verdict: {verdict}.\n")
        rows = [[c.kind, c.quantity, _f(c.observed),
                 (f"{_f(c.observed_lo)}-{_f(c.observed_hi)}" if not math.isnan(c.observed_lo) else ""),
                 _f(c.simulated), (f"{_f(c.simulated_lo)}-{_f(c.simulated_hi)}" if not math.isnan(c.simulated_lo) else ""),
                 "yes" if c.ok else "**no**", c.how] for c in val.checks]
        md.append(md_table(["class", "quantity", "log", "log 95%", "simulated", "simulated 95%", "within error", "how"], rows))
        bin_rows = []
        for kind, b in val.bins.items():
            widths = np.diff(b["edges"]) / 1000
            for i in range(len(b["observed"])):
                sim = b["simulated"][:, i]
                bin_rows.append([kind, f"{b['edges'][i] / 1000:g}-{b['edges'][i + 1] / 1000:g}", int(b["observed"][i]),
                                 f"{b['observed'][i] / widths[i]:.4g}", f"{sim.mean():.1f}", f"{sim.mean() / widths[i]:.4g}",
                                 fmt_p(float(b["p"][i])), "yes" if b["p"][i] >= 0.05 else "**no**"])
        if len(bin_rows) <= 60:
            md.append("<details><summary>Arrivals per bin</summary>\n")
            md.append(md_table(["class", "bin (s)", "log count", "log req/s", "simulated count (mean)", "simulated req/s",
                                "p", "within error"], bin_rows))
            md.append("</details>\n")
        md.append("Rates: exact test that the log's count and the seeds' total share one rate, per bin; the rates are "
                  "reproduced when no more bins fail than chance allows at 5%. CV: the log's CV lies in the 95% "
                  "prediction interval of the seeds' CVs. Quantiles: the distribution-free order-statistic 95% "
                  "intervals of the log and of the pooled simulation overlap.\n")
        if figures:
            md.append("![validation rates](figures/validation-rates.png)\n")
            if "validation-lengths" in written:
                md.append("![validation lengths](figures/validation-lengths.png)\n")
    if notes:
        md.append("## Notes\n")
        md += [f"- {n}\n" for n in notes]
    md.append("## Method\n")
    md.append(
        "Fits use scipy.stats. Arrival rate per bin: count / width (the Poisson MLE), exact Garwood 95% interval. "
        f"Tests at {ALPHA:.0%}. Constant rate: chi-square of the counts per bin. Poisson: KS of the inter-arrival "
        "times against the fitted exponential (p is conservative because the mean is estimated). With the per-bin "
        "rate: the time-rescaling theorem maps a Poisson process with that rate to one of rate 1, whose gaps are "
        "Exp(1) (KS); and the counts in short sub-bins against their expected counts (index of dispersion, "
        "chi-square, two-sided); rejected when either rejects after a Bonferroni correction. The scenario's "
        "arrivals: `poisson` when neither the constant-rate test nor the Poisson test rejects; else "
        "`piecewise` with the coarsest step whose rate variation reproduces the log's CV (at least 10 requests "
        "per step on average; `--step` chooses it).\n"
    )
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    fit_json = json.dumps(_jsonable(fit.as_dict() | (
        {"validation": {"seeds": val.seeds, "policy": val.policy, "passed": val.passed,
                        "checks": [c.row() for c in val.checks]}} if val is not None else {})), indent=1) + "\n"
    atomic_write_text(out / "fit.json", fit_json)
    records.save(records.FitRecord(
        log=str(log.path), summary=summary, scenario_file=scenario_path.name,
        scenario_text=_scenario_words(scenario_path), fit=json.loads(fit_json),
        figures=[f"figures/{n}.png" for n in written]), out)
    atomic_write_text(out / "rates.csv", rates_csv(fit))
    if val is not None:
        atomic_write_text(out / "validation.csv", validation_csv(val))
        lines = ["kind,start_s,end_s,log_count,simulated_mean_count,p_value"]
        for kind, b in val.bins.items():
            for i in range(len(b["observed"])):
                lines.append(f"{kind},{float(b['edges'][i]) / 1000!r},{float(b['edges'][i + 1]) / 1000!r},{int(b['observed'][i])},"
                             f"{float(b['simulated'][:, i].mean())!r},{float(b['p'][i])!r}")
        atomic_write_text(out / "validation-bins.csv", "\n".join(lines) + "\n")
    return path


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def knee_csv(cal) -> str:
    cols = ["curve", "factor", "offered_rps", "p95_mean_ms", "p95_ci_low_ms", "p95_ci_high_ms", "replications",
            "batch_throughput_per_min"]
    lines = [",".join(cols)]
    for p in cal.points:
        row = p.row()
        lines.append(",".join("" if isinstance(row[c], float) and not math.isfinite(row[c]) else csv_cell(row[c])
                              for c in cols))
    return "\n".join(lines) + "\n"


def write_calibration_report(cal, out: Path, figures: bool = True) -> Path:
    from simlab.calibration.knee import CURVE_LABELS

    out = Path(out)
    if figures:
        knee_figure(cal, out / "figures")
    rec = cal.recommended
    md = [f"# Calibration of {cal.scenario.name}\n"]
    summary = (f"Interactive rate ramped from {min(p.rps for p in cal.points):.3g} to {max(p.rps for p in cal.points):.3g} "
               f"req/s (the scenario offers {cal.base_rps:.3g} req/s); {len(cal.seeds)} seeds per point "
               f"({cal.seeds[0]}..{cal.seeds[-1]}); SLO: interactive P95 {cal.slo_ms:,.0f} ms.")
    md.append(summary + "\n")
    md.append("## Knees\n")
    rows = [[CURVE_LABELS[c], k.describe()] for c, k in cal.knees.items()]
    md.append(md_table(["curve", "rate where P95 crosses the SLO"], rows))
    md.append("## Recommendation\n")
    md.append(md_table(["option", "value", "why"], [
        ["interactiveRpsThreshold", f"{rec['interactiveRpsThreshold']:g}",
         f"{rec['threshold_from']}: {rec['threshold_raw']:.4g} req/s, rounded down to two significant digits. "
         "The adaptive policy's pressure is rps / threshold: at this rate the batch cap is at its minimum, which "
         "is needed from the rate where batch at its full cap breaks the SLO (below it the cap shrinks in "
         "proportion). The wider the knee's CI, the more seeds (--replications) it is worth."],
        ["interactiveP95LatencyMs", f"{rec['interactiveP95LatencyMs']:g}",
         "the SLO: the latency pressure p95 / threshold reaches 1 (batch at its minimum) when the window's P95 "
         "reaches the SLO."],
    ]))
    md.append("These values are not exported as options: they set `simlab tune`'s search ranges (`tune-bounds.json`, "
              "read with `simlab tune SCENARIO --calibration DIR`), so each scenario gets one recommendation. "
              "The options verified below:\n")
    md.append("```json\n" + json.dumps(cal.options, indent=1) + "\n```\n")
    verification = None
    if "adaptive" in cal.knees:
        k = cal.knees["adaptive"]
        verification = (f"Verification: with these options the adaptive scheduler's knee is {k.describe()}; "
                        f"batch present at full cap: {cal.knees['batch'].describe()}; batch absent (the ceiling "
                        f"without preemption): {cal.knees['alone'].describe()}.")
        md.append(verification + "\n")
    if figures:
        md.append("![knee](figures/knee.png)\n")
    md.append("## Points\n")
    md.append(md_table(["curve", "offered req/s", "P95 mean (ms)", "95% CI (ms)", "batch jobs/min"], [
        [CURVE_LABELS[p.curve], f"{p.rps:.4g}", _f(p.mean), f"{_f(p.lo)} to {_f(p.hi)}" if math.isfinite(p.lo) else "",
         _f(p.batch_throughput)] for p in cal.points]))
    if cal.notes:
        md.append("## Notes\n")
        md += [f"- {n}\n" for n in cal.notes]
    md.append("## Method\n")
    md.append(
        "Each point is the scenario with every open-loop interactive workload's rate multiplied by a factor "
        "(a trace is compressed in time), simulated on the listed seeds; the P95 is the run's interactive "
        "end-to-end P95 and the interval a Student-t 95% CI over seeds. Batch absent: the batch workloads "
        "removed. Batch present: `static` with the scenario's batchMaxConcurrency (batch never throttled). "
        "The knee is where the mean P95 first crosses the SLO (interpolated in log P95); its CI is where the CI's "
        "upper and lower bounds cross. The ramp continues until a point's CI lies wholly above the SLO, then "
        "bisects the bracket. The offered rate is measured on the generated arrivals.\n")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    atomic_write_text(out / "knee.csv", knee_csv(cal))
    atomic_write_text(out / "calibration.json", json.dumps(_jsonable({
        "scenario": cal.scenario.name, "slo_p95_ms": cal.slo_ms, "seeds": cal.seeds, "base_rps": cal.base_rps,
        "knees": {c: {"rps": k.rps, "ci_low": k.lo, "ci_high": k.hi, "status": k.status} for c, k in cal.knees.items()},
        "recommended": rec, "options": cal.options, "notes": cal.notes,
        "points": [p.row() for p in cal.points]}), indent=1) + "\n")
    records.save(records.CalibrationRecord(
        scenario=cal.scenario.name, slo_p95_ms=cal.slo_ms, seeds=list(cal.seeds), base_rps=cal.base_rps,
        summary=summary,
        knees={c: records.Knee(k.rps, k.lo, k.hi, k.status, k.describe()) for c, k in cal.knees.items()},
        recommended=json.loads(json.dumps(_jsonable(rec))), options=json.loads(json.dumps(_jsonable(cal.options))),
        verification=verification, notes=[str(n) for n in cal.notes],
        points=json.loads(json.dumps(_jsonable([p.row() for p in cal.points]))),
        figures=["figures/knee.png"] if figures else []), out)
    return path


def _scenario_words(path: Path) -> str:
    """The fitted scenario in words, as the A/B report describes scenarios ("" when it does not load)."""
    from simlab.errors import InputError
    from simlab.reporting.words import describe
    from simlab.scenario import load_scenario

    try:
        return describe(load_scenario(path).facts())
    except InputError:
        return ""


def write_gpu_report(fit, out: Path, toml_name: str, profile_name: str | None, figures: bool = True,
                     open_loop=None) -> Path:
    """report.md and fit.csv of a step-time fit; `open_loop` = (the load-test fit, openloop.OpenLoopFit) when
    the fit was refitted on open-loop runs (then also open-loop.csv)."""
    from simlab.calibration.gpu import MEASURE_LABELS

    out = Path(out)
    if figures:
        gpu_figure(fit, out / "figures")
    md = [f"# Step-time fit of {fit.label}\n"]
    md.append(f"{len(fit.rows)} measurements at concurrencies {', '.join(f'{c:g}' for c in sorted({r.c for r in fit.rows}))}.\n")
    md.append(md_table(["parameter", "value"], [
        ["base_ms", f"{fit.base_ms:.4g}"], ["per_token_ms", f"{fit.per_token_ms:.4g}"],
        ["per_seq_ms", f"{fit.per_seq_ms:.4g}"], ["request_ms", f"{fit.request_ms:.4g}"],
        *([["admit_ms", f"{fit.admit_ms:.4g}"]] if fit.admit_ms else []),
        ["mean relative error", f"{fit.mean_rel_error:.2%}"], ["largest relative error", f"{fit.max_rel_error:.2%}"],
        *[[f"R\u00b2, {MEASURE_LABELS[k]}", f"{v:.4f}"] for k, v in fit.r2.items()],
    ]))
    md.append(f"Scenario snippet: `{toml_name}`" + (f"; measured decode step per batch size: `{profile_name}` "
              "(set `profile` in `[backend.step]` to interpolate it)" if profile_name else "") + ".\n")
    md.append("```toml\n" + (out / toml_name).read_text(encoding="utf-8") + "```\n")
    for n in fit.notes:
        md.append(f"Note: {n}.\n")
    if figures:
        md.append("![fit](figures/gpu-fit.png)\n")
    from simlab.calibration.gpu import join_costs
    from simlab.experiments.tables import csv_text

    joins = join_costs(fit)
    if joins:
        md.append(_join_section(joins))
        atomic_write_text(out / "join-cost.csv", csv_text(joins, list(joins[0])))
    if open_loop is not None:
        md.append(_open_loop_section(*open_loop, fit))
        _write_open_loop_csv(open_loop[1], out / "open-loop.csv")
    md.append("## Every measurement\n")
    md.append(md_table(["line", "measure", "concurrency", "prompt", "output", "measured", "fitted", "error"], [
        [p["line"], MEASURE_LABELS[p["measure"]], f"{p['batch_size']:g}", _f(p["prompt_tokens"]), _f(p["output_tokens"]),
         _f(p["measured"]), _f(p["fitted"]), f"{p['relative_error']:+.1%}"] for p in fit.predictions()]))
    md.append("## Method\n")
    md.append("The backend's iteration takes base_ms + per_token_ms x tokens + per_seq_ms x sequences, and a "
              "request reaches the engine request_ms after it is sent (the server's front end). Each "
              "measurement is written as a linear function of the four parameters for a closed-loop load test in "
              "steady state (see `simlab calibrate-gpu --help`), and the parameters are fitted by non-negative "
              "least squares on relative errors (`scipy.optimize.lsq_linear`). R\u00b2 is per measurement on its "
              "own scale.\n" + ("With several output lengths, admit_ms (the engine's cost of taking a request in, "
                                 "paid in the iteration of its prefill) is fitted as a fifth parameter.\n"
                                 if fit.admit_ms else ""))
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    lines = ["line,measure,batch_size,prompt_tokens,output_tokens,measured,fitted,relative_error"]
    for p in fit.predictions():
        lines.append(",".join(csv_cell(v) for v in p.values()))
    atomic_write_text(out / "fit.csv", "\n".join(lines) + "\n")
    return path


def _join_section(joins: list[dict]) -> str:
    return "\n".join([
        "## What a request joining costs, by prompt length\n",
        "Per concurrency and prompt length measured at two output lengths: the difference of the time per output "
        "token divided by the difference of joins per iteration ((C-1)/O), i.e. the prefill and admission of one "
        "request, paid by every running sequence. The model prices it admit_ms + per_token_ms x (prompt - 1), a "
        "straight line in the prompt length (`join-cost.csv`; `calibration.gpu.join_costs`).\n",
        md_table(["sequences", "prompt", "outputs", "measured (ms)", "fitted (ms)", "error"], [
            [f"{j['batch_size']:g}", f"{j['prompt_tokens']:g}", f"{j['short_output']:g}, {j['long_output']:g}",
             f"{j['measured_ms']:.1f}", f"{j['fitted_ms']:.1f}",
             f"{(j['fitted_ms'] - j['measured_ms']) / j['measured_ms']:+.0%}" if j["measured_ms"] > 0 else ""]
            for j in joins])])


def _open_loop_section(closed, ol, fit) -> str:
    text = ["## Refitted on open-loop traffic\n",
            f"The decode step and the admission cost refitted on {ol.requests} requests of {len(ol.runs)} open-loop "
            f"run(s) ({ol.unstreamed} left out: their tokens came all at once), each request's measured decode "
            "step against the model at the load it had (sequences in the engine, requests and prompt tokens "
            "joining meanwhile); per_token_ms and request_ms kept from the load test(s). "
            "`simlab.calibration.openloop` gives the method.\n",
            md_table(["parameter", "load test(s) alone", "refitted on open-loop traffic"], [
                ["base_ms", f"{closed.base_ms:.4g}", f"{ol.base_ms:.4g}"],
                ["per_seq_ms", f"{closed.per_seq_ms:.4g}", f"{ol.per_seq_ms:.4g}"],
                ["admit_ms", f"{closed.admit_ms:.4g}", f"{ol.admit_ms:.4g}"],
                ["per_token_ms", f"{closed.per_token_ms:.4g}", f"{ol.per_token_ms:.4g} (kept)"],
                ["request_ms", f"{closed.request_ms:.4g}", f"{closed.request_ms:.4g} (kept)"],
                ["mean abs error, open-loop requests", f"{ol.mean_abs_error_before:.1%}", f"{ol.mean_abs_error_after:.1%}"],
                ["mean abs relative error, load-test rows", f"{closed.mean_rel_error:.1%}", f"{fit.mean_rel_error:.1%}"],
            ]),
            "Per run: the median over its requests of (model at the measured load / measured decode step - 1).\n",
            md_table(["run", "requests", "mean sequences", "load test(s) alone", "refitted"], [
                [r.name, str(r.requests), f"{r.mean_sequences:.1f}", f"{r.before:+.1%}", f"{r.after:+.1%}"]
                for r in ol.runs])]
    return "\n".join(text)


def _write_open_loop_csv(ol, path: Path) -> None:
    lines = ["run,requests,mean_sequences,error_load_test_fit,error_refitted"]
    lines += [",".join([r.name, str(r.requests)] + [csv_cell(v) for v in (r.mean_sequences, r.before, r.after)])
              for r in ol.runs]
    atomic_write_text(path, "\n".join(lines) + "\n")


def write_gpu_check(check: dict, fit_path, check_path, out: Path) -> Path:
    """check.md and check.csv from `gpu.held_out_check`'s record."""
    from simlab.calibration.gpu import MEASURE_LABELS

    out = Path(out)
    tol = check["tolerance"]
    prof = check["mean_abs_error_profile"] is not None
    suffixes = ("", "_profile") if prof else ("",)
    head = ["measure", "sequences", "mean abs error", f"every row within {tol:.0%}"]
    if prof:
        head = head[:2] + ["straight line: mean abs error", f"within {tol:.0%}", "measured profile: mean abs error",
                           f"within {tol:.0%}"]
    md = [f"# Held-out check of the step-time fit\n",
          f"Fitted on `{fit_path}`, checked on `{check_path}` (an independent load test of the same server).\n",
          ("Two decode-step models are checked: the straight line `base_ms + per_seq_ms * sequences` of step.toml, "
           "and the fit table's measured decode step per batch size interpolated (step-profile.csv, the backend's "
           "`step.profile`); both price prefill with the same per_token_ms and admit_ms.\n" if prof else ""),
          "## By measure and concurrency\n",
          md_table(head, [[MEASURE_LABELS[g["measure"]], f"{g['batch_size']:g}"]
                          + [c for s in suffixes for c in (f"{g['mean_abs_error' + s]:.1%}",
                                                            "yes" if g["within" + s] else "no")]
                          for g in check["by_concurrency"]]),
          f"All rows: mean |error| {check['mean_abs_error']:.1%}"
          + (f" with the straight line, {check['mean_abs_error_profile']:.1%} with the measured profile" if prof else "")
          + ".\n"]
    if check["retest_mean_abs_difference"] is not None:
        md.append(f"Test-retest: the same level measured in both tables differs by {check['retest_mean_abs_difference']:.1%} "
                  "on average; no model can be checked more finely than this.\n")
    md.append("## Every row\n")
    md.append(md_table(["measure", "sequences", "prompt", "output", "measured", "fitted", "error"]
                       + (["fitted (profile)", "error (profile)"] if prof else []) + ["fit table", "retest"], [
        [MEASURE_LABELS[r["measure"]], f"{r['batch_size']:g}", _f(r["prompt_tokens"]), _f(r["output_tokens"]),
         _f(r["measured"]), _f(r["fitted"]), f"{r['relative_error']:+.1%}"]
        + ([_f(r["fitted_profile"]), f"{r['relative_error_profile']:+.1%}"] if prof else [])
        + [_f(r["retest"]), "" if r["retest_difference"] is None else f"{r['retest_difference']:+.1%}"]
        for r in check["rows"]]))
    path = out / "check.md"
    atomic_write_text(path, "\n".join(md))
    cols = ["measure", "batch_size", "prompt_tokens", "output_tokens", "measured", "fitted", "relative_error",
            "fitted_profile", "relative_error_profile", "retest", "retest_difference"]
    lines = [",".join(cols)] + [",".join(csv_cell(r[c]) for c in cols) for r in check["rows"]]
    atomic_write_text(out / "check.csv", "\n".join(lines) + "\n")
    return path
