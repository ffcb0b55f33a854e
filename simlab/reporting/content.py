"""What the review page says, from the commands' records (never their Markdown), in order: the question and the scenario; the A/B (policies with 95% CIs, paired
differences, the article's three verdicts, the bounds); the tuned options and their held-out check; the
calibration knee; the workload fit; then every figure with a caption."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from simlab.experiments.tables import fmt_num
from simlab.reporting.collect import Source
from simlab.reporting.document import (FAIL, PASS, Badges, Bullets, Cell, Code, Contents, Document, Figure, Heading,
                                       Paragraph, Table)

KIND_TITLES = {"decide": "Decision", "ab": "A/B", "tune": "Tuning", "calibrate": "Calibration", "fit": "Workload fit"}

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
    builders = {"decide": _decide, "ab": _ab, "tune": _tune, "calibrate": _calibrate, "fit": _fit}
    _question(doc, sources)
    placed: set[Path] = set()
    for s in sources:
        builders[s.kind](doc, s, placed, many=sum(t.kind == s.kind for t in sources) > 1)
    _figures(doc, sources, placed)
    return doc.finish()


# --- the question ---------------------------------------------------------------------------------------------

def _question(doc: Document, sources: list[Source]) -> None:
    doc.add(Heading(2, "The question"))
    items = []
    for s in sources:
        r = s.record
        if s.kind == "decide":
            items.append(f"**{KIND_TITLES['decide']}**: on **{s.name}**, deploy the adaptive scheduler or a static cap, "
                         "and with which options? Every static cap and adaptive arm on held-out traffic, confirmed on "
                         "fresh seeds.")
        elif s.kind == "ab":
            items.append(f"**{KIND_TITLES['ab']}**: what does each policy ({', '.join(f'`{p}`' for p in r.policies)}) "
                         f"do to interactive latency and batch throughput on **{s.name}**, against `{r.baseline}`, and "
                         "which meet the article's three success criteria (P95 not stuck above the "
                         f"{_ms(r.slo_p95_ms)} SLO, batch keeps moving, concurrency within the cap)?")
        elif s.kind == "tune":
            items.append(f"**{KIND_TITLES['tune']}**: which adaptive-scheduler options give the lowest interactive "
                         f"{r.metric} on **{s.name}** while batch throughput stays at or above "
                         f"{fmt_num(r.required_throughput_per_min)} jobs/min, and does the choice hold on fresh seeds?")
        elif s.kind == "calibrate":
            items.append(f"**{KIND_TITLES['calibrate']}**: at what interactive rate does P95 cross the "
                         f"{_ms(r.slo_p95_ms)} SLO on **{s.name}**, with batch work absent and present, "
                         "and which adaptive thresholds follow?")
        else:
            items.append(f"**{KIND_TITLES['fit']}**: what does the traffic in `{_log_name(s)}` look like (rate, "
                         "burstiness, token lengths), and does the scenario fitted to it reproduce it?")
    doc.add(Bullets(items))
    described = [s for s in sources if s.kind == "ab"]
    if described:
        doc.add(Heading(2, "The scenario" if len(described) == 1 else "The scenarios"))
        for s in described:
            doc.add(Paragraph(("" if len(described) == 1 else f"**{s.name}**: ") + s.record.scenario_text))


# --- decision -------------------------------------------------------------------------------------------------

def _decide(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.decide import decide_blocks

    doc.add(Heading(2, f"Decision: {s.name}" + (f" (`{s.label}`)" if many else "")), *decide_blocks(s.record, 3))


# --- A/B ------------------------------------------------------------------------------------------------------

def _ab(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.experiments.ab_report import ab_blocks, frontier_record, verdict_blocks
    from simlab.reporting.blocks.decide import frontier_blocks

    doc.add(Heading(2, f"A/B: {s.name}" + (f" (`{s.label}`)" if many else "")), *verdict_blocks(s.record, 3),
            *ab_blocks(s.record, 3))
    decision = frontier_record(s.path) if s.record.verdict else None
    if decision is not None:
        doc.add(*frontier_blocks(decision, 3))


# --- tuning ---------------------------------------------------------------------------------------------------

def _tune(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.tune import tune_blocks

    doc.add(Heading(2, f"Tuned options: {s.name}" + (f" (`{s.label}`)" if many else "")), *tune_blocks(s.record, 3))


# --- calibration ----------------------------------------------------------------------------------------------

def _calibrate(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.calibration.knee import CURVE_LABELS

    r = s.record
    doc.add(Heading(2, f"Calibration: the knee, {s.name}" + (f" (`{s.label}`)" if many else "")))
    doc.add(Paragraph(r.summary))
    rec = r.recommended
    if rec:
        doc.add(Heading(3, "Recommended thresholds"))
        why_rps = rec.get("threshold_from", "")
        rows = [
            [Cell("interactiveRpsThreshold"), Cell(_g(rec.get("interactiveRpsThreshold"))),
             Cell((why_rps[:1].upper() + why_rps[1:] + ", rounded down to two significant digits") if why_rps else "")],
            [Cell("interactiveP95LatencyMs"), Cell(_g(rec.get("interactiveP95LatencyMs"))), Cell("The SLO")],
        ]
        doc.add(Table(["option", "recommended", "why"], rows, align="lrl"))
    if r.knees:
        doc.add(Heading(3, "Knees: where interactive P95 crosses the SLO"))
        rows = [[Cell(CURVE_LABELS.get(c, c)), _knee_cell(k)] for c, k in r.knees.items()]
        doc.add(Table(["curve", "interactive rate at the knee"], rows, narrow=True))
    if r.verification:
        doc.add(Paragraph(r.verification, small=True))
    for f in s.figures:
        if f.stem == "knee":
            doc.add(Figure(f, caption(f), source=s.label))
            placed.add(f)
    if r.options:
        doc.add(Paragraph("The options verified above. Not exported: the thresholds set `simlab tune`'s search ranges "
                          "(`tune-bounds.json`, read with `simlab tune SCENARIO --calibration DIR`)."),
                Code(json.dumps(r.options, indent=2), "json"))
    if r.notes:
        doc.add(Heading(3, "Notes"), Bullets(list(r.notes)))


def _knee_cell(k) -> Cell:
    if k.status == "above":
        return Cell(f"above {k.ci_low:.3g} req/s", "P95 stays under the SLO at every rate tried")
    if k.status == "below":
        return Cell(f"below {k.ci_high:.3g} req/s", "P95 is over the SLO at the lowest rate tried")
    ci = f"95% CI {k.ci_low:.3g} to {k.ci_high:.3g}" if math.isfinite(k.ci_low) and math.isfinite(k.ci_high) else ""
    return Cell(f"{k.rps:.3g} req/s", ci)


# --- workload fit ---------------------------------------------------------------------------------------------

def _fit(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.calibration.fit import p_is

    r = s.record
    fj = r.fit
    doc.add(Heading(2, f"Workload fit: {_log_name(s)}" + (f" (`{s.label}`)" if many else "")))
    doc.add(Paragraph(r.summary))
    if r.scenario_text:
        doc.add(Paragraph(f"Fitted scenario (`{r.scenario_file}`): {r.scenario_text}", small=True))
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
        checks = val.get("checks") or []
        if checks:
            classes = {str(r.get("kind")) for r in checks}
            rows = []
            for r in checks:
                ok = bool(r.get("ok"))
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


def _log_name(s: Source) -> str:
    return Path(s.record.log).name


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
            doc.add(Figure(f, caption(f), source=s.label))


def caption(f: Path) -> str:
    from simlab.reporting.figures.decision import CAPTIONS as DECISION
    from simlab.reporting.figures.tune import CAPTIONS as TUNE

    stem = f.stem
    for captions in (CAPTIONS, TUNE, DECISION):  # figure names are unique across commands
        if stem in captions:
            return captions[stem]
    for key in ("arrivals", "lengths"):
        if stem.startswith(key + "-"):
            kind = stem[len(key) + 1:]
            return CAPTIONS[key].format(kind=kind[:1].upper() + kind[1:])
    return stem.replace("_", " ").replace("-", " ")


# --- small formatting -----------------------------------------------------------------------------------------

def _name(s: Source) -> str:
    return f"fit of {_log_name(s)}" if s.kind == "fit" else s.record.scenario


def _rel(path: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:  # another drive
        return path.as_posix()


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


def _ms(x) -> str:
    v = num(x)
    return f"{fmt_num(v)} ms" if math.isfinite(v) else "–"


def _g(x) -> str:
    """A recommended value as written: 7.4, 4,000."""
    v = num(x)
    if not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if v >= 1000 and v == int(v) else f"{v:,.4g}"


def num(value) -> float:
    """A JSON number as a float; NaN for null (fit.json writes a NaN as null) or a missing value."""
    if value is None or isinstance(value, str):
        return math.nan
    return float(value)
