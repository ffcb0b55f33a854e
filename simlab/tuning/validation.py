"""Held-out validation: the chosen configurations re-run on fresh seeds never used in the search."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from simlab.experiments.runner import Job, run_jobs
from simlab.experiments.stats import intervals_overlap, mean_ci, paired
from simlab.policies import SchedulerOptions, options_from_dict
from simlab.tuning.study import OBJECTIVE_METRIC, TuneContext, holdout_seeds_of

MAX_PARETO = 8


@dataclass
class Candidate:
    label: str  # best, pareto-1.., defaults, reference
    options: SchedulerOptions
    trial: optuna.trial.FrozenTrial | None = None


def feasible(trial) -> bool:
    return trial.state == TrialState.COMPLETE and trial.user_attrs.get("constraint", math.inf) <= 0


def completed(study) -> list:
    return sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
                  key=lambda t: (t.user_attrs.get("slot") if t.user_attrs.get("slot") is not None else math.inf, t.number))


def pareto_front(trials) -> list:
    """Feasible trials that no other feasible trial beats on both P95 (lower) and throughput (higher)."""
    pts = [t for t in trials if feasible(t)]
    front = []
    for t in pts:
        p, q = t.values[0], t.values[1]
        if not any((o.values[0] <= p and o.values[1] >= q) and (o.values[0] < p or o.values[1] > q) for o in pts):
            front.append(t)
    front.sort(key=lambda t: (t.values[0], -t.values[1], t.number))
    if len(front) > MAX_PARETO:  # keep the ends and an even spread between
        idx = sorted({round(i * (len(front) - 1) / (MAX_PARETO - 1)) for i in range(MAX_PARETO)})
        front = [front[i] for i in idx]
    return front


def choose(ctx: TuneContext, study) -> tuple[list[Candidate], str | None]:
    """The configurations to validate, and a note when no trial met the constraint."""
    trials = completed(study)
    note = None
    if ctx.multi:
        front = pareto_front(trials)
        picks = [Candidate(f"pareto-{i + 1}", options_from_dict(t.user_attrs["options"]), t) for i, t in enumerate(front)]
        if not picks:
            note = "no trial met the batch-throughput constraint; there is no feasible Pareto front"
    else:
        best = pick_best(ctx, trials)
        if best is not None:
            picks = [Candidate("best", options_from_dict(best.user_attrs["options"]), best)]
        else:
            picks = []
            note = "no trial met the batch-throughput constraint (on the lower bound of its CI)"
    defaults = ctx.base.with_changes(policy="adaptive")
    picks.append(Candidate("defaults", defaults, next((t for t in trials if t.user_attrs.get("origin") == "defaults"), None)))
    picks.append(Candidate("reference", ctx.base.with_changes(policy=ctx.tune.reference)))
    picks.append(Candidate("bound-no-batch", ctx.base.with_changes(policy="unscheduled")))
    return picks, note


def pick_best(ctx: TuneContext, trials):
    """The scenario's decision rule over the trials, on their per-unit search values (paired on the search
    units, with the rule's margins): the constraint shown met, P95 ties (within the margin) to the higher
    throughput, then to the simpler options. Not the lowest point estimate: with a flat objective that is an
    accident of noise."""
    from simlab.decision.compare import Arm
    from simlab.decision.rule import judge

    arms, by = [], {}
    for t in trials:
        per_obj, per_thr = t.user_attrs.get("objective_per_seed"), t.user_attrs.get("throughput_per_seed")
        if not per_obj or not per_thr or not all(map(math.isfinite, per_obj + per_thr)):
            continue
        label = f"trial-{t.number}"
        opts = dict(t.user_attrs["options"])
        family = ctx.space.family
        if family == "adaptive" and opts.get("batchMinConcurrency") == opts.get("batchMaxConcurrency"):
            family = "static"
        arms.append(Arm(label, opts, per_obj, per_thr, family))
        by[label] = t
    if not arms:
        return None
    ref_per_seed = ctx.reference_per_seed or [ctx.reference_throughput] * len(ctx.units())
    reference = Arm("reference", {}, [math.nan] * len(ref_per_seed), list(ref_per_seed), "baseline")
    rule = ctx.scenario.decision.model_copy(update={"throughput_fraction": ctx.tune.throughput_fraction})
    outcome = judge(arms, rule, reference, ctx.base.to_json_dict(), None, ctx.scenario.slo_p95_ms, settle=False)
    return by.get(outcome.choice) if outcome.choice else None


def search_picks(ctx: TuneContext, study, n_trials: int | None = None,
                 after: dict[int, dict] | None = None) -> dict[str, dict]:
    """What the search proposes to `simlab decide`, as simlab options: the rule's pick over the first `n_trials`
    trials ("<family>-tuned", e.g. "adaptive-tuned") and, when it differs, the feasible trial with the lowest
    search objective ("<family>-tuned-lowest-p95": with few search seeds the rule's ties are wide and favour
    throughput). Trials beyond `n_trials` (a study grown by an earlier, longer run) are left out, so --trials N
    means N. Beside them, the picks of the earlier budgets (`after`, else `picks_after`) that differ:
    "<family>-tuned-after-C"."""
    trials = within_budget(study, n_trials)
    out = {}
    family = ctx.space.family
    best = pick_best(ctx, trials)
    if best is not None:
        out[f"{family}-tuned"] = dict(best.user_attrs["options"])
    ok = [t for t in trials if feasible(t)]
    if ok:
        low = min(ok, key=lambda t: (t.values[0], t.user_attrs.get("slot", t.number)))
        if best is None or low.user_attrs["options"] != best.user_attrs["options"]:
            out[f"{family}-tuned-lowest-p95"] = dict(low.user_attrs["options"])
    if after is None and n_trials is not None:
        after = picks_after(ctx, study, n_trials)
    for c, options in (after or {}).items():
        if options not in out.values():
            out[f"{family}-tuned-after-{c}"] = options
    return out


def checkpoints(n_trials: int) -> list[int]:
    """The earlier budgets whose picks race beside the search's own, largest first: half the budget, and every
    10 x 2^k below it. Trial k is the same at every budget (simlab/tuning/study.py seeds its sampler from the
    slot), so the search at one budget holds the search at each of these: --trials 20 races the pick a
    --trials 10 run makes, --trials 60 those of 10, 20, 30 and 40, and decide can tell whether halving the
    budget would change the answer."""
    if n_trials < 4:
        return []
    out = {n_trials // 2}
    c = 10
    while c < n_trials:
        out.add(c)
        c *= 2
    return sorted(out, reverse=True)


def picks_after(ctx: TuneContext, study, n_trials: int) -> dict[int, dict]:
    """The rule's pick over the first c trials, for each checkpoint c of `n_trials` (`checkpoints`)."""
    out = {}
    for c in checkpoints(n_trials):
        best = pick_best(ctx, within_budget(study, c))
        if best is not None:
            out[c] = dict(best.user_attrs["options"])
    return out


def within_budget(study, n_trials: int | None = None) -> list:
    """The completed trials of the first `n_trials` slots (all when None): a study grown by a longer run is read
    at this run's budget."""
    return [t for t in completed(study) if n_trials is None or (t.user_attrs.get("slot", math.inf) < n_trials)]


def found_at(ctx: TuneContext, study, n_trials: int | None = None) -> int | None:
    """The slot (0-based, in the reproducible sequence) of the trial the rule's pick ("<family>-tuned") came
    from; None when there is no pick. A pick from the last trials says the search was still improving."""
    best = pick_best(ctx, within_budget(study, n_trials))
    return None if best is None else best.user_attrs.get("slot")


def holdout_seeds(ctx: TuneContext) -> list[int]:
    return holdout_seeds_of(ctx)


def validate(ctx: TuneContext, candidates: list[Candidate], out: Path, workers: int, progress: bool) -> tuple[list[dict], list[dict]]:
    """Per-unit rows (held-out condition x held-out seed) and a per-candidate summary with 95% CIs (paired on
    the units) and the change against the defaults."""
    seeds = holdout_seeds(ctx)
    worlds = ctx.worlds(held=True)
    pairs = []
    for name, world in worlds:
        jobs = [Job(c.label, c.options, s, "no-batch" if c.label == "bound-no-batch" else "") for c in candidates for s in seeds]
        folder = out / "validation" if len(worlds) == 1 and name == "base" else out / "validation" / name
        pairs += [(name, j, m) for j, m in zip(jobs, run_jobs(world, jobs, folder, workers, progress))]
    metric = OBJECTIVE_METRIC[ctx.tune.objective]
    rows = [
        {
            "config": j.label,
            "condition": name,
            "seed": j.seed,
            "interactive_p50_ms": m["interactive_p50_ms"],
            "interactive_p95_ms": m["interactive_p95_ms"],
            "interactive_p99_ms": m["interactive_p99_ms"],
            "batch_throughput_per_min": m["batch_throughput_per_min"],
            "stranded": m["stranded"],
        }
        for name, j, m in pairs
    ]
    by = {c.label: [r for r in rows if r["config"] == c.label] for c in candidates}
    ref_per_seed = [r["batch_throughput_per_min"] for r in by["reference"]]
    ref_thr = mean_ci(ref_per_seed)[0]
    need = ctx.tune.throughput_fraction * ref_thr
    summary = []
    for c in candidates:
        mine = by[c.label]
        obj = mean_ci([r[metric] for r in mine])
        thr = mean_ci([r["batch_throughput_per_min"] for r in mine])
        # meets the constraint on the paired margin's lower CI bound, not on the point estimate
        margin = mean_ci([r["batch_throughput_per_min"] - ctx.tune.throughput_fraction * q for r, q in zip(mine, ref_per_seed)])
        margin_low = margin[1] if math.isfinite(margin[1]) else margin[0]
        vs = paired([r[metric] for r in mine], [r[metric] for r in by["defaults"]])
        vs_ref = paired([r[metric] for r in mine], [r[metric] for r in by["reference"]])
        d_obj = mean_ci([r[metric] for r in by["defaults"]])
        t = c.trial
        summary.append(
            {
                "config": c.label,
                "trial": t.user_attrs.get("slot") if t is not None else None,
                "search_objective_ms": (t.values[0] if t is not None and t.values else None),
                "search_throughput_per_min": (t.user_attrs.get("throughput_mean") if t is not None else None),
                "holdout_objective_ms": obj[0],
                "holdout_objective_ci_low": obj[1],
                "holdout_objective_ci_high": obj[2],
                "holdout_throughput_per_min": thr[0],
                "holdout_throughput_ci_low": thr[1],
                "holdout_throughput_ci_high": thr[2],
                "required_throughput_per_min": need,
                "meets_constraint": bool(margin_low >= 0),
                "throughput_margin_ci_low": margin_low,
                "vs_defaults_diff_ms": vs["diff"],
                "vs_defaults_ci_low": vs["diff_ci_low"],
                "vs_defaults_ci_high": vs["diff_ci_high"],
                "vs_reference_diff_ms": vs_ref["diff"],
                "vs_reference_ci_low": vs_ref["diff_ci_low"],
                "vs_reference_ci_high": vs_ref["diff_ci_high"],
                "beats_defaults_ci_disjoint": bool(c.label != "defaults" and obj[2] < d_obj[1]),
                "cis_overlap_defaults": intervals_overlap(obj[1:], d_obj[1:]) if all(map(math.isfinite, obj[1:] + d_obj[1:])) else True,
                "options": c.options.to_json_dict(),
            }
        )
    return rows, summary
