"""Hypothesis strategies and rules shared by the property tests of the gateway gates (holdback, aimd, gradient2)."""

from __future__ import annotations

from hypothesis import strategies as st

from simlab.policies import SchedulerOptions


def maybe(draw, d, key, strategy):
    if draw(st.booleans()):
        d[key] = draw(strategy)


@st.composite
def gate_options(draw, policy, cap):
    """Random valid options of a gateway gate (any key may be left to its source's default)."""
    d = {}
    if policy == "holdback":
        maybe(draw, d, "batchMaxConcurrency", st.integers(0, 5))
        maybe(draw, d, "saturationSignal", st.sampled_from(["utilization", "queue", "inflight"]))
        maybe(draw, d, "queueDepthThreshold", st.integers(1, 6))
        lo = draw(st.one_of(st.sampled_from([0.0, 0.2, 0.4, 0.5]), st.floats(0, 0.9)))
        hi = draw(st.one_of(st.sampled_from([1.0, 0.95]), st.floats(lo + 0.01, 1.0)))
        if hi > lo:
            d["minCeiling"], d["maxCeiling"] = lo, hi
        maybe(draw, d, "holdbackShape", st.sampled_from(["linear", "step"]))
    elif policy == "aimd":
        hi = draw(st.integers(0, 6))
        d["batchMaxConcurrency"] = hi
        d["batchMinConcurrency"] = draw(st.integers(0, hi))
        maybe(draw, d, "initialLimit", st.integers(0, 8))
        maybe(draw, d, "backoffRatio", st.floats(0.5, 0.99))
        maybe(draw, d, "interactiveP95LatencyMs", st.one_of(st.sampled_from([1, 5, 20]), st.floats(0.5, 100)))
        maybe(draw, d, "minWindowTimeMs", st.sampled_from([100.0, 200.0]))
        maybe(draw, d, "rttFrom", st.sampled_from(["submit", "dispatch"]))
    else:
        maybe(draw, d, "batchMaxConcurrency", st.integers(0, 5))
        maybe(draw, d, "minLimit", st.integers(0, cap))
        maybe(draw, d, "initialLimit", st.integers(0, 8))
        maybe(draw, d, "smoothing", st.floats(0.05, 1))
        maybe(draw, d, "queueSize", st.integers(0, 4))
        share = draw(st.floats(0, 1))
        d["batchPartition"], d["interactivePartition"] = share, draw(st.floats(0, 1 - share))
        maybe(draw, d, "longWindow", st.integers(1, 50))
        maybe(draw, d, "samplePercentile", st.floats(0.05, 0.99))
    for key in ("minWindowTimeMs",):
        if key in d:
            d["maxWindowTimeMs"] = d[key]
    maybe(draw, d, "windowSize", st.integers(10, 12))
    return d


def never_strands(o: SchedulerOptions) -> bool:
    if o.policy == "static":
        return o.batch_max_concurrency >= 1
    if o.policy == "adaptive":
        return o.batch_max_concurrency >= 1 and (o.batch_min_concurrency >= 1 or o.recheck_on_expiry)
    if o.policy == "holdback":  # idle (saturation 0), the first batch band is open if its ceiling is above 0
        slots = o.batch_max_concurrency if o.batch_max_concurrency is not None else o.max_concurrency
        high, low = o.value("maxCeiling"), o.value("minCeiling")
        bands = 1 if o.value("holdbackShape") == "step" else slots
        return slots >= 1 and high - 1 * (high - low) / bands > 0  # upstream's own arithmetic: 1 - (1 - 1e-300) is 0
    if o.policy == "aimd":  # a cap of 0 rises only when an interactive window closes
        return o.value("batchMinConcurrency") >= 1 and o.value("batchMaxConcurrency") >= 1
    if o.policy == "gradient2":  # a partition is never below 1
        return o.batch_max_concurrency is None or o.batch_max_concurrency >= 1
    return True
