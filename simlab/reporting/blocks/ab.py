"""What an A/B record says, as document blocks: the tables and sentences that the terminal, the command's
`report.md` and the `simlab report` page all render. Every cell is made here from the record, once, so the three
renderings cannot disagree on a number."""

from __future__ import annotations

import math
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.experiments.tables import fmt_num, text_table
from simlab.records import AbRecord, Comparison, Criteria, Interval, Verdict
from simlab.reporting.words import capacity_verdict, describe
from simlab.reporting.document import (BAD, CAPACITY, FAIL, GOOD, PASS, Bullets, Cell, Document, Figure, Heading,
                                       Paragraph, Table)

HEADLINE = [
    ("interactive_p95_ms", "interactive P95 ms"),
    ("interactive_p99_ms", "P99 ms"),
    ("batch_throughput_per_min", "batch jobs/min"),
    ("batch_makespan_ms", "batch makespan ms"),
    ("max_in_flight", "max in flight"),
    ("stranded", "stranded"),
]
FAILURES = [("interactive_failed", "interactive failed"), ("batch_failed", "batch failed")]
DEADLINE = [("batch_deadline_share", "batch by deadline %")]
PERCENT = {"batch_deadline_share"}  # shares, shown as percentages
STOPS = [("timeouts", "timeouts"), ("evictions", "evictions"), ("wasted_ms", "wasted ms"),
         ("wasted_tokens", "wasted tokens")]
COMPARED = [("interactive_p95_ms", "interactive P95 ms"), ("batch_throughput_per_min", "batch jobs/min"),
            ("batch_makespan_ms", "batch makespan ms")]
CRITERIA = ["1. P95 not stuck above the SLO", "2. batch keeps moving", "3. concurrency within the cap"]
CRITERIA_HEADING = "The article's three success criteria"
COMPARISON_HEADING = "What the scheduler buys: paired differences"


# --- cells ------------------------------------------------------------------------------------------------------

def ci_cell(i: Interval | None, sign: bool = False) -> Cell:
    """'mean' with '[low, high]' beneath; the mean alone when there is no interval or every seed agreed."""
    if i is None:
        return Cell("–")
    text = ("+" if sign and i.mean > 0 else "") + fmt_num(i.mean)
    if not (math.isfinite(i.ci_low) and math.isfinite(i.ci_high)) or i.ci_low == i.ci_high:
        return Cell(text)
    return Cell(text, f"[{fmt_num(i.ci_low)}, {fmt_num(i.ci_high)}]")


def seconds(ms) -> str:
    if ms is None or not math.isfinite(ms):
        return "–"
    return f"{fmt_num(ms / 1000)} s"


def diff_cell(c: Comparison | None) -> Cell:
    if c is None:
        return Cell("–")
    text = ("+" if c.diff > 0 else "") + fmt_num(c.diff)
    parts = []
    if math.isfinite(c.diff_ci_low) and math.isfinite(c.diff_ci_high) and c.diff_ci_low != c.diff_ci_high:
        parts.append(f"[{fmt_num(c.diff_ci_low)}, {fmt_num(c.diff_ci_high)}]")
    if math.isfinite(c.ratio):
        parts.append(f"×{c.ratio:#.3g}")
    status = None
    if c.significant and math.isfinite(c.diff) and c.diff != 0:
        status = GOOD if (c.diff < 0) == (c.better == "lower") else BAD
    return Cell(text, " ".join(parts), status)


def capacity_text(c: Criteria) -> str:
    return capacity_verdict(c.slo_bin_ms, c.p95_stay_ms)


def verdict_cells(v: Verdict, criteria: Criteria) -> list[Cell]:
    bound = ("" if v.bound_longest_p95_over_slo_ms is None
             else f"; batch absent {seconds(v.bound_longest_p95_over_slo_ms)}")
    stay = f"longest stretch over the SLO {seconds(v.longest_p95_over_slo_ms)}{bound}"
    p95 = {"pass": Cell("pass", stay, PASS), "fail": Cell("FAIL", stay, FAIL),
           "capacity": Cell(capacity_text(criteria), stay, CAPACITY)}[v.p95_verdict]
    moving = Cell("pass" if v.batch_keeps_moving else "FAIL",
                  f"longest stall {seconds(v.longest_batch_stall_ms)}, stranded {fmt_num(v.stranded)}",
                  PASS if v.batch_keeps_moving else FAIL)
    cap = Cell("pass" if v.concurrency_within_cap else "FAIL",
               f"max {fmt_num(v.max_in_flight)} in flight, cap {fmt_num(v.max_concurrency)}",
               PASS if v.concurrency_within_cap else FAIL)
    return [p95, moving, cap]


# --- tables -----------------------------------------------------------------------------------------------------

def lifecycle_columns(r: AbRecord) -> list[tuple[str, str]]:
    """The batch-lifecycle columns a reader needs: the deadline share where a workload has a deadline, and the
    stopped work wherever anything was stopped."""
    def any_run(metric, test):
        return any(test(run.values.get(metric)) for run in r.runs)

    cols = DEADLINE if any_run("batch_deadline_share", lambda v: v is not None and math.isfinite(v)) else []
    if any_run("timeouts", bool) or any_run("evictions", bool):
        cols = cols + STOPS
    return cols


def policy_table(r: AbRecord) -> Table:
    # Failed requests (e.g. 429s past the retry budget) change what the other columns mean: show them if any.
    failed = any(run.values.get("interactive_failed") or run.values.get("batch_failed") for run in r.runs)
    cols = HEADLINE + (FAILURES if failed else []) + lifecycle_columns(r)
    rows = [[Cell(p)] + [ci_cell(_shown(m, r.interval(p, m))) for m, _ in cols] for p in r.policies]
    return Table(["policy"] + [label for _, label in cols], rows)


def _shown(metric: str, i: Interval) -> Interval:
    return Interval(i.mean * 100, i.ci_low * 100, i.ci_high * 100) if metric in PERCENT else i


def lifecycle_text(r: AbRecord) -> str | None:
    """What the lifecycle columns mean, when the table has them."""
    cols = dict(lifecycle_columns(r))
    if not cols:
        return None
    parts = []
    if "batch_deadline_share" in cols:
        parts.append("Batch by deadline: the share of the jobs of batch workloads with a deadline_ms that finished "
                     "within it of their arrival (failed, timed-out and unfinished jobs count as missed).")
    if "timeouts" in cols:
        parts.append("Timeouts and evictions count stopped attempts (a timeout is retried up to max_retries, an "
                     "evicted task is queued again at the front); wasted ms and tokens are the service time and the "
                     "tokens (prompt once prefilled, plus output) those attempts had used.")
    return " ".join(parts)


def comparison_table(r: AbRecord) -> Table | None:
    shown = dict(lifecycle_columns(r))
    compared = COMPARED + [(m, label) for m, label in (("batch_deadline_share", "batch by deadline (share)"),
                                                        ("wasted_ms", "wasted ms")) if m in shown]
    pairs: dict[tuple[str, str], dict[str, Comparison]] = {}
    for c in r.comparisons:
        if c.metric in dict(compared):
            pairs.setdefault((c.candidate, c.baseline), {})[c.metric] = c
    if not pairs:
        return None
    rows = [[Cell(f"{cand} vs {base}")] + [diff_cell(by.get(m)) for m, _ in compared]
            for (cand, base), by in pairs.items()]
    return Table(["comparison"] + [label for _, label in compared], rows)


def verdict_table(r: AbRecord) -> Table:
    rows = [[Cell(v.policy)] + verdict_cells(v, r.criteria) for v in r.verdicts]
    return Table(["policy"] + CRITERIA, rows, align="lccc")


def criteria_text(r: AbRecord) -> str:
    c = r.criteria
    text = (f"Each criterion is judged on the worst seed. Criterion 1 fails when interactive P95, judged in "
            f"{c.slo_bin_ms / 1000:g} s bins, stays above {fmt_num(c.slo_p95_ms)} ms for {c.p95_stay_ms / 1000:g} s "
            "or more; it is shown next to the same measure with batch absent (the bound), and when the bound fails "
            f"it too the verdict is \"{capacity_text(c)}\" instead of FAIL. Criterion 2 fails when batch work waits "
            f"with no batch completion for {c.batch_stall_ms / 1000:g} s or more, or a batch task never starts; "
            "criterion 3 when more tasks than maxConcurrency are in flight at the scheduler at any instant.")
    return text


def bound_items(r: AbRecord) -> list[str]:
    items = []
    p95 = r.bound("bound-no-batch", "interactive_p95_ms")
    if p95 is not None:
        stay = next((v.bound_longest_p95_over_slo_ms for v in r.verdicts
                     if v.bound_longest_p95_over_slo_ms is not None), None)
        meets = ("" if stay is None else
                 f" Its longest stretch over the SLO: {seconds(stay)}"
                 + (": even here P95 stays above the SLO, so no scheduler can meet this SLO on this traffic."
                    if stay >= r.criteria.p95_stay_ms else "."))
        items.append(f"**Interactive P95 with batch absent: {ci_cell(p95).line()} ms.** No scheduler can do better "
                     f"without preempting running work.{meets}")
    thr = r.bound("bound-batch-alone", "batch_throughput_per_min")
    mk = r.bound("bound-batch-alone", "batch_makespan_ms")
    if thr is not None and mk is not None:
        items.append(f"**Batch alone, the whole capacity: {ci_cell(thr).line()} jobs/min**, makespan "
                     f"{ci_cell(mk).line()} ms. No interactive traffic: the most batch can get.")
    return items


def seeds_text(r: AbRecord) -> str:
    seeds = (f"the same {len(r.seeds)} seeds ({r.seeds[0]}..{r.seeds[-1]})" if r.seeds else "common seeds")
    return (f"Every policy on {seeds}: each sees the same arrivals and service draws. Means over seeds with 95% "
            "confidence intervals (Student t) in brackets.")


def options_text(r: AbRecord) -> str:
    return "Scheduler options: `" + ", ".join(f"{k}={_val(v)}" for k, v in r.options.items()) + "`"


def verdict_blocks(r: AbRecord, level: int = 2) -> list:
    """The decision rule's answer over the static frontier, when `ab` swept it."""
    return [Heading(level, "Verdict"), Paragraph(r.verdict)] if r.verdict else []


def ab_blocks(r: AbRecord, level: int = 2) -> list:
    """The A/B's tables and sentences; `level` is the heading level of its sections."""
    life = lifecycle_text(r)
    blocks = [Paragraph(seeds_text(r)), policy_table(r), *([Paragraph(life, small=True)] if life else []),
              Paragraph(options_text(r), small=True),
              Heading(level, CRITERIA_HEADING), verdict_table(r), Paragraph(criteria_text(r), small=True)]
    comp = comparison_table(r)
    if comp is not None:
        blocks += [Heading(level, COMPARISON_HEADING),
                   Paragraph("Candidate minus baseline over the same seeds, 95% CI in brackets, and the ratio "
                             "candidate / baseline. Marked **better** or **worse** when the paired difference is "
                             "significant at 95%; unmarked: not significant."),
                   comp]
    items = bound_items(r)
    if items:
        blocks += [Heading(level, "Bounds"), Bullets(items)]
    return blocks


def frontier_record(folder: Path):
    """The frontier's DecideRecord an A/B folder holds (decision.json), or None."""
    from simlab.records import load

    path = Path(folder) / "decision.json"
    return load(path, "decide") if path.is_file() else None


# --- the terminal and report.md ---------------------------------------------------------------------------------

def _plain(c: Cell) -> str:
    text = "capacity" if c.status == CAPACITY else c.text  # the full sentence once, below the table
    if c.status in (PASS, FAIL, CAPACITY) and c.sub:
        return f"{text} ({c.sub})"
    return c.line()


def terminal_table(r: AbRecord) -> str:
    pol, ver = policy_table(r), verdict_table(r)
    out = [text_table(pol.header, [[_plain(c) for c in row] for row in pol.rows]), "",
           "success criteria (worst seed):",
           text_table(ver.header, [[_plain(c) for c in row] for row in ver.rows])]
    if r.capacity_limited:
        out.append(f"{capacity_text(r.criteria)}: no scheduler can pass criterion 1 on this traffic.")
    for item in bound_items(r):
        out.append("bound: " + item.replace("**", ""))
    if r.verdict:
        out += ["", "verdict: " + r.verdict.replace("**", "")]
    return "\n".join(out)


def write_report(r: AbRecord, out: Path) -> None:
    from simlab.reporting.figures import caption
    from simlab.reporting.markdown import render_markdown

    out = Path(out)
    doc = Document(f"A/B: {r.scenario}")
    doc.add(Paragraph(describe(r.facts)), *verdict_blocks(r, 2), Heading(2, "Results per policy"), *ab_blocks(r, 2))
    decision = frontier_record(out) if r.verdict else None
    if decision is not None:
        from simlab.reporting.blocks.decide import frontier_blocks

        doc.add(*frontier_blocks(decision, 2))
    if r.figures:
        doc.add(Heading(2, "Figures"), *[Figure(out / f, caption(out / f)) for f in r.figures])
    doc.add(Heading(2, "Files"), Paragraph(
        "`result.json` (everything below, the record the reports are made from), `summary.csv` (one row per policy "
        "and seed), `policies.csv` (means and CIs), `comparison.csv` (paired differences and ratios), "
        "`verdicts.csv`, `bounds.csv`, `runs/POLICY/seed-N/` (per-task `tasks.csv` and time-series `series.csv` "
        "for the first seed, `run.json` for every run)."))
    atomic_write_text(out / "report.md", render_markdown(doc.finish(), out))


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)
