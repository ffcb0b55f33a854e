"""The policy families `decide` ranks beside the static frontier, and how each one is put on it.

Tuned families (the article's adaptive cap and the industry's gateway gates of simlab/policies/gates.py) each get
the same budget: `[decision] trials` trials of one Optuna search on the same search units (conditions x seeds) with
the same sampler seed (simlab/tuning/run.py `run_tune`, the family a parameter), and each races with its defaults
(the article's for adaptive; for a gate, the scenario's options with the source's defaults where they are unset,
as `simlab ab --policies <gate>` runs it) and its tuned candidates. Engine priority is not tuned: no gateway cap,
and the engine (a KV backend with scheduling = "priority", vLLM's --scheduling-policy priority) serves interactive
requests first.
"""

from __future__ import annotations

from simlab.errors import InputError
from simlab.scenario import Scenario

TUNED = ("adaptive", "holdback", "aimd", "gradient2")
ENGINE = "engine-priority"
GATES = ("holdback", "aimd", "gradient2")  # deployed with simlab's own options file (simlab.runtime.Scheduler)


def engine_priority(scenario: Scenario) -> bool:
    """The scenario's engine schedules by priority (the KV backend with scheduling = "priority")."""
    b = scenario.backend
    return bool(b.engine_scheduling) and b.scheduling == "priority"


def families_of(scenario: Scenario) -> list[str]:
    """[decision] families, else every family the scenario can run (engine priority only where its engine has
    it). InputError naming the setting when a family cannot run here."""
    given = scenario.decision.families
    if given is None:
        return [*TUNED, *([ENGINE] if engine_priority(scenario) else [])]
    if ENGINE in given and not engine_priority(scenario):
        raise InputError(scenario.path, "decision.families",
                         f"'{ENGINE}' needs an engine that schedules by priority ([backend] kind = "
                         "\"continuous-batching\" with scheduling = \"priority\"); this backend has none")
    return list(given)


def tuned_families(families: list[str]) -> list[str]:
    return [f for f in families if f in TUNED]


def tune_folder(family: str) -> str:
    """Where a family's search lives inside decide's folder (adaptive's stays where it always was)."""
    return "tune" if family == "adaptive" else f"tune-{family}"


def defaults_label(family: str) -> str:
    return f"{family}-defaults"
