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

from simlab.errors import InputError

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
    payload = {"simlab_result": record.KIND, "schema_version": record.VERSION, "record": asdict(record)}
    return json.dumps(payload, indent=1, default=_json_default) + "\n"


def save(record, folder: Path, name: str = RESULT_FILE) -> Path:
    from simlab.atomic import atomic_write_text

    path = Path(folder) / name
    atomic_write_text(path, to_json(record))
    return path


def load(path: Path, kind: str | None = None):
    """The record in `path`; InputError (exit 2) for a missing, invalid, foreign or old-schema file."""
    path = Path(path)
    expected = f"the {RESULT_FILE} that simlab {kind or 'ab, tune, calibrate or fit'} writes"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, None, f"not found; expected {expected} (written by an older simlab? run the command "
                         "again to regenerate the folder)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read ({exc})") from None
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
    VERSION: ClassVar[int] = 1

    scenario: str
    description: str
    scenario_file: str | None
    scenario_text: str  # the scenario in one paragraph
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

    @property
    def metric(self) -> str:
        return self.objective.upper()

    def config(self, name: str) -> TuneConfig | None:
        return next((c for c in self.validation if c.config == name), None)

    def to_frame(self):
        """One row per validated configuration (pandas); empty inside `simlab decide`, which judges its own."""
        import pandas as pd

        return pd.DataFrame([c.row() for c in self.validation])


# --- calibration and fit ----------------------------------------------------------------------------------------

@dataclass
class Knee:
    rps: float
    ci_low: float
    ci_high: float
    status: str  # "found", "above" (P95 under the SLO at every rate tried), "below"
    text: str  # in words, as the report says it


@register
@dataclass
class CalibrationRecord:
    """`simlab calibrate`: the latency knee with batch absent and present, and the thresholds that follow."""
    KIND: ClassVar[str] = "calibrate"
    VERSION: ClassVar[int] = 1

    scenario: str
    slo_p95_ms: float
    seeds: list[int]
    base_rps: float
    summary: str  # the ramp in one paragraph
    knees: dict[str, Knee]
    recommended: dict[str, Any]
    options: dict[str, Any]
    verification: str | None
    notes: list[str]
    points: list[dict[str, Any]]
    figures: list[str] = field(default_factory=list)

    def to_frame(self):
        """One row per point of the ramp (curve, offered rate, P95 with its CI), pandas."""
        import pandas as pd

        return pd.DataFrame(self.points)


@register
@dataclass
class FitRecord:
    """`simlab fit`: the fit summary (what fit.json holds, which stays the detailed dump) and where it went."""
    KIND: ClassVar[str] = "fit"
    VERSION: ClassVar[int] = 1

    log: str
    summary: str  # the log and the fit in one paragraph
    scenario_file: str | None
    scenario_text: str  # the fitted scenario in words ("" when it does not load)
    fit: dict[str, Any]  # fit.json's content
    figures: list[str] = field(default_factory=list)

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
class TuningSummary:
    """The search `decide` ran (its folder: tune/): what it proposed, never exported on its own."""
    trials: int
    complete: int
    feasible: int
    candidates: list[str]  # labels of the tuned arms added (none when tuning found nothing new)


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
    settled: bool  # stable: settled by the rule, or the same tie set two racing rounds in a row
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
    figures: list[str] = field(default_factory=list)

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
