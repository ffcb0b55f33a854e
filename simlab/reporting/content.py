"""What the review page says, in order: the question and the scenario; the A/B (policies with 95% CIs, paired
differences, the article's three verdicts, the bounds); the tuned options and their held-out check; the
calibration knee; the workload fit; then every figure with a caption."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from simlab.errors import InputError
from simlab.experiments.tables import fmt_num
from simlab.reporting.collect import Source, md_sections, num, paragraphs, truth
from simlab.reporting.document import (BAD, FAIL, GOOD, PASS, Badges, Bullets, Callout, Cell, Code, Contents,
                                       Document, Figure, Heading, Paragraph, Table)

KIND_TITLES = {"ab": "A/B", "tune": "Tuning", "calibrate": "Calibration", "fit": "Workload fit"}

CAPTIONS = {
    "latency_cdf": "Interactive end-to-end latency, cumulative distribution per policy (first seed). Where a curve "
                   "crosses 0.95 is that policy's P95; the SLO is marked.",
    "rolling_p95": "Interactive P95 over the scheduler's sliding window as the run goes on, per policy, against the "
                   "SLO: the time spent above it is what success criterion 1 judges.",
    "batch_cap_inflight": "Per policy: batch tasks in flight (light), interactive tasks in flight (dark, on top), the "
                          "batch cap in force (solid line) and maxConcurrency (dashed).",
    "queues": "Per policy: tasks waiting at the scheduler, per class, and in the backend's own queue.",
    "tradeoff": "Batch throughput against interactive P95, means over all seeds with 95% CIs: up and to the left is "
                "better. Dotted lines: the bounds (P95 with batch absent, throughput of batch alone).",
    "optimization_history": "The objective of each feasible trial, in trial order, and the best so far.",
    "param_importances": "Which options matter for the objective: Optuna's importance estimate over the completed trials.",
    "slices": "The objective against each option, one panel per option; each dot is a trial.",
    "pareto_front": "Every trial: interactive latency against batch throughput, the required throughput (dashed), "
                    "the production defaults and the chosen options.",
    "knee": "Interactive P95 against the offered interactive rate, with 95% CIs over seeds: batch absent, batch "
            "present at its full cap, and adaptive with the recommended options. Each knee is where a curve crosses "
            "the SLO; the recommended interactiveRpsThreshold is marked.",
    "arrivals": "{kind} arrivals in the log: the rate per bin with its 95% interval, the rate the fitted scenario "
                "uses, and the inter-arrival times against the exponential gaps of a Poisson process.",
    "lengths": "{kind} lengths in the log against the fitted lognormal, per quantity.",
    "validation-rates": "Validation: the log's arrival rate per bin against the fitted scenario's, simulated over seeds.",
    "validation-lengths": "Validation: the log's length distributions against the fitted scenario's; dots mark the "
                          "quantiles compared.",
}

VALIDATION_LABELS = {"rates": "arrival rates", "cv": "inter-arrival CV", "quantiles": "quantiles",
                     "latency": "latency"}
LENGTH_LABELS = {"prompt_tokens": "prompt tokens", "output_tokens": "output tokens", "service_ms": "latency (ms)"}


def build_document(sources: list[Source], base: Path, title: str | None) -> Document:
    """The document for `sources`; `base` is the folder the report is written to (paths are shown relative to it)."""
    for s in sources:
        s.label = _rel(s.path, base) + "/"
        s.name = _name(s)
    names = list(dict.fromkeys(s.name for s in sources))
    doc = Document(title or "Design review: " + " · ".join(names))
    doc.subtitle = "From " + ", ".join(f"`{s.label}` (simlab {s.kind})" for s in sources) + "."
    doc.add(Contents())
    builders = {"ab": _ab, "tune": _tune, "calibrate": _calibrate, "fit": _fit}
    _question(doc, sources)
    placed: set[Path] = set()
    for s in sources:
        try:
            builders[s.kind](doc, s, placed, many=sum(t.kind == s.kind for t in sources) > 1)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise InputError(s.given, None, f"unexpected content in the simlab {s.kind} output ({type(exc).__name__}: "
                             f"{exc}); was it written by another simlab version?") from None
    _figures(doc, sources, placed)
    return doc.finish()


# --- the question ---------------------------------------------------------------------------------------------

def _question(doc: Document, sources: list[Source]) -> None:
    doc.add(Heading(2, "The question"))
    items = []
    for s in sources:
        if s.kind == "ab":
            meta = s.files["meta.json"]
            pols = meta.get("policies") or [r["policy"] for r in s.files["policies.csv"]]
            items.append(f"**{KIND_TITLES['ab']}**: what does each policy ({', '.join(f'`{p}`' for p in pols)}) do to "
                         f"interactive latency and batch throughput on **{s.name}**, against `{_baseline(s)}`, and "
                         "which meet the article's three success criteria (P95 not stuck above the "
                         f"{_ms(meta.get('slo_p95_ms'))} SLO, batch keeps moving, concurrency within the cap)?")
        elif s.kind == "tune":
            req = _required(s)
            items.append(f"**{KIND_TITLES['tune']}**: which adaptive-scheduler options give the lowest interactive "
                         f"{_metric(s)} on **{s.name}** while batch throughput stays at or above "
                         f"{fmt_num(req)} jobs/min, and does the choice hold on fresh seeds?")
        elif s.kind == "calibrate":
            cal = s.files["calibration.json"]
            items.append(f"**{KIND_TITLES['calibrate']}**: at what interactive rate does P95 cross the "
                         f"{_ms(cal.get('slo_p95_ms'))} SLO on **{s.name}**, with batch work absent and present, "
                         "and which adaptive thresholds follow?")
        else:
            items.append(f"**{KIND_TITLES['fit']}**: what does the traffic in `{_log_name(s)}` look like (rate, "
                         "burstiness, token lengths), and does the scenario fitted to it reproduce it?")
    doc.add(Bullets(items))
    described = [s for s in sources if s.kind == "ab"]
    if described:
        doc.add(Heading(2, "The scenario" if len(described) == 1 else "The scenarios"))
        for s in described:
            intro = paragraphs(md_sections(s.report).get("", ""))
            meta = s.files["meta.json"]
            text = re.sub(r"\.\.(\s)", r".\1", intro[0]) if intro else (f"{meta.get('description') or s.name}; interactive SLO P95 "
                                           f"{_ms(meta.get('slo_p95_ms'))}.")
            doc.add(Paragraph(("" if len(described) == 1 else f"**{s.name}**: ") + text))


# --- A/B ------------------------------------------------------------------------------------------------------

HEADLINE = [
    ("interactive_p95_ms", "interactive P95 ms"),
    ("interactive_p99_ms", "P99 ms"),
    ("batch_throughput_per_min", "batch jobs/min"),
    ("batch_makespan_ms", "batch makespan ms"),
    ("max_in_flight", "max in flight"),
    ("stranded", "stranded"),
]
FAILURES = [("interactive_failed", "interactive failed"), ("batch_failed", "batch failed")]
COMPARED = [("interactive_p95_ms", "interactive P95 ms"), ("batch_throughput_per_min", "batch jobs/min"),
            ("batch_makespan_ms", "batch makespan ms")]
CRITERIA = [
    ("p95_not_stuck_above_slo", "1. P95 not stuck above the SLO"),
    ("batch_keeps_moving", "2. batch keeps moving"),
    ("concurrency_within_cap", "3. concurrency within the cap"),
]


def _ab(doc: Document, s: Source, placed, many: bool) -> None:
    meta, pol = s.files["meta.json"], s.files["policies.csv"]
    seeds = meta.get("seeds") or []
    suffix = f": {s.name}" + (f" (`{s.label}`)" if many else "")
    doc.add(Heading(2, f"A/B{suffix}"))
    seed_text = (f"the same {len(seeds)} seeds ({seeds[0]}..{seeds[-1]})" if seeds else "common seeds")
    doc.add(Paragraph(f"Every policy on {seed_text}: each sees the same arrivals and service draws. Means over seeds "
                      "with 95% confidence intervals (Student t) in brackets."))
    failed = any(num(r.get(f"{m}_mean")) > 0 for r in pol for m, _ in FAILURES)
    columns = HEADLINE + (FAILURES if failed else [])
    rows = [[Cell(r["policy"])] + [_ci_cell(r.get(f"{m}_mean"), r.get(f"{m}_ci_low"), r.get(f"{m}_ci_high"))
                                   for m, _ in columns] for r in pol]
    doc.add(Table(["policy"] + [label for _, label in columns], rows))
    options = meta.get("options")
    if isinstance(options, dict) and options:
        doc.add(Paragraph("Scheduler options: `" + ", ".join(f"{k}={_val(v)}" for k, v in options.items()) + "`",
                          small=True))

    verdicts = s.files.get("verdicts.csv")
    if verdicts:
        doc.add(Heading(3, "The article's three success criteria"))
        rows = [[Cell(v["policy"])] + [_verdict_cell(v, key) for key, _ in CRITERIA] for v in verdicts]
        doc.add(Table(["policy"] + [label for _, label in CRITERIA], rows, align="lccc"))
        section = md_sections(s.report).get("The article's three success criteria", "")
        explain = [p for p in paragraphs(section) if p.startswith("Criterion")]
        if explain:
            doc.add(Paragraph(explain[0], small=True))

    comp = s.files.get("comparison.csv")
    if comp:
        pairs: dict[tuple[str, str], dict] = {}
        for c in comp:
            if c["metric"] in dict(COMPARED):
                pairs.setdefault((c["candidate"], c["baseline"]), {})[c["metric"]] = c
        if pairs:
            doc.add(Heading(3, "What the scheduler buys: paired differences"))
            doc.add(Paragraph("Candidate minus baseline over the same seeds, 95% CI in brackets, and the ratio "
                              "candidate / baseline. Marked **better** (green) or **worse** (red) when the paired "
                              "difference is significant at 95%; unmarked: not significant."))
            rows = [[Cell(f"{cand} vs {base}")] + [_diff_cell(by.get(m)) for m, _ in COMPARED]
                    for (cand, base), by in pairs.items()]
            doc.add(Table(["comparison"] + [label for _, label in COMPARED], rows))

    bounds = s.files.get("bounds.csv")
    if bounds:
        from simlab.experiments.stats import mean_ci

        nb = [num(r.get("interactive_p95_ms")) for r in bounds if r["policy"] == "bound-no-batch"]
        ba = [r for r in bounds if r["policy"] == "bound-batch-alone"]
        items = []
        if nb:
            items.append(f"**Interactive P95 with batch absent: {_ci_text(*mean_ci(nb))} ms.** No scheduler can do "
                         "better without preempting running work.")
        if ba:
            mk = mean_ci([num(r.get("batch_makespan_ms")) for r in ba])
            thr = mean_ci([num(r.get("batch_throughput_per_min")) for r in ba])
            items.append(f"**Batch alone, the whole capacity: {_ci_text(*thr)} jobs/min**, makespan "
                         f"{_ci_text(*mk)} ms. No interactive traffic: the most batch can get.")
        if items:
            doc.add(Heading(3, "Bounds"), Bullets(items))


def _baseline(s: Source) -> str:
    comp = s.files.get("comparison.csv") or []
    if comp:
        return comp[0]["baseline"]
    pols = s.files["meta.json"].get("policies") or [r["policy"] for r in s.files["policies.csv"]]
    return pols[0] if pols else "unscheduled"


def _diff_cell(c: dict | None) -> Cell:
    if c is None:
        return Cell("–")
    diff, lo, hi, ratio = num(c["diff"]), num(c["diff_ci_low"]), num(c["diff_ci_high"]), num(c["ratio"])
    text = ("+" if diff > 0 else "") + fmt_num(diff)
    parts = []
    if math.isfinite(lo) and math.isfinite(hi) and lo != hi:
        parts.append(f"[{fmt_num(lo)}, {fmt_num(hi)}]")
    if math.isfinite(ratio):
        parts.append(f"×{ratio:#.3g}")
    status = None
    if truth(c["significant"]) and math.isfinite(diff) and diff != 0:
        lower_better = c.get("better", "lower") == "lower"
        status = GOOD if (diff < 0) == lower_better else BAD
    return Cell(text, " ".join(parts), status)


def _verdict_cell(v: dict, key: str) -> Cell:
    ok = truth(v[key])
    if key == "p95_not_stuck_above_slo":
        detail = f"longest stretch over the SLO {_seconds(v.get('longest_p95_over_slo_ms'))}"
    elif key == "batch_keeps_moving":
        detail = f"longest stall {_seconds(v.get('longest_batch_stall_ms'))}, stranded {fmt_num(num(v.get('stranded')))}"
    else:
        detail = f"max {fmt_num(num(v.get('max_in_flight')))} in flight, cap {fmt_num(num(v.get('max_concurrency')))}"
    return Cell("pass" if ok else "FAIL", detail, PASS if ok else FAIL)


# --- tuning ---------------------------------------------------------------------------------------------------

def _tune(doc: Document, s: Source, placed, many: bool) -> None:
    summary = s.files["validation-summary.csv"]
    metric = _metric(s)
    sections = md_sections(s.report)
    doc.add(Heading(2, f"Tuned options: {s.name}" + (f" (`{s.label}`)" if many else "")))
    for p in paragraphs(sections.get("", "")):
        p = re.sub(r"\s*Storage: `[^`]*`, study `[^`]*`\.", "", p).strip()  # a local path or a database URL
        if p:
            doc.add(Paragraph(p, small=p.startswith("Search space")))
    held = next((k for k in sections if k.startswith("Held-out validation")), None)
    doc.add(Heading(3, held or "Held-out validation"))
    req = _required(s)
    rows = []
    for r in summary:
        config = r["config"]
        bound = config.startswith("bound")
        meets = Cell("–") if bound else (Cell("yes", status=PASS) if truth(r["meets_constraint"])
                                         else Cell("NO", status=FAIL))
        vs = (Cell("–") if config == "defaults" or "vs_defaults_diff_ms" not in r
              else _ci_cell(r["vs_defaults_diff_ms"], r.get("vs_defaults_ci_low"), r.get("vs_defaults_ci_high"), sign=True))
        rows.append([
            Cell(config),
            Cell(fmt_num(num(r.get("search_objective_ms")))),
            _ci_cell(r["holdout_objective_ms"], r["holdout_objective_ci_low"], r["holdout_objective_ci_high"]),
            _ci_cell(r["holdout_throughput_per_min"], r["holdout_throughput_ci_low"], r["holdout_throughput_ci_high"]),
            meets,
            vs,
        ])
    doc.add(Table(["config", f"search {metric} ms", f"held-out {metric} ms", "held-out batch jobs/min",
                   f"meets ≥ {fmt_num(req)}/min", "vs defaults, paired ms"], rows, align="lrrrcr"))
    doc.add(Paragraph("Search: the mean over the search seeds. Held-out: fresh seeds the search never saw, 95% CI in "
                      "brackets. `defaults`: the production options; `reference`: the arm the throughput constraint "
                      "is measured against; `bound-no-batch`: batch absent, the floor for any scheduler.", small=True))
    verdict = paragraphs(sections.get("Verdict", ""))
    if verdict:
        doc.add(Heading(3, "Verdict"))
        first = verdict[0]
        status = FAIL if first.startswith(("**Not validated", "No configuration")) else (
            PASS if first.startswith("**The tuned options beat") else None)
        doc.add(Callout(first, status))
        for p in verdict[1:]:
            doc.add(Paragraph(p))
    best = s.files.get("best-options.json")
    if best is not None:
        doc.add(Heading(3, "Best options"),
                Paragraph("`best-options.json`, for the production scheduler and for `simlab run/ab/replay --options`:"),
                Code(json.dumps(best, indent=2), "json"))


def _metric(s: Source) -> str:
    m = re.search(r"held-out (P\d+) ms", s.report)
    return m.group(1) if m else "P95"


def _required(s: Source) -> float:
    rows = s.files["validation-summary.csv"]
    return num(rows[0].get("required_throughput_per_min")) if rows else math.nan


# --- calibration ----------------------------------------------------------------------------------------------

def _calibrate(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.calibration.knee import CURVE_LABELS

    cal = s.files["calibration.json"]
    sections = md_sections(s.report)
    doc.add(Heading(2, f"Calibration: the knee, {s.name}" + (f" (`{s.label}`)" if many else "")))
    intro = paragraphs(sections.get("", ""))
    if intro:
        doc.add(Paragraph(intro[0]))
    rec = cal.get("recommended") or {}
    if rec:
        doc.add(Heading(3, "Recommended thresholds"))
        why_rps = rec.get("threshold_from", "")
        rows = [
            [Cell("interactiveRpsThreshold"), Cell(_g(rec.get("interactiveRpsThreshold"))),
             Cell((why_rps[:1].upper() + why_rps[1:] + ", rounded down to two significant digits") if why_rps else "")],
            [Cell("interactiveP95LatencyMs"), Cell(_g(rec.get("interactiveP95LatencyMs"))), Cell("The SLO")],
        ]
        doc.add(Table(["option", "recommended", "why"], rows, align="lrl"))
    knees = cal.get("knees") or {}
    if knees:
        doc.add(Heading(3, "Knees: where interactive P95 crosses the SLO"))
        rows = [[Cell(CURVE_LABELS.get(c, c)), _knee_cell(k)] for c, k in knees.items()]
        doc.add(Table(["curve", "interactive rate at the knee"], rows, narrow=True))
    for p in paragraphs(sections.get("Recommendation", "")):
        if p.startswith("Verification"):
            doc.add(Paragraph(p, small=True))
    knee_figs = [f for f in s.figures if f.stem == "knee"]
    for f in knee_figs:
        doc.add(Figure(f, _caption(f), source=s.label))
        placed.add(f)
    options = s.files.get("recommended-options.json") or cal.get("options")
    if options:
        doc.add(Paragraph("`recommended-options.json` (use it with `--options`):"), Code(json.dumps(options, indent=2), "json"))
    if cal.get("notes"):
        doc.add(Heading(3, "Notes"), Bullets([str(n) for n in cal["notes"]]))


def _knee_cell(k: dict) -> Cell:
    rps, lo, hi, status = num(k.get("rps")), num(k.get("ci_low")), num(k.get("ci_high")), k.get("status", "found")
    if status == "above":
        return Cell(f"above {lo:.3g} req/s", "P95 stays under the SLO at every rate tried")
    if status == "below":
        return Cell(f"below {hi:.3g} req/s", "P95 is over the SLO at the lowest rate tried")
    ci = f"95% CI {lo:.3g} to {hi:.3g}" if math.isfinite(lo) and math.isfinite(hi) else ""
    return Cell(f"{rps:.3g} req/s", ci)


# --- workload fit ---------------------------------------------------------------------------------------------

def _fit(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.calibration.fit import p_is

    fj = s.files["fit.json"]
    doc.add(Heading(2, f"Workload fit: {_log_name(s)}" + (f" (`{s.label}`)" if many else "")))
    intro = paragraphs(md_sections(s.report).get("", ""))
    if intro:
        doc.add(Paragraph(intro[0]))
    described = _fitted_scenario(s)
    if described:
        doc.add(Paragraph(f"Fitted scenario (`scenario.toml`): {described}", small=True))
    classes = fj.get("classes") or {}
    arrivals = {kind: _arrival_cells(c.get("arrivals") or {}) for kind, c in classes.items()}
    arrivals = {k: v for k, v in arrivals.items() if v}
    if arrivals:
        labels = list(dict.fromkeys(label for cells in arrivals.values() for label in cells))
        rows = [[Cell(label)] + [arrivals[k].get(label, Cell("–")) for k in arrivals] for label in labels]
        doc.add(Heading(3, "Arrivals"), Table([""] + list(arrivals), rows, narrow=True))
    rows = []
    for kind, c in classes.items():
        for k, v in c.items():
            if k == "arrivals" or not isinstance(v, dict) or "quantiles" not in v:
                continue
            q, ln = v.get("quantiles") or {}, v.get("lognormal") or {}
            ks = ln.get("ks") or {}
            rows.append(([Cell(kind)] if len(classes) > 1 else []) + [
                Cell(LENGTH_LABELS.get(k, k)),
                Cell(_sig(num(q.get("p50")))), Cell(_sig(num(q.get("p95")))), Cell(_sig(num(q.get("p99")))),
                Cell(f"median {_sig(num(ln.get('median')))}, σ {num(ln.get('sigma')):.2f}",
                     f"KS D {num(ks.get('statistic')):.3f}, {p_is(num(ks.get('p_value')))}") if ln else Cell("–"),
                Cell(str(v.get("choice", "–"))),
            ])
    if rows:
        many = len(classes) > 1
        doc.add(Heading(3, "Token lengths and latencies"),
                Table((["class"] if many else []) + ["quantity", "median", "p95", "p99", "lognormal fit", "scenario uses"],
                      rows, align=("ll" if many else "l") + "rrrrl"))
    val = fj.get("validation")
    if isinstance(val, dict) and val.get("passed"):
        seeds = val.get("seeds") or []
        doc.add(Heading(3, "Validation: the fitted scenario against the log"))
        doc.add(Badges([Cell(f"{VALIDATION_LABELS.get(k, k)}: " + ("reproduced" if ok else "NOT reproduced"),
                             status=PASS if ok else FAIL) for k, ok in val["passed"].items()]))
        checks = s.files.get("validation.csv") or val.get("checks") or []
        if checks:
            classes = {str(r.get("kind")) for r in checks}
            rows = []
            for r in checks:
                ok = truth(r.get("ok"))
                row = [Cell(str(r.get("quantity", ""))),
                       _range_cell(r.get("observed"), r.get("observed_lo"), r.get("observed_hi")),
                       _range_cell(r.get("simulated"), r.get("simulated_lo"), r.get("simulated_hi")),
                       Cell("yes" if ok else "NO", status=PASS if ok else FAIL)]
                rows.append(([Cell(str(r.get("kind", "")))] if len(classes) > 1 else []) + row)
            header = (["class"] if len(classes) > 1 else []) + ["quantity", "log", "simulated", "within error"]
            doc.add(Table(header, rows, align="llrrc" if len(classes) > 1 else "lrrc", compact=True))
        doc.add(Paragraph(f"{len(seeds)} simulated seeds; intervals are 95%.", small=True))
    elif val is None:
        doc.add(Paragraph("No validation (run without `--no-validate` to simulate the fitted scenario against the log).",
                          small=True))


def _arrival_cells(a: dict) -> dict[str, Cell]:
    """One class's arrival fit: row label -> cell."""
    from simlab.calibration.fit import format_duration, format_span, p_is

    if not a:
        return {}
    out = {
        "requests": Cell(f"{int(num(a.get('requests'))):,}", f"over {format_span(num(a.get('span_s')) * 1000)}"),
        "mean rate": Cell(f"{num(a.get('rate_per_s')):.3g} req/s"),
        "inter-arrival CV": Cell(f"{num(a.get('interarrival_cv')):.3f}", "Poisson: 1"),
    }
    rv = a.get("rate_varies")
    if rv:
        out["rate varies across bins?"] = Cell("yes" if rv.get("rejected") else "no",
                                               f"chi-square {p_is(num(rv.get('p_value')))}")
    pc = a.get("poisson_constant_rate")
    if pc:
        out["Poisson, constant rate"] = Cell("rejected" if pc.get("rejected") else "not rejected",
                                             f"KS {p_is(num(pc.get('p_value')))}")
    pb = a.get("poisson_per_bin_rate")
    if pb:
        tests = [f"{label} {p_is(num(pb[k].get('p_value')))}" for k, label in
                 (("time_rescaled_ks", "rescaled KS"), ("dispersion", "dispersion")) if pb.get(k)]
        out[f"Poisson, rate per {format_duration(num(a.get('bin_s')) * 1000)}"] = Cell(
            "rejected" if pb.get("rejected") else "not rejected", ", ".join(tests))
    process, step = a.get("process", ""), num(a.get("step_s"))
    detail = (f"rate per {format_duration(step * 1000)}, predicted CV {num(a.get('predicted_cv')):.3f}"
              if process == "piecewise" and math.isfinite(step) else "")
    out["scenario arrivals"] = Cell(process, detail)
    return out


def _fitted_scenario(s: Source) -> str:
    """The fitted scenario in words (as the A/B report describes scenarios), when it loads."""
    path = s.path / "scenario.toml"
    if not path.is_file():
        return ""
    try:
        from simlab.experiments.ab_report import _describe
        from simlab.scenario import load_scenario

        text = _describe(load_scenario(path))
    except Exception:  # noqa: BLE001 - a scenario that no longer loads only loses this sentence
        return ""
    return text


def _log_name(s: Source) -> str:
    log = s.files["fit.json"].get("log")
    return Path(str(log)).name if log else s.path.name


# --- figures --------------------------------------------------------------------------------------------------

def _figures(doc: Document, sources: list[Source], placed: set[Path]) -> None:
    rest = [(s, [f for f in s.figures if f not in placed]) for s in sources]
    rest = [(s, figs) for s, figs in rest if figs]
    if not rest:
        return
    doc.add(Heading(2, "Figures"))
    for s, figs in rest:
        doc.add(Heading(3, f"{KIND_TITLES[s.kind]}: {s.name if s.kind != 'fit' else _log_name(s)}"))
        for f in figs:
            doc.add(Figure(f, _caption(f), source=s.label))


def _caption(f: Path) -> str:
    stem = f.stem
    if stem in CAPTIONS:
        return CAPTIONS[stem]
    for key in ("arrivals", "lengths"):
        if stem.startswith(key + "-"):
            kind = stem[len(key) + 1:]
            return CAPTIONS[key].format(kind=kind[:1].upper() + kind[1:])
    return stem.replace("_", " ").replace("-", " ")


# --- small formatting -----------------------------------------------------------------------------------------

def _name(s: Source) -> str:
    if s.kind == "ab":
        return str(s.files["meta.json"].get("scenario") or s.path.name)
    if s.kind == "calibrate":
        return str(s.files["calibration.json"].get("scenario") or s.path.name)
    if s.kind == "tune":
        m = re.search(r"^# Tuning: (.+)$", s.report, re.M)
        return m.group(1).strip() if m else s.path.name
    return f"fit of {_log_name(s)}"


def _rel(path: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:  # another drive
        return path.as_posix()


def _ci_cell(mean, lo, hi, sign: bool = False) -> Cell:
    mean, lo, hi = num(mean), num(lo), num(hi)
    text = ("+" if sign and mean > 0 else "") + fmt_num(mean)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        return Cell(text)
    return Cell(text, f"[{fmt_num(lo)}, {fmt_num(hi)}]")


def _ci_text(mean, lo, hi) -> str:
    c = _ci_cell(mean, lo, hi)
    return f"{c.text} {c.sub}".strip()


def _range_cell(value, lo, hi) -> Cell:
    value, lo, hi = num(value), num(lo), num(hi)
    sub = f"{_sig(lo)} – {_sig(hi)}" if math.isfinite(lo) and math.isfinite(hi) else ""
    return Cell(_sig(value), sub)


def _sig(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def _seconds(ms) -> str:
    x = num(ms)
    if not math.isfinite(x):
        return "–"
    return f"{fmt_num(x / 1000)} s"


def _ms(x) -> str:
    v = num(x)
    return f"{fmt_num(v)} ms" if math.isfinite(v) else "–"


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _g(x) -> str:
    """A recommended value as written: 7.4, 4,000."""
    v = num(x)
    if not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if v >= 1000 and v == int(v) else f"{v:,.4g}"
