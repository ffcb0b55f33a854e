"""What `simlab tune` leaves behind: the TuneRecord (result.json) and, made from it, validation-summary.csv; also
best-options.json, trials.csv and validation.csv. Its report and figures are drawn from the record
(simlab/reporting/blocks/tune.py, simlab/reporting/figures/tune.py)."""

from __future__ import annotations

import json
from pathlib import Path

from optuna.trial import TrialState

from simlab.store import atomic_write_text
from simlab.store import csv_text
from simlab.records import TrialPoint, TuneConfig, TuneDecision, TuneRecord, columns, save
from simlab.tuning.study import TuneContext, trials_by_slot
from simlab.tuning.validation import completed, feasible, holdout_seeds


def trial_rows(ctx: TuneContext, study) -> tuple[list[dict], list[str]]:
    keys = [*ctx.space.bounds, *ctx.space.choices]
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


def build_record(ctx: TuneContext, study, summary: list[dict], note: str | None, pick: dict | None,
                 candidates: dict[str, dict] | None = None, found: int | None = None,
                 picks_after: dict[int, dict] | None = None, half_picks: dict[str, dict] | None = None) -> TuneRecord:
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
        decision=TuneDecision(tune_status(summary, pick) if summary else "in-decide"),
        best_options=_production(pick["options"]) if pick is not None and pick["meets_constraint"] else None,
        search_conditions=[n for n, _ in ctx.worlds()],
        holdout_conditions=[n for n, _ in ctx.worlds(held=True)],
        candidates=dict(candidates or {}), found_at=found,
        picks_after={str(c): o for c, o in (picks_after or {}).items()}, half_picks=dict(half_picks or {}),
        pick=pick["config"] if pick is not None else None,
        trial_points=trial_points(ctx, study),
        importances=importances(ctx, study, done),
        family=ctx.space.family,
    )


def trial_points(ctx: TuneContext, study) -> list[TrialPoint]:
    rows, _ = trial_rows(ctx, study)
    metric = "p95_mean_ms" if ctx.tune.objective == "p95" else "p99_mean_ms"
    return [TrialPoint(r["trial"], r["origin"], r["state"], {k: r[k] for k in ctx.space.bounds}, r[metric],
                       r["throughput_per_min"], r["feasible"]) for r in rows]


def importances(ctx: TuneContext, study, done) -> dict[str, float]:
    """Which options matter for the objective: Optuna's default estimate (PED-ANOVA, deterministic)."""
    if len(done) < 3:
        return {}
    from optuna.importance import get_param_importances

    try:
        found = get_param_importances(study, target=lambda t: t.values[0])
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}  # too few distinct trials to estimate importances
    return {k: float(v) for k, v in found.items()}


def write_record(record: TuneRecord, out: Path) -> TuneRecord:
    """result.json (the record) and validation-summary.csv, made from it."""
    save(record, out)
    if record.validation:
        atomic_write_text(out / "validation-summary.csv", csv_text([c.row() for c in record.validation],
                                                                   [c for c in columns(TuneConfig) if c != "options"]))
    return record


def tune_status(summary: list[dict], pick: dict | None) -> str:
    """Whether the tuned options beat the defaults on held-out seeds, in a word (the words are made from the
    record at render time: simlab/reporting/words.py, tune_verdict)."""
    by = {s["config"]: s for s in summary}
    defaults, bound = by["defaults"], by.get("bound-no-batch")
    if pick is None:
        return "none"
    at_bound = bound is not None and defaults["holdout_objective_ms"] <= max(
        bound["holdout_objective_ci_high"], bound["holdout_objective_ms"]) * 1.005
    if pick["beats_defaults_ci_disjoint"] and pick["meets_constraint"]:
        return "beaten"
    if not pick["meets_constraint"]:
        return "not-validated"
    if at_bound:
        return "at-bound"
    if pick["cis_overlap_defaults"]:
        return "overlap"
    return "defaults-lower" if not defaults["meets_constraint"] else "keep-defaults"


def _safe(url: str) -> str:
    from simlab.tuning.study import _redact

    return _redact(url)


def write_tables(ctx, study, out: Path, rows, summary) -> None:
    trows, tcols = trial_rows(ctx, study)
    atomic_write_text(out / "trials.csv", csv_text(trows, tcols))
    if rows:
        atomic_write_text(out / "validation.csv", csv_text(rows, list(rows[0])))
