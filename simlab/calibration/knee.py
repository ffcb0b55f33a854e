"""`simlab calibrate`: ramp the interactive rate and find the knee where interactive P95 crosses the SLO.

Three curves, each point replicated over seeds (95% Student-t intervals with `mean_ci`):
- `alone`: batch absent (the scenario without its batch workloads): the rate the server can carry for
  interactive traffic at all (no scheduler beats it without preemption);
- `batch`: batch present and held at its full cap (`static` with the scenario's batchMaxConcurrency): the rate
  up to which batch can run unthrottled;
- `adaptive`: the adaptive scheduler with the recommended options (verification, `--no-verify` skips it).

Ramping multiplies every open-loop interactive workload's rate by a factor (`poisson` rate, `piecewise`
rates, `diurnal` mean; a `trace` is compressed in time with `time_scale / f` over `limit_ms * f` of the
trace, so the window stays the same while the trace lasts). The x axis is the offered rate measured on the
generated arrivals (requests / arrival window, averaged over the seeds).

The knee of a curve is where the mean P95 first crosses the SLO (interpolated in log P95 between the two
rates around the crossing); its interval is where the upper and the lower CI bound cross. The automatic
ramp walks factors 0.25, 0.5, 0.75, 1, 1.25, ... until every curve has a point whose CI lies above the
SLO, then bisects the bracketing interval (`--refine` times).

Recommendation (`recommend`; the report explains it):
- interactiveRpsThreshold = the `batch` knee (the rate at which batch at full cap makes interactive P95 cross
  the SLO), rounded down to two significant digits: the adaptive policy's pressure rps / threshold reaches
  1, and the batch cap its minimum, by the time full batch would break the SLO (and the cap already shrinks
  in proportion below it). Its CI is reported beside it;
- interactiveP95LatencyMs = the SLO: the latency pressure reaches 1 when the window P95 reaches it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simlab import records
from simlab.errors import InputError
from simlab.experiments.runner import Job, run_cells
from simlab.experiments.stats import mean_ci
from simlab.scenario import ClosedLoop, Diurnal, Piecewise, Poisson, Scenario, Trace

AUTO_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0)
LOW_FACTORS = (0.1, 0.05, 0.02)
CURVES = ("alone", "batch", "adaptive")


def interactive_workloads(scenario: Scenario) -> list[int]:
    idx = [i for i, w in enumerate(scenario.workload) if w.kind == "interactive"]
    if not idx:
        raise InputError(scenario.path, "workload", "no interactive workload: calibrate ramps the interactive rate")
    for i in idx:
        arr = scenario.workload[i].arrivals
        if isinstance(arr, ClosedLoop):
            raise InputError(
                scenario.path, f"workload[{i}].arrivals",
                "a closed-loop workload sets its own rate (users wait for answers): calibrate ramps open-loop "
                "arrivals (poisson, piecewise, diurnal, trace); describe the interactive traffic by its rate",
            )
        if not isinstance(arr, (Poisson, Piecewise, Diurnal, Trace)):
            raise InputError(scenario.path, f"workload[{i}].arrivals",
                             f"calibrate cannot ramp a '{arr.process}' interactive workload (expected poisson, "
                             "piecewise, diurnal or trace)")
    return idx


def scale_arrivals(arr, factor: float):
    if isinstance(arr, Poisson):
        return arr.model_copy(update={"rate_per_s": arr.rate_per_s * factor})
    if isinstance(arr, Piecewise):
        return arr.model_copy(update={"rates_per_s": [r * factor for r in arr.rates_per_s]})
    if isinstance(arr, Diurnal):
        return arr.model_copy(update={"mean_rate_per_s": arr.mean_rate_per_s * factor})
    if isinstance(arr, Trace):
        limit = arr.limit_ms * factor if arr.limit_ms is not None else None
        return arr.model_copy(update={"time_scale": arr.time_scale / factor, "limit_ms": limit})
    raise TypeError(arr)


def scaled(scenario: Scenario, factor: float) -> Scenario:
    workloads = list(scenario.workload)
    for i in interactive_workloads(scenario):
        w = workloads[i]
        workloads[i] = w.model_copy(update={"arrivals": scale_arrivals(w.arrivals, factor)})
    return scenario.model_copy(update={"workload": workloads})


def offered_rps(scenario: Scenario, seeds: list[int]) -> float:
    """Interactive arrivals per second of arrival window, averaged over seeds."""
    from simlab.world.workloads import open_loop_tasks

    world = scenario.model_copy(update={"workload": [w for w in scenario.workload if w.kind == "interactive"]})
    rates = []
    for seed in seeds[:3]:
        times = [t.arrival_ms for t in open_loop_tasks(world, seed)]
        if times:
            window = max(min(max(times), scenario.duration_ms), 1.0)
            rates.append(len(times) / window * 1000.0)
    return float(np.mean(rates)) if rates else 0.0


@dataclass
class Point:
    curve: str
    factor: float
    rps: float
    p95: list[float]
    mean: float
    lo: float
    hi: float
    batch_throughput: float = math.nan

    def record(self) -> records.KneePoint:
        return records.KneePoint(self.curve, self.factor, self.rps, self.mean, self.lo, self.hi, len(self.p95),
                                 self.batch_throughput)


@dataclass
class Knee:
    curve: str
    rps: float  # NaN when not bracketed
    lo: float
    hi: float
    status: str  # "found", "above" (never crossed: knee beyond the last rate), "below" (over SLO from the start)
    bracket: tuple[float, float] | None = None

    def record(self) -> records.Knee:
        return records.Knee(self.curve, self.rps, self.lo, self.hi, self.status)


def _crossing(xs, ys, level) -> float | None:
    """x where y first rises through `level`, interpolated linearly in log(y) (latency grows geometrically
    past a knee, so a straight line in y would put every knee at the left end); None if it never does."""
    for i in range(1, len(xs)):
        y0, y1 = ys[i - 1], ys[i]
        if y0 <= level < y1:
            if not math.isfinite(y1):
                return xs[i]
            if y0 > 0:
                w = math.log(level / y0) / math.log(y1 / y0)
            else:
                w = (level - y0) / (y1 - y0)
            return xs[i - 1] + w * (xs[i] - xs[i - 1])
    return None


def find_knee(points: list[Point], slo: float, curve: str) -> Knee:
    pts = sorted(points, key=lambda p: p.rps)
    xs = [p.rps for p in pts]

    def clean(v, fallback):
        return v if math.isfinite(v) else fallback

    means = [clean(p.mean, math.inf) for p in pts]
    upper = [clean(p.hi, clean(p.mean, math.inf)) for p in pts]
    lower = [clean(p.lo, clean(p.mean, math.inf)) for p in pts]
    if not pts:
        return Knee(curve, math.nan, math.nan, math.nan, "none")
    if means[0] > slo:
        return Knee(curve, math.nan, math.nan, xs[0], "below")
    x = _crossing(xs, means, slo)
    if x is None:
        return Knee(curve, math.nan, xs[-1], math.nan, "above")
    lo = _crossing(xs, upper, slo) if upper[0] <= slo else xs[0]
    hi = _crossing(xs, lower, slo)
    i = next(i for i in range(1, len(xs)) if means[i - 1] <= slo < means[i] or (math.isinf(means[i]) and means[i - 1] <= slo))
    return Knee(curve, float(x), float(lo) if lo is not None else math.nan,
                float(hi) if hi is not None else math.nan, "found", (xs[i - 1], xs[i]))


def _nice_floor(x: float) -> float:
    """Round down to two significant digits (a threshold people can read)."""
    if not math.isfinite(x) or x <= 0:
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return math.floor(x / scale) * scale


class Ramp:
    def __init__(self, scenario: Scenario, base_options, seeds: list[int], out: Path | None, workers: int,
                 slo_ms: float, progress=None, scheduler=None):
        self.scenario = scenario
        self.scheduler = scheduler
        self.base = base_options
        self.seeds = seeds
        self.out = out
        self.workers = workers
        self.slo = slo_ms
        self.progress = progress or (lambda msg: None)
        self.has_batch = any(w.kind == "batch" for w in scenario.workload)
        self.options = {
            "alone": base_options.with_changes(policy="priority"),
            "batch": base_options.with_changes(policy="static"),
        }
        self.points: dict[tuple[str, float], Point] = {}
        self._rps: dict[float, float] = {}

    def rps(self, factor: float) -> float:
        if factor not in self._rps:
            self._rps[factor] = offered_rps(scaled(self.scenario, factor), self.seeds)
        return self._rps[factor]

    def run(self, wanted: list[tuple[str, float]]) -> None:
        wanted = [(c, f) for c, f in wanted if (c, f) not in self.points]
        if not wanted:
            return
        tasks, owners = [], []
        for curve, factor in wanted:
            world = scaled(self.scenario, factor)
            variant = "no-batch" if curve == "alone" else ""
            point_out = self.out / "points" / f"{curve}-x{factor:.6g}" if self.out is not None else None
            for seed in self.seeds:
                tasks.append((world, Job(curve, self.options[curve], seed, variant), point_out))
                owners.append((curve, factor))
        self.progress(f"{len(wanted)} rate(s) x {len(self.seeds)} seeds: "
                      + ", ".join(f"{c} {self.rps(f):.3g}/s" for c, f in wanted))
        metrics = run_cells(tasks, self.workers, progress=False, scheduler=self.scheduler)  # in order
        for curve, factor in wanted:
            ms = [m for m, o in zip(metrics, owners) if o == (curve, factor)]
            p95 = [m["interactive_p95_ms"] for m in ms]
            mean, lo, hi = mean_ci(p95)
            thr = [m["batch_throughput_per_min"] for m in ms if m["batch_throughput_per_min"] == m["batch_throughput_per_min"]]
            thr = float(np.mean(thr)) if thr and curve != "alone" else math.nan
            self.points[(curve, factor)] = Point(curve, factor, self.rps(factor), p95, mean, lo, hi, thr)

    def curve_points(self, curve: str) -> list[Point]:
        return sorted((p for (c, _), p in self.points.items() if c == curve), key=lambda p: p.factor)

    def settled(self, curve: str) -> bool:
        """A point whose CI lies wholly above the SLO (the knee is bracketed)."""
        return any((p.lo if math.isfinite(p.lo) else p.mean) > self.slo for p in self.curve_points(curve))

    def ramp(self, curves: list[str], factors: list[float] | None, refine: int) -> None:
        if factors is not None:
            self.run([(c, f) for f in factors for c in curves])
        else:
            todo = list(curves)
            for f in AUTO_FACTORS:
                if not todo:
                    break
                self.run([(c, f) for c in todo])
                todo = [c for c in todo if not self.settled(c)]
            for c in curves:  # over the SLO from the first rate: walk down
                for f in LOW_FACTORS:
                    first = self.curve_points(c)[0]
                    if first.mean <= self.slo:
                        break
                    self.run([(c, f)])
        for _ in range(refine):
            wanted = []
            for c in curves:
                knee = find_knee(self.curve_points(c), self.slo, c)
                if knee.status != "found":
                    continue
                pts = self.curve_points(c)
                by_rps = {p.rps: p.factor for p in pts}
                f0, f1 = by_rps[knee.bracket[0]], by_rps[knee.bracket[1]]
                wanted.append((c, round((f0 + f1) / 2, 6)))
            if not wanted:
                break
            self.run(wanted)


def calibrate(scenario: Scenario, base_options, seeds: list[int], out: Path | None, workers: int = 1,
              slo_ms: float | None = None, factors: list[float] | None = None, refine: int = 2,
              verify: bool = True, progress=None, scheduler=None) -> records.CalibrationRecord:
    interactive_workloads(scenario)  # ramps need open-loop interactive arrivals
    slo = slo_ms if slo_ms is not None else scenario.slo_p95_ms
    ramp = Ramp(scenario, base_options, seeds, out, workers, slo, progress, scheduler)
    base_rps = ramp.rps(1.0)
    curves = ["alone"] + (["batch"] if ramp.has_batch else [])
    notes = [] if ramp.has_batch else ["no-batch"]  # only the batch-absent curve, and the threshold from it
    if all(isinstance(scenario.workload[i].arrivals, Trace) for i in interactive_workloads(scenario)):
        notes.append("trace-arrivals")  # with batch absent every seed sees the same requests
    ramp.ramp(curves, factors, refine)
    knees = {c: find_knee(ramp.curve_points(c), slo, c) for c in curves}
    recommendation = recommend(knees["batch"] if "batch" in knees else knees["alone"], slo, scenario)
    notes += {"highest-rate": ["never-crossed"], "lowest-rate": ["over-at-lowest"]}.get(recommendation.basis, [])
    base = base_options.model_dump(by_alias=True, exclude_none=True)
    from simlab.policies import ARTICLE_DEFAULTS, options_from_dict

    merged = {**{k: v for k, v in ARTICLE_DEFAULTS.items() if k not in base}, **base, "policy": "adaptive",
              "interactiveRpsThreshold": recommendation.interactive_rps_threshold,
              "interactiveP95LatencyMs": recommendation.interactive_p95_latency_ms}
    recommended = options_from_dict(merged, "recommended options")
    if verify and ramp.has_batch:
        ramp.options["adaptive"] = recommended
        ceiling = knees["alone"].bracket[1] if knees["alone"].bracket else math.inf
        factors_v = sorted({p.factor for c in curves for p in ramp.curve_points(c) if p.rps <= ceiling * 1.0001})
        ramp.run([("adaptive", f) for f in factors_v])
        knees["adaptive"] = find_knee(ramp.curve_points("adaptive"), slo, "adaptive")
    return records.CalibrationRecord(
        scenario=scenario.name, slo_p95_ms=float(slo), seeds=list(seeds), base_rps=base_rps,
        knees=[k.record() for k in knees.values()], recommendation=recommendation,
        options=recommended.to_json_dict(), notes=notes,
        points=[p.record() for c in CURVES for p in ramp.curve_points(c)])


def recommend(source: Knee, slo: float, scenario: Scenario) -> records.Recommendation:
    """interactiveRpsThreshold from the knee of `source` (the batch-present curve, or batch absent), rounded down to
    two significant digits; the highest rate tried when it never crossed the SLO (erring on the safe side), the
    lowest when it was over the SLO from the start (a floor: the SLO cannot be met with batch at full cap)."""
    raw, basis = {"found": (source.rps, "knee"), "above": (source.lo, "highest-rate")}.get(
        source.status, (source.hi, "lowest-rate"))
    threshold = _nice_floor(raw) if raw and math.isfinite(raw) else None
    if threshold is None or threshold <= 0:
        raise InputError(scenario.path, None, "no usable knee: interactive P95 is over the SLO at every rate tried")
    return records.Recommendation(threshold, float(slo), source.curve, basis, float(raw))
