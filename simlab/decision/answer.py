"""The plain answer: the rule's choice against the best static cap, as one sentence, from records only."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simlab.atomic import atomic_write_text
from simlab.decision.rule import Arm, DecisionRecord, decide, dominated_by
from simlab.experiments.stats import mean_ci


@dataclass
class AnswerRecord:
    """Everything the one-line answer says, as numbers (JSON save/load; renderers format it)."""

    scenario: str
    rule: str
    chosen: str | None
    chosen_family: str | None
    chosen_options: dict | None
    p95: tuple[float, float, float] | None  # mean, CI low, CI high
    throughput: tuple[float, float, float] | None
    bound_p95: float | None
    best_static: str | None
    best_static_p95: tuple[float, float, float] | None
    best_static_throughput: tuple[float, float, float] | None
    adaptive_dominated_by_static: list[str] = field(default_factory=list)  # adaptive arms a static cap dominates
    held_out_total: int = 0  # held-out traffic conditions judged
    held_out_holds: int = 0  # ... on which the choice is not dominated by any static cap
    reason: str = ""
    sentence: str = ""

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self), indent=1, default=float))

    @classmethod
    def load(cls, path: Path) -> "AnswerRecord":
        data = json.loads(Path(path).read_text())
        for k in ("p95", "throughput", "best_static_p95", "best_static_throughput"):
            if data.get(k) is not None:
                data[k] = tuple(data[k])
        return cls(**data)


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
    held = (f"; taken one by one, {a.held_out_holds} of {a.held_out_total} held-out traffic conditions have no static cap "
            "that dominates it there" if a.held_out_total else "")
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
    atomic_write_text(path, json.dumps(asdict(record), indent=1, default=float))


def load_decision(path: Path) -> DecisionRecord:
    return DecisionRecord(**json.loads(Path(path).read_text()))
