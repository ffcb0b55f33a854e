"""What a fit record says, as document blocks: the tables and sentences that `simlab fit` prints, its report.md and
the `simlab report` page's "Workload fit" section all render. Every cell is made here from the record, once."""

from __future__ import annotations

import math
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.calibration.fit import format_duration, format_span
from simlab.records import ArrivalSummary, FitRecord, FitValidation, LengthSummary
from simlab.reporting import words
from simlab.reporting.document import (FAIL, PASS, Badges, Bullets, Cell, Document, Figure, Heading, Paragraph,
                                       Table)

ARRIVALS_HEADING = "Arrivals"
LENGTHS_HEADING = "Token lengths and latencies"
VALIDATION_HEADING = "Validation: the fitted scenario against the log"
LENGTH_HEADER = ["quantity", "median", "p90", "p95", "p99", "mean", "lognormal median", "σ", "KS D / p", "drift p",
                 "scenario uses"]
CHECK_HEADER = ["quantity", "log", "simulated", "within error"]


# --- cells ------------------------------------------------------------------------------------------------------

def num(x: float | None) -> str:
    """A measured value: 4 significant digits, to the unit from 1,000 up; '–' when there is none."""
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def rate(x: float) -> str:
    return f"{x:.3f} req/s" if x < 100 else f"{x:,.1f} req/s"


def range_cell(value: float, lo: float, hi: float, status: str | None = None) -> Cell:
    sub = f"[{num(lo)}, {num(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return Cell(num(value), sub, status)


def arrival_cells(a: ArrivalSummary) -> dict[str, Cell]:
    """One class's arrival fit: row label -> cell."""
    out = {
        "requests": Cell(f"{a.requests:,}", f"(over {format_span(a.span_ms)})"),
        "mean rate": Cell(rate(a.rate_per_s)),
        "inter-arrival CV": Cell(f"{a.cv:.3f}" if math.isfinite(a.cv) else "–", "(Poisson: 1)"),
        "rate bins": Cell(f"{a.bins} of {format_duration(a.bin_ms)}",
                          f"({a.bin_rate_min_per_s:.3g} to {a.bin_rate_max_per_s:.3g} req/s)"),
        "rate varies across bins?": Cell("yes" if a.rate_varies.rejected else "no",
                                         f"(chi-square {words.p_is(a.rate_varies.p_value)})"),
        "Poisson, constant rate": Cell(words.rejected(a.poisson_constant),
                                       f"(KS D = {a.poisson_constant.statistic:.3f}, "
                                       f"{words.p_is(a.poisson_constant.p_value)})"),
    }
    if a.poisson_rescaled is not None:
        out[f"Poisson, rate per {format_duration(a.bin_ms)}"] = Cell(
            "rejected" if a.poisson_per_bin_rejected else "not rejected", f"({words.per_bin_tests(a)})")
    detail = {"piecewise": f"(rate per {format_duration(a.step_ms)}, predicted CV {a.predicted_cv:.3f})",
              "resampled": f"(blocks of {format_duration(a.step_ms)})"}.get(a.process, "")
    out["scenario arrivals"] = Cell(f"`{a.process}`", detail)
    return out


def length_row(ln: LengthSummary) -> list[Cell]:
    drift = words.fmt_p(ln.drift.p_value) if ln.drift is not None else "–"
    return [Cell(words.LENGTH_LABELS.get(ln.column, ln.column)), Cell(num(ln.p50)), Cell(num(ln.p90)),
            Cell(num(ln.p95)), Cell(num(ln.p99)), Cell(num(ln.mean)), Cell(num(ln.lognormal_median)),
            Cell(f"{ln.lognormal_sigma:.3f}"), Cell(f"{ln.ks.statistic:.3f} / {words.fmt_p(ln.ks.p_value)}"),
            Cell(drift), Cell(f"**{ln.choice}**", "(--dist)" if ln.reason == "dist-flag" else "")]


# --- tables -----------------------------------------------------------------------------------------------------

def arrivals_table(r: FitRecord, kinds: list[str] | None = None) -> Table:
    """One column per class (`kinds`: those classes only)."""
    cells = {c.kind: arrival_cells(c.arrivals) for c in r.classes if kinds is None or c.kind in kinds}
    labels = list(dict.fromkeys(label for by in cells.values() for label in by))
    rows = [[Cell(label)] + [cells[k].get(label, Cell("–")) for k in cells] for label in labels]
    return Table([""] + list(cells), rows, align="l" * (len(cells) + 1), narrow=True)


def lengths_table(r: FitRecord) -> Table:
    many = len(r.classes) > 1
    rows = [([Cell(c.kind)] if many else []) + length_row(ln) for c in r.classes for ln in c.lengths]
    return Table((["class"] if many else []) + LENGTH_HEADER, rows,
                 align=("l" if many else "") + "l" + "r" * 7 + "rrl")


def checks_table(r: FitRecord, how: bool = False) -> Table:
    v = r.validation
    many = len({c.kind for c in v.checks}) > 1
    rows = []
    for c in v.checks:
        row = [Cell(words.check_quantity(c, r.bin_ms)), range_cell(c.observed, c.observed_lo, c.observed_hi),
               range_cell(c.simulated, c.simulated_lo, c.simulated_hi),
               Cell("yes" if c.ok else "NO", status=PASS if c.ok else FAIL)]
        rows.append(([Cell(c.kind)] if many else []) + row + ([Cell(words.check_how(c))] if how else []))
    header = (["class"] if many else []) + CHECK_HEADER + (["how"] if how else [])
    return Table(header, rows, align=("l" if many else "") + "lrrc" + ("l" if how else ""), compact=True)


def bins_table(v: FitValidation) -> Table:
    rows = []
    for b in v.bins:
        width_s = (b.end_ms - b.start_ms) / 1000
        ok = b.p_value >= 0.05
        rows.append([Cell(b.kind), Cell(f"{b.start_ms / 1000:g}-{b.end_ms / 1000:g}"), Cell(f"{b.log_count:,}"),
                     Cell(f"{b.log_count / width_s:.4g}"), Cell(f"{b.simulated_mean_count:.1f}"),
                     Cell(f"{b.simulated_mean_count / width_s:.4g}"), Cell(words.fmt_p(b.p_value)),
                     Cell("yes" if ok else "NO", status=PASS if ok else FAIL)])
    return Table(["class", "bin (s)", "log count", "log req/s", "simulated count (mean)", "simulated req/s", "p",
                  "within error"], rows, align="lrrrrrrc", compact=True)


def badges(v: FitValidation) -> Badges:
    return Badges([Cell(f"{words.VALIDATION_LABELS[k]}: {words.reproduced(ok)}", status=PASS if ok else FAIL)
                   for k, ok in v.passed.items()])


# --- sections ---------------------------------------------------------------------------------------------------

def arrival_blocks(r: FitRecord, level: int, steps: bool = False) -> list:
    """The arrivals table, and per class why the scenario uses its process (and, in report.md, the steps that
    were considered for a piecewise rate)."""
    blocks = [Heading(level, ARRIVALS_HEADING), arrivals_table(r)]
    for c in r.classes:
        a = c.arrivals
        blocks.append(Paragraph(f"**{c.kind}**: the scenario's arrivals are `{a.process}`: "
                                f"{words.process_reason(c.kind, a)}.", small=not steps))
        if steps and a.steps:
            blocks.append(Table(["step", "predicted CV", "log's CV"],
                                [[Cell(format_duration(s.step_ms)), Cell(f"{s.predicted_cv:.3f}"), Cell(f"{a.cv:.3f}")]
                                 for s in a.steps], narrow=True))
    if steps and any(c.arrivals.steps for c in r.classes):
        blocks.append(Paragraph("Steps considered for the scenario's rate: the CV a piecewise Poisson process with "
                                "the log's rate per step would show; finer steps copy more of the log's short-term "
                                "bursts, and more of its counting noise.", small=True))
    return blocks


def validation_blocks(r: FitRecord, level: int, detail: bool = False) -> list:
    v = r.validation
    if v is None:
        return [Paragraph("No validation (run without `--no-validate` to simulate the fitted scenario against the "
                          "log).", small=True)]
    blocks = [Heading(level, VALIDATION_HEADING), Paragraph(words.validation_how(v)), badges(v),
              checks_table(r, how=detail)]
    if detail and len(v.bins) <= 60:
        blocks += [Paragraph("Arrivals per bin:"), bins_table(v)]
    blocks.append(Paragraph((words.VALIDATION_METHOD + " " if detail else "")
                            + f"{len(v.seeds)} simulated seeds; intervals are 95%.", small=True))
    return blocks


def fit_blocks(r: FitRecord, level: int = 2, detail: bool = False) -> list:
    """The fit's tables and sentences; `level` is the heading level of its sections; `detail` adds what only
    report.md shows (steps considered, how each check was judged, arrivals per bin, the methods)."""
    blocks = [*arrival_blocks(r, level, steps=detail), Heading(level, LENGTHS_HEADING), lengths_table(r)]
    if detail:
        blocks.append(Paragraph(words.LENGTHS_METHOD, small=True))
    return blocks + validation_blocks(r, level, detail)


def intro_blocks(r: FitRecord) -> list:
    """The log in a paragraph, its notes, and the written scenario's."""
    blocks = [Paragraph(words.log_summary(r))]
    note = words.resolution_note(r)
    if note:
        blocks.append(Paragraph(note, small=True))
    notes = [words.LOG_NOTES[n] for n in r.log_notes] + [words.scenario_note(n) for n in r.scenario_notes]
    if notes:
        blocks.append(Bullets([f"Note: {n}." for n in notes]))
    return blocks


def terminal_blocks(r: FitRecord) -> list:
    """What `simlab fit` prints: the log, the arrivals and lengths tables, the validation's verdict."""
    blocks = list(intro_blocks(r))
    for c in r.classes:
        blocks += [Heading(2, f"{c.kind} arrivals"), arrivals_table(r, [c.kind])]
    blocks += [Heading(2, LENGTHS_HEADING), lengths_table(r)]
    if r.validation is not None:
        blocks += [Heading(2, f"Validation ({len(r.validation.seeds)} simulated seeds against the log)"),
                   badges(r.validation)]
    return blocks


def scenario_text(r: FitRecord) -> str | None:
    """The fitted scenario in words, as the A/B report describes scenarios."""
    return words.describe(r.scenario) if r.scenario is not None else None


def document(r: FitRecord, out: Path) -> Document:
    """report.md."""
    from simlab.reporting.figures import caption

    out = Path(out)
    doc = Document(f"Fit of {r.log_name}")
    doc.add(*intro_blocks(r), Paragraph(
        f"Scenario written: `{r.scenario_file}` (load it with any simlab command). The record the reports are made "
        "from: `result.json`; every bin and test: `fit.json`; rate per bin: `rates.csv`; validation: "
        "`validation.csv` and `validation-bins.csv`."))
    words_of_scenario = scenario_text(r)
    if words_of_scenario:
        doc.add(Paragraph(f"The fitted scenario: {words_of_scenario}", small=True))
    doc.add(*fit_blocks(r, 2, detail=True))
    if r.figures:
        doc.add(Heading(2, "Figures"), *[Figure(out / f, caption(out / f)) for f in r.figures])
    doc.add(Heading(2, "Method"), Paragraph(words.FIT_METHOD))
    return doc.finish()


def write_report(r: FitRecord, out: Path) -> Path:
    from simlab.reporting.markdown import render_markdown

    path = Path(out) / "report.md"
    atomic_write_text(path, render_markdown(document(r, out), Path(out)))
    return path
