"""The search space: which options are tuned, in which ranges, and how a trial's values become options."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from simlab.errors import InputError
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario, TUNABLE

LOG_SCALE = {"interactiveRpsThreshold", "interactiveP95LatencyMs", "windowMs", "smoothingTauMs"}
INTEGER = {"batchMaxConcurrency", "batchMinConcurrency"}


@dataclass(frozen=True)
class Space:
    bounds: dict[str, tuple[float, float]]  # in suggestion order; batchMin's high is capped by batchMax
    max_concurrency: int

    def suggest(self, trial) -> dict:
        params = {}
        for name, (lo, hi) in self.bounds.items():
            if name == "batchMinConcurrency":
                hi = min(hi, params["batchMaxConcurrency"])
                params[name] = trial.suggest_int(name, int(lo), int(max(lo, hi)))
            elif name in INTEGER:
                params[name] = trial.suggest_int(name, int(lo), int(hi))
            else:
                params[name] = trial.suggest_float(name, lo, hi, log=name in LOG_SCALE)
        return params


def build_space(scenario: Scenario, base: SchedulerOptions) -> Space:
    """Default ranges around the scenario, overridden by its [tune.bounds]; checked against the policy's limits."""
    tune = scenario.tune
    cap = base.max_concurrency
    if cap is None or cap < 2:
        raise InputError(scenario.path, "scheduler.maxConcurrency", "tuning needs maxConcurrency >= 2 (one slot kept for interactive)")
    slo = scenario.slo_p95_ms
    bounds: dict[str, tuple[float, float]] = {
        "interactiveRpsThreshold": (0.5, 200.0),
        "interactiveP95LatencyMs": (max(10.0, slo / 20), slo * 5),
        "windowMs": (1000.0, 60_000.0),
    }
    if tune.smoothing == "alpha":
        bounds["smoothingAlpha"] = (0.05, 1.0)
    elif tune.smoothing == "tau":
        bounds["smoothingTauMs"] = (500.0, 60_000.0)
    bounds["batchMaxConcurrency"] = (1, cap - 1)
    bounds["batchMinConcurrency"] = (0 if tune.allow_zero_min else 1, cap - 1)
    for key, value in tune.bounds.items():
        if key == "smoothingAlpha" and tune.smoothing != "alpha" or key == "smoothingTauMs" and tune.smoothing != "tau":
            raise InputError(scenario.path, f"tune.bounds.{key}", f"is not searched with smoothing = '{tune.smoothing}'")
        bounds[key] = tuple(value)
    for key in INTEGER:
        lo, hi = bounds[key]
        if lo != int(lo) or hi != int(hi):
            raise InputError(scenario.path, f"tune.bounds.{key}", f"[{lo}, {hi}] must be whole numbers")
        if hi > cap - 1:
            raise InputError(
                scenario.path,
                f"tune.bounds.{key}",
                f"high {int(hi)} leaves no slot for interactive work (maxConcurrency is {cap}; expected <= {cap - 1})",
            )
    return Space(bounds, cap)


def round_sig(x: float, digits: int = 2) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def round_to(x: float, step: float) -> float:
    return max(step, round(round(x / step) * step, 10))


def rounded(key: str, value):
    """Production-sensible precision: thresholds and tau to 2 significant digits, windowMs to 500 ms,
    smoothingAlpha to 0.05. Trials evaluate the rounded values, so what is validated is what is exported."""
    if key in INTEGER:
        return int(value)
    if key in ("interactiveRpsThreshold", "interactiveP95LatencyMs", "smoothingTauMs"):
        return round_sig(float(value))
    if key == "windowMs":
        return round_to(float(value), 500.0)
    if key == "smoothingAlpha":
        return min(1.0, round_to(float(value), 0.05))
    return value


def options_for(base: SchedulerOptions, params: dict, scenario: Scenario) -> SchedulerOptions:
    """The adaptive options a trial evaluates: the base options with the trial's values, rounded."""
    changes = {"policy": "adaptive", "recheck_on_expiry": scenario.tune.recheck_on_expiry or base.recheck_on_expiry}
    for key, value in params.items():
        changes[_FIELD[key]] = rounded(key, value)
    if scenario.tune.smoothing == "none":
        changes["smoothing_alpha"] = None
        changes["smoothing_tau_ms"] = None
    elif scenario.tune.smoothing == "alpha":
        changes["smoothing_tau_ms"] = None
    else:
        changes["smoothing_alpha"] = None
    return base.with_changes(**changes)


TUNABLE_KEYS = TUNABLE  # the scenario's list of tunable options, in suggestion order
_FIELD = {
    "interactiveRpsThreshold": "interactive_rps_threshold",
    "interactiveP95LatencyMs": "interactive_p95_latency_ms",
    "windowMs": "window_ms",
    "smoothingAlpha": "smoothing_alpha",
    "smoothingTauMs": "smoothing_tau_ms",
    "batchMaxConcurrency": "batch_max_concurrency",
    "batchMinConcurrency": "batch_min_concurrency",
}


def params_of(options: SchedulerOptions, space: Space) -> dict:
    """The tunable values of given options (to enqueue the defaults as a trial)."""
    out = {}
    for key, (lo, _) in space.bounds.items():
        value = getattr(options, _FIELD[key])
        if value is None:
            # no smoothing: alpha = 1 behaves exactly the same; a tau has no exact equivalent, so the
            # trial is evaluated with the production options themselves (see study.evaluate)
            value = 1.0 if key == "smoothingAlpha" else lo
        out[key] = int(value) if key in INTEGER else float(value)
    return out


def with_calibration(scenario, where: str):
    """The scenario with calibrate's threshold ranges in [tune.bounds] (the scenario's own bounds win)."""
    from simlab.errors import CONFIG_MAX_BYTES, read_text

    path = Path(where)
    path = path / "tune-bounds.json" if path.is_dir() else path
    try:
        ranges = json.loads(read_text(path, "calibration file", "tune-bounds.json from `simlab calibrate`", CONFIG_MAX_BYTES))
        bounds = {str(k): (float(v[0]), float(v[1])) for k, v in ranges.items()}
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        raise InputError(path, None, f"not a tune-bounds.json written by `simlab calibrate` ({exc})") from None
    merged = {**bounds, **scenario.tune.bounds}
    try:
        tune = type(scenario.tune).model_validate({**scenario.tune.model_dump(), "bounds": merged})
    except Exception as exc:
        raise InputError(path, "bounds", str(exc).splitlines()[-1]) from None
    return scenario.model_copy(update={"tune": tune})
