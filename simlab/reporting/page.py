"""What the review page says, from the commands' records (never their Markdown), in order: the question and the
scenario; the A/B (policies with 95% CIs, paired differences, the article's three verdicts, the bounds); the tuned
options and their held-out check; the calibration knee; the workload fit; the step-time fit; then every other figure
with a caption. Each section is the blocks module of its command (simlab/reporting/blocks/)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from simlab.experiments.tables import fmt_num
from simlab.reporting.collect import Source
from simlab.reporting.figures import caption
from simlab.reporting.document import Bullets, Contents, Document, Figure, Heading, Paragraph
from simlab.reporting.words import describe

KIND_TITLES = {"decide": "Decision", "ab": "A/B", "tune": "Tuning", "calibrate": "Calibration", "fit": "Workload fit",
               "calibrate-gpu": "Step-time fit"}


def build_document(sources: list[Source], base: Path, title: str | None) -> Document:
    """The document for `sources`; `base` is the folder the report is written to (paths are shown relative to it)."""
    for s in sources:
        s.label = _rel(s.path, base) + "/"
        s.name = _name(s)
    names = list(dict.fromkeys(s.name for s in sources))
    doc = Document(title or "Design review: " + " · ".join(names))
    doc.subtitle = "From " + ", ".join(f"`{s.label}` (simlab {s.kind})" for s in sources) + "."
    doc.add(Contents())
    builders = {"decide": _decide, "ab": _ab, "tune": _tune, "calibrate": _calibrate, "fit": _fit, "calibrate-gpu": _gpu}
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
        elif s.kind == "fit":
            items.append(f"**{KIND_TITLES['fit']}**: what does the traffic in `{_log_name(s)}` look like (rate, "
                         "burstiness, token lengths), and does the scenario fitted to it reproduce it?")
        else:
            items.append(f"**{KIND_TITLES['calibrate-gpu']}**: how long does an iteration of the server measured in "
                         f"`{s.name}` take, by sequences, tokens and requests joining, and how well does the "
                         "continuous-batching model fit it?")
    doc.add(Bullets(items))
    described = [s for s in sources if s.kind == "ab"]
    if described:
        doc.add(Heading(2, "The scenario" if len(described) == 1 else "The scenarios"))
        for s in described:
            doc.add(Paragraph(("" if len(described) == 1 else f"**{s.name}**: ") + describe(s.record.facts)))


# --- A/B ------------------------------------------------------------------------------------------------------

def _decide(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.decide import decide_blocks

    doc.add(Heading(2, f"Decision: {s.name}" + (f" (`{s.label}`)" if many else "")), *decide_blocks(s.record, 3))


# --- A/B ------------------------------------------------------------------------------------------------------

def _ab(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.ab import ab_blocks, frontier_record, verdict_blocks
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
    from simlab.reporting.blocks.calibrate import calibrate_blocks

    doc.add(Heading(2, f"Calibration: the knee, {s.name}" + (f" (`{s.label}`)" if many else "")),
            *calibrate_blocks(s.record, 3, _place(s, "knee", placed)))


# --- workload fit ---------------------------------------------------------------------------------------------

def _fit(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.fit import fit_blocks, intro_blocks, scenario_text

    r = s.record
    doc.add(Heading(2, f"Workload fit: {_log_name(s)}" + (f" (`{s.label}`)" if many else "")), *intro_blocks(r))
    text = scenario_text(r)
    if text:
        doc.add(Paragraph(f"Fitted scenario (`{r.scenario_file}`): {text}", small=True))
    doc.add(*fit_blocks(r, 3))


# --- step-time fit --------------------------------------------------------------------------------------------

def _gpu(doc: Document, s: Source, placed, many: bool) -> None:
    from simlab.reporting.blocks.gpu import gpu_blocks

    doc.add(Heading(2, f"Step-time fit: {s.name}" + (f" (`{s.label}`)" if many else "")),
            *gpu_blocks(s.record, 3, _place(s, "gpu-fit", placed)))


def _place(s: Source, stem: str, placed: set[Path]) -> Figure | None:
    """The source's figure `stem`, placed in its section (not again under Figures)."""
    for f in s.figures:
        if f.stem == stem:
            placed.add(f)
            return Figure(f, caption(f), source=s.label)
    return None


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


# --- small formatting -----------------------------------------------------------------------------------------

def _name(s: Source) -> str:
    if s.kind == "fit":
        return f"fit of {_log_name(s)}"
    return s.record.label if s.kind == "calibrate-gpu" else s.record.scenario


def _rel(path: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:  # another drive
        return path.as_posix()


def _ms(x) -> str:
    v = num(x)
    return f"{fmt_num(v)} ms" if math.isfinite(v) else "–"


def num(value) -> float:
    """A JSON number as a float; NaN for null (fit.json writes a NaN as null) or a missing value."""
    if value is None or isinstance(value, str):
        return math.nan
    return float(value)
