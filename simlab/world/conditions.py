"""Traffic conditions: a scenario evaluated over a family of traffic, not only over seeds.

On a trace scenario the seed changes only the batch draws, so held-out seeds do not hold traffic out. A
condition is the scenario transformed (so every run stays keyed by its scenario, and bound runs see the
same transformed traffic): another window of each trace (time shift), a block-bootstrap resample of each
trace (keeps its bursts), an interactive load multiplier (rates scaled for synthetic processes, thinning or
superposition of shifted copies for traces, users scaled for closed loops), a diurnal profile on the
interactive arrivals (thinning against a sine of period `diurnal_period_ms`, default the run's duration:
the mean load is kept, peaks reach 1 + amplitude), the batch arrivals delayed.

The scenario's `[conditions]` table lists them; the first `search` conditions are searched on, the others
are held out. "base" (the scenario as written) is always first.
"""

from __future__ import annotations

from dataclasses import dataclass

from simlab.errors import InputError
from simlab.scenario import ClosedLoop, Diurnal, Piecewise, Poisson, Scenario, Trace


@dataclass(frozen=True)
class Condition:
    name: str  # tables and run folders: "base", "shift-600s", "resample-2", "load-x1.5", "diurnal-a0.5", "batch-at-60s"
    kind: str  # base | shift | resample | load | diurnal | batch_at
    value: float
    period_ms: float | None = None  # diurnal only (None: the scenario's duration)

    def apply(self, scenario: Scenario) -> Scenario:
        if self.kind == "base":
            return scenario
        work = []
        for w in scenario.workload:
            a = w.arrivals
            if self.kind == "shift" and isinstance(a, Trace):
                w = w.model_copy(update={"arrivals": a.model_copy(update={"offset_ms": a.offset_ms + self.value})})
            elif self.kind == "resample" and isinstance(a, Trace):
                block = scenario.conditions.resample_block_ms
                w = w.model_copy(update={"arrivals": a.model_copy(update={"resample_block_ms": block, "resample": int(self.value)})})
            elif self.kind == "load" and w.kind == "interactive":
                w = _scaled(w, self.value)
            elif self.kind == "diurnal" and w.kind == "interactive" and not isinstance(a, ClosedLoop):
                w = w.model_copy(update={"diurnal_amplitude": self.value, "diurnal_period_ms": self.period_ms})
            elif self.kind == "batch_at" and w.kind == "batch":
                w = w.model_copy(update={"shift_ms": w.shift_ms + self.value})
            work.append(w)
        return scenario.model_copy(update={"workload": work})


def _scaled(w, m: float):
    a = w.arrivals
    if isinstance(a, Poisson):
        return w.model_copy(update={"arrivals": a.model_copy(update={"rate_per_s": a.rate_per_s * m})})
    if isinstance(a, Piecewise):
        return w.model_copy(update={"arrivals": a.model_copy(update={"rates_per_s": [r * m for r in a.rates_per_s]})})
    if isinstance(a, Diurnal):
        return w.model_copy(update={"arrivals": a.model_copy(update={"mean_rate_per_s": a.mean_rate_per_s * m})})
    if isinstance(a, ClosedLoop):
        return w.model_copy(update={"arrivals": a.model_copy(update={"users": max(1, round(a.users * m))})})
    return w.model_copy(update={"load": w.load * m})  # traces and bursts: thinning / superposition


def _s(ms: float) -> str:
    return f"{ms / 1000:g}s"


def conditions_of(scenario: Scenario) -> list[Condition]:
    """Every condition of the scenario's [conditions] table, "base" first, in a fixed order."""
    c = scenario.conditions
    out = [Condition("base", "base", 0.0)]
    has_trace = any(isinstance(w.arrivals, Trace) for w in scenario.workload)
    if has_trace:
        out += [Condition(f"shift-{_s(v)}", "shift", v) for v in c.time_shifts_ms if v != 0]
        out += [Condition(f"resample-{i + 1}", "resample", i + 1) for i in range(c.resamples)]
    out += [Condition(f"load-x{v:g}", "load", v) for v in c.load if v != 1]
    if any(w.kind == "interactive" and not isinstance(w.arrivals, ClosedLoop) for w in scenario.workload):
        out += [Condition(f"diurnal-a{v:g}", "diurnal", v, c.diurnal_period_ms) for v in c.diurnal]
    out += [Condition(f"batch-at-{_s(v)}", "batch_at", v) for v in c.batch_at_ms if v != 0]
    return out


def _check(scenario: Scenario, every: list[Condition]) -> None:
    """What [conditions] says must take effect: no entry twice, none that changes nothing, `search` leaving at
    least one condition held out. An InputError at the key otherwise (never a silent clamp or drop)."""
    c = scenario.conditions
    for key in ("time_shifts_ms", "load", "batch_at_ms", "diurnal"):
        values = getattr(c, key)
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise InputError(scenario.path, f"conditions.{key}", f"{twice[0]:g} is given twice")
    if (c.time_shifts_ms or c.resamples) and not any(isinstance(w.arrivals, Trace) for w in scenario.workload):
        key = "time_shifts_ms" if c.time_shifts_ms else "resamples"
        raise InputError(scenario.path, f"conditions.{key}", "shifts and resamples act on trace workloads, and no "
                         "workload replays a trace")
    if c.diurnal and not any(w.kind == "interactive" and not isinstance(w.arrivals, ClosedLoop)
                             for w in scenario.workload):
        raise InputError(scenario.path, "conditions.diurnal", "a diurnal profile thins open-loop interactive "
                         "arrivals, and no interactive workload is open-loop")
    names = ", ".join(x.name for x in every)
    if len(every) == 1 and c.search > 1:
        raise InputError(scenario.path, "conditions.search", f"is {c.search}, but there is 1 condition ({names}: the "
                         "scenario itself); list more in [conditions] (load, batch_at_ms, ...) or set search = 1")
    if len(every) > 1 and c.search > len(every) - 1:
        raise InputError(scenario.path, "conditions.search", f"is {c.search}, but there are {len(every)} conditions "
                         f"({names}) and one at least must be held out: "
                         + ("search must be 1" if len(every) == 2 else f"search can be 1 to {len(every) - 1}"))


def split(scenario: Scenario) -> tuple[list[Condition], list[Condition]]:
    """(search conditions, held-out conditions): disjoint whenever there are two conditions or more (the
    search keeps at least one out). With a single condition it is both, and only held-out seeds hold out."""
    every = conditions_of(scenario)
    _check(scenario, every)
    if len(every) == 1:
        return every, every
    n = scenario.conditions.search
    return every[:n], every[n:]
