"""The plain answer: the rule's choice against the best static cap, as one sentence, from records only."""

from __future__ import annotations

import math
from pathlib import Path

from simlab import records
from simlab.decision.rule import Arm, decide, dominated_across, dominated_by
from simlab.experiments.stats import mean_ci
from simlab.records import AnswerRecord, DecisionRecord

__all__ = ["AnswerRecord", "DecisionRecord", "answer", "judge_conditions", "load_decision", "save_decision", "sentence"]


def _cap(label: str | None) -> str:
    return label.removeprefix("static-") if label else "?"


def _ci(t) -> str:
    mean, lo, hi = t
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{mean:,.0f}"
    return f"{mean:,.0f} [{lo:,.0f}, {hi:,.0f}]"


def sentence(a: AnswerRecord, options_file: str = "best-options.json") -> str:
    if a.chosen is None:
        return f"No recommendation: {a.reason}."
    held = ""
    if a.held_out_total:
        if a.dominated_across_by:
            held = (f"; but static cap {', '.join(_cap(x) for x in a.dominated_across_by)} dominates it across the "
                    f"{a.held_out_total} held-out traffic conditions")
        else:
            held = f"; no single static cap dominates it across the {a.held_out_total} held-out traffic conditions"
        held += (f" (taken one by one, {a.held_out_holds} of {a.held_out_total} have no static cap that dominates it "
                 "there)")
        caps = {c: x for c, x in a.best_static_by_condition.items() if x}
        if len(set(caps.values())) > 1:
            held += ("; the best static cap differs by condition (" + ", ".join(f"{c}: {_cap(x)}" for c, x in caps.items())
                     + "), so a fixed cap must pick one")
    bound = f" (bound {a.bound_p95:,.0f})" if a.bound_p95 is not None and math.isfinite(a.bound_p95) else ""
    if a.chosen_family == "static":
        extra = ""
        if a.adaptive_dominated_by_static:
            d = a.adaptive_dominated_by_static
            extra = f"; {', '.join(d)} {'is' if len(d) == 1 else 'are'} dominated by a static cap"
        return (f"A static cap of {_cap(a.chosen)} is as good here: adaptive adds nothing measurable on this traffic "
                f"(P95 {_ci(a.p95)} ms{bound}, {a.throughput[0]:,.0f} jobs/min; as options: "
                f"batchMinConcurrency = batchMaxConcurrency = {_cap(a.chosen)}){extra}{held}.")
    if a.chosen_family == "adaptive":
        vs = ""
        if a.best_static:
            vs = (f" (best static: cap {_cap(a.best_static)}, {a.best_static_p95[0]:,.0f} ms, "
                  f"{a.best_static_throughput[0]:,.0f} jobs/min)")
        return (f"Deploy adaptive ({a.chosen}) with {options_file}: P95 {_ci(a.p95)} ms{bound}, "
                f"{a.throughput[0]:,.0f} jobs/min{vs}{held}.")
    return f"{a.chosen} is best here, but it is not a production scheduler setting."


def answer(scenario_name: str, arms: list[Arm], rule, reference: Arm | None, defaults: dict,
           bound_p95: list[float] | None, slo_ms: float | None) -> tuple[AnswerRecord, DecisionRecord]:
    """Apply the rule to every arm and to the static caps alone, and say which wins and by how much."""
    record = decide(arms, rule, reference, defaults, bound_p95, slo_ms)
    statics = [a for a in arms if a.family == "static"]
    static_pick = decide(statics, rule, reference, defaults, bound_p95, slo_ms).chosen if statics else None
    by = {a.label: a for a in arms}
    chosen = by.get(record.chosen) if record.chosen else None
    bs = by.get(static_pick) if static_pick else None
    dominated = [a.label for a in arms if a.family == "adaptive" and any(dominated_by(a, s, rule.level) for s in statics)]
    out = AnswerRecord(
        scenario=scenario_name, rule=rule.rule, chosen=record.chosen,
        chosen_family=chosen.family if chosen else None, chosen_options=chosen.options if chosen else None,
        p95=chosen.ci("interactive_p95_ms", rule.level) if chosen else None,
        throughput=chosen.ci("batch_throughput_per_min", rule.level) if chosen else None,
        bound_p95=mean_ci(bound_p95)[0] if bound_p95 else None,
        best_static=static_pick,
        best_static_p95=bs.ci("interactive_p95_ms", rule.level) if bs else None,
        best_static_throughput=bs.ci("batch_throughput_per_min", rule.level) if bs else None,
        adaptive_dominated_by_static=dominated, reason=record.reason,
    )
    record.best_static = static_pick
    out.sentence = sentence(out)
    record.verdict = out.sentence
    return out, record


def save_decision(record: DecisionRecord, path: Path) -> None:
    records.save(record, Path(path).parent, Path(path).name)


def load_decision(path: Path) -> DecisionRecord:
    return records.load(path, DecisionRecord.KIND)


def judge_conditions(ans: AnswerRecord, arms: list[Arm], groups: dict[str, slice], rule, reference_label: str | None,
                     defaults: dict, bound_p95: list[float] | None = None, slo_ms: float | None = None) -> None:
    """Fill the per-condition verdicts of `ans`: on each held-out condition (its units: `groups[name]`) which
    static caps dominate the choice and which cap the rule picks among static caps alone; and the caps that
    dominate it across all the held-out conditions (the export gate)."""
    if ans.chosen is None:
        return
    by = {a.label: a for a in arms}
    chosen = by[ans.chosen]
    statics = [a for a in arms if a.family == "static" and a.label != ans.chosen]
    ans.held_out_total = ans.held_out_holds = 0
    for name, g in groups.items():
        sub = {a.label: Arm(a.label, a.options, a.p95[g], a.throughput[g], a.family) for a in arms}
        beaten = [s.label for s in statics if dominated_by(sub[ans.chosen], sub[s.label], rule.level)]
        ans.dominated_on_condition[name] = beaten
        ans.held_out_total += 1
        ans.held_out_holds += not beaten
        only = [x for x in sub.values() if x.family == "static"]
        ref = sub.get(reference_label) if reference_label else None
        bound = bound_p95[g] if bound_p95 else None
        ans.best_static_by_condition[name] = decide(only, rule, ref, defaults, bound, slo_ms).chosen if only else None
    ans.dominated_across_by = [s.label for s in statics if dominated_across(chosen, s, list(groups.values()), rule.level)]
