"""What a step-time fit record says, as document blocks: the parameters and their error, the snippet, what a
joining request costs, the open-loop refit, every measurement and the held-out check; rendered by what `simlab
calibrate-gpu` prints, its report.md and check.md (and `simlab loadtest`'s fit/report.md), and the `simlab report`
page's "Step-time fit" section."""

from __future__ import annotations

from pathlib import Path

from simlab.store import atomic_write_text
from simlab.calibration.gpu import MEASURE_LABELS, step_toml
from simlab.records import GpuFitRecord, HeldOutCheck, StepParameters
from simlab.reporting import words
from simlab.reporting.blocks.fit import num
from simlab.reporting.document import FAIL, PASS, Cell, Code, Document, Figure, Heading, Paragraph, Table

PARAMETERS = ("base_ms", "per_token_ms", "per_seq_ms", "request_ms", "admit_ms")
PARAMETER_HEADER = ["parameter", "value"]
OPEN_LOOP_HEADER = ["parameter", "load test(s) alone", "refitted on open-loop traffic"]
RUNS_HEADER = ["run", "requests", "mean sequences", "load test(s) alone", "refitted"]
CHECK_HEADER = ["measure", "sequences", "mean abs error", "every row within"]


def g4(x: float) -> str:
    return f"{x:.4g}"


def signed(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:+.{digits}%}"


def parameter_names(p: StepParameters) -> list[str]:
    return [k for k in PARAMETERS if k != "admit_ms" or p.admit_ms]


# --- tables -----------------------------------------------------------------------------------------------------

def parameters_table(r: GpuFitRecord) -> Table:
    rows = [[Cell(k), Cell(g4(getattr(r.parameters, k)))] for k in parameter_names(r.parameters)]
    rows += [[Cell("mean relative error"), Cell(f"{r.mean_rel_error:.2%}")],
             [Cell("largest relative error"), Cell(f"{r.max_rel_error:.2%}")]]
    rows += [[Cell(f"R\u00b2, {MEASURE_LABELS[m.measure]}"), Cell(f"{m.r2:.4f}")] for m in r.r2]
    return Table(PARAMETER_HEADER, rows, narrow=True)


def joins_table(r: GpuFitRecord) -> Table:
    rows = [[Cell(f"{j.batch_size:g}"), Cell(f"{j.prompt_tokens:g}"), Cell(f"{j.short_output:g}, {j.long_output:g}"),
             Cell(f"{j.measured_ms:.1f}"), Cell(f"{j.fitted_ms:.1f}"),
             Cell(f"{(j.fitted_ms - j.measured_ms) / j.measured_ms:+.0%}" if j.measured_ms > 0 else "–")]
            for j in r.joins]
    return Table(["sequences", "prompt", "outputs", "measured (ms)", "fitted (ms)", "error"], rows, narrow=True)


def open_loop_table(r: GpuFitRecord) -> Table:
    ol, before, after = r.open_loop, r.open_loop.load_test, r.parameters
    rows = [[Cell(k), Cell(g4(getattr(before, k))), Cell(g4(getattr(after, k)))]
            for k in ("base_ms", "per_seq_ms", "admit_ms")]
    rows += [[Cell("per_token_ms"), Cell(g4(before.per_token_ms)), Cell(g4(after.per_token_ms), "(kept)")],
             [Cell("request_ms"), Cell(g4(before.request_ms)), Cell(g4(after.request_ms), "(kept)")],
             [Cell("mean abs error, open-loop requests"), Cell(f"{ol.mean_abs_error_before:.1%}"),
              Cell(f"{ol.mean_abs_error_after:.1%}")],
             [Cell("mean abs relative error, load-test rows"), Cell(f"{ol.load_test_mean_rel_error:.1%}"),
              Cell(f"{r.mean_rel_error:.1%}")]]
    return Table(OPEN_LOOP_HEADER, rows, narrow=True)


def runs_table(r: GpuFitRecord) -> Table:
    rows = [[Cell(x.run), Cell(f"{x.requests:,}"), Cell(f"{x.mean_sequences:.1f}"), Cell(signed(x.error_load_test_fit)),
             Cell(signed(x.error_refitted))] for x in r.open_loop.runs]
    return Table(RUNS_HEADER, rows)


def predictions_table(r: GpuFitRecord) -> Table:
    rows = [[Cell(str(p.line)), Cell(MEASURE_LABELS[p.measure]), Cell(f"{p.batch_size:g}"), Cell(num(p.prompt_tokens)),
             Cell(num(p.output_tokens)), Cell(num(p.measured)), Cell(num(p.fitted)), Cell(signed(p.relative_error))]
            for p in r.predictions]
    return Table(["line", "measure", "concurrency", "prompt", "output", "measured", "fitted", "error"], rows,
                 align="ll", compact=True)


def check_table(c: HeldOutCheck) -> Table:
    within = f"every row within {c.tolerance:.0%}"

    def verdict(ok: bool) -> Cell:
        return Cell("yes" if ok else "NO", status=PASS if ok else FAIL)

    rows = []
    for g in c.by_concurrency:  # "within" judges every row: the largest error stands beside the mean
        row = [Cell(MEASURE_LABELS[g.measure]), Cell(f"{g.batch_size:g}"), Cell(f"{g.mean_abs_error:.1%}"),
               Cell(f"{g.max_abs_error:.1%}"), verdict(g.within)]
        if c.profile:
            row += [Cell(f"{g.mean_abs_error_profile:.1%}"), Cell(f"{g.max_abs_error_profile:.1%}"),
                    verdict(g.within_profile)]
        rows.append(row)
    header = (["measure", "sequences", "straight line: mean abs error", "largest", within,
               "measured profile: mean abs error", "largest", within] if c.profile
              else CHECK_HEADER[:3] + ["largest abs error", within])
    return Table(header, rows, align="lrrrcrrc" if c.profile else "lrrrc")


def check_rows_table(c: HeldOutCheck) -> Table:
    rows = []
    for x in c.rows:
        row = [Cell(MEASURE_LABELS[x.measure]), Cell(f"{x.batch_size:g}"), Cell(num(x.prompt_tokens)),
               Cell(num(x.output_tokens)), Cell(num(x.measured)), Cell(num(x.fitted)), Cell(signed(x.relative_error))]
        if c.profile:
            row += [Cell(num(x.fitted_profile)), Cell(signed(x.relative_error_profile))]
        rows.append(row + [Cell(num(x.retest)), Cell(signed(x.retest_difference))])
    header = (["measure", "sequences", "prompt", "output", "measured", "fitted", "error"]
              + (["fitted (profile)", "error (profile)"] if c.profile else []) + ["fit table", "retest"])
    return Table(header, rows, align="l", compact=True)


# --- sections ---------------------------------------------------------------------------------------------------

def headline(r: GpuFitRecord) -> Paragraph:
    sizes = ", ".join(f"{c:g}" for c in r.concurrencies)
    return Paragraph(f"{len(r.predictions)} measurements at concurrencies {sizes}: {words.step_formula(r.parameters)}.")


def note_blocks(r: GpuFitRecord) -> list:
    return [Paragraph(f"Note: {words.gpu_note(n, r)}.", small=True) for n in r.notes]


def open_loop_blocks(r: GpuFitRecord, level: int) -> list:
    if r.open_loop is None:
        return []
    return [Heading(level, "Refitted on open-loop traffic"), Paragraph(words.open_loop_text(r)), open_loop_table(r),
            Paragraph("Per run: the median over its requests of (model at the measured load / measured decode step "
                      "- 1)."), runs_table(r)]


def check_blocks(r: GpuFitRecord, level: int) -> list:
    if r.check is None:
        return []
    return [Heading(level, "Held-out check"), Paragraph(words.check_summary(r.check)), check_table(r.check)]


def gpu_blocks(r: GpuFitRecord, level: int = 2, figure: Figure | None = None, detail: bool = False) -> list:
    """The fit's tables and sentences (`detail`: the snippet, every measurement and the method, for report.md)."""
    blocks = [headline(r), parameters_table(r), *note_blocks(r)]
    if detail:
        blocks += [Paragraph(f"Scenario snippet: `{r.snippet_file}`" + (
            f"; measured decode step per batch size: `{r.profile_file}` (set `profile` in `[backend.step]` to "
            "interpolate it)" if r.profile_file else "") + "."), Code(step_toml(r).rstrip("\n"), "toml")]
    if figure is not None:
        blocks.append(figure)
    if r.joins:
        blocks += [Heading(level, "What a request joining costs, by prompt length"), Paragraph(words.JOIN_TEXT),
                   joins_table(r)]
    blocks += open_loop_blocks(r, level) + check_blocks(r, level)
    if detail:
        blocks += [Heading(level, "Every measurement"), predictions_table(r), Heading(level, "Method"),
                   Paragraph(words.GPU_METHOD + (" " + words.ADMIT_METHOD if r.parameters.admit_ms else ""))]
    return blocks


def terminal_blocks(r: GpuFitRecord) -> list:
    """What `simlab calibrate-gpu` prints: the parameters and their error, the refit, the held-out check."""
    return [headline(r), parameters_table(r), *note_blocks(r), *open_loop_blocks(r, 2), *check_blocks(r, 2)]


def document(r: GpuFitRecord, out: Path) -> Document:
    from simlab.reporting.figures import caption

    out = Path(out)
    figure = next((Figure(out / f, caption(out / f)) for f in r.figures), None)
    doc = Document(f"Step-time fit of {r.label}")
    doc.add(*gpu_blocks(r, 2, figure, detail=True))
    return doc.finish()


def check_document(r: GpuFitRecord) -> Document:
    """check.md: the held-out check of the fit, row by row."""
    c = r.check
    doc = Document("Held-out check of the step-time fit")
    doc.add(Paragraph(f"Fitted on `{' + '.join(r.tables)}`, checked on `{c.table}` (an independent load test of the "
                      "same server)."))
    if c.profile:
        doc.add(Paragraph(words.PROFILE_CHECK))
    doc.add(Heading(2, "By measure and concurrency"), Paragraph(words.check_summary(c)), check_table(c),
            Heading(2, "Every row"), check_rows_table(c))
    return doc.finish()


def write_report(r: GpuFitRecord, out: Path) -> Path:
    """report.md, and check.md when the record holds a held-out check."""
    from simlab.reporting.markdown import render_markdown

    out = Path(out)
    atomic_write_text(out / "report.md", render_markdown(document(r, out), out))
    if r.check is not None:
        atomic_write_text(out / "check.md", render_markdown(check_document(r), out))
    return out / "report.md"
