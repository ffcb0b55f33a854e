"""The arms a decision compares: the static frontier (every batch cap the backend can run), the adaptive arms, the
baselines; and the production options each one is exported as.

Adaptive with batchMinConcurrency = batchMaxConcurrency = N never moves its cap, so it is exactly static cap N
(tests/test_decision.py checks it run for run): every static arm is expressible as production options. Static
caps run as the `static` policy and are exported as that adaptive equivalent.
"""

from __future__ import annotations

from simlab.experiments.plan import ArmSpec
from simlab.policies import SchedulerOptions
from simlab.scenario import Scenario

SHARE = "batch_deadline_share"  # measured where a batch workload has deadline_ms ([decision] may require it)
PRODUCTION_KEYS = ("maxConcurrency", "batchMaxConcurrency", "batchMinConcurrency", "interactiveRpsThreshold",
                   "interactiveP95LatencyMs", "windowMs", "smoothingAlpha")


def production_options(options: SchedulerOptions) -> dict:
    """The production SchedulerOptions shape and nothing else (a static cap N becomes min = max = N).
    Options the production scheduler does not have (simlab's fixes) are refused rather than dropped."""
    data = options.to_json_dict()
    if options.policy == "static":
        data.update(policy="adaptive", batchMinConcurrency=data["batchMaxConcurrency"])
    elif options.policy != "adaptive":
        raise ValueError(f"policy '{options.policy}' is not the production scheduler")
    extra = {k: v for k, v in data.items() if k not in PRODUCTION_KEYS and k != "policy"
             and v != SchedulerOptions.model_fields[_snake(k)].default}
    if extra:
        raise ValueError(f"options {', '.join(sorted(extra))} are not part of the production SchedulerOptions")
    return {k: data[k] for k in PRODUCTION_KEYS if k in data}


def exported_options(options: SchedulerOptions) -> dict:
    """Production options when the arm has them, else simlab's own options (baselines)."""
    try:
        return production_options(options)
    except ValueError:
        return options.to_json_dict()


def _snake(camel: str) -> str:
    for name, f in SchedulerOptions.model_fields.items():
        if (f.alias or "") == camel or name.replace("_", "") == camel.lower():
            return name
    return camel


def backend_slots(scenario: Scenario) -> int | None:
    """How many tasks the backend serves at once (GPU slots, sequences of a batch, the provider's concurrency
    quota); None when unlimited."""
    b = scenario.backend
    for name in ("slots", "max_num_seqs", "concurrency"):
        value = getattr(b, name, None)
        if value is not None:
            return int(value)
    return None


FULL_SWEEP_CAPS = 64  # every static cap up to this one is measured (the bundled scenarios stay within it)
SAMPLED_CAPS = 32  # beyond it, this many more, spaced geometrically up to the top cap


def _ceil_root(x: int, n: int) -> int:
    """The least integer c with c ** n >= x (exact integer arithmetic: the same caps on every machine)."""
    lo, hi = 1, 1 << (x.bit_length() // n + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        if mid**n >= x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def top_cap(base: SchedulerOptions, scenario: Scenario | None = None) -> int:
    """The largest batch cap worth measuring: maxConcurrency - 1 (one slot kept for interactive work), and none
    above what the backend can run."""
    top = (base.max_concurrency or 2) - 1
    slots = backend_slots(scenario) if scenario is not None else None
    return min(top, slots) if slots is not None else top


def static_caps(base: SchedulerOptions, scenario: Scenario | None = None) -> list[int]:
    """The static caps the frontier measures: every cap 1..top (`top_cap`) up to FULL_SWEEP_CAPS; above that,
    every cap to FULL_SWEEP_CAPS, SAMPLED_CAPS more spaced geometrically up to the top (always included), and the
    options' own batchMaxConcurrency. A function of the options and the backend alone (not of --workers)."""
    top = top_cap(base, scenario)
    if top <= FULL_SWEEP_CAPS:
        return list(range(1, top + 1))
    caps = set(range(1, FULL_SWEEP_CAPS + 1))
    n, f = SAMPLED_CAPS, FULL_SWEEP_CAPS
    caps |= {_ceil_root(f ** (n - k) * top**k, n) for k in range(1, n + 1)}  # ceil(f * (top / f) ** (k / n))
    own = base.batch_max_concurrency
    if own is not None and 1 <= own <= top:
        caps.add(own)
    return sorted(caps)


def caps_note(base: SchedulerOptions, scenario: Scenario | None = None) -> str | None:
    """A warning when the frontier samples the caps rather than measuring every one; None when it measures all."""
    caps, top = static_caps(base, scenario), top_cap(base, scenario)
    if len(caps) == top:
        return None
    return (f"maxConcurrency = {(base.max_concurrency or 2):,}: the static frontier measures {len(caps)} of the "
            f"{top:,} caps 1..{top:,} (every cap up to {FULL_SWEEP_CAPS}, then {SAMPLED_CAPS} spaced geometrically "
            f"up to {top:,}, and the options' own batchMaxConcurrency), not every one")


def caps_swept(base: SchedulerOptions, scenario: Scenario | None = None) -> str:
    """What the frontier measured, for a sentence: 'static caps 1..7 swept', or how many of them."""
    top = top_cap(base, scenario)
    n = len(static_caps(base, scenario))
    return f"static caps 1..{top} swept" if n == top else f"{n} static caps of 1..{top:,} swept"


def static_label(cap: int) -> str:
    return f"static-{cap}"


def frontier_specs(base: SchedulerOptions, scenario: Scenario | None = None) -> list[ArmSpec]:
    return [ArmSpec(static_label(n), base.with_changes(policy="static", batch_max_concurrency=n,
                                                      batch_min_concurrency=n), "static", cap=n)
            for n in static_caps(base, scenario)]


def reference_label(rule, base: SchedulerOptions, adaptive: str = "adaptive-defaults") -> str:
    """The arm the "constrained" rule's throughput is measured against, by label: the one place it is resolved
    (`adaptive`: the label the production defaults' adaptive arm has, e.g. `ab --options` names it "adaptive")."""
    if rule.reference == "static":
        return static_label(base.batch_max_concurrency)
    return adaptive if rule.reference == "adaptive" else rule.reference


def decide_specs(base: SchedulerOptions, scenario: Scenario, tuned: list[tuple[str, SchedulerOptions, str]],
                 families: tuple[str, ...] = ("adaptive",)) -> list[ArmSpec]:
    """Every arm `decide` compares: the frontier, each family's defaults, tuning's candidates (label, options,
    family; dropped when they are an arm already there), engine priority where the engine has it, the baselines.
    On a priority engine the `unscheduled` baseline is the engine-priority arm itself (the first label wins)."""
    from simlab.decision.families import ENGINE, TUNED, defaults_label

    specs = frontier_specs(base, scenario)
    specs += [ArmSpec(defaults_label(f), base.with_changes(policy=f), f) for f in families if f in TUNED]
    specs += [ArmSpec(label, options, family) for label, options, family in tuned]
    if ENGINE in families:
        specs.append(ArmSpec(ENGINE, base.with_changes(policy="unscheduled"), ENGINE))
    specs += [ArmSpec("priority", base.with_changes(policy="priority"), "baseline"),
              ArmSpec("unscheduled", base.with_changes(policy="unscheduled"), "baseline")]
    return unique(specs)


def unique(specs: list[ArmSpec]) -> list[ArmSpec]:
    """One arm per production configuration: a tuned candidate equal to a static cap or to the defaults is that
    arm (the first label wins)."""
    seen: dict[str, str] = {}
    out = []
    for s in specs:
        key = option_key(s.options)
        if key in seen:
            continue
        seen[key] = s.label
        out.append(s)
    return out


def option_key(options: SchedulerOptions) -> str:
    """Two arms are one production configuration when their exported options are equal."""
    return repr(sorted(exported_options(options).items()))


def cap_beyond_backend(base: SchedulerOptions, scenario: Scenario) -> tuple[int, int] | None:
    """(maxConcurrency, backend slots) when maxConcurrency lets more tasks in flight than the backend serves."""
    slots = backend_slots(scenario)
    if slots is not None and base.max_concurrency is not None and base.max_concurrency > slots:
        return base.max_concurrency, slots
    return None
