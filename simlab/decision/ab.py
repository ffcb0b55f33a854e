"""The static frontier as an arm of `ab`: every cap 1..maxConcurrency-1 on the A/B's seeds, and the verdict."""

from __future__ import annotations

from pathlib import Path

from simlab.decision.answer import AnswerRecord, answer, save_decision, sentence
from simlab.decision.frontier import frontier_specs, measure, production_options
from simlab.decision.rule import P95, THR, Arm, DecisionRecord
from simlab.experiments.tables import csv_text
from simlab.atomic import atomic_write_text
from simlab.world.conditions import Condition

FAMILY = {"adaptive": "adaptive", "static": "static"}
FRONTIER_COLUMNS = ["arm", "family", "feasible", "chosen", "p95_tie", "p95_mean", "p95_ci_low", "p95_ci_high",
                    "throughput_mean", "throughput_ci_low", "throughput_ci_high", "p95_vs_chosen", "p95_vs_chosen_ci_low",
                    "p95_vs_chosen_ci_high", "thr_vs_chosen", "thr_vs_chosen_ci_low", "thr_vs_chosen_ci_high"]


def _options(opts) -> dict:
    try:
        return production_options(opts)
    except ValueError:
        return opts.to_json_dict()


def ab_decision(scenario, options, result, out: Path | None, workers: int = 1,
                progress: bool = True, scheduler=None) -> tuple[AnswerRecord, DecisionRecord] | None:
    """None when there is nothing to decide (no maxConcurrency, or a single class)."""
    kinds = {w.kind for w in scenario.workload}
    if options.max_concurrency is None or options.max_concurrency < 2 or kinds != {"interactive", "batch"}:
        return None
    base = Condition("base", "base", 0.0)
    frontier = measure(scenario, frontier_specs(options), [base], result.seeds,
                       None if out is None else out / "frontier", workers, progress, bounds=False,
                       scheduler=scheduler)
    arms = list(frontier.arms)
    swept = {a.label for a in arms}
    for p in result.policies:
        label = p
        if p == "static":
            label = f"static-{options.batch_max_concurrency}"
            if label in swept:
                continue  # the frontier holds it
        rows = [r for r in result.rows if r["policy"] == p]
        opts = options.with_changes(policy=p)
        share = [r["batch_deadline_share"] for r in rows] if all("batch_deadline_share" in r for r in rows) else None
        arms.append(Arm(label, _options(opts), [r[P95] for r in rows], [r[THR] for r in rows], FAMILY.get(p, "baseline"),
                        share))
    rule = scenario.decision
    by = {a.label: a for a in arms}
    ref_label = f"static-{options.batch_max_concurrency}" if rule.reference == "static" else rule.reference
    reference = by.get(ref_label)
    bound = [m[P95] for m in result.bounds if m["policy"] == "bound-no-batch"]
    defaults = _options(options.with_changes(policy="adaptive")) if options.batch_max_concurrency is not None else {}
    ans, record = answer(scenario.name, arms, rule, reference, defaults, bound or None, scenario.slo_p95_ms)
    ans.sentence = record.verdict = sentence(ans, "the A/B's options")  # ab exports no options file
    if out is not None:
        ans.save(out / "answer.json")
        save_decision(record, out / "decision.json")
        atomic_write_text(out / "frontier.csv", csv_text(record.ranking, FRONTIER_COLUMNS))
    return ans, record
