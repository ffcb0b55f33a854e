"""One plan of simulations: arms x traffic conditions x seeds, plus the bounds, built once.

A unit is one (condition, seed): every arm of a plan runs on the same units (common random numbers), so arms are
compared unit by unit. Units are ordered seed by seed, every condition within a seed, so the units of the first
k seeds are a prefix of the units of k + 1 seeds: racing (simlab/decision/racing.py) adds seeds to some arms and
compares every pair of arms on the units both have. Each condition's runs go to their own folder
(OUT/CONDITION/runs/ARM/seed-N/), so a rerun resumes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simlab.experiments.runner import Job, run_cells
from simlab.experiments.twins import as_twin, run_key
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario
from simlab.world.conditions import Condition

P95, THR = "interactive_p95_ms", "batch_throughput_per_min"
NO_BATCH, BATCH_ALONE = "bound-no-batch", "bound-batch-alone"


@dataclass(frozen=True)
class ArmSpec:
    """What runs: a label for the tables, the options, the family (static | adaptive | baseline | bound)."""

    label: str
    options: SchedulerOptions
    family: str
    variant: str = ""  # a bound's variant of the scenario (simlab.experiments.runner.VARIANTS)
    cap: int | None = None  # a static arm's batch cap


def bound_specs(options: SchedulerOptions, scenario: Scenario, batch_alone: bool = True) -> list[ArmSpec]:
    """The batch-absent run (interactive P95 no scheduler can beat without preempting) and, if asked, batch alone
    (the most batch can get); none unless the scenario has both classes."""
    if {w.kind for w in scenario.workload} != {"interactive", "batch"}:
        return []
    free = options.with_changes(policy="unscheduled")
    out = [ArmSpec(NO_BATCH, free, "bound", "no-batch")]
    return out + ([ArmSpec(BATCH_ALONE, free, "bound", "batch-alone")] if batch_alone else [])


@dataclass
class Measurements:
    """Per-unit metrics of every arm run so far: (label, condition, seed) -> the run's summary metrics."""

    units: list[tuple[str, int]] = field(default_factory=list)  # (condition, seed), in plan order
    metrics: dict[tuple[str, str, int], dict] = field(default_factory=dict)

    def values(self, label: str, metric: str) -> np.ndarray:
        """`metric` of `label` per unit, NaN where it was not run (or gave no number)."""
        out = np.full(len(self.units), np.nan)
        for i, (c, s) in enumerate(self.units):
            m = self.metrics.get((label, c, s))
            if m is not None and m.get(metric) is not None:
                out[i] = float(m[metric])
        return out

    def ran(self, label: str) -> int:
        return sum(1 for (c, s) in self.units if (label, c, s) in self.metrics)

    def condition_mask(self, name: str) -> np.ndarray:
        return np.array([c == name for c, _ in self.units], dtype=bool)


@dataclass
class Plan:
    """Arms x conditions x seeds of one scenario, run in one pool of processes."""

    scenario: Scenario
    conditions: list[Condition]
    out: Path | None = None  # each condition's runs go to OUT/CONDITION/
    workers: int = 1
    progress: bool = True
    scheduler: str | None = None  # a Dask scheduler address (simlab.experiments.runner.run_jobs)
    measured: Measurements = field(default_factory=Measurements)
    runs: int = 0  # simulations asked for (a rerun that loads saved runs counts them too)
    shared: int = 0  # arm x unit results that were another arm's simulation (simlab/experiments/twins.py)

    def __post_init__(self):
        self._worlds = {c.name: c.apply(self.scenario) for c in self.conditions}
        self._keys: dict[tuple[str, str], tuple] = {}  # (label, condition) -> run key
        self._shared: dict[tuple, tuple[str, str, int]] = {}  # (run key, condition, seed) -> the run that has it

    def add_seeds(self, seeds: list[int]) -> list[tuple[str, int]]:
        """Extend the units with `seeds` (every condition); returns the new units."""
        new = [(c.name, s) for s in seeds for c in self.conditions if (c.name, s) not in self.measured.units]
        self.measured.units.extend(new)
        return new

    def run(self, arms: list[ArmSpec], units: list[tuple[str, int]] | None = None, series=()) -> Measurements:
        """Run every arm on `units` (default: every unit) that it has not run yet. `series`: the (label,
        condition, seed) runs that also keep their time series (series.csv in the run's folder, for figures).
        Arms that are one simulation on a unit (simlab/experiments/twins.py) share it: the first is run, the others
        get its metrics under their own labels."""
        units = self.measured.units if units is None else units
        metrics = self.measured.metrics
        cells, keys, twins = [], [], []
        made: dict[tuple, tuple[str, str, int]] = {}  # this call's representatives: kept once their runs are made
        for c, s in units:
            for a in arms:
                if (a.label, c, s) in metrics:
                    continue
                folder = None if self.out is None else self.out / c
                keep = (a.label, c, s) in series and folder is not None
                if not keep:
                    same = (self._key(a, c), c, s)
                    if same in self._shared or same in made:
                        twins.append(((a.label, c, s), same))
                        continue
                    made[same] = (a.label, c, s)
                job = Job(a.label, a.options, s, a.variant, keep_tasks=keep, tasks_format="none")
                cells.append((self._worlds[c], job, folder))
                keys.append((a.label, c, s))
        for key, result in zip(keys, run_cells(cells, self.workers, self.progress, self.scheduler)):
            metrics[key] = result
        self._shared.update(made)  # after the runs: a failed batch leaves no representative without metrics
        for key, same in twins:
            metrics[key] = as_twin(metrics[self._shared[same]], key[0])
        self.runs += len(cells)
        self.shared += len(twins)
        return self.measured

    def _key(self, arm: ArmSpec, condition: str) -> tuple:
        key = self._keys.get((arm.label, condition))
        if key is None:
            key = self._keys[(arm.label, condition)] = run_key(arm.options, self._worlds[condition], arm.variant)
        return key
