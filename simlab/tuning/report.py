"""What `simlab tune` leaves behind: the TuneRecord (result.json) and, made from it, validation-summary.csv and
report.md; also best-options.json, trials.csv, validation.csv and figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

from optuna.trial import TrialState

from simlab.atomic import atomic_write_text
from simlab.experiments.tables import csv_text, fmt_ci, fmt_num
from simlab.records import TuneConfig, TuneDecision, TuneRecord, columns, save
from simlab.tuning.study import TuneContext, constraint_of, trials_by_slot
from simlab.tuning.validation import completed, feasible, holdout_seeds, pareto_front


def trial_rows(ctx: TuneContext, study) -> tuple[list[dict], list[str]]:
    keys = list(ctx.space.bounds)
    rows = []
    slots = trials_by_slot(study)
    joined = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("origin") == "joined"]
    for t in [slots[k] for k in sorted(slots)] + joined:
        opts = t.user_attrs.get("options", {})
        row = {
            # the slot is the trial's place in the reproducible sequence; Optuna's own number can differ
            # after an interrupted run, so it is only shown for trials of joined workers
            "trial": t.user_attrs.get("slot") if t.user_attrs.get("slot") is not None else f"joined-{t.number}",
            "state": t.state.name,
            "origin": t.user_attrs.get("origin", "sampled"),
        }
        for k in keys:  # the options evaluated (the defaults may have no smoothing at all)
            row[k] = opts.get(k) if opts else t.params.get(k)
        values = t.values or []
        row["objective_ms"] = values[0] if values else None
        row["p95_mean_ms"] = t.user_attrs.get("p95_mean")
        row["p99_mean_ms"] = t.user_attrs.get("p99_mean")
        row["throughput_per_min"] = t.user_attrs.get("throughput_mean")
        row["constraint"] = t.user_attrs.get("constraint")
        row["feasible"] = feasible(t) if t.state == TrialState.COMPLETE else None
        rows.append(row)
    cols = ["trial", "state", "origin", *keys, "objective_ms", "p95_mean_ms", "p99_mean_ms",
            "throughput_per_min", "constraint", "feasible"]
    return rows, cols


def write_best(out: Path, summary: list[dict], multi: bool) -> dict | None:
    """best-options.json: the production scheduler's options of the chosen configuration."""
    picks = [s for s in summary if s["config"] == "best" or s["config"].startswith("pareto-")]
    if multi:
        ok = [s for s in picks if s["meets_constraint"]] or picks
        for s in picks:
            atomic_write_text(out / "pareto" / f"{s['config']}.json", json.dumps(_production(s["options"]), indent=2) + "\n")
        pick = min(ok, key=lambda s: s["holdout_objective_ms"]) if ok else None
    else:
        pick = picks[0] if picks else None
    if pick is None:
        return None
    # only validated options become best-options.json; otherwise a file whose name says what it is
    stale = out / ("best-options.json" if not pick["meets_constraint"] else CANDIDATE_FILE)
    stale.unlink(missing_ok=True)
    name = "best-options.json" if pick["meets_constraint"] else CANDIDATE_FILE
    atomic_write_text(out / name, json.dumps(_production(pick["options"]), indent=2) + "\n")
    return pick


CANDIDATE_FILE = "candidate-options-NOT-VALIDATED.json"
TUNED_CANDIDATE_FILE = "tuned-candidate.json"  # inside `simlab decide`: what the search proposed, judged by decide


def write_candidate(out: Path, picks: dict[str, dict]) -> None:
    """The search's pick as production options, named for what it is: a candidate `simlab decide` judges, never
    options to deploy (decide writes the one options file, at the top of its folder)."""
    for stale in ("best-options.json", CANDIDATE_FILE, TUNED_CANDIDATE_FILE):
        (out / stale).unlink(missing_ok=True)
    if "adaptive-tuned" in picks:
        atomic_write_text(out / TUNED_CANDIDATE_FILE, json.dumps(_production(picks["adaptive-tuned"]), indent=2) + "\n")


def _production(options: dict) -> dict:
    """The options a production LmTrafficScheduler loads: its keys, plus the improvements that were on."""
    out = {k: v for k, v in options.items() if k not in ("policy", "tieBreak")}
    for k in ("recheckOnExpiry",):
        if not out.get(k):
            out.pop(k, None)
    if out.get("rpsSource") == "completions":
        out.pop("rpsSource")
    return out


def figures(ctx: TuneContext, study, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import optuna.visualization.matplotlib as ovm

    from simlab.plots import style

    target = out / "figures"
    made = []
    done = completed(study)
    name = ctx.scenario.name
    objective = f"interactive {ctx.tune.objective.upper()} (ms)"

    def keep(fig, fname):
        style.save(fig, target, fname)
        made.append(f"figures/{fname}.png")

    def tidy(fig, axes, title):
        # Optuna puts its own title on the figure: one title only, names not cut off, grey points explained,
        # and a y-range of at least 10% of the values so that a 1% change does not look like a cliff
        if getattr(fig, "_suptitle", None) is not None:
            fig._suptitle.set_text("")
        for ax in axes:
            for loc in ("left", "center", "right"):
                ax.set_title("", loc=loc)
            if ax.get_xscale() == "log":  # Optuna's 2x10^3 3x10^3 ... minor labels run into each other
                compact_log_ticks(ax.xaxis)
            lo, hi = ax.get_ylim()
            mid, need = (lo + hi) / 2, 0.1 * abs((lo + hi) / 2)
            if ax.get_yscale() == "linear" and ax.get_ylabel() and 0 < hi - lo < need:
                ax.set_ylim(mid - need / 2, mid + need / 2)
        fig.suptitle(title + "\ngrey points: trials that miss the batch-throughput constraint",
                     fontsize=11)
        fig.set_layout_engine("constrained")

    with style.context():
        if not ctx.multi and done:
            ax = ovm.plot_optimization_history(study, target_name=objective)
            fig = ax.figure
            fig.set_size_inches(*style.WIDE)
            tidy(fig, [ax], f"{name}: optimisation history (blue: feasible trials; line: best so far)")
            keep(fig, "optimization_history")
        if len(done) >= 3:
            try:
                ax = ovm.plot_param_importances(study, target=(lambda t: t.values[0]), target_name=objective)
                fig = ax.figure
                fig.set_size_inches(*style.WIDE)
                for loc in ("left", "center", "right"):
                    ax.set_title("", loc=loc)
                fig.suptitle(f"{name}: which options matter for {ctx.tune.objective.upper()} (fANOVA importance)", fontsize=11)
                fig.set_layout_engine("constrained")
                keep(fig, "param_importances")
            except (RuntimeError, ValueError, ZeroDivisionError):
                pass  # too few distinct trials to estimate importances
            axes = ovm.plot_slice(study, target=(lambda t: t.values[0]), target_name=objective)
            fig = axes.flat[0].figure if hasattr(axes, "flat") else axes.figure
            fig.set_size_inches(max(13.0, 3.0 * len(ctx.space.bounds) + 2), 6.0)
            tidy(fig, list(axes.flat) if hasattr(axes, "flat") else [axes], f"{name}: objective against each option "
                 "(colour: trial number)")
            keep(fig, "slices")
        if done and ctx.multi:
            ax = ovm.plot_pareto_front(study, target_names=[objective, "batch throughput (jobs/min)"],
                                       constraints_func=constraint_of)
            fig = ax.figure
            fig.set_size_inches(*style.WIDE)
            ax.set_title(f"{name}: Pareto front, P95 vs batch throughput (feasible and infeasible trials)")
            keep(fig, "pareto_front")
        elif done:
            keep(tradeoff_figure(ctx, study, done), "pareto_front")
    return made


def compact_log_ticks(axis) -> None:
    """Log-axis ticks at 1, 2, 5 x 10^k (1, 3 x 10^k over two decades, powers of ten beyond), written short: 2k."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 99
    subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 2.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def tradeoff_figure(ctx: TuneContext, study, done):
    from simlab.plots import style

    fig = style.new_figure()
    ax = fig.add_subplot()
    need = ctx.tune.throughput_fraction * ctx.reference_throughput
    ok = [t for t in done if feasible(t)]
    bad = [t for t in done if not feasible(t)]
    p = lambda t: t.user_attrs.get("p95_mean") if ctx.tune.objective == "p95" else t.user_attrs.get("p99_mean")  # noqa: E731
    thr = lambda t: t.user_attrs.get("throughput_mean")  # noqa: E731
    ax.scatter([thr(t) for t in bad], [p(t) for t in bad], s=70, color="#BBBBBB", edgecolor="#777777", label="infeasible (too little batch throughput)")
    ax.scatter([thr(t) for t in ok], [p(t) for t in ok], s=80, color="#0072B2", label="feasible")
    if ctx.multi:
        front = pareto_front(done)
    else:
        front = [min(ok, key=lambda t: t.value)] if ok else []
    if front:
        pts = sorted((thr(t), p(t)) for t in front)
        ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", color="#009E73", ms=13, label="Pareto front" if ctx.multi else "best")
    for t in done:
        if t.user_attrs.get("origin") == "defaults":
            ax.scatter([thr(t)], [p(t)], s=260, marker="*", color="#D55E00", zorder=5, label="production defaults")
    ax.axvline(need, color="#222222", ls="--", lw=2, label=f"required: {ctx.tune.throughput_fraction:g} x {ctx.tune.reference} = {need:,.0f}/min")
    ax.set_xlabel("batch throughput (jobs/min, mean over search seeds)")
    ax.set_ylabel(f"interactive {ctx.tune.objective.upper()} (ms)")
    values = [p(t) for t in done if p(t)]
    if values and max(values) / max(min(values), 1e-9) > 5:
        ax.set_yscale("log")
        style.plain_log_ticks(ax.yaxis)
    ax.legend(loc="best")
    style.title(fig, f"{ctx.scenario.name}: interactive latency vs batch throughput, every trial (better: down and right)")
    return fig


def build_record(ctx: TuneContext, study, summary: list[dict], note: str | None, pick: dict | None,
                 figs: list[str], candidates: dict[str, dict] | None = None) -> TuneRecord:
    done = completed(study)
    required = ctx.tune.throughput_fraction * ctx.reference_throughput
    return TuneRecord(
        scenario=ctx.scenario.name,
        objective=ctx.tune.objective,
        mode="multi" if ctx.multi else "single",
        trials=len(study.get_trials(deepcopy=False)),
        trials_complete=len(done),
        trials_feasible=sum(feasible(t) for t in done),
        seeds=list(ctx.seeds),
        throughput_fraction=ctx.tune.throughput_fraction,
        reference=ctx.tune.reference,
        reference_throughput_per_min=ctx.reference_throughput,
        required_throughput_per_min=summary[0]["required_throughput_per_min"] if summary else required,
        study=ctx.study_name,
        storage=_safe(ctx.storage_url),
        space={k: [lo, hi] for k, (lo, hi) in ctx.space.bounds.items()},
        max_concurrency=ctx.space.max_concurrency,
        note=note,
        holdout_seeds=holdout_seeds(ctx),
        validation=[TuneConfig(**s) for s in summary],
        decision=(decide(ctx.tune.objective.upper(), ctx.tune.reference, summary, pick) if summary else
                  TuneDecision("not-validated", "Not validated here: `simlab decide` judges these candidates on its "
                               "own held-out units.", [])),
        best_options=_production(pick["options"]) if pick is not None and pick["meets_constraint"] else None,
        figures=list(figs),
        search_conditions=[n for n, _ in ctx.worlds()],
        holdout_conditions=[n for n, _ in ctx.worlds(held=True)],
        candidates=dict(candidates or {}),
    )


def write_report(ctx: TuneContext, study, out: Path, summary: list[dict], note: str | None, pick: dict | None,
                 figs: list[str], elapsed_s: float | None = None, candidates: dict[str, dict] | None = None) -> TuneRecord:
    """The record (result.json), validation-summary.csv and report.md made from it."""
    record = build_record(ctx, study, summary, note, pick, figs, candidates)
    save(record, out)
    if record.validation:
        atomic_write_text(out / "validation-summary.csv", csv_text([c.row() for c in record.validation],
                                                                   [c for c in columns(TuneConfig) if c != "options"]))
    write_markdown(record, out, elapsed_s)
    return record


def intro_text(r: TuneRecord) -> str:
    return (f"{r.trials} trials ({r.trials_complete} complete, {r.trials_feasible} feasible) of the adaptive policy, "
            f"each on the same {len(r.seeds)} seeds ({r.seeds[0]}..{r.seeds[-1]})"
            + (f" x {len(r.search_conditions)} traffic conditions ({', '.join(r.search_conditions)})"
               if r.search_conditions != ["base"] else "")
            + ". Objective: mean interactive "
            f"{r.metric}" + (" and batch throughput (Pareto front)" if r.mode == "multi" else "")
            + f", subject to batch throughput >= {r.throughput_fraction:g} x the `{r.reference}` arm at the "
            f"production options ({fmt_num(r.reference_throughput_per_min)} jobs/min on the search seeds). The "
            "production defaults and a static-cap equivalent were the first trials.")


def space_text(r: TuneRecord) -> str:
    return ("Search space: " + ", ".join(f"`{k}` in [{fmt_num(lo)}, {fmt_num(hi)}]" for k, (lo, hi) in r.space.items())
            + f"; `maxConcurrency` = {r.max_concurrency} (fixed).")


def holdout_heading(r: TuneRecord) -> str:
    held = ("" if r.holdout_conditions == r.search_conditions else
            f" x {len(r.holdout_conditions)} held-out traffic conditions ({', '.join(r.holdout_conditions)})")
    return f"Held-out validation ({len(r.holdout_seeds)} fresh seeds from {r.holdout_seeds[0]}{held})"


def validation_table(r: TuneRecord):
    from simlab.experiments.ab_report import ci_cell
    from simlab.records import Interval
    from simlab.reporting.document import FAIL, PASS, Cell, Table

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
    from simlab.reporting.document import Callout, Code, Heading, Paragraph

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
               Heading(level, "Verdict"), Callout(r.decision.headline, r.decision.outcome)]
    blocks += [Paragraph(d) for d in r.decision.details]
    if r.best_options is not None:
        blocks += [Heading(level, "Best options"),
                   Paragraph("`best-options.json`, for the production scheduler (`LmTrafficScheduler` options) and "
                             "for `simlab run/ab/replay --options`:"),
                   Code(json.dumps(r.best_options, indent=2), "json")]
    return blocks


def write_markdown(r: TuneRecord, out: Path, elapsed_s: float | None = None) -> None:
    from simlab.reporting.content import caption
    from simlab.reporting.document import Document, Figure, Heading, Paragraph
    from simlab.reporting.markdown import render_markdown

    doc = Document(f"Tuning: {r.scenario}")
    doc.add(*tune_blocks(r, 2))
    doc.add(Paragraph(f"Storage: `{r.storage}`, study `{r.study}`.", small=True))
    if r.figures:
        doc.add(Heading(2, "Figures"), *[Figure(out / f, caption(out / f)) for f in r.figures])
    if elapsed_s is not None:
        doc.add(Paragraph(f"Wall time of this command: {elapsed_s:.1f} s."))
    atomic_write_text(out / "report.md", render_markdown(doc.finish(), out))


def decide(metric: str, reference_name: str, summary: list[dict], pick: dict | None) -> TuneDecision:
    """Says plainly whether the tuned options beat the defaults on held-out seeds, and if not, why."""
    by = {s["config"]: s for s in summary}
    defaults, bound = by["defaults"], by.get("bound-no-batch")
    if pick is None:
        return TuneDecision("none", "No configuration can be recommended: no trial kept batch throughput at the "
                            "required level. Loosen `throughput_fraction` or widen the bounds.", [])
    ms = lambda s: f"{fmt_num(s['holdout_objective_ms'])} ms"  # noqa: E731
    need = fmt_num(pick["required_throughput_per_min"])
    at_bound = bound is not None and defaults["holdout_objective_ms"] <= max(
        bound["holdout_objective_ci_high"], bound["holdout_objective_ms"]) * 1.005
    if pick["beats_defaults_ci_disjoint"] and pick["meets_constraint"]:
        status = "beaten"
        head = (f"**The tuned options beat the production defaults on held-out seeds**: {metric} {ms(pick)} vs "
                f"{ms(defaults)}, non-overlapping 95% CIs, with batch throughput "
                f"{fmt_num(pick['holdout_throughput_per_min'])}/min (required {need}).")
    elif not pick["meets_constraint"]:
        status = "not-validated"
        head = (f"**Not validated**: on held-out seeds the tuned options miss the batch-throughput constraint "
                f"({fmt_num(pick['holdout_throughput_per_min'])} < {need}/min); the search seeds flattered them.")
    elif at_bound:
        status = "at-bound"
        head = (
            f"**The defaults cannot be beaten on {metric} here**: they already reach {ms(defaults)}, the lower bound "
            f"set by the interactive traffic alone ({ms(bound)} with batch absent, which no scheduler can beat "
            "without preempting running work). "
            + (f"They pay for it in batch throughput: {fmt_num(defaults['holdout_throughput_per_min'])}/min, below the "
               f"required {need}/min. The tuned options meet the constraint "
               f"({fmt_num(pick['holdout_throughput_per_min'])}/min) at {metric} {ms(pick)}, "
               f"{_pct(pick['holdout_objective_ms'], bound['holdout_objective_ms'])} above the bound."
               if not defaults["meets_constraint"] else "The tuned options match them within the noise.")
        )
    elif pick["cis_overlap_defaults"]:
        status = "overlap"
        head = (f"**The defaults cannot be beaten with confidence**: held-out {metric} {ms(pick)} tuned vs "
                f"{ms(defaults)} defaults, and the 95% CIs overlap.")
    else:
        status = "defaults-lower" if not defaults["meets_constraint"] else "keep-defaults"
        head = (
            f"**The defaults have the lower {metric}** ({ms(defaults)} vs {ms(pick)} tuned), "
            + ("but they miss the batch-throughput constraint "
               f"({fmt_num(defaults['holdout_throughput_per_min'])} < {need}/min): the tuned options are the best "
               "latency that keeps batch work at the required pace." if not defaults["meets_constraint"]
               else "and meet the constraint too: keep the defaults.")
        )
    reference = by["reference"]
    details = [
        f"Against the reference arm (`{reference_name}` at the production options, "
        f"{fmt_num(reference['holdout_throughput_per_min'])} batch/min): tuned {metric} {ms(pick)} vs {ms(reference)}, "
        f"paired difference {fmt_ci(pick['vs_reference_diff_ms'], pick['vs_reference_ci_low'], pick['vs_reference_ci_high'])} ms."
    ]
    so = pick["search_objective_ms"]
    if so is not None and math.isfinite(pick["holdout_objective_ci_low"]) and so < pick["holdout_objective_ci_low"]:
        details.append(
            f"Noise-fitting: the search measured {fmt_num(so)} ms for these options, below their held-out 95% CI "
            f"[{fmt_num(pick['holdout_objective_ci_low'])}, {fmt_num(pick['holdout_objective_ci_high'])}]: the search "
            "picked them partly for the luck of its seeds. More search seeds (`[tune] seeds`) make it more honest."
        )
    return TuneDecision(status, head, details)


def _pct(value: float, base: float) -> str:
    return f"{100 * (value - base) / base:.1f}%" if base else "–"


def _safe(url: str) -> str:
    from simlab.tuning.study import _redact

    return _redact(url)


def write_tables(ctx, study, out: Path, rows, summary) -> None:
    trows, tcols = trial_rows(ctx, study)
    atomic_write_text(out / "trials.csv", csv_text(trows, tcols))
    if rows:
        atomic_write_text(out / "validation.csv", csv_text(rows, list(rows[0])))
