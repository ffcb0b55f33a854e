"""What a calibration record says, as document blocks: the knees, the recommended thresholds and every point,
rendered by what `simlab calibrate` prints, its report.md and the `simlab report` page's "Calibration" section."""

from __future__ import annotations

import json
import math
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.experiments.tables import fmt_num
from simlab.records import CalibrationRecord, Knee
from simlab.reporting import words
from simlab.reporting.document import Bullets, Cell, Code, Document, Figure, Heading, Paragraph, Table

KNEE_HEADER = ["curve", "interactive rate at the knee"]
RECOMMENDATION_HEADER = ["option", "recommended", "why"]
POINTS_HEADER = ["curve", "offered req/s", "P95 mean (ms)", "95% CI (ms)", "batch jobs/min"]


def value(x: float) -> str:
    """A recommended value as written: 7.4, 4,000."""
    if not math.isfinite(x):
        return "–"
    return f"{x:,.0f}" if x >= 1000 and x == int(x) else f"{x:,.4g}"


def knee_cell(k: Knee) -> Cell:
    return Cell(*words.knee_parts(k))


def knee_table(r: CalibrationRecord) -> Table:
    return Table(KNEE_HEADER, [[Cell(words.CURVE_LABELS[k.curve]), knee_cell(k)] for k in r.knees], align="ll",
                 narrow=True)


def recommendation_table(r: CalibrationRecord) -> Table:
    rec = r.recommendation
    return Table(RECOMMENDATION_HEADER, [
        [Cell("interactiveRpsThreshold"), Cell(value(rec.interactive_rps_threshold)), Cell(words.threshold_why(r))],
        [Cell("interactiveP95LatencyMs"), Cell(value(rec.interactive_p95_latency_ms)), Cell(words.LATENCY_WHY)],
    ], align="lrl")


def points_table(r: CalibrationRecord) -> Table:
    rows = [[Cell(words.CURVE_LABELS[p.curve]), Cell(f"{p.offered_rps:.4g}"), Cell(fmt_num(p.p95_mean_ms)),
             Cell(f"{fmt_num(p.p95_ci_low_ms)} to {fmt_num(p.p95_ci_high_ms)}" if math.isfinite(p.p95_ci_low_ms)
                  else "–"),
             Cell(f"{p.batch_throughput_per_min:.4g}" if math.isfinite(p.batch_throughput_per_min) else "–")]
            for p in r.points]
    return Table(POINTS_HEADER, rows, compact=True)


def notes(r: CalibrationRecord) -> list[str]:
    return [words.calibration_note(n, r) for n in r.notes]


def calibrate_blocks(r: CalibrationRecord, level: int = 2, figure: Figure | None = None,
                     points: bool = False) -> list:
    """The ramp in a sentence, the knees, the recommendation and its verification, the options verified, the
    notes; `points` adds every point's table (report.md)."""
    blocks = [Paragraph(words.ramp_summary(r)), Heading(level, "Knees: where interactive P95 crosses the SLO"),
              knee_table(r), Heading(level, "Recommendation"), recommendation_table(r)]
    check = words.verification(r)
    if check:
        blocks.append(Paragraph(check, small=True))
    if figure is not None:
        blocks.append(figure)
    blocks += [Paragraph(f"{words.TUNE_RANGES} The options verified above:"),
               Code(json.dumps(r.options, indent=2), "json")]
    if r.notes:
        blocks += [Heading(level, "Notes"), Bullets(notes(r))]
    if points:
        blocks += [Heading(level, "Points"), points_table(r)]
    return blocks


def terminal_blocks(r: CalibrationRecord) -> list:
    """What `simlab calibrate` prints."""
    return ([Paragraph(words.ramp_summary(r)), knee_table(r), Heading(2, "Recommendation"),
             Table(RECOMMENDATION_HEADER[:2], [row[:2] for row in recommendation_table(r).rows], align="lr")]
            + [Paragraph(f"note: {n}") for n in notes(r)])


def document(r: CalibrationRecord, out: Path) -> Document:
    from simlab.reporting.figures import caption

    out = Path(out)
    figure = next((Figure(out / f, caption(out / f)) for f in r.figures), None)
    doc = Document(f"Calibration of {r.scenario}")
    doc.add(*calibrate_blocks(r, 2, figure, points=True), Heading(2, "Method"), Paragraph(words.CALIBRATION_METHOD),
            Heading(2, "Files"), Paragraph(
                "`result.json` (the record the reports are made from), `knee.csv` (every point), `calibration.json` "
                "(knees, recommendation, options, points), `tune-bounds.json` (tune's search ranges)."))
    return doc.finish()


def write_report(r: CalibrationRecord, out: Path) -> Path:
    from simlab.reporting.markdown import render_markdown

    path = Path(out) / "report.md"
    atomic_write_text(path, render_markdown(document(r, out), Path(out)))
    return path
