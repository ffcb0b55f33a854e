"""What a decision leaves in its folder, all from the DecideRecord: result.json (the record), frontier.csv (every arm
on the selection units), confirmation.csv, conditions.csv, rounds.csv, and exactly one options file at the top:
best-options.json when the answer is exported, else candidate-options-NOT-VALIDATED.json when there is a choice."""

from __future__ import annotations

import json
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.store import csv_text
from simlab.records import DecideRecord, save

BEST, CANDIDATE = "best-options.json", "candidate-options-NOT-VALIDATED.json"
INTERVALS = ("p95", "throughput", "p95_vs_choice", "throughput_vs_choice", "required_margin", "deadline_share")
ARM_COLUMNS = (["arm", "family", "cap", "units"] + [f"{n}_{p}" for n in INTERVALS for p in ("mean", "ci_low", "ci_high")]
               + ["feasible", "tie", "second", "stopped_after", "dominates", "dominates_p", "chosen"])


def arm_rows(r: DecideRecord, confirmation: bool) -> list[dict]:
    rows = []
    for a in r.confirmation if confirmation else r.selection:
        row = {"arm": a.label, "family": a.family, "cap": a.cap, "units": a.units, "feasible": a.feasible,
               "tie": a.tie, "second": a.second, "stopped_after": a.stopped_after, "dominates": a.dominates,
               "dominates_p": a.dominates_p, "chosen": a.label == r.choice}
        for n in INTERVALS:
            i = getattr(a, n)
            for p in ("mean", "ci_low", "ci_high"):
                row[f"{n}_{p}"] = getattr(i, p) if i is not None else None
        rows.append(row)
    return rows


def decide_rows(r: DecideRecord, confirmation: bool) -> tuple[list[dict], list[str]]:
    """decide's arm rows: ab's columns and, when decide tuned, the trials its family's search got (the equal
    budget, per arm; blank for the static caps, engine priority and the baselines) when it tuned more than one
    family (the adaptive cap alone writes the columns it always wrote)."""
    rows = arm_rows(r, confirmation)
    if r.tuning is None or len(r.tuning.families) < 2:
        return rows, list(ARM_COLUMNS)
    trials = {f.family: f.trials for f in r.tuning.families}
    for row in rows:
        row["tuning_trials"] = trials.get(row["family"])
    at = ARM_COLUMNS.index("units") + 1
    return rows, [*ARM_COLUMNS[:at], "tuning_trials", *ARM_COLUMNS[at:]]


def write_ab(r: DecideRecord, out: Path) -> None:
    """The frontier verdict inside an A/B folder: decision.json (the record) and frontier.csv."""
    out = Path(out)
    save(r, out, "decision.json")
    atomic_write_text(out / "frontier.csv", csv_text(arm_rows(r, False), ARM_COLUMNS))
    (out / "answer.json").unlink(missing_ok=True)  # written by simlab before the DecideRecord


def write(r: DecideRecord, out: Path) -> Path | None:
    """Every file but the report and the figures; returns the options file written (or None)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save(r, out)
    for old in ("answer.json", "decision.json", "candidate-options-NOT-VALIDATED.json"):
        (out / old).unlink(missing_ok=True)  # written by simlab before the DecideRecord
    atomic_write_text(out / "frontier.csv", csv_text(*decide_rows(r, False)))
    if r.confirmation:
        atomic_write_text(out / "confirmation.csv", csv_text(*decide_rows(r, True)))
    if r.per_condition:
        rows = [{"condition": c.condition, "units": c.units, "p95_mean": c.p95.mean, "p95_ci_low": c.p95.ci_low,
                 "p95_ci_high": c.p95.ci_high, "throughput_mean": c.throughput.mean,
                 "throughput_ci_low": c.throughput.ci_low, "throughput_ci_high": c.throughput.ci_high,
                 "dominators": " ".join(c.dominators), "worse": " ".join(c.worse_than_choice),
                 "best_static": c.best_static} for c in r.per_condition]
        atomic_write_text(out / "conditions.csv", csv_text(rows, list(rows[0])))
    if r.rounds:
        rows = [{"round": i, "seeds": x.seeds, "arms": x.arms, "runs": x.runs, "choice": x.choice,
                 "tie_set": " ".join(x.tie_set), "settled": x.settled} for i, x in enumerate(r.rounds)]
        atomic_write_text(out / "rounds.csv", csv_text(rows, list(rows[0])))
    for stale in (BEST, CANDIDATE):
        (out / stale).unlink(missing_ok=True)
    chosen = r.arm(r.choice)
    if chosen is None or chosen.family == "baseline" or r.command != "decide":
        return None
    path = out / (BEST if r.exported else CANDIDATE)
    atomic_write_text(path, json.dumps(chosen.options, indent=2) + "\n")
    return path
