"""The files `simlab fit`, `calibrate` and `calibrate-gpu` store beside their result.json: the tables (CSV at 6
significant digits, through `experiments.tables.csv_text`) and the machine-readable dumps, all made from the
command's record (fit.json and rates.csv also from the fit itself: every bin). No sentences: report.md, the
terminal and the review page render the record (simlab/reporting/blocks/).

fit            fit.json (the detailed dump), rates.csv, validation.csv, validation-bins.csv
calibrate      knee.csv, calibration.json, tune-bounds.json (the search ranges `simlab tune --calibration` reads)
calibrate-gpu  step.toml, step-profile.csv, fit.csv, join-cost.csv, open-loop.csv, check.csv
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from simlab import records
from simlab.store import atomic_write_text
from simlab.store import csv_text


def table(rows: list, cls, columns: list[str] | None = None) -> str:
    """Record rows (dataclasses of `cls`) as CSV: booleans as true/false, non-finite numbers as empty cells."""
    return csv_text([{k: _cell(v) for k, v in asdict(r).items()} for r in rows], columns or records.columns(cls))


def _cell(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def jsonable(obj):
    """Plain JSON: numpy scalars as numbers, NaN and infinities as null, keys as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, data) -> None:
    atomic_write_text(path, json.dumps(jsonable(data), indent=1) + "\n")


# --- fit ---------------------------------------------------------------------------------------------------------

RATE_COLUMNS = ["kind", "start_s", "end_s", "count", "rate_per_s", "rate_ci_low", "rate_ci_high"]
BIN_COLUMNS = ["kind", "start_s", "end_s", "log_count", "simulated_mean_count", "p_value"]
CHECK_COLUMNS = ["kind", "quantity", "observed", "observed_lo", "observed_hi", "simulated", "simulated_lo",
                 "simulated_hi", "ok", "method", "column", "q", "p_value", "bins_within", "bins"]


def store_fit(record: records.FitRecord, fit, out: Path) -> records.FitRecord:
    """result.json, fit.json (`fit`: the calibration.fit.LogFit the record summarises), rates.csv and, with a
    validation, validation.csv and validation-bins.csv."""
    out = Path(out)
    stored = records.save(record, out)  # what is rendered
    dump = fit.as_dict()
    if record.validation is not None:
        v = record.validation
        dump["validation"] = {"seeds": v.seeds, "policy": v.policy, "passed": v.passed,
                              "checks": [asdict(c) for c in v.checks]}
    write_json(out / "fit.json", dump)
    rates = [{"kind": kind, "start_s": s / 1000, "end_s": e / 1000, "count": int(c), "rate_per_s": r,
              "rate_ci_low": lo, "rate_ci_high": hi}
             for kind, a in fit.arrivals.items()
             for s, e, c, r, lo, hi in zip(a.edges[:-1], a.edges[1:], a.counts, a.rates_per_s, a.rate_lo, a.rate_hi)]
    atomic_write_text(out / "rates.csv", csv_text(jsonable(rates), RATE_COLUMNS))
    if record.validation is not None:
        atomic_write_text(out / "validation.csv", table(record.validation.checks, records.ValidationCheck,
                                                             CHECK_COLUMNS))
        bins = [{"kind": b.kind, "start_s": b.start_ms / 1000, "end_s": b.end_ms / 1000, "log_count": b.log_count,
                 "simulated_mean_count": b.simulated_mean_count, "p_value": b.p_value} for b in record.validation.bins]
        atomic_write_text(out / "validation-bins.csv", csv_text(bins, BIN_COLUMNS))
    return stored


# --- calibrate ---------------------------------------------------------------------------------------------------


def tune_bounds(r: records.Recommendation) -> dict:
    """Ranges for `simlab tune --calibration`: a factor of two either side of the knee's threshold and the SLO."""
    thr, p95 = r.interactive_rps_threshold, r.interactive_p95_latency_ms
    return {"interactiveRpsThreshold": [thr / 2, thr * 2], "interactiveP95LatencyMs": [p95 / 2, p95 * 2]}


def store_calibration(record: records.CalibrationRecord, out: Path) -> records.CalibrationRecord:
    """result.json, knee.csv, calibration.json and tune-bounds.json. One recommendation per scenario: calibrate
    exports no competing options file (an older simlab's recommended-options.json is removed); its knee sets
    tune's search ranges."""
    out = Path(out)
    stored = records.save(record, out)  # what is rendered
    atomic_write_text(out / "knee.csv", table(record.points, records.KneePoint))
    rec = record.recommendation
    write_json(out / "calibration.json", {
        "scenario": record.scenario, "slo_p95_ms": record.slo_p95_ms, "seeds": record.seeds,
        "base_rps": record.base_rps,
        "knees": {k.curve: {"rps": k.rps, "ci_low": k.ci_low, "ci_high": k.ci_high, "status": k.status}
                  for k in record.knees},
        "recommended": {"interactiveRpsThreshold": rec.interactive_rps_threshold,
                        "interactiveP95LatencyMs": rec.interactive_p95_latency_ms, "threshold_source": rec.source,
                        "threshold_basis": rec.basis, "threshold_raw": rec.raw_rps},
        "options": record.options, "notes": record.notes, "points": [asdict(p) for p in record.points]})
    (out / "recommended-options.json").unlink(missing_ok=True)
    atomic_write_text(out / "tune-bounds.json", json.dumps(tune_bounds(rec), indent=2) + "\n")
    return stored


# --- calibrate-gpu -----------------------------------------------------------------------------------------------


def store_gpu(record: records.GpuFitRecord, out: Path) -> records.GpuFitRecord:
    """result.json, step.toml, and the tables the record holds: fit.csv, step-profile.csv, join-cost.csv,
    open-loop.csv, check.csv."""
    from simlab.calibration.gpu import step_toml

    out = Path(out)
    stored = records.save(record, out)  # what is rendered
    atomic_write_text(out / record.snippet_file, step_toml(record))
    atomic_write_text(out / "fit.csv", table(record.predictions, records.Prediction))
    if record.profile_file:
        atomic_write_text(out / record.profile_file, table(record.profile, records.ProfilePoint))
    if record.joins:
        atomic_write_text(out / "join-cost.csv", table(record.joins, records.JoinCost))
    if record.open_loop is not None:
        atomic_write_text(out / "open-loop.csv", table(record.open_loop.runs, records.OpenLoopRun))
    if record.check is not None:
        atomic_write_text(out / "check.csv", table(record.check.rows, records.CheckRow))
    return stored


