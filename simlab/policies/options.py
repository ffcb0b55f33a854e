"""The production scheduler's options (the article's `SchedulerOptions`, camelCase in JSON).

The same file is read by `simlab replay/run/ab --options` and written by `simlab tune`, so a tuned
configuration goes straight to production and back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from simlab.errors import CONFIG_MAX_BYTES, InputError, did_you_mean, read_text

POLICY_NAMES = ("unscheduled", "fifo", "priority", "static", "adaptive", "holdback", "aimd", "gradient2")
PolicyName = Literal["unscheduled", "fifo", "priority", "static", "adaptive", "holdback", "aimd", "gradient2"]
GATEWAY_POLICIES = ("holdback", "aimd", "gradient2")
NO_EVICTION = ("unscheduled", "fifo")  # one queue or none: `evict` does not apply  # the industry's batch gates (simlab/policies/gates.py)

# Keys each policy cannot run without (camelCase, as the user writes them).
REQUIRED_KEYS = {
    "unscheduled": (),
    "fifo": ("maxConcurrency",),
    "priority": ("maxConcurrency",),
    "static": ("maxConcurrency", "batchMaxConcurrency"),
    "adaptive": (
        "maxConcurrency",
        "batchMaxConcurrency",
        "batchMinConcurrency",
        "interactiveRpsThreshold",
        "interactiveP95LatencyMs",
    ),
    # The gateway gates need only the hard cap: every other key has its source's default (SOURCE_DEFAULTS).
    "holdback": ("maxConcurrency",),
    "aimd": ("maxConcurrency",),
    "gradient2": ("maxConcurrency",),
}

# What a gateway policy uses for a key its options leave out, and where the value comes from (camelCase keys;
# simlab/policies/gates.py names the upstream file and function of each). Unset keys stay unset in the options,
# so the JSON a tuned run writes holds only what was chosen.
SOURCE_DEFAULTS = {
    "holdback": {
        "saturationSignal": ("utilization", "llm-d utilization-detector (the detector flow control enables by default)"),
        "queueDepthThreshold": (5, "llm-d utilization-detector DefaultQueueDepthThreshold"),
        "kvCacheUtilThreshold": (0.8, "llm-d utilization-detector DefaultKVCacheUtilThreshold"),
        "minCeiling": (0.4, "llm-d priority-holdback-policy README example (upstream requires it: no default)"),
        "maxCeiling": (1.0, "llm-d priority-holdback-policy defaultMaxCeiling"),
        "holdbackShape": ("linear", "simlab: the batch ceiling falls linearly (one band per batch slot)"),
        "batchMaxConcurrency": (None, "simlab: maxConcurrency (upstream has no batch cap)"),
    },
    "aimd": {
        "initialLimit": (20, "Netflix AIMDLimit.Builder initialLimit (clipped into [batchMin, batchMax])"),
        "batchMinConcurrency": (20, "Netflix AIMDLimit.Builder minLimit"),
        "batchMaxConcurrency": (200, "Netflix AIMDLimit.Builder maxLimit"),
        "backoffRatio": (0.9, "Netflix AIMDLimit.Builder backoffRatio"),
        "interactiveP95LatencyMs": (5000.0, "Netflix AIMDLimit.Builder timeout (DEFAULT_TIMEOUT, 5 s)"),
        "samplePercentile": (0.95, "simlab: the window's P95 (Netflix PercentileSampleWindowFactory has no default)"),
        "rttFrom": ("submit", "simlab: end-to-end interactive latency (Netflix measures from acquire)"),
        "minWindowTimeMs": (1000.0, "Netflix WindowedLimit DEFAULT_MIN_WINDOW_TIME"),
        "maxWindowTimeMs": (1000.0, "Netflix WindowedLimit DEFAULT_MAX_WINDOW_TIME; follows minWindowTimeMs above it"),
        "windowSize": (10, "Netflix WindowedLimit DEFAULT_WINDOW_SIZE"),
        "minRttThresholdMs": (0.1, "Netflix WindowedLimit DEFAULT_MIN_RTT_THRESHOLD (100 us)"),
    },
    "gradient2": {
        "initialLimit": (20, "Netflix Gradient2Limit.Builder initialLimit"),
        "minLimit": (20, "Netflix Gradient2Limit.Builder minLimit (at most maxConcurrency)"),
        "smoothing": (0.2, "Netflix Gradient2Limit.Builder smoothing"),
        "queueSize": (4, "Netflix Gradient2Limit.Builder queueSize (concurrency -> 4)"),
        "rttTolerance": (1.5, "Netflix Gradient2Limit.Builder rttTolerance"),
        "longWindow": (600, "Netflix Gradient2Limit.Builder longWindow"),
        "batchPartition": (0.1, "Netflix README: partition(\"batch\", 0.1)"),
        "interactivePartition": (0.9, "Netflix README: partition(\"live\", 0.9)"),
        "samplePercentile": (None, "Netflix WindowedLimit default AverageSampleWindowFactory (the mean RTT)"),
        "rttFrom": ("dispatch", "Netflix AbstractLimiter: the RTT runs from acquire to completion"),
        "minWindowTimeMs": (1000.0, "Netflix WindowedLimit DEFAULT_MIN_WINDOW_TIME"),
        "maxWindowTimeMs": (1000.0, "Netflix WindowedLimit DEFAULT_MAX_WINDOW_TIME; follows minWindowTimeMs above it"),
        "windowSize": (10, "Netflix WindowedLimit DEFAULT_WINDOW_SIZE"),
        "minRttThresholdMs": (0.1, "Netflix WindowedLimit DEFAULT_MIN_RTT_THRESHOLD (100 us)"),
    },
}

# The article's simulate.ts numbers: the defaults people start from.
ARTICLE_DEFAULTS = {
    "maxConcurrency": 8,
    "batchMaxConcurrency": 6,
    "batchMinConcurrency": 1,
    "interactiveRpsThreshold": 20,
    "interactiveP95LatencyMs": 500,
    "windowMs": 10000,
}


class SchedulerOptions(BaseModel):
    """Validated options. Attribute names are snake_case; JSON keys are camelCase."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    policy: PolicyName = "adaptive"
    max_concurrency: int | None = Field(default=None, ge=1)
    batch_max_concurrency: int | None = Field(default=None, ge=0)
    batch_min_concurrency: int | None = Field(default=None, ge=0)
    interactive_rps_threshold: float | None = Field(default=None, gt=0)
    interactive_p95_latency_ms: float | None = Field(default=None, gt=0, alias="interactiveP95LatencyMs")
    window_ms: float = Field(default=10000.0, gt=0)
    smoothing_alpha: float | None = Field(default=None, gt=0, le=1)
    tie_break: Literal["fifo", "seed-heap"] = "fifo"
    # Improvements beside the exact reference; all off by default.
    recheck_on_expiry: bool = False
    smoothing_tau_ms: float | None = Field(default=None, gt=0)
    rps_source: Literal["completions", "arrivals"] = "completions"
    # Eviction at the gateway (any two-queue policy): when an interactive request has waited evictAfterMs,
    # the newest running batch task is stopped and queued again at the front (simlab/policies/evict.py).
    evict: Literal["newest"] | None = None
    evict_after_ms: float | None = Field(default=None, gt=0)
    # holdback (llm-d priority-holdback-policy over a saturation detector); None: SOURCE_DEFAULTS
    saturation_signal: Literal["utilization", "kv", "queue", "inflight"] | None = None
    queue_depth_threshold: int | None = Field(default=None, ge=1)
    kv_cache_util_threshold: float | None = Field(default=None, gt=0, le=1)
    min_ceiling: float | None = Field(default=None, ge=0, lt=1)
    max_ceiling: float | None = Field(default=None, gt=0, le=1)
    holdback_shape: Literal["linear", "step"] | None = None
    # aimd and gradient2 (Netflix concurrency-limits); None: SOURCE_DEFAULTS
    initial_limit: int | None = Field(default=None, ge=0)
    min_limit: int | None = Field(default=None, ge=0)
    backoff_ratio: float | None = Field(default=None, ge=0.5, lt=1)
    smoothing: float | None = Field(default=None, gt=0, le=1)
    queue_size: int | None = Field(default=None, ge=0)
    rtt_tolerance: float | None = Field(default=None, ge=1)
    long_window: int | None = Field(default=None, ge=1)
    interactive_partition: float | None = Field(default=None, ge=0, le=1)
    batch_partition: float | None = Field(default=None, ge=0, le=1)
    sample_percentile: float | None = Field(default=None, gt=0, lt=1)
    rtt_from: Literal["submit", "dispatch"] | None = None
    min_window_time_ms: float | None = Field(default=None, ge=100)
    max_window_time_ms: float | None = Field(default=None, ge=100)
    window_size: int | None = Field(default=None, ge=10)
    min_rtt_threshold_ms: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> "SchedulerOptions":
        lo, hi = self.batch_min_concurrency, self.batch_max_concurrency
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"batchMinConcurrency ({lo}) must not exceed batchMaxConcurrency ({hi})")
        if self.smoothing_alpha is not None and self.smoothing_tau_ms is not None:
            raise ValueError("give smoothingAlpha (per-evaluation EMA) or smoothingTauMs (time-constant EMA), not both")
        missing = [k for k in REQUIRED_KEYS[self.policy] if getattr(self, _FIELD_OF[k]) is None]
        if missing:
            raise ValueError(f"policy '{self.policy}' needs key(s) {', '.join(missing)}")
        if (self.evict is None) != (self.evict_after_ms is None):
            raise ValueError("give evict and evictAfterMs together (evict = \"newest\", evictAfterMs = milliseconds)")
        if self.policy == "holdback":
            low, high = self.value("minCeiling"), self.value("maxCeiling")
            if low >= high:
                raise ValueError(f"minCeiling ({low}) must be below maxCeiling ({high})")
        if self.policy == "gradient2":
            parts = self.value("interactivePartition") + self.value("batchPartition")
            if parts > 1 + 1e-12:
                raise ValueError(f"interactivePartition + batchPartition is {parts:g}: the partitions of one limit "
                                 "must sum to at most 1")
        lo, hi = self.min_window_time_ms, self.max_window_time_ms
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"minWindowTimeMs ({lo:g}) must not exceed maxWindowTimeMs ({hi:g})")
        return self

    def value(self, key: str):
        """A key's value for this policy: the one given, else the policy's source default (SOURCE_DEFAULTS)."""
        given = getattr(self, _FIELD_OF[key])
        if given is not None:
            return given
        default = SOURCE_DEFAULTS.get(self.policy, {}).get(key)
        return None if default is None else default[0]

    def defaults_taken(self) -> list[tuple[str, object, str]]:
        """(key, value used, where it comes from) for each key the policy reads and these options leave out."""
        return [(key, value, source) for key, (value, source) in SOURCE_DEFAULTS.get(self.policy, {}).items()
                if getattr(self, _FIELD_OF[key]) is None]

    def defaults_note(self) -> str | None:
        """One sentence on the source defaults this policy takes (None when it takes none)."""
        taken = self.defaults_taken()
        if not taken:
            return None
        shown = ", ".join(f"{k}={'(unset)' if v is None else json.dumps(v)}" for k, v, _ in taken)
        return (f"{self.policy} takes its source's defaults for what the options leave out: {shown} "
                "(docs/gateway-policies.md names the source of each)")

    @property
    def evicts(self) -> bool:
        """Eviction applies: `evict` is set and the policy queues interactive and batch work apart."""
        return self.evict is not None and self.policy not in NO_EVICTION

    def warnings(self) -> list[str]:
        out = []
        if self.evict is not None and self.policy in NO_EVICTION:
            out.append(f"evict does not apply to policy '{self.policy}' (it has no batch queue to put a victim back "
                       "in, nor an interactive one to serve first): nothing is evicted")
        if (
            self.policy in ("static", "adaptive")
            and self.batch_max_concurrency is not None
            and self.max_concurrency is not None
            and self.batch_max_concurrency >= self.max_concurrency
        ):
            out.append(
                f"batchMaxConcurrency ({self.batch_max_concurrency}) >= maxConcurrency ({self.max_concurrency}): "
                "batch work can take every slot and leave none reserved for interactive requests"
            )
        if self.policy == "adaptive" and self.batch_min_concurrency == 0:
            out.append(
                "batchMinConcurrency is 0: under pressure the batch cap reaches 0 and, in the reference policy, "
                "queued batch tasks can be stranded (set recheckOnExpiry to re-evaluate when window samples expire)"
            )
        return out

    def waits_forever(self) -> str | None:
        """Why a submit of some class could wait forever under these options (None when none can): what a live
        scheduler (simlab.runtime.Scheduler) refuses, while a simulation only warns and counts stranded tasks."""
        if self.policy in ("static", "adaptive") and self.batch_max_concurrency == 0:
            return ("batchMaxConcurrency = 0: no batch request could ever start, so every batch submit would wait "
                    "forever; set batchMaxConcurrency to 1 or more")
        if self.policy == "adaptive" and self.batch_min_concurrency == 0 and not self.recheck_on_expiry:
            return ("batchMinConcurrency = 0 without recheckOnExpiry: once pressure drives the batch cap to 0, queued "
                    "batch submits wait until another request arrives or ends, forever if none does; set "
                    "batchMinConcurrency to 1 or more, or recheckOnExpiry to true")
        return None

    def to_json_dict(self) -> dict:
        """The production scheduler's shape: camelCase, unset keys left out."""
        return self.model_dump(by_alias=True, exclude_none=True)

    def with_changes(self, **changes) -> "SchedulerOptions":
        return SchedulerOptions.model_validate({**self.model_dump(), **changes})


_FIELD_OF = {f.alias or to_camel(n): n for n, f in SchedulerOptions.model_fields.items()}
KNOWN_KEYS = tuple(_FIELD_OF)


class Range:
    """A tunable key's search range: numbers, or "maxConcurrency" / "maxConcurrency-1" (the options' own cap)."""

    __slots__ = ("low", "high", "integer", "log")

    def __init__(self, low, high, integer: bool = False, log: bool = False):
        self.low, self.high, self.integer, self.log = low, high, integer, log

    def bounds(self, max_concurrency: int) -> tuple[float, float]:
        def resolve(v):
            if v == "maxConcurrency":
                return max_concurrency
            if v == "maxConcurrency-1":
                return max_concurrency - 1
            return v

        return resolve(self.low), resolve(self.high)

    def __repr__(self) -> str:
        return f"Range({self.low!r}, {self.high!r}, integer={self.integer}, log={self.log})"


def options_from_dict(data: object, source: str | Path | None = None, where: str | None = None) -> SchedulerOptions:
    """Validate a dict of camelCase options; raise InputError naming the key on failure.

    >>> o = options_from_dict({"policy": "static", "maxConcurrency": 16, "batchMaxConcurrency": 12})
    >>> o.policy, o.max_concurrency, o.batch_max_concurrency
    ('static', 16, 12)
    >>> options_from_dict({"maxConcurency": 16}, "opts.json")
    Traceback (most recent call last):
    simlab.errors.InputError: opts.json: maxConcurency: unknown option (did you mean 'maxConcurrency'?); known options: ...
    >>> options_from_dict({"policy": "static", "maxConcurrency": True, "batchMaxConcurrency": 1}, "opts.json")
    Traceback (most recent call last):
    simlab.errors.InputError: opts.json: maxConcurrency: Input should be a valid integer (found true)
    >>> options_from_dict({"maxConcurrency": 16, "batchMaxConcurrency": 12}, "opts.json")
    Traceback (most recent call last):
    simlab.errors.InputError: opts.json: policy 'adaptive' needs key(s) batchMinConcurrency, interactiveRpsThreshold, interactiveP95LatencyMs
    """
    if not isinstance(data, dict):
        raise InputError(source, where, f"expected a JSON object of scheduler options, found {type(data).__name__}")
    for key in data:
        if key not in KNOWN_KEYS and key not in SchedulerOptions.model_fields:
            raise InputError(
                source,
                _join(where, key),
                f"unknown option{did_you_mean(key, KNOWN_KEYS)}; known options: {', '.join(KNOWN_KEYS)}",
            )
    try:
        # strict: JSON/TOML carry real types; `true` must not pass as maxConcurrency 1, nor "100" as windowMs
        return SchedulerOptions.model_validate(data, strict=True)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, source, where) from None


def load_options(path: str | Path, policy: str | None = None) -> SchedulerOptions:
    """Read an options JSON file (e.g. `best-options.json`); `policy` overrides the file's `policy` key."""
    path = Path(path)
    text = read_text(path, "options file", "a JSON object of scheduler options", CONFIG_MAX_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno} column {exc.colno}", f"not valid JSON ({exc.msg})") from None
    if policy is not None and isinstance(data, dict):
        data = {**data, "policy": policy}
    return options_from_dict(data, path)


def pydantic_to_input_error(exc: ValidationError, source, where: str | None = None) -> InputError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    found = err.get("input")
    if loc and err["type"] != "value_error" and not isinstance(found, dict):
        msg = f"{msg} (found {json.dumps(found, default=str)})"
    return InputError(source, _join(where, loc) if loc else where, msg)


def _join(where: str | None, key: str) -> str:
    return f"{where}.{key}" if where else key
