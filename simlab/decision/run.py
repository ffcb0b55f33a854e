"""`run_decide`: which scheduler to deploy, and with which options; one DecideRecord.

1. Tune (optional) every policy family (simlab/decision/families.py) with the same number of trials on the same
   search traffic: the scenario's first `[conditions] search` conditions x search seeds.
2. Race every static cap the backend can run, each family's defaults, tuning's candidates and the baselines on
   the selection units: held-out conditions x held-out seeds (simlab/decision/racing.py), until the rule's
   answer is settled or the budget (--replications seeds per condition) is spent.
3. Confirm: the choice, its tie set, the reference, and the best arm of every family on fresh confirmation
   units (the same held-out conditions, new seeds) that played no part in choosing. The reported P95,
   throughput and margins are these; no arm may dominate the choice on them (Holm), pooled or on any condition
   where it is not itself dominated elsewhere; the choice must not be shown to miss the constraint.
4. Export (exit 0) only a settled, confirmed, deployable choice; otherwise exit 3 with no best-options.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from simlab.decision.compare import P95, Arm, alpha_of, axes, dominators, p_above, p_below
from simlab.decision.families import families_of, tune_folder, tuned_families
from simlab.decision.frontier import backend_slots, decide_specs, exported_options, option_key, reference_label
from simlab.decision.racing import arms_of, best_of, race
from simlab.decision.rule import judge
from simlab.errors import InputError
from simlab.experiments.metrics import few_requests_warning
from simlab.experiments.plan import NO_BATCH, Measurements, Plan, bound_specs
from simlab.experiments.runner import pooled
from simlab.experiments.stats import mean_ci
from simlab.policies import SchedulerOptions, options_from_dict
from simlab.records import ArmResult, BudgetStep, ConditionCheck, DecideRecord, FamilyTuning, Interval, TuningSummary, Unit
from simlab.scenario import Scenario
from simlab.tuning import STARTUP_TRIALS  # the package's constant alone: no Optuna import
from simlab.world.conditions import split


@pooled
def run_decide(scenario: Scenario, base: SchedulerOptions, out: Path, *, trials: int | None = None,
               replications: int | None = None, workers: int = 1, progress: bool = True, scheduler=None,
               exhaustive: bool = False, warn: Callable[[str], None] | None = None,
               max_trials: int | None = None) -> DecideRecord:
    """The whole decision; runs are saved under `out` (tune/, selection/, confirmation/) so a rerun resumes."""
    rule = scenario.decision
    out = Path(out)
    search, held = split(scenario)
    budget = scenario.tune.holdout_seeds if replications is None else replications
    first = scenario.tune.holdout_first_seed
    confirm = list(range(rule.confirm_first_seed, rule.confirm_first_seed + confirm_seeds(rule, len(held))))
    if set(confirm) & set(range(first, first + budget)):
        raise InputError(scenario.path, "decision.confirm_first_seed",
                         f"confirmation seeds {confirm[0]}..{confirm[-1]} overlap the selection seeds {first}.."
                         f"{first + budget - 1}; the confirmation units must be fresh")
    n_trials = rule.trials if trials is None else trials
    ceiling = max_trials_of(rule, n_trials, max_trials)
    families = families_of(scenario)
    reference = reference_label(rule, base)
    defaults = exported_options(base.with_changes(policy="adaptive"))
    bounds = bound_specs(base, scenario, batch_alone=False)
    steps: list[BudgetStep] = []
    while True:  # while the answer hangs on the tuning budget, double the searches (trial k is the same at any)
        tuned, tuning, halves = tune_families(scenario, base, out, tuned_families(families), n_trials, workers,
                                              progress, warn)
        specs = decide_specs(base, scenario, tuned, tuple(families))
        holder = {option_key(s.options): s.label for s in specs}
        if tuning is not None:
            kept = {s.label for s in specs}
            for f in tuning.families:
                f.candidates = [label for label, _, family in tuned if family == f.family and label in kept]
            tuning.candidates = [c for f in tuning.families for c in f.candidates]
        # the tuned arms a run with half the trials would race too (its picks this run also races)
        shorter = {holder[k] for picks in halves.values() for o in picks.values() if (k := option_key(o)) in holder}
        # a fresh plan per budget: a label such as gradient2-tuned may name other options at the next budget; a
        # run saved under selection/ is loaded only when its key (options, world, seed) is the one asked for
        plan = Plan(scenario, held, out / "selection", workers, progress, scheduler)
        raced = race(plan, specs, bounds, rule, reference, defaults, scenario.slo_p95_ms, first, budget, exhaustive)
        outcome = raced.outcome
        moved, moved_why = budget_moves(tuning, outcome, shorter)
        steps.append(BudgetStep(n_trials, outcome.choice, list(outcome.tie_set), raced.stable, moved_why))
        following = trials_to_tell(n_trials, moved_why)
        # an answer unsettled on the selection seeds asks for seeds, not trials
        if not raced.stable or following is None or following > ceiling:
            break
        n_trials = following
    if warn is not None and (few := few_requests_warning(plan.measured.metrics.values(), "selection run")):
        warn(few)
    by = {a.label: a for a in raced.arms}
    best_static = best_of(raced.arms, "static", rule, by.get(reference), defaults, raced.bound_p95, scenario.slo_p95_ms)
    best_adaptive = best_of(raced.arms, "adaptive", rule, by.get(reference), defaults, raced.bound_p95, scenario.slo_p95_ms)
    # every other family's best arm is confirmed too: each family is judged on the same confirmation units
    best_family = [best_of(raced.arms, f, rule, by.get(reference), defaults, raced.bound_p95, scenario.slo_p95_ms)
                   for f in families if f != "adaptive"]

    cplan = Plan(scenario, held, out / "confirmation", workers, progress, scheduler)
    c = Confirmation()
    if outcome.choice is not None and raced.stable:
        keep = [outcome.choice, *outcome.tie_set, reference, best_static, best_adaptive, *best_family]
        burst = {(a, held[0].name, confirm[0]) for a in (best_adaptive, outcome.choice, best_static) if a}
        c = confirm_choice(cplan, [s for s in specs if s.label in keep], bounds, confirm, burst, outcome, reference,
                           rule, defaults, scenario)
    confirmed, missed, slo_met, dominated, checks, carms = (c.confirmed, c.missed, c.slo_met, c.dominated, c.checks,
                                                            c.arms)
    exported = bool(confirmed and raced.stable and not moved and by[outcome.choice].deployable)
    cb = cplan.measured.values(NO_BATCH, P95) if carms and bounds else None
    bound_values = cb if cb is not None else (np.asarray(raced.bound_p95) if raced.bound_p95 else None)
    selection_units = list(plan.measured.units)[:raced.judged]  # --exhaustive measured more than it judged
    every = len(specs) + len(bounds)
    return DecideRecord(
        scenario=scenario.name, command="decide", rule=rule.rule, level=rule.level, p95_margin=rule.p95_margin,
        throughput_margin=rule.throughput_margin, throughput_fraction=rule.throughput_fraction,
        bound_tolerance=rule.bound_tolerance, batch_deadline_share=rule.batch_deadline_share,
        reference=reference if reference in by else None,
        slo_p95_ms=scenario.slo_p95_ms, max_concurrency=base.max_concurrency, backend_slots=backend_slots(scenario),
        conditions=[c.name for c in held], search_conditions=[c.name for c in search],
        selection_units=[Unit(c, s) for c, s in selection_units],
        confirmation_units=[Unit(c, s) for c, s in cplan.measured.units],
        selection=arm_results(raced.arms, outcome, rule, by.get(reference), raced.frozen),
        confirmation=arm_results(carms, outcome, rule, {a.label: a for a in carms}.get(reference), {}, dominated),
        choice=outcome.choice, pick=outcome.pick, leader=outcome.leader, second_leader=outcome.second_leader,
        no_choice=outcome.no_choice, limit_ms=outcome.limit_ms, limit_kind=outcome.limit_kind,
        settled=raced.stable, settled_by=raced.settled_by, unsettling=list(outcome.unsettling),
        seeds_needed=outcome.seeds_needed(len(held)) if outcome.unsettling else None,
        seeds_budget=budget, rounds=raced.rounds, best_static=best_static, best_adaptive=best_adaptive,
        bound_p95=_interval(bound_values) if bound_values is not None else None,
        confirmed=confirmed, constraint_missed=missed, slo_met=slo_met, per_condition=checks, exported=exported,
        exit_code=0 if exported else 3, runs=plan.runs + cplan.runs, runs_shared=plan.shared + cplan.shared,
        runs_exhaustive=every * budget * len(held) + cplan.runs + cplan.shared, tuning=tuning,
        trials_needed=trials_to_tell(n_trials, moved_why), budget_arms=moved, budget_why=moved_why,
        budget_steps=steps, max_trials=ceiling if tuning is not None else None,
    )


def tune_families(scenario: Scenario, base: SchedulerOptions, out: Path, families: list[str], n_trials: int,
                  workers: int, progress: bool, warn) -> tuple[list[tuple[str, SchedulerOptions, str]],
                                                           TuningSummary | None,
                                                           dict[str, dict[str, SchedulerOptions]]]:
    """The same search for every family: `n_trials` trials each, on the same search units (conditions x seeds)
    with the same sampler seed; each family's candidates (label, options, family), the budget it got, and what
    a run with half the trials would race from each family's search (family -> label there -> options)."""
    if n_trials <= 0 or not families:
        return [], None, {}
    from simlab.tuning.run import run_tune_families
    from simlab.tuning.validation import checkpoints

    half = n_trials // 2 if checkpoints(n_trials) else None
    # the reference and batch-absent runs on the search units are the same for every family: made once
    records = run_tune_families(scenario, base, {f: out / tune_folder(f) for f in families}, trials=n_trials,
                                workers=workers, progress=progress, warn=warn,
                                search_runs=out / tune_folder("adaptive") / "search")
    tuned, summaries, halves = [], [], {}
    for family, t in records.items():
        tuned += [(label, options_from_dict(o), family) for label, o in t.candidates.items()]
        summaries.append(FamilyTuning(family, t.trials, t.trials_complete, t.trials_feasible, [], t.found_at,
                                      half))
        if half is not None:
            halves[family] = {label: options_from_dict(o) for label, o in t.half_picks.items()}
    # the adaptive-only record stays what it was: its totals are the one family's
    total = TuningSummary(n_trials, sum(f.complete for f in summaries), sum(f.feasible for f in summaries), [],
                          summaries, n_trials)
    if len(summaries) == 1:
        total.trials = summaries[0].trials
    return tuned, total, halves


def budget_moves(tuning: TuningSummary | None, outcome, shorter: set[str]) -> tuple[list[str], str]:
    """Whether the answer hangs on the tuning budget: the arms it hangs on and why ("" when it does not).

    - "start-up": every search stopped within the sampler's random start-up (simlab.tuning.STARTUP_TRIALS) and
      the tie set holds tuned arms. Those are random draws, and the best of 2N random trials is as likely to be
      among the last N as among the first, so no lookback at this budget is evidence; the arms are those draws.
    - "tie-set": every arm of the tie set (the choice included) is a tuned arm that a run with half the trials
      would not have raced (`shorter`: the arms it would). Trial k is the same at every budget, so the shorter
      run's arms are known here without running it.
    - "choice": the choice is such an arm, and no arm shown equivalent to the leader is a static cap, a family's
      defaults, a baseline or a pick the shorter run makes: its search was still improving where the answer
      comes from (undecided arms beside it do not hold the answer; the shorter run need not pick them).
    """
    if tuning is None or outcome.choice is None or not tuning.families:
        return [], ""
    tie = [outcome.choice, *(a for a in outcome.tie_set if a != outcome.choice)]
    found = {c for f in tuning.families for c in f.candidates}
    if all(f.trials <= STARTUP_TRIALS for f in tuning.families) and any(a in found for a in tie):
        return [a for a in tie if a in found], "start-up"
    if not any(f.half is not None for f in tuning.families):
        return [], ""
    late = {a for a in tie if a in found and a not in shorter}
    if len(late) == len(tie):
        return tie, "tie-set"
    standing = outcome.standings
    anchored = any(standing[a].tie == "equivalent" for a in tie if a not in late)
    if outcome.choice in late and not anchored:
        return [outcome.choice], "choice"
    return [], ""


def max_trials_of(rule, n_trials: int, given: int | None) -> int:
    """The most trials per family the searches may grow to: --max-trials, else [decision] max_trials, else 4 x
    the larger of --trials and [decision] trials (a smaller --trials starts the searches smaller, where the
    answer is clear at once, without lowering the ceiling); never below the trials asked for ([decision]
    max_trials below --trials means no doubling)."""
    if given is not None and given < n_trials:
        raise InputError(None, "max_trials", f"must be at least the trials the searches start with ({n_trials}); "
                         f"found {given}")
    if given is None:
        given = rule.max_trials if rule.max_trials is not None else 4 * max(n_trials, rule.trials)
    return max(given, n_trials)


def trials_to_tell(n_trials: int, why: str) -> int | None:
    """--trials that would tell whether a budget-dependent answer still moves: twice the budget, and at least
    twice the sampler's random start-up when the searches ended within it."""
    if not why:
        return None
    return max(2 * n_trials, 2 * STARTUP_TRIALS) if why == "start-up" else 2 * n_trials


CONFIRM_UNITS = 10  # the confirmation's default size: enough units for the pooled claims


def confirm_seeds(rule, conditions: int) -> int:
    """[decision] confirm_seeds, else enough seeds for 10 units, at least 3 per held-out condition."""
    return rule.confirm_seeds or max(3, math.ceil(CONFIRM_UNITS / max(1, conditions)))


@dataclass
class Confirmation:
    """The choice against its contenders on the confirmation units."""

    confirmed: bool = False
    missed: bool = False  # shown outside the constraint (beyond its margin)
    slo_met: str = ""  # yes | no | undecided
    dominated: dict = field(default_factory=dict)  # label -> (dominates the choice, Holm-adjusted p)
    checks: list[ConditionCheck] = field(default_factory=list)
    arms: list[Arm] = field(default_factory=list)


def confirm_choice(cplan: Plan, cspecs, bounds, seeds: list[int], burst, outcome, reference: str | None, rule,
                   defaults: dict, scenario: Scenario) -> Confirmation:
    """Run the choice and its contenders on fresh seeds (the same held-out conditions) and test it again: no
    dominator (Holm), the constraint not shown missed, the SLO, and every held-out condition alone."""
    cplan.add_seeds(seeds)
    cplan.run(cspecs + bounds, series=burst)
    arms = arms_of(cplan.measured, cspecs)
    by = {a.label: a for a in arms}
    choice = by[outcome.choice]
    p95_axis, thr_axis = axes(rule)
    alpha = alpha_of(rule)
    deployable = [a for a in arms if a.deployable]
    dom = dominators(choice, deployable, p95_axis, thr_axis, alpha)
    missed = _misses(choice, by.get(reference), rule, outcome.limit_ms, alpha)
    gap = choice.p95 - scenario.slo_p95_ms
    checks = _per_condition(cplan.measured, cplan.conditions, choice, deployable, rule, by.get(reference), defaults,
                            scenario)
    return Confirmation(not dom.dominators and not missed and not _uniform_contradiction(checks), missed,
                        _three(p_below(gap), p_above(gap), alpha),
                        {k: (k in dom.dominators, p) for k, p in dom.adjusted_p.items()}, checks, arms)


def _three(p_yes: float, p_no: float, alpha: float) -> str:
    return "yes" if p_yes < alpha else ("no" if p_no < alpha else "undecided")


def _misses(choice: Arm, reference: Arm | None, rule, limit_ms, alpha: float) -> bool:
    """The confirmation units show the choice outside the rule's constraint, by more than its margin (below the
    required throughput under "constrained", above the limit under "slo")."""
    from simlab.decision.rule import constraint_gap

    gap = constraint_gap(choice, rule, reference, limit_ms)
    return gap is not None and p_below(gap) < alpha


def _per_condition(measured: Measurements, held, choice: Arm, arms: list[Arm], rule, reference, defaults,
                   scenario) -> list[ConditionCheck]:
    p95_axis, thr_axis = axes(rule)
    alpha = alpha_of(rule)
    out = []
    for cond in held:
        mask = measured.condition_mask(cond.name)
        mine = choice.on(mask)
        others = [a.on(mask) for a in arms]
        dom = dominators(mine, others, p95_axis, thr_axis, alpha).dominators
        beaten = worse_somewhere(mine, others, p95_axis, thr_axis, alpha)
        statics = [a for a in others if a.family == "static"]
        ref = reference.on(mask) if reference is not None else None
        best = judge(statics, rule, ref, defaults, None, scenario.slo_p95_ms, settle=False).choice if statics else None
        out.append(ConditionCheck(cond.name, int(mask.sum()), _interval(mine.p95), _interval(mine.throughput), dom,
                                  beaten, best))
    return out


def worse_somewhere(choice: Arm, others: list[Arm], p95_axis, thr_axis, alpha: float) -> list[str]:
    """The arms shown worse than the choice by more than a margin on either axis (Holm over both axes of every
    arm compared)."""
    from simlab.decision.compare import holm, worse_beyond

    others = [o for o in others if o.label != choice.label]
    tests = [p for o in others for p in (worse_beyond(o, choice, p95_axis), worse_beyond(o, choice, thr_axis))]
    rejected, _ = holm(tests, alpha)
    return [o.label for i, o in enumerate(others) if rejected[2 * i] or rejected[2 * i + 1]]


def _uniform_contradiction(checks: list[ConditionCheck]) -> list[str]:
    """Arms that dominate the choice on some held-out condition and are shown worse than it (beyond a margin, on
    either axis) on none: the pooled pick is contradicted, not traded off."""
    dom = {a for c in checks for a in c.dominators}
    traded = {a for c in checks for a in c.worse_than_choice}
    return sorted(dom - traded)


def _interval(values) -> Interval:
    return Interval.of(mean_ci(np.asarray(values, dtype=float)))


def arm_results(arms: list[Arm], outcome, rule, reference: Arm | None, frozen: dict,
                dominated: dict | None = None) -> list[ArmResult]:
    """ArmResults of `arms` against the choice, with their standings (and, on confirmation, domination)."""
    choice = next((a for a in arms if a.label == outcome.choice), None)
    out = []
    for a in arms:
        if not a.measured:
            continue
        st = outcome.standings.get(a.label)
        vs_p = vs_t = None
        if choice is not None and a is not choice:
            vs_p, vs_t = _interval(a.p95 - choice.p95), _interval(a.throughput - choice.throughput)
        margin = None
        if rule.rule == "constrained" and reference is not None:
            margin = _interval(a.throughput - rule.throughput_fraction * reference.throughput)
        dom, p = (dominated or {}).get(a.label, (False, None))
        out.append(ArmResult(
            label=a.label, family=a.family, cap=a.cap, options=dict(a.options), units=a.measured,
            p95_ms=[float(v) for v in a.p95], throughput_per_min=[float(v) for v in a.throughput],
            p95=_interval(a.p95), throughput=_interval(a.throughput), p95_vs_choice=vs_p, throughput_vs_choice=vs_t,
            required_margin=margin, feasible=st.feasible if st else "", tie=st.tie if st else "",
            second=st.second if st else "", stopped_after=frozen[a.label].round if a.label in frozen else None,
            dominates=dom, dominates_p=p,
            deadline_share=None if a.deadline_share is None else _interval(a.deadline_share),
            constraint=st.constraint if st else "", on_time=st.on_time if st else ""))
    return out
