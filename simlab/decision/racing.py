"""Racing: sequential replication on the selection units until the answer is settled or the budget is spent.

Round 0 measures every arm on the first seeds of every held-out condition (common random numbers). After each
round the rule judges the arms on the units they share (simlab/decision/rule.py); an arm the rule has put out
(shown infeasible, or worse than the leader by more than the margin on the rule's first axis: out of the tie set)
stops being measured and keeps that standing, and still counts in the later rounds' equivalence tests as one
shown not equivalent, so that each Holm family is as large as if it were measured; the others get more seeds (the
count doubles, up to the budget). Racing stops as soon as the choice is settled (it would be the same whatever
the undecided arms turn out to be), or when the budget is spent: then the answer is unsettled, and the record
says which arms keep it so and how many seeds would decide them. The baselines (not deployable) run in round 0
only, for the record; the reference arm and the bounds the rule reads run in every round.

Racing also stops when the tie set and the choice are the same after two rounds in a row (the answer has stopped
changing) even though some arms are still undecided, unless the budget's remaining seeds are expected to decide
those arms (at the effects measured): an answer the budget can still settle is not called stable before it is
spent. Such a stop counts only once the arms stopped after the round before are measured on this round's units
(with none of them, "unchanged" says nothing of those arms). The record says which criterion ended it.

A long static frontier is refined rather than swept (`coarse_caps`): round 0 measures every cap up to 4 and a
geometric grid above (ratio 1.4, the top and the reference cap always in); after each judgement, the cap halfway
between two measured neighbours joins (measured on every unit so far) wherever either neighbour is still in
contention, until no such gap is left. Caps between two neighbours that are both out are never measured: on a
frontier whose P95 and throughput move with the cap, they lie between two arms already beaten.

`exhaustive=True` measures every arm (the whole frontier) on every selection unit of the budget first, then
judges the same rounds on the units of their seeds and stops where racing's rule says the answer is stable, with
no arm ever put out of measurement: what racing's eliminations and frontier refinement would change, checked
(benchmarks/run.py counts the runs they save). Whether more seeds would move a stable answer is the budget's
question (`--replications`), not this one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simlab.decision.compare import P95 as P95_AXIS, THR as THR_AXIS, Arm
from simlab.decision.frontier import SHARE, exported_options
from simlab.decision.rule import Frozen, Outcome, judge
from simlab.experiments.plan import NO_BATCH, P95, THR, ArmSpec, Measurements, Plan
from simlab.records import Round


FIRST_UNITS = 4  # the first round's units: enough for a t-test to put clearly worse arms out
DENSE_CAPS = 8  # a frontier of at most this many caps is measured whole
GRID_RATIO = 1.4  # above cap 4, the first round's caps grow by this factor


def coarse_caps(caps: list[int], keep=()) -> set[int]:
    """The static caps round 0 measures: all of a short frontier; else every cap up to 4, then a geometric grid
    (each cap the first at least GRID_RATIO x the last one taken), the top and the caps in `keep`."""
    if len(caps) <= DENSE_CAPS:
        return set(caps)
    out, last = set(), None
    for c in caps:
        if c <= 4 or last is None or c >= last * GRID_RATIO:
            out.add(c)
            last = c
    return out | {caps[-1]} | {c for c in keep if c in caps}


@dataclass
class Race:
    outcome: Outcome
    arms: list[Arm]  # every arm on the selection units (NaN where it was not run)
    frozen: dict[str, Frozen]
    rounds: list[Round]
    bound_p95: list[float] | None
    stable: bool  # settled by the rule, or `unchanged`
    settled_by: str  # "decided" | "unchanged" | "" (the budget ran out first)
    judged: int  # the selection units the answer was judged on (the first ones of the plan's; all, when racing)


def schedule(first: int, budget: int) -> list[int]:
    """Selection seeds per condition after each round: first, doubling, the budget last."""
    out = [min(first, budget)]
    while out[-1] < budget:
        out.append(min(budget, 2 * out[-1]))
    return out


def first_seeds(rule, conditions: int, budget: int) -> int:
    """Racing's first round: [decision] first_seeds, else enough seeds for 4 units (at least one per condition)."""
    n = rule.first_seeds or max(1, math.ceil(FIRST_UNITS / max(1, conditions)))
    return min(n, budget)


def arms_of(measured: Measurements, specs: list[ArmSpec]) -> list[Arm]:
    return [Arm(s.label, exported_options(s.options), measured.values(s.label, P95), measured.values(s.label, THR),
                s.family, s.cap, _share(measured, s.label)) for s in specs]


def _share(measured: Measurements, label: str):
    """The arm's batch_deadline_share per unit, or None where no run measured it (no batch deadline)."""
    share = measured.values(label, SHARE)
    return share if np.isfinite(share).any() else None


def put_out(st) -> bool:
    """Shown infeasible, or out of the tie set: racing stops measuring such an arm, and refines no gap beside it."""
    return st.feasible == "no" or st.tie == "out"


def stop_the_out(outcome: Outcome, frozen: dict[str, Frozen], k: int, keep) -> None:
    """Arms shown infeasible, or out of the tie set (worse than the leader by more than the margin), stop being
    measured after round k (their standing kept). An arm of the tie set goes on, even when it is out on the second
    axis: that standing is against the tie set's best arm on it, which can itself leave the tie set later (an arm
    frozen there would then be judged against a tie set it is no longer compared with)."""
    for label, st in outcome.standings.items():
        if label in frozen or label in keep:
            continue
        if put_out(st):
            frozen[label] = Frozen(st, k)


def best_of(arms: list[Arm], family: str, rule, reference, defaults, bound, slo_ms) -> str | None:
    """The rule over one family alone (selection units): the best static cap, the best adaptive arm; when none
    is feasible, the family's best arm on the rule's first axis (for the sentence's trade-off)."""
    mine = [a for a in arms if a.family == family and a.measured]
    if not mine:
        return None
    outcome = judge(mine, rule, reference, defaults, bound, slo_ms, settle=False)
    if outcome.choice is not None:
        return outcome.choice
    first = P95_AXIS if rule.rule == "constrained" else THR_AXIS
    sign = 1 if first == P95_AXIS else -1
    return min(mine, key=lambda a: (sign * float(np.nanmean(a.values(first))), a.label)).label


def refine(statics: list[ArmSpec], waiting: set[str], outcome: Outcome, frozen: dict[str, Frozen],
           best_static: str | None = None) -> list[ArmSpec]:
    """The waiting caps to measure now: the one halfway between each two measured neighbours of which at least
    one is still in contention (not shown infeasible, not out of the tie set) or is the best static cap (which
    the answer names, so it is found as a full sweep would find it)."""
    def contending(label: str) -> bool:
        if label == best_static:
            return True
        st = frozen[label].standing if label in frozen else outcome.standings.get(label)
        return st is None or not put_out(st)

    measured = [i for i, s in enumerate(statics) if s.label not in waiting]
    out = []
    for i, j in zip(measured, measured[1:]):
        if j - i > 1 and (contending(statics[i].label) or contending(statics[j].label)):
            out.append(statics[(i + j) // 2])
    return out


def within_reach(outcome: Outcome, n: int, budget: int, conditions: int) -> bool:
    """The seeds left in the budget are expected to decide the arms that keep the answer open (the rule's units
    needed, at the effects measured, are at most the budget's)."""
    if n >= budget or not outcome.unsettling:
        return False
    return outcome.seeds_needed(conditions) <= budget


def unchanged(rounds: list[Round], outcome: Outcome, refined: bool, n: int, budget: int, conditions: int) -> bool:
    """The answer stopped changing: the same tie set and the same choice as the round before (no cap joined in
    between), and the budget's remaining seeds are not expected to decide it."""
    if not rounds or refined:
        return False
    last = rounds[-1]
    return (last.tie_set == outcome.tie_set and last.choice == outcome.choice
            and not within_reach(outcome, n, budget, conditions))


def race(plan: Plan, specs: list[ArmSpec], bounds: list[ArmSpec], rule, reference: str | None, defaults: dict,
         slo_ms: float, first_seed: int, budget: int, exhaustive: bool = False) -> Race:
    """Race `specs` on `plan`'s conditions, selection seeds from `first_seed`, at most `budget` per condition.
    Stable: the rule says settled (no undecided arm could move the choice), or the answer is `unchanged` over two
    rounds and the budget is not expected to settle it. `exhaustive`: every arm on every
    unit first, then the same rounds judged on the units of their seeds, stopping where racing would: the two
    answers differ only by what racing did not measure."""
    steps = schedule(first_seeds(rule, len(plan.conditions), budget), budget)
    statics = sorted((s for s in specs if s.family == "static"), key=lambda s: s.cap)
    ref_cap = [s.cap for s in statics if s.label == reference]
    grid = coarse_caps([s.cap for s in statics], ref_cap) if not exhaustive else {s.cap for s in statics}
    waiting = {s.label for s in statics if s.cap not in grid}  # caps refinement may still add
    frozen: dict[str, Frozen] = {}
    rounds: list[Round] = []
    done = 0
    every_round = [b for b in bounds if b.label == NO_BATCH] if rule.rule == "slo" else []
    start = plan.runs
    if exhaustive:  # every arm on every unit, then the same rounds judged on the units of their seeds
        plan.add_seeds(list(range(first_seed, first_seed + budget)))
        plan.run(specs + bounds)
    for k, n in enumerate(steps):
        units = plan.add_seeds(list(range(first_seed + done, first_seed + n)))
        live = [s for s in specs if s.label not in frozen and s.label not in waiting
                and (k == 0 or s.family != "baseline" or s.label == reference)]
        before = start if k == 0 else plan.runs
        plan.run(live + (bounds if k == 0 else every_round), units)
        upto = len(plan.conditions) * n  # the units of the first n seeds (the plan orders units seed by seed)
        bound = plan.measured.values(NO_BATCH, P95)[:upto] if bounds else None
        refined = False
        while True:  # judge; refine the frontier where it is in contention; judge again, until nothing joins
            arms = [a.on(slice(0, upto)) for a in arms_of(plan.measured, specs)]
            by = {a.label: a for a in arms}
            outcome = judge([a for a in arms if a.label not in waiting], rule, by.get(reference), defaults, bound,
                            slo_ms, frozen)
            best = best_of([a for a in arms if a.label not in waiting], "static", rule, by.get(reference), defaults,
                           bound, slo_ms) if waiting else None
            joining = refine(statics, waiting, outcome, frozen, best)
            if not joining:
                stable = outcome.settled or unchanged(rounds, outcome, refined, n, budget, len(plan.conditions))
                # "unchanged since the round before" says nothing of the arms stopped after that round: they
                # have no units of this one. Measured on them before the stop counts (what --exhaustive sees)
                joining = [] if outcome.settled or not stable else [
                    s for s in specs if s.label in frozen and frozen[s.label].round == k - 1]
                if not joining:
                    break
                for s in joining:
                    del frozen[s.label]
            else:
                waiting -= {s.label for s in joining}
                refined = True
            live += joining
            plan.run(joining)  # on every unit so far: compared on the same units as the others
        rounds.append(Round(n, len(specs) if exhaustive else len(live), plan.runs - before, outcome.choice,
                            outcome.tie_set, stable))
        done = n
        if stable or n >= budget:
            break
        if exhaustive:
            continue  # nothing is frozen: every arm is judged on every unit of the round
        stop_the_out(outcome, frozen, k, keep=(reference, outcome.choice, outcome.leader, outcome.second_leader))
    bound = [float(v) for v in plan.measured.values(NO_BATCH, P95)[:upto]] if bounds else None
    return Race(outcome, arms, frozen, rounds, bound, stable, "decided" if outcome.settled else (
        "unchanged" if stable else ""), upto)
