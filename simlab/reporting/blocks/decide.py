"""A DecideRecord as document blocks: the answer, every arm with its CIs and standing, the tie set, racing's rounds,
the confirmation, the per-condition checks, the figures and the method. `decide_blocks` is decide's report.md and
its section of the review page; `frontier_blocks` is the part `ab`'s report shows for the static frontier its
verdict comes from. Every cell is made here from the record, once."""

from __future__ import annotations

import json
import math
from pathlib import Path

from simlab.reporting import words
from simlab.reporting.document import (BAD, FAIL, GOOD, PASS, Callout, Cell, Code, Document, Figure, Heading,
                                       Paragraph, Table)

STANDING_WORDS = {"leader": "best", "equivalent": "within margin", "undecided": "undecided", "out": "out"}
# which part of feasibility an infeasible arm missed, where the rule asks for a batch deadline share too
MISSED = {("no", "no"): "both constraints", ("yes", "no"): "deadline share", ("undecided", "no"): "deadline share",
          ("no", "yes"): "{limit}", ("no", "undecided"): "{limit}"}


def ci_cell(i, sign: bool = False) -> Cell:
    if i is None or not math.isfinite(i.mean):
        return Cell("–")
    text = words.ci(i, sign=sign)
    head, _, tail = text.partition(" [")
    return Cell(head, f"[{tail}" if tail else "")


def diff_cell(i, lower_is_better: bool) -> Cell:
    """A paired difference against the choice, coloured when its CI excludes zero (better or worse)."""
    cell = ci_cell(i, sign=True)
    if i is not None and math.isfinite(i.ci_low) and math.isfinite(i.ci_high) and (i.ci_low > 0 or i.ci_high < 0):
        cell.status = GOOD if (i.mean < 0) == lower_is_better else BAD
    return cell


def standing_cell(a, r=None) -> Cell:
    if a.family == "baseline":
        return Cell("–", "not deployable")
    if a.feasible == "no":
        limit = "required throughput" if r is not None and r.rule == "constrained" else "P95 limit"
        return Cell("infeasible", MISSED.get((a.constraint, a.on_time), "").format(limit=limit), status=FAIL)
    if a.feasible == "undecided":
        return Cell("feasibility undecided")
    tie = STANDING_WORDS.get(a.tie, a.tie)
    if a.tie not in ("leader", "equivalent", "undecided"):
        sub = ""
    elif not a.second:  # undecided, its point estimate beyond the margin: the rule leaves it out of the tie set
        sub = "not counted: its estimate is beyond the margin"
    else:
        sub = f"2nd axis: {STANDING_WORDS.get(a.second, a.second)}"
    return Cell(tie, sub, PASS if a.tie in ("leader", "equivalent") else None)


def arms_table(r, confirmation: bool = False) -> Table:
    arms = r.confirmation if confirmation else r.selection
    on_time = r.batch_deadline_share is not None  # the rule judges it: each arm's share, beside its throughput
    header = ["arm", "units", "P95 ms", "batch jobs/min"] + (["batch on time"] if on_time else [])
    header += ["P95 vs choice", "batch/min vs choice"]
    header += ["dominates the choice"] if confirmation else ["standing", "stopped after round"]
    rows = []
    for a in sorted(arms, key=_order):
        name = Cell(f"**{a.label}**" if a.label == r.choice else a.label)
        row = [name, Cell(str(a.units)), ci_cell(a.p95), ci_cell(a.throughput)]
        row += [share_cell(a.deadline_share)] if on_time else []
        row += [diff_cell(a.p95_vs_choice, True), diff_cell(a.throughput_vs_choice, False)]
        if confirmation:
            p = "" if a.dominates_p is None else f"Holm p {a.dominates_p:.3g}"
            row.append(Cell("yes", p, FAIL) if a.dominates else Cell("no" if a.label != r.choice else "–", p))
        else:
            row += [standing_cell(a, r), Cell("–" if a.stopped_after is None else str(a.stopped_after))]
        rows.append(row)
    return Table(header, rows, align="lrrr" + ("r" if on_time else "") + "rr" + ("c" if confirmation else "cr"),
                 compact=len(rows) > 12)


def share_cell(i) -> Cell:
    """A share of batch jobs done by their deadline, as a percentage with its 95% CI."""
    if i is None or not math.isfinite(i.mean):
        return Cell("–")
    return Cell(f"{100 * i.mean:.0f}%", f"[{100 * i.ci_low:.0f}, {100 * i.ci_high:.0f}]")


FAMILY_ORDER = ("static", "adaptive", "holdback", "aimd", "gradient2", "engine-priority", "baseline")
STANDING_RANK = {"leader": 0, "equivalent": 1, "undecided": 2, "out": 3, "": 4}


def _order(a) -> tuple:
    rank = FAMILY_ORDER.index(a.family) if a.family in FAMILY_ORDER else len(FAMILY_ORDER)
    return (rank, a.cap if a.cap is not None else 0, a.label)


def families_table(r) -> Table | None:
    """One row per family beyond the static caps (when decide ranked more than the adaptive cap): the budget its
    search got, its arms, its best standing on the selection units, and its arms on the confirmation units."""
    present = [f for f in FAMILY_ORDER[1:-1] if any(a.family == f for a in r.selection)]
    if r.command != "decide" or present == ["adaptive"] or not present:
        return None
    searched = {f.family: f for f in (r.tuning.families if r.tuning is not None else [])}
    rows = []
    for family in present:
        mine = sorted((a for a in r.selection if a.family == family), key=_order)
        best = min(mine, key=lambda a: (a.label != r.choice, a.feasible == "no", STANDING_RANK.get(a.tie, 4)))
        t = searched.get(family)
        trials = Cell(f"{t.trials}", f"({t.complete} complete, {t.feasible} feasible)") if t else Cell("–", "not tuned")
        confirmed = [a.label for a in r.confirmation if a.family == family]
        rows.append([Cell(family), trials, Cell(", ".join(a.label for a in mine)),
                     Cell("chosen", status=PASS) if best.label == r.choice else standing_cell(best, r),
                     Cell(", ".join(confirmed) or "–")])
    return Table(["family", "tuning trials", "arms", "best standing", "confirmed"], rows, align="lrllll")


def rounds_table(r) -> Table:
    rows = [[Cell(str(i)), Cell(str(x.seeds)), Cell(str(x.arms)), Cell(str(x.runs)), Cell(words.arm_name(r, x.choice)),
             Cell(words.arms_text(r, x.tie_set) if x.tie_set else "–"), Cell("yes" if x.settled else "no")]
            for i, x in enumerate(r.rounds)]
    return Table(["round", "seeds per condition", "arms measured", "runs", "choice", "tie set", "settled"], rows,
                 align="rrrrllc")


def budgets_table(r) -> Table | None:
    """The tuning budgets judged, when decide grew the searches (the labels of tuned arms name other options at
    another budget)."""
    steps = list(getattr(r, "budget_steps", None) or [])
    if len(steps) < 2:
        return None
    rows = [[Cell(str(x.trials)), Cell(words.arm_name(r, x.choice)), Cell(", ".join(x.tie_set) or "–"),
             Cell("yes" if x.settled else "no"),
             Cell(words.BUDGET_CASES.get(x.why, x.why) if x.why else "no", status=FAIL if x.why else PASS)]
            for x in steps]
    return Table(["trials per family", "choice", "tie set", "settled", "hangs on the budget"], rows, align="rllcl")


def conditions_table(r) -> Table:
    rows = [[Cell(c.condition), Cell(str(c.units)), ci_cell(c.p95), ci_cell(c.throughput),
             Cell(", ".join(c.dominators) or "none", status=FAIL if c.dominators else None),
             Cell(", ".join(c.worse_than_choice) or "none"), Cell(words.arm_name(r, c.best_static))]
            for c in r.per_condition]
    return Table(["condition", "units", "choice P95 ms", "choice jobs/min", "dominate the choice there",
                  "worse than the choice there", "best static there"], rows, align="lrrrlll")


def answer_blocks(r) -> list:
    status = PASS if r.exported else (FAIL if r.command == "decide" else None)
    text = words.decide_sentences(r)
    return [Callout(f"**{text[0]}**", status)] + ([Paragraph(" ".join(text[1:]))] if len(text) > 1 else [])


def frontier_blocks(r, level: int = 2) -> list:
    """What `ab`'s report shows of the static frontier its verdict comes from: the answer in full, every arm
    with its standing, the method (the A/B's seeds only: no racing, no confirmation units)."""
    return [Heading(level, "The static frontier behind the verdict"), *answer_blocks(r), arms_table(r),
            Paragraph(words.method_text(r), small=True)]


def decide_blocks(r, level: int = 2, base: Path | None = None) -> list:
    """decide's report: answer, confirmation, arms, tie set, rounds, per condition, figures, method."""
    blocks = answer_blocks(r)
    if r.confirmation:
        blocks += [Heading(level, "The choice on fresh confirmation units"),
                   Paragraph(f"{len(r.confirmation_units)} units: the held-out conditions x seeds "
                             f"{r.confirmation_units[0].seed}.. (never used to choose). Differences are this arm "
                             "minus the choice, paired per unit, 95% CI; **better**/**worse**: the CI excludes 0.",
                             small=True),
                   arms_table(r, confirmation=True)]
    families = families_table(r)
    if families is not None:
        blocks += [Heading(level, "Every policy family"),
                   Paragraph(words.families_text(r) or "No family was tuned (--trials 0): each races with its "
                             "defaults.", small=True),
                   families]
    blocks += [Heading(level, "Every arm on the selection units"),
               Paragraph(f"Tie set (equivalent on the rule's first axis within the margins, or not yet told apart): "
                         f"{words.arms_text(r, r.tie_set) or 'empty'}. Standing: against the best arm on the rule's "
                         "first axis (and, within the tie set, on the second); out: shown worse beyond the margin.",
                         small=True),
               arms_table(r)]
    if (budgets := budgets_table(r)) is not None:
        blocks += [Heading(level, "Tuning budgets"),
                   Paragraph("Each budget's choice and tie set on the selection units; a tuned arm's label names "
                             "that budget's pick. While the answer hung on the budget, every search was doubled.",
                             small=True),
                   budgets]
    if r.command == "decide":
        blocks += [Heading(level, "Racing"), rounds_table(r)]
    if r.per_condition:
        blocks += [Heading(level, "Each held-out condition"),
                   Paragraph("The choice on each condition's confirmation units alone, with the same margins and "
                             "Holm over the arms compared.", small=True),
                   conditions_table(r)]
    if base is not None and r.figures:
        from simlab.reporting.figures import caption

        blocks += [Heading(level, "Figures"), *[Figure(base / f, caption(f)) for f in r.figures]]
    blocks += [Heading(level, "Method"), Paragraph(words.method_text(r))]
    chosen = r.arm(r.choice)
    if r.exported and chosen is not None:
        blocks += [Heading(level, "Options"), Paragraph(f"`best-options.json`, {words.options_for_text(chosen)}:"),
                   Code(json.dumps(chosen.options, indent=2), "json")]
    return blocks


def write_report(r, out: Path) -> Path:
    from simlab.store import atomic_write_text
    from simlab.reporting.markdown import render_markdown

    doc = Document(f"Decision: {r.scenario}")
    doc.add(*decide_blocks(r, 2, Path(out)))
    path = Path(out) / "report.md"
    atomic_write_text(path, render_markdown(doc.finish(), Path(out)))
    return path


def terminal(r) -> str:
    """What `simlab decide` prints: the answer, the choice's confirmation table, where the files are."""
    from simlab.experiments.tables import text_table

    lines = words.decide_sentences(r)
    out = [lines[0]] + ([" ".join(lines[1:])] if len(lines) > 1 else [])
    if r.confirmation:
        t = arms_table(r, confirmation=True)
        out += ["", f"fresh confirmation units ({len(r.confirmation_units)}):",
                text_table(t.header, [[c.line().replace("**", "") for c in row] for row in t.rows])]
    return "\n".join(out)
