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

POLICY_NAMES = ("unscheduled", "fifo", "priority", "static", "adaptive")

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

    policy: Literal["unscheduled", "fifo", "priority", "static", "adaptive"] = "adaptive"
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
        return self

    def warnings(self) -> list[str]:
        out = []
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


def options_from_dict(data: object, source: str | Path | None = None, where: str | None = None) -> SchedulerOptions:
    """Validate a dict of camelCase options; raise InputError naming the key on failure."""
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
