"""Scenario files: TOML in `scenarios/`, validated on load.

A scenario says what world to simulate (backend, workloads, duration, SLO), which scheduler options to
evaluate, and how to run experiments and tuning on it. Relative file paths are resolved from the
scenario file's folder. See README.md ("Scenario format") for an annotated example.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simlab.errors import CONFIG_MAX_BYTES, DATA_MAX_BYTES, InputError, check_file, did_you_mean, read_text
from simlab.policies.options import PolicyName, SchedulerOptions, options_from_dict


class Strict(BaseModel):
    # No inf/nan (TOML has both): an infinite rate or duration would crash or never end the run.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- distributions (service times in ms, or token counts) --------------------------------------
class Constant(Strict):
    dist: Literal["constant"]
    value: float = Field(ge=0)


class Exponential(Strict):
    dist: Literal["exponential"]
    mean: float = Field(gt=0)


class Lognormal(Strict):
    """Given by its median and 95th percentile, the two numbers people know about their latencies."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    p95: float = Field(gt=0)

    @model_validator(mode="after")
    def _order(self):
        if self.p95 <= self.median:
            raise ValueError(f"p95 ({self.p95}) must be greater than median ({self.median})")
        return self


class Uniform(Strict):
    dist: Literal["uniform"]
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must not be below low ({self.low})")
        return self


class Empirical(Strict):
    """Resampled with replacement from a CSV column (e.g. arxiv-summarization-lengths.csv)."""

    dist: Literal["empirical"]
    file: str
    column: str
    scale: float = Field(default=1.0, gt=0)


Dist = Annotated[Union[Constant, Exponential, Lognormal, Uniform, Empirical], Field(discriminator="dist")]


# --- arrival processes ------------------------------------------------------------------------
class Poisson(Strict):
    process: Literal["poisson"]
    rate_per_s: float = Field(gt=0)
    start_ms: float = Field(default=0.0, ge=0)
    end_ms: float | None = Field(default=None, gt=0)  # default: the scenario's duration


class Piecewise(Strict):
    """A non-homogeneous Poisson process: `rates_per_s[i]` holds from `i * step_ms` on."""

    process: Literal["piecewise"]
    rates_per_s: list[Annotated[float, Field(ge=0)]] = Field(min_length=1)
    step_ms: float = Field(gt=0)


class Diurnal(Strict):
    """Poisson with rate mean * (1 + amplitude * sin(2 pi (t - phase) / period))."""

    process: Literal["diurnal"]
    mean_rate_per_s: float = Field(gt=0)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    period_ms: float = Field(default=86_400_000.0, gt=0)
    phase_ms: float = 0.0


class Burst(Strict):
    """`count` jobs submitted at each time in `at_ms` (the nightly backfill)."""

    process: Literal["burst"]
    count: int = Field(ge=1)
    at_ms: float | list[Annotated[float, Field(ge=0)]] = 0.0


class ClosedLoop(Strict):
    """`users` each send a request, wait for its answer, think, repeat (the article's simulate.ts)."""

    process: Literal["closed-loop"]
    users: int = Field(ge=1)
    think: Dist
    start_ms: float = Field(default=0.0, ge=0)
    requests_per_user: int | None = Field(default=None, ge=1)


class Resampled(Strict):
    """A log's own arrival times (one `arrival_ms` column), rebuilt per seed by a block bootstrap: blocks of
    `block_ms` drawn with replacement keep the log's bursts, and each seed is another resample of the traffic.
    What `simlab fit` writes when a piecewise rate cannot reproduce the log's burstiness."""

    process: Literal["resampled"]
    file: str
    block_ms: float = Field(default=60_000.0, gt=0)
    span_ms: float | None = Field(default=None, gt=0)  # the log's span (default: the scenario's duration)


class Trace(Strict):
    """Replay a file: the generic `id,kind,arrival_ms,service_ms` CSV or the Azure LLM trace format."""

    process: Literal["trace"]
    file: str
    format: Literal["generic", "azure"] = "generic"
    offset_ms: float = Field(default=0.0, ge=0)  # skip this much of the trace's beginning
    limit_ms: float | None = Field(default=None, gt=0)  # keep this much of it
    time_scale: float = Field(default=1.0, gt=0)  # >1 stretches time (slower traffic)
    # block bootstrap of the kept window (keeps bursts): blocks of this length drawn with replacement
    resample_block_ms: float | None = Field(default=None, gt=0)
    resample: int = Field(default=0, ge=0)  # which resample (its own random stream); 0 with a block = resample 0


Arrivals = Annotated[
    Union[Poisson, Piecewise, Diurnal, Burst, ClosedLoop, Trace, Resampled], Field(discriminator="process")
]


class Workload(Strict):
    name: str | None = None
    kind: Literal["interactive", "batch"] = Field(alias="class")
    arrivals: Arrivals
    service: Dist | None = None  # service time in ms
    prompt_tokens: Dist | None = None
    output_tokens: Dist | None = None
    # traffic conditions (simlab/world/conditions.py): open-loop arrivals thinned (< 1) or superposed (> 1)
    # with shifted copies of themselves, then delayed by shift_ms
    load: float = Field(default=1.0, gt=0, le=20)
    shift_ms: float = Field(default=0.0, ge=0)
    # a diurnal profile on top: arrivals kept with a rate x (1 + amplitude sin(2 pi (t - phase) / period))
    diurnal_amplitude: float = Field(default=0.0, ge=0, le=1)
    diurnal_period_ms: float | None = Field(default=None, gt=0)  # default: the scenario's duration (one cycle)
    diurnal_phase_ms: float = 0.0
    # batch lifecycle (batch workloads only): a running task is stopped after timeout_ms since its dispatch (its
    # work lost) and sent again up to max_retries times, then fails ("timeout"); deadline_ms, counted from each
    # job's arrival, is what the run's batch_deadline_share measures
    timeout_ms: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=0, ge=0)
    deadline_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _lifecycle(self):
        if self.kind == "interactive":
            given = [k for k in ("timeout_ms", "deadline_ms") if getattr(self, k) is not None]
            if self.max_retries:
                given.append("max_retries")
            if given:
                raise ValueError(f"{', '.join(given)}: only batch workloads have a timeout, retries or a deadline")
        elif self.max_retries and self.timeout_ms is None:
            raise ValueError("max_retries retries a timed-out task: give timeout_ms too")
        return self


# --- backends ---------------------------------------------------------------------------------
class TokenTime(Strict):
    """Service time of a request in isolation: base + per-token costs (ms)."""

    base_ms: float = Field(default=0.0, ge=0)
    per_prompt_token_ms: float = Field(default=0.0, ge=0)
    per_output_token_ms: float = Field(default=0.0, ge=0)


class StepTime(Strict):
    """Continuous batching: one iteration takes base_ms + per_token_ms * tokens in the step
    (+ per_seq_ms * sequences, + admit_ms per request whose prefill runs in it), or is interpolated from a
    measured profile; a request reaches the engine request_ms after its dispatch (the server's front end)."""

    base_ms: float = Field(default=10.0, ge=0)
    per_token_ms: float = Field(default=0.0, ge=0)
    per_seq_ms: float = Field(default=0.0, ge=0)
    request_ms: float = Field(default=0.0, ge=0)  # front-end latency before a request reaches the engine
    admit_ms: float = Field(default=0.0, ge=0)  # the engine's own cost of taking a request in (its first step)
    profile: str | None = None  # CSV: batch_size,step_ms (from `simlab calibrate-gpu`)

    @model_validator(mode="after")
    def _positive(self):
        if self.profile is None and self.base_ms + self.per_token_ms + self.per_seq_ms <= 0:
            raise ValueError("a decode step must take time: give base_ms, per_token_ms or per_seq_ms above 0")
        return self


class Retry(Strict):
    max_retries: int = Field(default=5, ge=0)
    base_ms: float = Field(default=500.0, gt=0)
    cap_ms: float = Field(default=30_000.0, gt=0)
    jitter: float = Field(default=0.5, ge=0, le=1)


class Backend(Strict):
    kind: Literal["delay", "slots", "continuous-batching", "api"]
    slots: int | None = Field(default=None, ge=1)
    token_time: TokenTime | None = None
    # continuous-batching
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_batched_tokens: int | None = Field(default=None, ge=1)
    step: StepTime | None = None
    # continuous-batching with a KV cache and vLLM V1's scheduling (simlab/world/backends/kv_batching.py)
    kv_cache_tokens: int | None = Field(default=None, ge=1)  # vLLM's start-up log: "GPU KV cache size: N tokens"
    kv_block_tokens: int | None = Field(default=None, ge=1)  # vLLM's --block-size (default 16)
    scheduling: Literal["fcfs", "priority"] | None = None  # vLLM's --scheduling-policy (default fcfs)
    preempt_on: Literal["kv", "kv-or-seqs"] | None = None  # what a waiting request may preempt for (default kv)
    # api (a third-party provider)
    concurrency: int | None = Field(default=None, ge=1)
    rpm: float | None = Field(default=None, gt=0)
    tpm: float | None = Field(default=None, gt=0)
    retry: Retry = Retry()

    @model_validator(mode="after")
    def _needs(self):
        if self.kind == "slots" and self.slots is None:
            raise ValueError("backend 'slots' needs `slots` (number of GPU slots)")
        if self.kind == "continuous-batching" and self.max_num_seqs is None:
            raise ValueError("backend 'continuous-batching' needs `max_num_seqs`")
        if self.kind == "api" and self.concurrency is None:
            raise ValueError("backend 'api' needs `concurrency` (the provider's concurrency quota)")
        self._check_engine_scheduling()
        return self

    def _check_engine_scheduling(self) -> None:
        given = [k for k in ("kv_cache_tokens", "kv_block_tokens", "scheduling", "preempt_on") if getattr(self, k) is not None]
        if given and self.kind != "continuous-batching":
            raise ValueError(f"{given[0]} is a setting of the continuous-batching backend (this one is '{self.kind}')")
        if self.kv_block_tokens is not None and self.kv_cache_tokens is None:
            raise ValueError("kv_block_tokens sizes the blocks of a KV cache: give kv_cache_tokens too")
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < self.block_tokens:
            raise ValueError(f"kv_cache_tokens ({self.kv_cache_tokens}) is smaller than one block of "
                             f"kv_block_tokens ({self.block_tokens})")
        if self.preempt_on == "kv-or-seqs" and self.scheduling != "priority":
            raise ValueError("preempt_on = 'kv-or-seqs' lets a waiting request of higher priority preempt a "
                             "running one: it needs scheduling = 'priority'")

    @property
    def block_tokens(self) -> int:
        return self.kv_block_tokens if self.kv_block_tokens is not None else 16

    @property
    def kv_blocks(self) -> int | None:
        """The KV cache in whole blocks (vLLM's num_gpu_blocks), None without one."""
        return None if self.kv_cache_tokens is None else self.kv_cache_tokens // self.block_tokens

    @property
    def engine_scheduling(self) -> bool:
        """True when the KV cache / engine-scheduling model runs instead of the plain continuous batching."""
        return self.kind == "continuous-batching" and (self.kv_cache_tokens is not None or self.scheduling == "priority")


# --- gateway instances (simlab/world/gateway.py) ------------------------------------------------
class Gateway(Strict):
    """N gateway instances in front of one backend, each running the policy (issue 24), and their restarts.

    limiter "local": each instance has the full options and its own counts; "split": the caps divided by N;
    "shared": one global limit that each instance sees `shared_delay_ms` late, every slot a lease of `lease_ms`.
    Crashes: at `crash_at_ms` (instance i = k mod N for the k-th time) or every `mtbf_ms` on average per instance
    (exponential, seeded); an instance is down `restart_ms`. `queue`: what it had queued is lost ("memory", its
    clients send it again after `client_retry_ms` if given) or kept for its restart ("persistent"). `delivery`:
    its running tasks are abandoned ("at-most-once", their work wasted) or sent again ("at-least-once"), counted
    as duplicates unless `idempotent`."""

    instances: int = Field(default=1, ge=1, le=1024)
    balancer: Literal["round-robin", "random", "least-loaded"] = "round-robin"
    limiter: Literal["local", "split", "shared"] = "local"
    shared_delay_ms: float = Field(default=0.0, ge=0)
    lease_ms: float = Field(default=5000.0, gt=0)
    crash_at_ms: list[float] = []
    mtbf_ms: float | None = Field(default=None, gt=0)
    restart_ms: float = Field(default=0.0, ge=0)
    queue: Literal["memory", "persistent"] = "memory"
    client_retry_ms: float | None = Field(default=None, ge=0)
    delivery: Literal["at-most-once", "at-least-once"] = "at-most-once"
    idempotent: bool = False

    @model_validator(mode="after")
    def _crashes(self):
        bad = [t for t in self.crash_at_ms if t < 0]
        if bad:
            raise ValueError(f"crash_at_ms: {bad[0]} is negative (expected milliseconds >= 0)")
        if self.crash_at_ms != sorted(self.crash_at_ms):
            raise ValueError("crash_at_ms: times must be in increasing order")
        if self.crash_at_ms and self.mtbf_ms is not None:
            raise ValueError("crash_at_ms, mtbf_ms: give crash times or a mean time between failures, not both")
        if self.delivery == "at-least-once" and self.queue != "persistent":
            raise ValueError('delivery: "at-least-once" delivers again from a persistent queue: set queue = "persistent"')
        if self.client_retry_ms is not None and self.queue != "memory":
            raise ValueError('client_retry_ms: clients send again what a crash lost, and queue = "persistent" loses '
                             'nothing: drop client_retry_ms or set queue = "memory"')
        if self.idempotent and self.delivery != "at-least-once":
            raise ValueError('idempotent: only tasks delivered again can run twice: set delivery = "at-least-once"')
        return self

    @property
    def crashes(self) -> bool:
        return bool(self.crash_at_ms) or self.mtbf_ms is not None

    @property
    def plain(self) -> bool:
        """One instance that never fails: the single gateway of every other run (no gateway layer at all)."""
        return self.instances == 1 and not self.crashes


# --- experiments and tuning -------------------------------------------------------------------
class Experiment(Strict):
    seed: int = Field(default=1, ge=0)
    replications: int = Field(default=10, ge=1)
    policies: list[PolicyName] = Field(default=[
        "unscheduled",
        "priority",
        "static",
        "adaptive",
    ], min_length=1)

    @model_validator(mode="after")
    def _once_each(self):
        twice = [p for i, p in enumerate(self.policies) if p in self.policies[:i]]
        if twice:
            raise ValueError(f"policies: {twice[0]} is given twice")
        return self


TUNABLE = (
    "interactiveRpsThreshold",
    "interactiveP95LatencyMs",
    "windowMs",
    "smoothingAlpha",
    "smoothingTauMs",
    "batchMaxConcurrency",
    "batchMinConcurrency",
)


class Tune(Strict):
    """`simlab tune` settings; `bounds` overrides the default search range of any tunable option."""

    objective: Literal["p95", "p99"] = "p95"
    mode: Literal["single", "multi"] = "single"  # multi: P95 vs batch throughput, a Pareto front
    throughput_fraction: float = Field(default=0.9, gt=0, le=1.5)
    reference: PolicyName = "static"
    trials: int = Field(default=50, ge=1)
    seeds: int = Field(default=4, ge=1)
    first_seed: int = Field(default=1000, ge=0)
    holdout_seeds: int = Field(default=10, ge=2)
    holdout_first_seed: int = Field(default=100_000, ge=0)
    batch_size: int = Field(default=4, ge=1)  # trials proposed together; results do not depend on --workers
    sampler_seed: int = Field(default=0, ge=0)
    smoothing: Literal["alpha", "tau", "none"] = "alpha"
    allow_zero_min: bool = False
    recheck_on_expiry: bool = False
    bounds: dict[str, Annotated[list[float], Field(min_length=2, max_length=2)]] = {}  # [low, high]

    @model_validator(mode="after")
    def _bounds(self):
        for key, (lo, hi) in self.bounds.items():
            if key not in TUNABLE:
                raise ValueError(f"bounds: '{key}' is not tunable{did_you_mean(key, TUNABLE)}; tunable: {', '.join(TUNABLE)}")
            if not (lo < hi or (lo == hi and key in ("batchMaxConcurrency", "batchMinConcurrency"))):
                raise ValueError(f"bounds.{key}: [{lo}, {hi}] is inverted or empty (expected low < high)")
            if lo <= 0 and key not in ("batchMinConcurrency",):
                raise ValueError(f"bounds.{key}: low {lo} must be > 0")
            if key == "smoothingAlpha" and hi > 1:
                raise ValueError(f"bounds.smoothingAlpha: high {hi} must be <= 1")
            if key == "batchMinConcurrency" and lo < (0 if self.allow_zero_min else 1):
                raise ValueError(
                    f"bounds.batchMinConcurrency: low {lo} must be >= 1 (a batch cap of 0 can strand batch work; "
                    "set allow_zero_min = true to search it)"
                )
        return self


# The families `decide` can rank: the article's adaptive cap, the industry's gateway gates, and engine priority
# (no gateway cap; the engine schedules interactive first: a KV backend with scheduling = "priority").
Family = Literal["adaptive", "holdback", "aimd", "gradient2", "engine-priority"]


class Decision(Strict):
    """How `ab` and `decide` turn measurements into one recommendation (simlab/decision/rule.py, docs/decision.md).

    rule "constrained": minimise interactive P95 subject to batch throughput >= throughput_fraction x the
    reference arm's (shown by a one-sided test); "slo": meet the SLO (shown, or within bound_tolerance of the
    batch-absent bound when nothing can and it is above the SLO) and maximise batch throughput. Arms within the margins of the best
    (fractions of its value) tie; ties go to higher throughput (lower P95 under "slo"), then to the simpler arm.
    Every claim is Holm-corrected at the family-wise level 1 - level. `decide` tunes with `trials` trials, then
    races: it adds selection seeds
    (first_seeds per held-out condition, doubling up to --replications) to the arms still in contention until
    the answer is settled, then reports the choice on confirm_seeds fresh seeds per held-out condition."""

    rule: Literal["constrained", "slo"] = "constrained"
    throughput_fraction: float = Field(default=0.9, gt=0, le=1.5)
    reference: Literal["static", "priority", "unscheduled", "adaptive"] = "static"
    bound_tolerance: float = Field(default=0.05, ge=0, le=5)  # "slo" rule: P95 within this fraction of the bound
    # either rule: an arm is feasible only if the share of batch jobs done by their deadline_ms is at least this
    # (judged on the CI's lower bound); needs a batch workload with deadline_ms
    batch_deadline_share: float | None = Field(default=None, gt=0, le=1)
    level: float = Field(default=0.95, gt=0.5, lt=1)  # 1 - the family-wise error rate of the rule's claims
    p95_margin: float = Field(default=0.02, ge=0, lt=1)  # P95 within this fraction of the other's: no worse
    throughput_margin: float = Field(default=0.02, ge=0, lt=1)  # throughput within this fraction: no worse
    trials: int = Field(default=20, ge=0)  # tuning trials of `decide` (its candidate is one arm racing judges)
    # when the answer hangs on the tuning budget, `decide` doubles every search up to this many trials per family
    # (default: 4 x the larger of --trials and trials); equal to trials: never
    max_trials: int | None = Field(default=None, ge=0)
    first_seeds: int | None = Field(default=None, ge=1)  # racing's first round; default: 4 units or more
    confirm_seeds: int | None = Field(default=None, ge=2)  # fresh seeds per held-out condition (default: 10 units
    # or more, at least 3 seeds per condition) for the reported numbers
    confirm_first_seed: int = Field(default=200_000, ge=0)
    # the policy families `decide` tunes (each with `trials` trials on the same search units) and ranks beside the
    # static frontier; None: every family the scenario can run (simlab/decision/families.py)
    families: list[Family] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _max_trials_at_least_trials(self):
        if self.max_trials is not None and self.max_trials < self.trials:
            raise ValueError(f"max_trials ({self.max_trials}) is below trials ({self.trials}): the searches start "
                             "at trials and only grow")
        return self

    @model_validator(mode="after")
    def _families_once(self):
        twice = [f for i, f in enumerate(self.families or []) if f in self.families[:i]]
        if twice:
            raise ValueError(f"families: {twice[0]} is given twice")
        return self


class Conditions(Strict):
    """Traffic conditions (simlab/world/conditions.py): each is the scenario transformed; the first
    `search` are tuned on, the rest held out. An empty table means one condition: the scenario itself."""

    time_shifts_ms: list[float] = []  # other windows of every trace workload (added to offset_ms)
    resamples: int = Field(default=0, ge=0)  # block-bootstrap resamples of every trace workload
    resample_block_ms: float = Field(default=30_000.0, gt=0)
    load: list[float] = []  # interactive load multipliers (thinning below 1, superposition above)
    batch_at_ms: list[float] = []  # batch arrivals delayed by this much
    diurnal: list[float] = []  # amplitudes of a diurnal profile on the interactive arrivals (thinning)
    diurnal_period_ms: float | None = Field(default=None, gt=0)  # default: the scenario's duration (one cycle)
    search: int = Field(default=1, ge=1)  # conditions used by the search; the others are held out

    @model_validator(mode="after")
    def _values(self):
        for key in ("time_shifts_ms", "batch_at_ms"):
            bad = [v for v in getattr(self, key) if v < 0]
            if bad:
                raise ValueError(f"{key}: {bad[0]} is negative (expected milliseconds >= 0)")
        bad = [v for v in self.load if not 0 < v <= 20]
        if bad:
            raise ValueError(f"load: {bad[0]} is out of range (expected a multiplier in (0, 20])")
        bad = [v for v in self.diurnal if not 0 < v <= 1]
        if bad:
            raise ValueError(f"diurnal: {bad[0]} is out of range (expected an amplitude in (0, 1])")
        return self


class Criteria(Strict):
    """The article's success criteria, made measurable."""

    slo_bin_ms: float = Field(default=10_000.0, gt=0)  # bins in which interactive P95 is judged
    p95_stay_ms: float = Field(default=30_000.0, gt=0)  # P95 above the SLO this long counts as "stays above"
    batch_stall_ms: float = Field(default=60_000.0, gt=0)  # batch work waiting this long with no batch completion


class Scenario(Strict):
    name: str
    description: str = ""
    duration_ms: float = Field(gt=0)  # arrivals stop here; the run continues until work drains
    max_sim_ms: float | None = Field(default=None, gt=0)  # hard stop (default 20 x duration)
    slo_p95_ms: float = Field(default=2000.0, gt=0)  # the interactive business limit
    sample_ms: float | None = Field(default=None, gt=0)  # time-series resolution
    max_tasks: int = Field(default=2_000_000, ge=1)  # the event budget: every task of a run, open and closed loop
    backend: Backend
    workload: list[Workload] = Field(min_length=1)
    scheduler: dict[str, Any] = {}
    experiment: Experiment = Experiment()
    criteria: Criteria = Criteria()
    tune: Tune = Tune()
    decision: Decision = Decision()
    conditions: Conditions = Conditions()
    gateway: Gateway | None = None  # absent: one gateway that never fails

    # set by load_scenario
    path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _unique_workload_names(self):
        # a workload's name keys its random streams: two of the same name would draw identical tasks
        seen: set[str] = set()
        for w in self.workload:
            if w.name is not None:
                if w.name in seen:
                    raise ValueError(f"workload: two workloads are named {w.name!r} (names must be unique)")
                seen.add(w.name)
        return self

    def options(self, policy: str | None = None) -> SchedulerOptions:
        data = dict(self.scheduler)
        if policy is not None:
            data["policy"] = policy
        return options_from_dict(data, self.path, "scheduler")

    def resolve(self, file: str) -> Path:
        p = Path(file)
        return p if p.is_absolute() or self.path is None else (self.path.parent / p)

    @property
    def end_ms(self) -> float:
        return self.max_sim_ms if self.max_sim_ms is not None else 20 * self.duration_ms

    def facts(self):
        """The scenario as reports describe it (records.ScenarioFacts: numbers and names only)."""
        from simlab.records import ScenarioFacts, WorkloadFacts

        def workload(w) -> WorkloadFacts:
            a = w.arrivals
            return WorkloadFacts(
                kind=w.kind, name=w.name or w.kind, process=a.process,
                rate_per_s=getattr(a, "rate_per_s", None) or getattr(a, "mean_rate_per_s", None),
                steps=len(a.rates_per_s) if isinstance(a, Piecewise) else None,
                step_ms=a.step_ms if isinstance(a, Piecewise) else (a.block_ms if isinstance(a, Resampled) else None),
                count=getattr(a, "count", None), users=getattr(a, "users", None),
                file=Path(a.file).name if isinstance(a, (Trace, Resampled)) else None)

        b = self.backend
        return ScenarioFacts(self.name, self.description, self.duration_ms, self.slo_p95_ms, b.kind, b.slots,
                             b.max_num_seqs, b.concurrency, b.rpm, b.tpm, [workload(w) for w in self.workload])


_TAGS = {
    "constant", "exponential", "lognormal", "uniform", "empirical",
    "poisson", "piecewise", "diurnal", "burst", "closed-loop", "trace", "resampled",
}  # fmt: skip


def _all_field_names(model, seen=None) -> set[str]:
    seen = seen if seen is not None else set()
    names = set()
    for name, field in model.model_fields.items():
        names.add(field.alias or name)
    for cls in (Constant, Exponential, Lognormal, Uniform, Empirical, Poisson, Piecewise, Diurnal, Burst,
                ClosedLoop, Trace, Resampled, Workload, TokenTime, StepTime, Retry, Backend, Experiment, Criteria, Tune, Decision,
                Conditions, Gateway, Scenario):
        if cls not in seen:
            seen.add(cls)
            names |= {f.alias or n for n, f in cls.model_fields.items()}
    return names


FIELD_NAMES = sorted(_all_field_names(Scenario) - {"path"})


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TAGS or part.startswith("function-"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def scenario_from_dict(data: dict, path: Path | None = None) -> Scenario:
    try:
        # strict, as options files: "60000" is not a number and `true` is not 1 (an int is still a float)
        scenario = Scenario.model_validate(data, strict=True)
    except ValidationError as exc:
        errors = exc.errors()
        # A typo in a required key gives "missing" and "unknown key" errors: the unknown key (with its
        # "did you mean") is the one that tells the user what to fix.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = _loc(err["loc"]) or None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1])
            msg = f"unknown key '{key}'{did_you_mean(key, FIELD_NAMES)}"
        elif err["type"] == "union_tag_invalid":
            msg = f"{msg}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif "input" in err and not isinstance(err["input"], dict):
            msg = f"{msg} (found {err['input']!r})"
        raise InputError(path, where, msg) from None
    object.__setattr__(scenario, "path", path)
    _check_semantics(scenario)
    return scenario


def _input_file(s: "Scenario", where: str, file: str, what: str, max_bytes: int = DATA_MAX_BYTES) -> None:
    """A file the scenario points at: there, a regular file (not a FIFO, a device or a folder) and within its
    size limit, or an InputError at the key that names it."""
    path = s.resolve(file)
    try:
        check_file(path, what, max_bytes)
    except InputError as exc:
        message = f"{what} not found: {path}" if exc.message.endswith("not found") else f"{path}: {exc.message}"
        raise InputError(s.path, where, message) from None


MAX_STEPS = 1_000_000  # piecewise steps or bootstrap blocks over a run: each is a loop turn when arrivals are drawn
MAX_SAMPLES = 1_000_000  # time-series rows over the arrivals' span (11 floats each, kept in memory)


def _at_most(s: "Scenario", where: str, count: float, what: str, limit: int, fix: str) -> None:
    if count > limit:
        raise InputError(s.path, where, f"makes {count:,.0f} {what}, more than {limit:,}: {fix}")


def _check_sizes(s: "Scenario") -> None:
    """Settings that would make a run loop or allocate without bound: a tiny step, block or sample interval."""
    if s.sample_ms is not None:
        _at_most(s, "sample_ms", s.duration_ms / s.sample_ms, "time-series rows over duration_ms", MAX_SAMPLES,
                 "give a longer sample_ms")
    users = 0
    for i, w in enumerate(s.workload):
        a, where = w.arrivals, f"workload[{i}].arrivals"
        if isinstance(a, Piecewise):
            _at_most(s, f"{where}.step_ms", s.duration_ms / a.step_ms, "rate steps over duration_ms", MAX_STEPS,
                     "give a longer step_ms")
        elif isinstance(a, Resampled):
            _at_most(s, f"{where}.block_ms", (a.span_ms or s.duration_ms) / a.block_ms, "bootstrap blocks", MAX_STEPS,
                     "give a longer block_ms")
        elif isinstance(a, Trace) and a.resample_block_ms is not None:
            span = a.limit_ms * a.time_scale if a.limit_ms is not None else s.duration_ms
            _at_most(s, f"{where}.resample_block_ms", span / a.resample_block_ms, "bootstrap blocks", MAX_STEPS,
                     "give a longer resample_block_ms")
        elif isinstance(a, ClosedLoop):
            users += a.users
            if users > s.max_tasks:  # each user is a process from the start: more users than tasks cannot be meant
                raise InputError(s.path, f"{where}.users", f"{users:,} closed-loop users in all, more than max_tasks = "
                                 f"{s.max_tasks:,} (the event budget, which counts every task)")
    if s.conditions.resamples:
        _at_most(s, "conditions.resample_block_ms", s.duration_ms / s.conditions.resample_block_ms,
                 "bootstrap blocks over duration_ms", MAX_STEPS, "give a longer resample_block_ms")


def _always_zero(d) -> bool:
    return (isinstance(d, Constant) and d.value == 0) or (isinstance(d, Uniform) and d.high == 0)


def _check_semantics(s: Scenario) -> None:
    """Cross-field rules pydantic cannot see: files exist, tokens where the backend needs them."""
    if s.scheduler:
        s.options()  # validates [scheduler] (camelCase production options)
    if s.gateway is not None and s.gateway.crashes:
        timed = next((i for i, w in enumerate(s.workload) if w.timeout_ms is not None), None)
        if timed is not None:
            raise InputError(s.path, "gateway", f"crashes (crash_at_ms, mtbf_ms) together with workload[{timed}]."
                             "timeout_ms are not modelled: a task would be both retried and resubmitted")
    _check_sizes(s)
    if s.decision.batch_deadline_share is not None and not any(w.deadline_ms is not None for w in s.workload):
        raise InputError(s.path, "decision.batch_deadline_share", "no batch workload has deadline_ms: there is no "
                         "deadline to meet (give a batch workload deadline_ms)")
    token_backend = s.backend.kind == "continuous-batching" or s.backend.kind == "api"
    for i, w in enumerate(s.workload):
        where = f"workload[{i}]"
        for key in ("service", "prompt_tokens", "output_tokens"):
            d = getattr(w, key)
            if isinstance(d, Empirical):
                _input_file(s, f"{where}.{key}.file", d.file, "empirical distribution file")
        arr = w.arrivals
        if isinstance(arr, Resampled):
            _input_file(s, f"{where}.arrivals.file", arr.file, "arrivals file")
        if isinstance(arr, Trace):
            _input_file(s, f"{where}.arrivals.file", arr.file, "trace file")
            has_tokens = arr.format == "azure" or (w.prompt_tokens is not None and w.output_tokens is not None)
            has_service = arr.format == "generic" or w.service is not None
        else:
            has_tokens = w.prompt_tokens is not None and w.output_tokens is not None
            has_service = w.service is not None
            if (w.prompt_tokens is None) != (w.output_tokens is None):
                raise InputError(s.path, where, "give both prompt_tokens and output_tokens, or neither")
            if not has_tokens and not has_service:
                raise InputError(s.path, where, "needs `service` (ms distribution) or `prompt_tokens` and `output_tokens`")
        if s.backend.kind == "api" and s.backend.tpm is not None and not has_tokens:
            raise InputError(s.path, where, "backend.tpm limits tokens per minute, so this workload needs prompt_tokens and output_tokens")
        if s.backend.kind == "continuous-batching" and not has_tokens:
            raise InputError(s.path, where, "the continuous-batching backend needs token counts: give prompt_tokens and output_tokens")
        if not token_backend and not has_service and s.backend.token_time is None:
            raise InputError(
                s.path, where,
                "has token counts but no service time: give `service`, or backend.token_time to turn tokens into ms",
            )
        if isinstance(arr, ClosedLoop) and arr.requests_per_user is None and _always_zero(arr.think):
            tt = s.backend.token_time
            zero_service = (w.service is not None and _always_zero(w.service)) or (
                w.service is None and tt is not None and tt.base_ms == tt.per_prompt_token_ms == tt.per_output_token_ms == 0
            )
            if zero_service and s.backend.kind in ("delay", "slots"):  # the other backends take time per step
                raise InputError(
                    s.path, f"{where}.arrivals.think",
                    "zero think time and zero service time: these users would never let the clock move; "
                    "give think or service a time above 0, or set requests_per_user",
                )
        if s.backend.kv_cache_tokens is not None and has_tokens:
            _check_fits_kv_cache(s, where, w)
        if isinstance(arr, Poisson) and arr.end_ms is not None and arr.end_ms <= arr.start_ms:
            raise InputError(s.path, f"{where}.arrivals.end_ms", f"must be after start_ms ({arr.start_ms})")
    if s.backend.kind == "api" and s.backend.token_time is None:
        raise InputError(s.path, "backend.token_time", "the api backend needs token_time (provider latency per token)")
    if s.backend.step is not None and s.backend.step.profile is not None:
        _input_file(s, "backend.step.profile", s.backend.step.profile, "step profile", CONFIG_MAX_BYTES)


def _largest_tokens(d) -> int | None:
    """The most tokens a distribution can draw (drawn counts are rounded, at least 1); None if unbounded
    or only known from a file."""
    top = d.value if isinstance(d, Constant) else d.high if isinstance(d, Uniform) else None
    return None if top is None else max(1, round(top))


def _check_fits_kv_cache(s: Scenario, where: str, w: Workload) -> None:
    """A request grows to prompt + output - 1 tokens of KV; one that the whole cache cannot hold could never
    run (vLLM refuses to start with a max_model_len its KV cache cannot hold). Checked where the largest
    request is known; the backend rejects any other such request as failed."""
    b = s.backend
    prompt, output = _largest_tokens(w.prompt_tokens), _largest_tokens(w.output_tokens)
    if prompt is None or output is None:
        return
    need = -(-(prompt + output - 1) // b.block_tokens)
    if need > b.kv_blocks:
        raise InputError(
            s.path, "backend.kv_cache_tokens",
            f"{b.kv_cache_tokens} tokens ({b.kv_blocks} blocks of {b.block_tokens}) cannot hold the largest request "
            f"of {where} ({prompt} prompt + {output} output tokens need {need} blocks): raise kv_cache_tokens or "
            "shorten the requests",
        )


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    text = read_text(path, "scenario file", "a TOML scenario", CONFIG_MAX_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, f"not valid TOML: {exc}") from None
    return scenario_from_dict(data, path)
