"""A TuneRecord as document blocks: the search, the held-out validation table, the verdict, the options. The same
blocks make tune's report.md and its section of the review page; the terminal prints the same table."""

from __future__ import annotations

import json
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.experiments.tables import fmt_num, text_table
from simlab.records import Interval, TuneRecord
from simlab.reporting import words
from simlab.reporting.blocks.decide import ci_cell
from simlab.reporting.document import FAIL, PASS, Callout, Cell, Code, Document, Figure, Heading, Paragraph, Table


def _production(options: dict) -> dict:
    from simlab.tuning.report import _production as production

    return production(options)


def intro_text(r: TuneRecord) -> str:
    first = ("The production defaults and a static-cap equivalent were the first trials." if r.family == "adaptive"
             else f"The {r.family} gate's defaults were the first trial.")
    return (f"{r.trials} trials ({r.trials_complete} complete, {r.trials_feasible} feasible) of the {r.family} "
            f"{'policy' if r.family == 'adaptive' else 'gate'}, "
            f"each on the same {len(r.seeds)} seeds ({r.seeds[0]}..{r.seeds[-1]})"
            + (f" x {len(r.search_conditions)} traffic conditions ({', '.join(r.search_conditions)})"
               if r.search_conditions != ["base"] else "")
            + ". Objective: mean interactive "
            f"{r.metric}" + (" and batch throughput (Pareto front)" if r.mode == "multi" else "")
            + f", subject to batch throughput >= {r.throughput_fraction:g} x the `{r.reference}` arm at the "
            f"production options ({fmt_num(r.reference_throughput_per_min)} jobs/min on the search seeds). {first}")


def space_text(r: TuneRecord) -> str:
    return ("Search space: " + ", ".join(f"`{k}` in [{fmt_num(lo)}, {fmt_num(hi)}]" for k, (lo, hi) in r.space.items())
            + f"; `maxConcurrency` = {r.max_concurrency} (fixed).")


def holdout_heading(r: TuneRecord) -> str:
    held = ("" if r.holdout_conditions == r.search_conditions else
            f" x {len(r.holdout_conditions)} held-out traffic conditions ({', '.join(r.holdout_conditions)})")
    return f"Held-out validation ({len(r.holdout_seeds)} fresh seeds from {r.holdout_seeds[0]}{held})"


def validation_table(r: TuneRecord):

    rows = []
    for c in r.validation:
        bound = c.config.startswith("bound")
        meets = Cell("–") if bound else (Cell("yes", status=PASS) if c.meets_constraint else Cell("NO", status=FAIL))
        vs = (Cell("–") if c.config == "defaults"
              else ci_cell(Interval(c.vs_defaults_diff_ms, c.vs_defaults_ci_low, c.vs_defaults_ci_high), sign=True))
        rows.append([
            Cell(c.config),
            Cell(fmt_num(c.search_objective_ms)),
            ci_cell(Interval(c.holdout_objective_ms, c.holdout_objective_ci_low, c.holdout_objective_ci_high)),
            ci_cell(Interval(c.holdout_throughput_per_min, c.holdout_throughput_ci_low, c.holdout_throughput_ci_high)),
            meets,
            vs,
        ])
    return Table(["config", f"search {r.metric} ms", f"held-out {r.metric} ms", "held-out batch jobs/min",
                  f"meets ≥ {fmt_num(r.required_throughput_per_min)}/min", "vs defaults, paired ms"], rows,
                 align="lrrrcr")


def tune_blocks(r: TuneRecord, level: int = 2) -> list:
    """The tuning result as document blocks (report.md and the review page)."""
    blocks = [Paragraph(intro_text(r)), Paragraph(space_text(r), small=True)]
    if r.note:
        blocks.append(Paragraph(f"**{r.note}.**"))
    if not r.validation:  # inside `simlab decide`: candidates, judged by decide on its own units
        blocks += [Heading(level, "Candidates for `simlab decide`"),
                   Paragraph("The search's picks, judged by `simlab decide` against every static cap and the "
                             "production defaults on its held-out units (its report.md, one folder up). "
                             "`tuned-candidate.json` is the first; nothing here is for deployment."),
                   *[Code(json.dumps(_production(o), indent=2), "json") for o in r.candidates.values()]]
        return blocks
    blocks += [Heading(level, holdout_heading(r)), validation_table(r),
               Paragraph("Search: the mean over the search seeds (and conditions). Held-out: fresh seeds (and held-out traffic conditions) the search never saw, 95% CI "
                         "in brackets. `defaults`: the production options; `reference`: the arm the throughput "
                         "constraint is measured against; `bound-no-batch`: batch absent, the floor for any "
                         "scheduler.", small=True),
               Heading(level, "Verdict")]
    headline, details = words.tune_verdict(r)
    blocks += [Callout(headline, r.decision.outcome), *[Paragraph(d) for d in details]]
    if r.best_options is not None:
        blocks += [Heading(level, "Best options"),
                   Paragraph("`best-options.json`, for the production scheduler (`LmTrafficScheduler` options) and "
                             "for `simlab run/ab/replay --options`:"),
                   Code(json.dumps(r.best_options, indent=2), "json")]
    return blocks


def write_report(r: TuneRecord, out: Path, elapsed_s: float | None = None) -> None:
    from simlab.reporting.markdown import render_markdown
    from simlab.reporting.figures import caption

    doc = Document(f"Tuning: {r.scenario}")
    doc.add(*tune_blocks(r, 2))
    doc.add(Paragraph(f"Storage: `{r.storage}`, study `{r.study}`.", small=True))
    if r.figures:
        doc.add(Heading(2, "Figures"), *[Figure(out / f, caption(f)) for f in r.figures])
    if elapsed_s is not None:
        doc.add(Paragraph(f"Wall time of this command: {elapsed_s:.1f} s."))
    atomic_write_text(out / "report.md", render_markdown(doc.finish(), out))


def write_files(r: TuneRecord, out: Path, elapsed_s: float) -> None:
    """tune's folder from its record: the figures, the record saved again with them, report.md."""
    from simlab.reporting.figures.tune import tune_figures
    from simlab.tuning.report import write_record

    r.figures = tune_figures(r, out)
    write_record(r, out)
    write_report(r, out, elapsed_s)


def terminal(r: TuneRecord, out: Path, elapsed_s: float) -> str:
    """What `simlab tune` prints: the held-out table, the verdict, where the files are."""
    table = validation_table(r)
    lines = [f"{r.scenario}: held-out {r.metric} on {len(r.holdout_seeds)} fresh seeds (95% CI)", "",
             text_table(table.header, [[c.line() for c in row] for row in table.rows])]
    if r.note:
        lines += ["", f"note: {r.note}"]
    lines += ["", "verdict: " + words.tune_verdict(r)[0].replace("**", "")]
    if r.best_options is not None:
        lines += ["", f"best options: {out}/best-options.json"]
    lines.append(f"report: {out}/report.md  record: {out}/result.json  trials: {out}/trials.csv  ({elapsed_s:.1f} s)")
    return "\n".join(lines)
