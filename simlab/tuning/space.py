"""The search space: which options are tuned, in which ranges, and how a trial's values become options."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from simlab.errors import InputError
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario, TUNABLE

LOG_SCALE = {"interactiveRpsThreshold", "interactiveP95LatencyMs", "windowMs", "smoothingTauMs"}
INTEGER = {"batchMaxConcurrency", "batchMinConcurrency"}


def searched(lo: float, hi: float) -> tuple[float, float]:
    """The range a search proposes from: one inverted by an extreme SLO (or a cap below) collapses to its low end."""
    return lo, max(lo, hi)


@dataclass(frozen=True)
class Space:
    bounds: dict[str, tuple[float, float]]  # in suggestion order; a dependent key's high is capped (`below`)
    max_concurrency: int
    family: str = "adaptive"  # the policy whose options are searched (simlab/decision/families.py)
    integer: frozenset = frozenset(INTEGER)
    log: frozenset = frozenset(LOG_SCALE)
    below: tuple = (("batchMinConcurrency", "batchMaxConcurrency", 0.0),)  # (key, bound key, gap): key <= bound - gap
    choices: dict = field(default_factory=dict)  # categorical keys: name -> the values searched

    def suggest(self, trial) -> dict:
        params = {}
        caps = {key: (bound, gap) for key, bound, gap in self.below}
        for name, (lo, hi) in self.bounds.items():
            if name in caps:
                bound, gap = caps[name]
                hi = min(hi, rounded(bound, params[bound], self.integer) - gap)
            lo, hi = searched(lo, hi)
            if name in self.integer:
                params[name] = trial.suggest_int(name, int(lo), int(hi), log=name in self.log)
            else:
                params[name] = trial.suggest_float(name, lo, hi, log=name in self.log)
        for name, values in self.choices.items():
            params[name] = trial.suggest_categorical(name, list(values))
        return params

    def outside(self, params: dict) -> list[tuple[str, float, float, float]]:
        """(key, value, low, high) for every value of `params` outside its searched range: a production default
        the search never proposes, measured as set in the defaults' trial. The range is what `suggest` searches: a
        default range that an extreme SLO inverts collapses to its low end."""
        ranges = {key: searched(lo, hi) for key, (lo, hi) in self.bounds.items()}
        return [(key, params[key], lo, hi) for key, (lo, hi) in ranges.items()
                if key in params and not lo <= params[key] <= hi]


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


# A gateway family's search: the ranges its policy declares beside it (`TUNABLE` in simlab/policies/gates.py, each
# range from the source's documented limits or defaults: docs/gateway-policies.md), plus what the policy needs to
# stay valid while searched.
GATEWAY_BELOW = {
    "holdback": (("minCeiling", "maxCeiling", 0.05),),  # the plugin requires minCeiling < maxCeiling
    "aimd": (("batchMinConcurrency", "batchMaxConcurrency", 0.0),),  # AIMDLimit: minLimit <= maxLimit
    "gradient2": (),
}
GATEWAY_FIRST = {"holdback": ("maxCeiling",), "aimd": ("batchMaxConcurrency",)}  # a bound before the key it caps
# holdback's saturation signal (llm-d's detectors): every one the backend can give; "kv" needs a KV cache
SIGNALS = ("utilization", "queue", "inflight")


def family_space(family: str, scenario: Scenario, base: SchedulerOptions) -> Space:
    """The search space of one family: the adaptive cap's (`build_space`, [tune.bounds] included), or a gateway
    gate's ranges (its `TUNABLE`, resolved against maxConcurrency). [tune.bounds] names the adaptive cap's keys
    and applies to it alone."""
    if family == "adaptive":
        return build_space(scenario, base)
    from simlab.policies import POLICIES

    cap = base.max_concurrency
    if cap is None or cap < 2:
        raise InputError(scenario.path, "scheduler.maxConcurrency", "tuning needs maxConcurrency >= 2 (one slot kept for interactive)")
    ranges = POLICIES[family].TUNABLE
    order = [*GATEWAY_FIRST.get(family, ()), *(k for k in ranges if k not in GATEWAY_FIRST.get(family, ()))]
    bounds = {k: tuple(float(v) for v in ranges[k].bounds(cap)) for k in order}
    integer = frozenset(k for k in order if ranges[k].integer)
    log = frozenset(k for k in order if ranges[k].log)
    choices = {}
    if family == "holdback":
        kv = getattr(scenario.backend, "kv_cache_tokens", None) is not None
        choices["saturationSignal"] = SIGNALS + (("kv",) if kv else ())
    return Space(bounds, cap, family, integer, log, GATEWAY_BELOW[family], choices)


def round_sig(x: float, digits: int = 2) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def round_to(x: float, step: float) -> float:
    return max(step, round(round(x / step) * step, 10))


def rounded(key: str, value, integer=INTEGER):
    """Production-sensible precision: thresholds and tau to 2 significant digits, windowMs to 500 ms,
    smoothingAlpha to 0.05; a gateway gate's other numbers to 2 significant digits. Trials evaluate the rounded
    values, so what is validated is what is exported."""
    if isinstance(value, str):
        return value
    if key in integer:
        return int(value)
    if key == "windowMs":
        return round_to(float(value), 500.0)
    if key == "smoothingAlpha":
        return min(1.0, round_to(float(value), 0.05))
    return round_sig(float(value))


def options_for(base: SchedulerOptions, params: dict, scenario: Scenario, space: Space | None = None) -> SchedulerOptions:
    """The options a trial evaluates: the base options with the trial's values, rounded, as the space's family
    (the adaptive cap unless told)."""
    if space is not None and space.family != "adaptive":
        data = {**base.to_json_dict(), "policy": space.family}
        data.update({k: rounded(k, v, space.integer) for k, v in params.items()})
        if space.family == "gradient2" and "batchPartition" in params:
            # the two partitions share one limit (Netflix's README: live 0.9, batch 0.1): live takes the rest
            data["interactivePartition"] = round(1.0 - data["batchPartition"], 10)
        low, high = data.get("batchMinConcurrency"), data.get("batchMaxConcurrency")
        if "batchMaxConcurrency" in params and "batchMinConcurrency" not in params and low is not None \
                and high is not None and low > high:
            # a searched ceiling below the scenario's floor (holdback reads no floor): the floor follows it down
            data["batchMinConcurrency"] = high
        return SchedulerOptions.model_validate(data)
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
    if space.family != "adaptive":  # the gate's own values (its source's defaults where unset), inside the ranges
        for key, (lo, hi) in space.bounds.items():
            value = options.value(key)
            value = lo if value is None else min(hi, max(lo, float(value)))
            out[key] = int(value) if key in space.integer else value
        for key, values in space.choices.items():
            value = options.value(key)
            out[key] = value if value in values else values[0]
        return out
    for key, (lo, _) in space.bounds.items():
        value = getattr(options, _FIELD[key])
        if value is None:
            # no smoothing: alpha = 1 behaves exactly the same; a tau has no exact equivalent, so the
            # trial is evaluated with the production options themselves (see study.trial_options)
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
