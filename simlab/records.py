"""One record type per result. A command builds its record once, writes it as JSON (`result.json`, with its kind and
schema version) and as CSV tables, and every renderer (terminal, report.md, the HTML review page, figures) reads
the record, never another renderer's text.

Adding a result kind: a dataclass with KIND and VERSION, decorated with @register; `save`/`load` do the rest.
Loading validates the JSON against the dataclass (pydantic), so a damaged, foreign or old file is an InputError
naming the file and the field, not a KeyError deep in a renderer. Bump a kind's VERSION whenever a field changes
meaning or disappears: old files are then refused with a message that says how to regenerate them."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from simlab.errors import RECORD_MAX_BYTES, InputError, read_text

RESULT_FILE = "result.json"
KINDS: dict[str, type] = {}


def register(cls):
    KINDS[cls.KIND] = cls
    return cls


def columns(cls) -> list[str]:
    """A record row's CSV columns: its fields, in declaration order."""
    return [f.name for f in fields(cls)]


# --- the generic part -------------------------------------------------------------------------------------------

def to_json(record) -> str:
    """The record as result.json: its kind, schema version and fields, floats at the results' precision (6
    significant digits: another CPU's last bits change nothing)."""
    payload = {"simlab_result": record.KIND, "schema_version": record.VERSION, "record": _rounded(asdict(record))}
    return json.dumps(payload, indent=1, default=_json_default) + "\n"


def save(record, folder: Path, name: str = RESULT_FILE):
    """Write `record` to folder/name; returns the record as stored (rounded), which is what renderers read, so
    what a command prints and what `simlab report` renders later from the file cannot differ."""
    from simlab.store import atomic_write_text

    text = to_json(record)
    atomic_write_text(Path(folder) / name, text)
    return _validate(type(record), json.loads(text)["record"], Path(folder) / name)


def _rounded(value):
    from simlab.store import significant

    if isinstance(value, float):
        return significant(value)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def load(path: Path, kind: str | None = None):
    """The record in `path`; InputError (exit 2) for a missing, invalid, foreign or old-schema file."""
    path = Path(path)
    expected = f"the {RESULT_FILE} that simlab {kind or 'ab, tune, calibrate, fit or calibrate-gpu'} writes"
    if not path.exists():
        raise InputError(path, None, f"not found; expected {expected} (written by an older simlab? run the command "
                         "again to regenerate the folder)") from None
    text = read_text(path, "result file", expected, RECORD_MAX_BYTES)  # a regular file, of a bounded size
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno}", f"not valid JSON ({exc.msg}); expected {expected}") from None
    if not isinstance(data, dict) or "simlab_result" not in data:
        raise InputError(path, None, f"not a simlab result (no 'simlab_result' key); expected {expected}")
    found = data["simlab_result"]
    if found not in KINDS or (kind is not None and found != kind):
        raise InputError(path, "simlab_result", f"is {found!r}; expected {expected}")
    cls = KINDS[found]
    version = data.get("schema_version")
    if version != cls.VERSION:
        raise InputError(path, "schema_version", f"is {version!r}, this simlab reads version {cls.VERSION} of "
                         f"simlab {found} results; run simlab {found} again to regenerate the folder")
    return _validate(cls, data.get("record"), path)


def _validate(cls, data, path: Path):
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "record." + ".".join(str(p) for p in err["loc"]) if err["loc"] else "record"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise InputError(path, where, f"{err['msg']}{more}; expected a simlab {cls.KIND} result of schema version "
                         f"{cls.VERSION}") from None


@cache
def _adapter(cls):
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def _json_default(value):
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# --- shared pieces ----------------------------------------------------------------------------------------------

@dataclass
class Interval:
    """A mean over seeds with its 95% CI (NaN bounds with fewer than two finite values)."""
    mean: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, t) -> "Interval":
        return cls(float(t[0]), float(t[1]), float(t[2]))

    def tuple(self) -> tuple[float, float, float]:
        return (self.mean, self.ci_low, self.ci_high)


@dataclass
class WorkloadFacts:
    """One workload as a report describes it: its class, name and arrival process with its headline number."""
    kind: str
    name: str
    process: str
    rate_per_s: float | None = None  # poisson; diurnal: the mean rate
    steps: int | None = None  # piecewise: how many rates
    step_ms: float | None = None  # piecewise step; resampled: the block
    count: int | None = None  # burst: jobs per burst
    users: int | None = None  # closed-loop users
    file: str | None = None  # trace or resampled arrivals: the file's name


@dataclass
class ScenarioFacts:
    """What a report says about a scenario (`reporting.words.describe` makes the sentence): numbers and names."""
    name: str
    description: str
    duration_ms: float
    slo_p95_ms: float
    backend: str  # delay | slots | continuous-batching | api
    slots: int | None = None
    max_num_seqs: int | None = None
    concurrency: int | None = None
    rpm: float | None = None
    tpm: float | None = None
    workloads: list[WorkloadFacts] = field(default_factory=list)


# --- A/B --------------------------------------------------------------------------------------------------------

@dataclass
class RunMetrics:
    """One simulated run: a policy (or a bound) on one seed. `values`: the SUMMARY_COLUMNS metrics."""
    policy: str
    seed: int
    values: dict[str, float | int | None]

    def row(self) -> dict:
        return {**self.values, "policy": self.policy, "seed": self.seed}


@dataclass
class PolicyAggregate:
    """Every metric of one policy (or bound) over the seeds."""
    policy: str
    n: int
    metrics: dict[str, Interval]


@dataclass
class Comparison:
    """A candidate against a baseline on one metric over common seeds: the paired difference and ratio."""
    candidate: str
    baseline: str
    metric: str
    better: Literal["lower", "higher"]
    candidate_mean: float
    candidate_ci_low: float
    candidate_ci_high: float
    baseline_mean: float
    baseline_ci_low: float
    baseline_ci_high: float
    n: int
    diff: float
    diff_ci_low: float
    diff_ci_high: float
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    significant: bool
    cis_overlap: bool




@dataclass
class Verdict:
    """The article's three criteria for one policy, worst case over seeds. Criterion 1 has a third state,
    'capacity': the policy fails it, and so does the run with batch absent (the bound), so no scheduler could pass."""
    policy: str
    p95_verdict: Literal["pass", "fail", "capacity"]
    longest_p95_over_slo_ms: float
    bound_longest_p95_over_slo_ms: float | None  # the same, batch absent; None when there is no bound run
    batch_keeps_moving: bool
    longest_batch_stall_ms: float
    stranded: int
    concurrency_within_cap: bool
    max_in_flight: int
    max_concurrency: int | None

    @property
    def p95_not_stuck_above_slo(self) -> bool:
        return self.p95_verdict == "pass"

    def row(self) -> dict:
        """verdicts.csv: the boolean column kept for existing readers, the three-state one beside it."""
        d = asdict(self)
        return {"policy": self.policy, "p95_not_stuck_above_slo": self.p95_not_stuck_above_slo,
                **{k: v for k, v in d.items() if k != "policy"}}


VERDICT_COLUMNS = ["policy", "p95_not_stuck_above_slo"] + [c for c in columns(Verdict) if c != "policy"]


@dataclass
class Criteria:
    slo_p95_ms: float
    slo_bin_ms: float
    p95_stay_ms: float
    batch_stall_ms: float


@register
@dataclass
class AbRecord:
    """`simlab ab`: every policy on common seeds, the bounds, aggregates, paired comparisons and verdicts."""
    KIND: ClassVar[str] = "ab"
    VERSION: ClassVar[int] = 2

    scenario: str
    description: str
    scenario_file: str | None
    facts: ScenarioFacts  # what the report says about the scenario
    criteria: Criteria
    options: dict[str, Any]
    policies: list[str]
    seeds: list[int]
    baseline: str
    runs: list[RunMetrics]
    bound_runs: list[RunMetrics]
    aggregates: list[PolicyAggregate]
    bound_aggregates: list[PolicyAggregate]
    comparisons: list[Comparison]
    verdicts: list[Verdict]
    figures: list[str] = field(default_factory=list)  # PNGs relative to the folder, in display order
    verdict: str = ""  # the decision rule's one-line answer over the static frontier ("" when not judged)

    @property
    def slo_p95_ms(self) -> float:
        return self.criteria.slo_p95_ms

    @property
    def max_concurrency(self) -> int | None:
        return self.options.get("maxConcurrency")

    # plain views, for tables and notebooks
    @property
    def rows(self) -> list[dict]:
        return [r.row() for r in self.runs]

    @property
    def bounds(self) -> list[dict]:
        return [r.row() for r in self.bound_runs]

    @property
    def aggregate(self) -> dict[str, dict[str, tuple[float, float, float]]]:
        return {a.policy: {m: i.tuple() for m, i in a.metrics.items()} for a in self.aggregates}

    def interval(self, policy: str, metric: str) -> Interval:
        return next(a for a in self.aggregates if a.policy == policy).metrics[metric]

    def bound(self, name: str, metric: str) -> Interval | None:
        """A bound's metric over seeds ('bound-no-batch', 'bound-batch-alone'); None without that bound."""
        for a in self.bound_aggregates:
            if a.policy == name and metric in a.metrics and finite(a.metrics[metric].mean):
                return a.metrics[metric]
        return None

    def table(self, name: str) -> list[dict]:
        """'comparisons' or 'verdicts' as a list of dicts (e.g. for pandas)."""
        return [v.row() if hasattr(v, "row") else asdict(v) for v in getattr(self, name)]

    @property
    def capacity_limited(self) -> bool:
        return any(v.p95_verdict == "capacity" for v in self.verdicts)

    def to_frame(self):
        """One row per run (policy or bound, seed) with every summary metric (pandas)."""
        import pandas as pd

        return pd.DataFrame([{**r.row(), "bound": False} for r in self.runs]
                            + [{**r.row(), "bound": True} for r in self.bound_runs])


# --- tuning -----------------------------------------------------------------------------------------------------

@dataclass
class TuneConfig:
    """One configuration re-run on the held-out seeds (the chosen options, the defaults, the reference, the bound)."""
    config: str
    trial: int | str | None
    search_objective_ms: float | None
    search_throughput_per_min: float | None
    holdout_objective_ms: float
    holdout_objective_ci_low: float
    holdout_objective_ci_high: float
    holdout_throughput_per_min: float
    holdout_throughput_ci_low: float
    holdout_throughput_ci_high: float
    required_throughput_per_min: float
    meets_constraint: bool
    vs_defaults_diff_ms: float
    vs_defaults_ci_low: float
    vs_defaults_ci_high: float
    vs_reference_diff_ms: float
    vs_reference_ci_low: float
    vs_reference_ci_high: float
    beats_defaults_ci_disjoint: bool
    cis_overlap_defaults: bool
    options: dict[str, Any]
    throughput_margin_ci_low: float = math.nan  # lower CI bound of the paired margin over the required throughput

    def row(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "options"}


@dataclass
class TuneDecision:
    """Whether the tuned options beat the defaults on held-out seeds, in a word (simlab/reporting/words.py says it
    in sentences, from the record's numbers)."""
    status: Literal["beaten", "not-validated", "at-bound", "overlap", "defaults-lower", "keep-defaults", "none",
                    "in-decide"]

    @property
    def outcome(self) -> str | None:
        """'pass' when the tuned options are validated winners, 'fail' when nothing can be recommended."""
        return {"beaten": "pass", "not-validated": "fail", "none": "fail"}.get(self.status)


@dataclass
class TrialPoint:
    """One trial of the study, as its figures draw it: the options evaluated and the search means."""
    trial: int | str  # its slot in the reproducible sequence ("joined-N" for a joined worker's trial)
    origin: str  # defaults | static-equivalent | sampled | joined
    state: str  # COMPLETE | FAIL | RUNNING | ...
    params: dict[str, float | None]
    objective_ms: float | None
    throughput_per_min: float | None
    feasible: bool | None


@register
@dataclass
class TuneRecord:
    """`simlab tune`: the search, the held-out validation and the decision."""
    KIND: ClassVar[str] = "tune"
    VERSION: ClassVar[int] = 2

    scenario: str
    objective: str  # "p95" or "p99"
    mode: str  # "single" or "multi"
    trials: int
    trials_complete: int
    trials_feasible: int
    seeds: list[int]
    throughput_fraction: float
    reference: str
    reference_throughput_per_min: float
    required_throughput_per_min: float
    study: str
    storage: str  # credentials redacted
    space: dict[str, list[float]]
    max_concurrency: int | None
    note: str | None
    holdout_seeds: list[int]
    validation: list[TuneConfig]
    decision: TuneDecision
    best_options: dict[str, Any] | None
    figures: list[str] = field(default_factory=list)
    search_conditions: list[str] = field(default_factory=lambda: ["base"])  # traffic conditions searched on
    holdout_conditions: list[str] = field(default_factory=lambda: ["base"])  # ... validated on (disjoint when 2+)
    # inside `simlab decide`: the search's picks (label -> simlab options), judged there, not validated here
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)
    pick: str | None = None  # the validated configuration chosen ("best", "pareto-N")
    trial_points: list[TrialPoint] = field(default_factory=list)
    importances: dict[str, float] = field(default_factory=dict)  # Optuna's importance of each option (PED-ANOVA)
    family: str = "adaptive"  # the policy searched: adaptive, or a gateway gate (inside `simlab decide`)
    found_at: int | None = None  # inside `simlab decide`: the slot (0-based) of the trial "<family>-tuned" came from
    # inside `simlab decide`: the rule's pick over the first c trials (str(c) -> simlab options), for each earlier
    # budget c that races (simlab/tuning/validation.py `checkpoints`)
    picks_after: dict[str, dict[str, Any]] = field(default_factory=dict)
    # inside `simlab decide`: what a run with half the trials would race from this search (label -> options)
    half_picks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.objective.upper()

    def config(self, name: str) -> TuneConfig | None:
        return next((c for c in self.validation if c.config == name), None)

    def to_frame(self):
        """One row per validated configuration (pandas); empty inside `simlab decide`, which judges its own."""
        import pandas as pd

        return pd.DataFrame([c.row() for c in self.validation])


# --- calibration: `simlab calibrate` ----------------------------------------------------------------------------

Curve = Literal["alone", "batch", "adaptive"]  # batch absent; batch present at full cap; adaptive, recommended


@dataclass
class Knee:
    """Where a curve's mean P95 first crosses the SLO. status: "found" (rps with its CI), "above" (under the SLO at
    every rate tried, up to ci_low), "below" (over it already at the lowest rate, ci_high), "none" (no points)."""
    curve: Curve
    rps: float
    ci_low: float
    ci_high: float
    status: Literal["found", "above", "below", "none"]


@dataclass
class KneePoint:
    """One rate of one curve, over the seeds (knee.csv's row)."""
    curve: Curve
    factor: float  # the interactive rate's multiplier
    offered_rps: float
    p95_mean_ms: float
    p95_ci_low_ms: float
    p95_ci_high_ms: float
    replications: int
    batch_throughput_per_min: float  # NaN with batch absent


@dataclass
class Recommendation:
    """The adaptive thresholds that follow from the knee. `source`: the curve the threshold comes from (the
    batch-present knee, or batch absent when the scenario has no batch); `basis`: its knee, or the highest rate
    tried (the SLO held everywhere) or the lowest (it failed everywhere); `raw`: the rate before rounding down."""
    interactive_rps_threshold: float
    interactive_p95_latency_ms: float
    source: Curve
    basis: Literal["knee", "highest-rate", "lowest-rate"]
    raw_rps: float


CALIBRATION_NOTES = ("no-batch", "trace-arrivals", "never-crossed", "over-at-lowest")


@register
@dataclass
class CalibrationRecord:
    """`simlab calibrate`: the latency knee with batch absent and present, and the thresholds that follow.
    notes: "no-batch" (only the batch-absent curve), "trace-arrivals" (every seed replays the same requests),
    "never-crossed" / "over-at-lowest" (the recommendation's curve never crossed the SLO / failed it throughout)."""
    KIND: ClassVar[str] = "calibrate"
    VERSION: ClassVar[int] = 2

    scenario: str
    slo_p95_ms: float
    seeds: list[int]
    base_rps: float  # the scenario's own interactive rate, as generated
    knees: list[Knee]
    recommendation: Recommendation
    options: dict[str, float | int | bool | str]  # the recommended options verified (an options file's content)
    notes: list[Literal["no-batch", "trace-arrivals", "never-crossed", "over-at-lowest"]]
    points: list[KneePoint]
    figures: list[str] = field(default_factory=list)

    def knee(self, curve: str) -> Knee | None:
        return next((k for k in self.knees if k.curve == curve), None)

    def curve(self, curve: str) -> list[KneePoint]:
        return sorted((p for p in self.points if p.curve == curve), key=lambda p: p.offered_rps)

    def to_frame(self):
        """One row per point of the ramp (curve, offered rate, P95 with its CI), pandas."""
        import pandas as pd

        return pd.DataFrame([asdict(p) for p in self.points])


# --- the workload fit: `simlab fit` -----------------------------------------------------------------------------

@dataclass
class TestResult:
    """A hypothesis test at 5%: its statistic, p-value and whether it rejects."""
    __test__ = False  # not a pytest class
    statistic: float
    p_value: float
    rejected: bool


@dataclass
class StepCandidate:
    """A piecewise step considered for the scenario's rate, and the inter-arrival CV its process would show."""
    step_ms: float
    predicted_cv: float


ARRIVAL_REASONS = ("burst", "arrivals-flag", "step-flag", "poisson-fits", "rate-varies", "poisson-rejected")


@dataclass
class ArrivalSummary:
    """One class's arrivals. process: the scenario's arrival process; reason: why (`burst`: every request at once;
    `arrivals-flag`/`step-flag`: chosen with --arrivals / --step; `poisson-fits`: neither the constant-rate test nor
    the Poisson test rejects; `rate-varies` / `poisson-rejected`: which test rejected, then `piecewise` when a rate per
    step reproduces the log's CV, else `resampled`). step_ms: the piecewise step, the resampling block, or the span;
    rate_step_ms: the piecewise step chosen (also for a resampled class: the closest one, predicting closest_cv)."""
    requests: int
    span_ms: float
    rate_per_s: float
    cv: float  # of the inter-arrival times as written (NaN for a burst)
    bin_ms: float
    bins: int
    bin_rate_min_per_s: float
    bin_rate_max_per_s: float
    rate_varies: TestResult  # chi-square of the counts per bin (NaN statistic with one bin)
    poisson_constant: TestResult  # KS of the inter-arrival times against the fitted exponential
    mean_gap_ms: float
    poisson_rescaled: TestResult | None  # time-rescaling KS with the rate per bin
    rescaled_gap_cv: float | None
    dispersion: TestResult | None  # statistic: variance / mean of the counts per window
    dispersion_window_ms: float | None
    dispersion_df: int | None
    poisson_per_bin_rejected: bool
    process: Literal["poisson", "piecewise", "resampled", "burst"]
    reason: Literal["burst", "arrivals-flag", "step-flag", "poisson-fits", "rate-varies", "poisson-rejected"]
    step_ms: float
    rate_step_ms: float
    predicted_cv: float  # of the scenario's process (1 for poisson, the log's own for resampled)
    closest_cv: float  # predicted at rate_step_ms
    steps: list[StepCandidate]
    timestamps_spread: bool  # timestamps spread within their tick before the tests
    first_arrival_ms: float


@dataclass
class LengthSummary:
    """One class's token counts or latencies. reason: `lognormal-fits` / `lognormal-rejected` (by KS at 5%, for
    --dist auto) or `dist-flag` (chosen with --dist)."""
    column: Literal["prompt_tokens", "output_tokens", "service_ms"]
    n: int
    zeros: int
    mean: float
    p10: float
    p50: float
    p90: float
    p95: float
    p99: float
    lognormal_median: float
    lognormal_sigma: float
    lognormal_p95: float
    ks: TestResult  # against the fitted lognormal
    drift: TestResult | None  # first half against second half
    choice: Literal["lognormal", "empirical"]
    reason: Literal["lognormal-fits", "lognormal-rejected", "dist-flag"]


@dataclass
class FitClass:
    kind: Literal["interactive", "batch"]
    arrivals: ArrivalSummary
    lengths: list[LengthSummary]


@dataclass
class ValidationCheck:
    """One comparison of the log with the fitted scenario's simulation (validation.csv's row). quantity: `bin_rate`
    (req/s per report bin), `total_rate` (req/s over the log), `cv` (inter-arrival), `quantile` (of `column`, at q).
    method: `poisson` (exact tests of one rate: per bin, bins_within of bins pass, and `ok` says whether chance allows
    the failures; on the total, p_value), `resampled` (a block-resampled class against its own resampling
    variability: two-sample KS of the counts per bin, p_value; the total in the seeds' prediction interval),
    `prediction-interval` (the log's value in the seeds' 95% prediction interval), `order-statistics` (the 95%
    order-statistic intervals of the log's and the simulation's quantile overlap)."""
    kind: Literal["interactive", "batch"]
    quantity: Literal["bin_rate", "total_rate", "cv", "quantile"]
    column: str | None
    q: float | None
    observed: float
    observed_lo: float
    observed_hi: float
    simulated: float
    simulated_lo: float
    simulated_hi: float
    ok: bool
    method: Literal["poisson", "resampled", "prediction-interval", "order-statistics"]
    p_value: float | None = None
    bins_within: int | None = None
    bins: int | None = None


@dataclass
class ValidationBin:
    """The log's arrivals in one report bin against the seeds' (validation-bins.csv's row)."""
    kind: Literal["interactive", "batch"]
    start_ms: float
    end_ms: float
    log_count: int
    simulated_mean_count: float
    p_value: float


@dataclass
class FitValidation:
    """The fitted scenario simulated on `seeds` (policy None: only its workload generated, the log has no latency)."""
    seeds: list[int]
    policy: str | None
    rates: bool
    cv: bool
    quantiles: bool
    checks: list[ValidationCheck]
    bins: list[ValidationBin]

    @property
    def passed(self) -> dict[str, bool]:
        return {"rates": self.rates, "cv": self.cv, "quantiles": self.quantiles}


@dataclass
class LogColumn:
    role: str  # arrival, class, service_ms, prompt_tokens, output_tokens
    source: str  # the log's column (and unit), as read


@dataclass
class ScenarioNote:
    """What the written scenario says about itself: `placeholder-delay` (a `delay` backend: latency is the fitted
    service time), `placeholder-token-time` (a `delay` backend with a made-up token_time), `empirical-quantiles`
    (`kind`'s empirical values summarised by `count` quantiles)."""
    code: Literal["placeholder-delay", "placeholder-token-time", "empirical-quantiles"]
    kind: str | None = None
    values: int | None = None
    count: int | None = None


@register
@dataclass
class FitRecord:
    """`simlab fit`: the log, each class's arrivals and lengths, the written scenario and its validation (fit.json
    stays the detailed dump, with every bin). log_notes: `unsorted` (rows sorted by arrival time)."""
    KIND: ClassVar[str] = "fit"
    VERSION: ClassVar[int] = 2

    log: str
    layout: str
    columns: list[LogColumn]
    requests: int
    span_ms: float
    origin: str | None  # the first request's timestamp as written, when the log has date-times
    resolution_ms: float  # timestamp granularity (0 when finer than a millisecond)
    log_notes: list[Literal["unsorted"]]
    bin_ms: float
    classes: list[FitClass]
    scenario_file: str
    scenario_notes: list[ScenarioNote]
    validation: FitValidation | None
    figures: list[str] = field(default_factory=list)
    scenario: ScenarioFacts | None = None  # the written scenario, as reports describe it

    @property
    def log_name(self) -> str:
        return Path(self.log).name

    def of(self, kind: str) -> FitClass:
        return next(c for c in self.classes if c.kind == kind)


# --- the step-time fit: `simlab calibrate-gpu` ------------------------------------------------------------------

Measure = Literal["step", "tpot", "ttft", "latency", "throughput", "request_rate"]


@dataclass
class StepParameters:
    """The continuous-batching backend's step model: base + per_token x tokens + per_seq x sequences + admit x
    admitted, and request_ms of front end per request."""
    base_ms: float
    per_token_ms: float
    per_seq_ms: float
    request_ms: float
    admit_ms: float


@dataclass
class MeasureFit:
    measure: Measure
    r2: float


@dataclass
class Prediction:
    """One measurement of the table(s) and the model's value for it (fit.csv's row)."""
    line: int | str  # the table's line; "table:line" when several tables are fitted together
    measure: Measure
    batch_size: float
    prompt_tokens: float | None
    output_tokens: float | None
    measured: float
    fitted: float
    relative_error: float


@dataclass
class ProfilePoint:
    """The measured decode step at one batch size (step-profile.csv's row)."""
    batch_size: int
    step_ms: float


@dataclass
class JoinCost:
    """What one request joining costs the running ones, at one concurrency and prompt length, from the time per
    output token at two output lengths (join-cost.csv's row); fitted: admit_ms + per_token_ms x (prompt - 1)."""
    batch_size: float
    prompt_tokens: float
    short_output: float
    long_output: float
    measured_ms: float
    fitted_ms: float


@dataclass
class OpenLoopRun:
    """The model at one open-loop run's measured load: the median over its requests of model / measured - 1, with the
    load-test fit (before) and the refit (after) (open-loop.csv's row)."""
    run: str
    requests: int
    mean_sequences: float
    error_load_test_fit: float
    error_refitted: float


@dataclass
class OpenLoopRefit:
    """base_ms, per_seq_ms and admit_ms refitted on open-loop requests (per_token_ms and request_ms kept)."""
    load_test: StepParameters  # the fit of the load test(s) alone
    load_test_mean_rel_error: float  # its error on the load-test rows
    requests: int
    unstreamed: int  # requests left out: their tokens came all at once
    runs: list[OpenLoopRun]
    mean_abs_error_before: float  # over every request, with the load-test fit
    mean_abs_error_after: float


@dataclass
class CheckRow:
    """One row of the held-out table: measured, the straight-line model, the measured profile (None without one),
    and the fit table's value for the same level (retest; None when it has none) (check.csv's row)."""
    measure: Measure
    batch_size: float
    prompt_tokens: float | None
    output_tokens: float | None
    measured: float
    fitted: float
    relative_error: float
    fitted_profile: float | None
    relative_error_profile: float | None
    retest: float | None
    retest_difference: float | None


@dataclass
class CheckGroup:
    """One measure at one concurrency: mean and largest |error|, and whether every row is within the tolerance."""
    measure: Measure
    batch_size: float
    mean_abs_error: float
    max_abs_error: float
    within: bool
    mean_abs_error_profile: float | None = None
    max_abs_error_profile: float | None = None
    within_profile: bool | None = None


@dataclass
class HeldOutCheck:
    """The fit against an independent load test of the same server (`--check`)."""
    table: str
    tolerance: float
    rows: list[CheckRow]
    by_concurrency: list[CheckGroup]
    mean_abs_error: float
    mean_abs_error_profile: float | None
    retest_mean_abs_difference: float | None

    @property
    def profile(self) -> bool:
        return self.mean_abs_error_profile is not None


GPU_NOTES = ("not-identifiable", "per-token-fixed", "open-loop-refit")


@register
@dataclass
class GpuFitRecord:
    """`simlab calibrate-gpu`: the step-time model fitted to load-test table(s), every prediction, what a joining
    request costs, the open-loop refit and the held-out check when asked for. notes: `not-identifiable` (per-token
    cost set to 0: the table cannot tell it from the per-sequence cost), `per-token-fixed` (by --per-token-ms),
    `open-loop-refit` (the parameters below are the refit; the load-test rows are predicted with them)."""
    KIND: ClassVar[str] = "calibrate-gpu"
    VERSION: ClassVar[int] = 1

    label: str  # the table(s) fitted (and the open-loop runs), for titles
    tables: list[str]
    parameters: StepParameters
    identifiable: bool
    mean_rel_error: float
    max_rel_error: float
    r2: list[MeasureFit]
    predictions: list[Prediction]
    profile: list[ProfilePoint]
    joins: list[JoinCost]
    notes: list[Literal["not-identifiable", "per-token-fixed", "open-loop-refit"]]
    open_loop: OpenLoopRefit | None
    check: HeldOutCheck | None
    snippet_file: str = "step.toml"
    profile_file: str | None = None  # step-profile.csv, when written
    figures: list[str] = field(default_factory=list)

    @property
    def concurrencies(self) -> list[float]:
        return sorted({p.batch_size for p in self.predictions})

    def r2_of(self, measure: str) -> float | None:
        return next((m.r2 for m in self.r2 if m.measure == measure), None)

    def to_frame(self):
        """fit.json flattened, one row per class (pandas)."""
        import pandas as pd

        classes = self.fit.get("classes") or {}
        return pd.json_normalize([{"class": k, **v} for k, v in classes.items()])


# --- decision (simlab/decision: `simlab decide`, and the frontier `ab` sweeps) ----------------------------------

@dataclass
class Unit:
    """One unit of a decision: a traffic condition and a seed (every arm runs on the same units)."""
    condition: str
    seed: int


@dataclass
class ArmResult:
    """One arm on one set of units (selection or confirmation). Per-unit values follow the record's unit list of
    that set (NaN where racing did not run the arm); intervals are 95% t intervals over the units it ran; the
    comparisons with the choice are paired on the units both ran (None for the choice itself, or no choice)."""
    label: str  # static-4, adaptive-defaults, adaptive-tuned, priority, unscheduled
    family: str  # static | adaptive | baseline
    cap: int | None  # a static arm's batch cap
    options: dict[str, Any]  # production options (simlab's own for baselines)
    units: int  # units it ran
    p95_ms: list[float]  # per unit
    throughput_per_min: list[float]
    p95: Interval
    throughput: Interval
    p95_vs_choice: Interval | None = None  # this arm minus the choice
    throughput_vs_choice: Interval | None = None
    required_margin: Interval | None = None  # throughput - throughput_fraction x reference, paired ("constrained")
    feasible: str = ""  # yes | no | undecided ("" for baselines)
    tie: str = ""  # against the leader on the rule's first axis: leader | equivalent | undecided | out
    second: str = ""  # within the tie set, on the second axis: leader | equivalent | undecided | out
    stopped_after: int | None = None  # racing round after which it was no longer measured (None: to the end)
    dominates: bool = False  # dominates the choice on these units (Holm over every arm compared with it)
    dominates_p: float | None = None  # Holm-adjusted p-value of that claim (its better route)
    deadline_share: Interval | None = None  # batch jobs done by their deadline (None: no batch deadline)
    constraint: str = ""  # `feasible`'s parts: the rule's own constraint alone (P95 limit or required throughput)
    on_time: str = ""  # ... and [decision] batch_deadline_share alone ("" when the rule asks for none)


@dataclass
class Round:
    """One round of racing: selection seeds per held-out condition after it, what ran, and what the rule said."""
    seeds: int
    arms: int  # arms measured in this round
    runs: int
    choice: str | None
    tie_set: list[str]
    settled: bool


@dataclass
class BudgetStep:
    """One tuning budget `decide` judged: trials per family, the rule's choice and tie set on the selection units,
    and whether the answer hung on that budget (`why`: "start-up" | "tie-set" | "choice", "" when it did not)."""
    trials: int
    choice: str | None
    tie_set: list[str]
    settled: bool
    why: str


@dataclass
class ConditionCheck:
    """The choice on one held-out condition's confirmation units alone, with the same margins."""
    condition: str
    units: int
    p95: Interval
    throughput: Interval
    dominators: list[str]  # arms that dominate the choice there (Holm over the arms compared)
    worse_than_choice: list[str]  # ... and arms shown worse than it there, beyond a margin on either axis
    best_static: str | None  # the rule over the static caps alone, on these units


@dataclass
class FamilyTuning:
    """One family's search inside `decide` (its folder: tune/ for adaptive, tune-<family>/ for a gate)."""
    family: str  # adaptive | holdback | aimd | gradient2
    trials: int  # trials in its study
    complete: int
    feasible: int
    candidates: list[str]  # labels of its tuned arms added
    found_at: int | None = None  # the slot (0-based) of the trial its "<family>-tuned" pick came from
    half: int | None = None  # half the budget: the shorter search the answer is checked against


@dataclass
class TuningSummary:
    """The searches `decide` ran: what they proposed, never exported on their own. Every family gets the same
    budget: `trials_per_family` trials on the same search units with the same sampler seed."""
    trials: int  # trials per family (one family: its study's trials)
    complete: int  # over every family
    feasible: int
    candidates: list[str]  # labels of the tuned arms added (none when tuning found nothing new)
    families: list[FamilyTuning] = field(default_factory=list)  # in the order they were tuned
    trials_per_family: int | None = None  # the budget each family got ([decision] trials or --trials)


@register
@dataclass
class DecideRecord:
    """`simlab decide` (command "decide") and the frontier verdict of `simlab ab` (command "ab"): every arm on the
    selection units, the rule's choice and tie set, racing's rounds, and the choice against its contenders on
    fresh confirmation units. Numbers and codes only: simlab/reporting/words.py says it in sentences."""
    KIND: ClassVar[str] = "decide"
    VERSION: ClassVar[int] = 1

    scenario: str
    command: str  # "decide" or "ab"
    rule: str  # constrained | slo
    level: float  # the family-wise level of every claim is 1 - level
    p95_margin: float
    throughput_margin: float
    throughput_fraction: float
    bound_tolerance: float
    reference: str | None  # the label of the arm the throughput constraint is measured against
    slo_p95_ms: float
    max_concurrency: int | None
    backend_slots: int | None
    conditions: list[str]  # held-out traffic conditions (the units' conditions)
    search_conditions: list[str]
    selection_units: list[Unit]
    confirmation_units: list[Unit]
    selection: list[ArmResult]
    confirmation: list[ArmResult]
    choice: str | None
    pick: str | None  # the rule's pick before it moved to an arm of the tie set that dominates it
    leader: str | None  # best on the first axis
    second_leader: str | None  # best on the second axis within the tie set
    no_choice: str  # "" | "no-feasible"
    limit_ms: float | None  # "slo" rule: the P95 limit judged
    limit_kind: str  # "slo" | "bound" | ""
    settled: bool  # stable: settled by the rule, or the same tie set and choice two racing rounds in a row
    settled_by: str  # "decided" (no undecided arm could move the choice) | "unchanged" | "" (not settled)
    unsettling: list[str]  # arms whose undecided standing could move the choice
    seeds_needed: float | None  # selection seeds per condition that would settle it (inf: never, at these effects)
    seeds_budget: int  # at most this many selection seeds per condition
    rounds: list[Round]
    best_static: str | None  # the rule over the static caps alone (selection units)
    best_adaptive: str | None  # ... over the adaptive arms alone
    bound_p95: Interval | None  # interactive P95 with batch absent (confirmation units, else selection)
    confirmed: bool  # on confirmation units nothing dominates the choice and it does not miss the constraint
    constraint_missed: bool  # the confirmation units show the choice below the required throughput (or SLO)
    slo_met: str  # the choice's P95 on confirmation units against the SLO: yes | no | undecided
    per_condition: list[ConditionCheck]
    exported: bool  # best-options.json written
    exit_code: int
    runs: int  # simulations this decision ran (or found saved)
    runs_exhaustive: int  # ... that every arm on every selection unit (and the same confirmation) would take
    tuning: TuningSummary | None = None
    # arm x unit results that were another arm's simulation: options that provably make the same decisions
    # (simlab/policies/equivalence.py), counted neither in `runs` nor saved from `runs_exhaustive`'s count
    runs_shared: int = 0
    figures: list[str] = field(default_factory=list)
    batch_deadline_share: float | None = None  # [decision]: feasible only with this share of batch jobs on time
    # the answer depends on the tuning budget (simlab/decision/run.py `budget_moves`): `budget_why` says how
    # ("start-up" | "tie-set" | "choice", "" when it does not), `budget_arms` are the arms it hangs on, and these
    # trials per family (--trials) would tell whether it still moves
    trials_needed: int | None = None
    budget_arms: list[str] = field(default_factory=list)
    budget_why: str = ""
    # the budgets judged, the first the one asked for (--trials): while the answer hung on the budget, every search
    # was doubled (to `trials_needed` of the step before), up to max_trials per family
    budget_steps: list[BudgetStep] = field(default_factory=list)
    max_trials: int | None = None

    def arm(self, label: str | None, confirmation: bool = False) -> ArmResult | None:
        for a in (self.confirmation if confirmation else self.selection):
            if a.label == label:
                return a
        return None

    @property
    def tie_set(self) -> list[str]:
        return [a.label for a in self.selection if a.tie in ("leader", "equivalent", "undecided")]

    def to_frame(self):
        """One row per arm and set of units (selection, confirmation): means, CIs, standings (pandas)."""
        import pandas as pd

        rows = []
        for which, arms in (("selection", self.selection), ("confirmation", self.confirmation)):
            for a in arms:
                row = {"units": which, "arm": a.label, "family": a.family, "cap": a.cap, "n": a.units,
                       "feasible": a.feasible, "tie": a.tie, "second": a.second, "chosen": a.label == self.choice,
                       "dominates": a.dominates}
                for name in ("p95", "throughput", "p95_vs_choice", "throughput_vs_choice"):
                    i = getattr(a, name)
                    row[name] = i.mean if i else None
                    row[name + "_ci_low"] = i.ci_low if i else None
                    row[name + "_ci_high"] = i.ci_high if i else None
                rows.append(row)
        return pd.DataFrame(rows)


# --- sim-to-real (simlab/realcheck, `simlab validate-real`) -----------------------------------------------------

RUNTIME, ARTICLE_JS = "runtime", "article-js"  # the drivers: simlab.runtime, or the article's scheduler under Node


@dataclass
class StepModelUsed:
    """The continuous-batching backend the simulation ran with (the scenario's, or the --calibration's)."""
    max_num_seqs: int
    base_ms: float
    per_seq_ms: float
    per_token_ms: float
    admit_ms: float
    request_ms: float
    profile: str | None  # the decode-step profile CSV, when the step time comes from one


@dataclass
class RealMetricRow:
    """One policy through one driver, one class and metric: predicted vs the measured runs (a summary.csv row)."""
    policy: str
    driver: Literal["runtime", "article-js"]
    kind: Literal["interactive", "batch"]  # summary.csv's `class`
    metric: str  # p50_ms, p95_ms, p99_ms, ttft_p95_ms, throughput_tok_s
    predicted: float
    measured: float  # mean over the runs
    measured_min: float
    measured_max: float
    spread: float  # (max - min) / mean
    relative_error: float  # (predicted - measured) / measured
    runs: int
    measured_ci_low: float
    measured_ci_high: float
    run_values: list[float] = field(default_factory=list)
    within_tolerance: bool | None = None  # on the watched metrics: |relative error| <= the tolerance
    within_noise: bool | None = None  # on the watched metrics: the prediction inside the measured mean's 95% CI


@dataclass
class RankingPair:
    """Two policies (the runtime driver) on one watched metric: '>' (a better), '<' (b better) or '~' (a tie)."""
    metric: str  # "interactive p95_ms" or "batch throughput_tok_s"
    a: str
    b: str
    predicted: Literal[">", "<", "~"]
    measured: Literal[">", "<", "~"]
    p_value: float  # Welch's t-test over the runs; NaN without two runs on each side


@dataclass
class RealVerdict:
    tolerance: float
    ranking_predicted: dict[str, list[str]]  # per watched metric, best first
    ranking_measured: dict[str, list[str]]
    pairs: list[RankingPair]
    rankings_agree: bool  # no pair ordered one way predicted and the other way measured
    same_order: bool  # the two orders (by the values alone) are the same
    rankings_same: bool  # every pair has the same relation on both sides
    all_within: bool  # every watched row within the tolerance


@dataclass
class DecodeCheck:
    """The decode step one policy's requests of one class saw (ms per token): simulated, measured per run, and
    the step model evaluated at each run's measured load."""
    policy: str
    driver: Literal["runtime", "article-js"]
    kind: Literal["interactive", "batch"]
    simulated_ms: float
    measured_ms: list[float]  # per run: median over requests of (end - first token) / (output tokens - 1)
    in_flight: list[float]  # per run: mean sequences in the engine during those decodes
    at_load_measured_ms: list[float]  # per run: the measured step of the requests the model is checked on
    at_load_model_ms: list[float]  # per run: the model's step at their load


@dataclass
class ServerProcessCpu:
    name: str
    cores: float  # cores' worth of CPU time per wall second
    waiting: float  # cores' worth of run-queue wait per wall second


@dataclass
class RunCpu:
    wall_s: float
    client_cores: float
    machine_cores: float
    server: list[ServerProcessCpu]


@dataclass
class MeasuredRun:
    """One measured run of one policy through one driver."""
    policy: str
    driver: Literal["runtime", "article-js"]
    run: int  # 1-based
    kept: bool  # reused from an earlier invocation with the same key, not measured now
    sent: int
    completed: int
    batch_error_by_window: dict[int, float]  # 10-s window of decode start -> model / measured - 1 (batch requests)
    cpu: RunCpu | None


@register
@dataclass
class ValidateRealRecord:
    """`simlab validate-real`: a scenario's arrivals measured on a real server per policy, against the simulation."""
    KIND: ClassVar[str] = "validate-real"
    VERSION: ClassVar[int] = 1

    scenario: str
    scenario_file: str  # its file name
    seed: int
    tasks: int
    interactive: int
    batch: int
    last_arrival_ms: float
    time_scale: float
    until_ms: float | None
    server: str  # the checked server's canonical URL (a loopback address literal)
    model: str  # as the server reports it (GET /v1/models), or as the kept runs recorded it
    repeats: int
    calibration: str | None  # the --calibration file, as given
    backend: StepModelUsed
    policies: list[str]
    node_policies: list[str]
    rows: list[RealMetricRow]
    verdict: RealVerdict
    decode: list[DecodeCheck]
    runs: list[MeasuredRun]
    figures: list[str] = field(default_factory=list)
    # --engine-priority: the engine scheduled by priority (requests sent with vLLM's `priority`, interactive 0,
    # batch 1; simulated with the KV backend's scheduling = "priority") with this KV cache (None: no KV limit)
    engine_priority: bool = False
    kv_cache_tokens: int | None = None

    def arms(self) -> list[tuple[str, str]]:
        """(policy, driver) in report order: every policy through the runtime, then those also run under Node."""
        return [(p, RUNTIME) for p in self.policies] + [(p, ARTICLE_JS) for p in self.node_policies]
