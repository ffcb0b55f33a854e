"""One call per calibration command: from what the user gave to the command's record (simlab/records.py).

run_fit            `simlab fit`: read the log, fit it, write the scenario, simulate it against the log
run_calibrate      `simlab calibrate`: ramp the interactive rate, find the knees, recommend the thresholds
run_calibrate_gpu  `simlab calibrate-gpu` (and `simlab loadtest`'s fit): the step-time model of load-test tables,
                   refitted on open-loop runs and checked on another table when asked for

Storing (simlab/calibration/files.py) and rendering (simlab/reporting/) are the commands' next steps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simlab import records
from simlab.errors import InputError

MAX_BINS = 100_000  # rate bins or piecewise steps a user's --bin or --step may cut the log into


# --- fit ---------------------------------------------------------------------------------------------------------

@dataclass
class FitRun:
    """The fit's record, and what its figures and fit.json draw on besides: the fit (every request) and the
    validation's samples."""
    record: records.FitRecord
    fit: object  # calibration.fit.LogFit
    validation: object | None  # calibration.validate.Validation


def read_fit_inputs(log_path, mapping=None, classes=None, default_class: str = "interactive",
                    bin_ms: float | None = None, step_ms: float | None = None, template=None):
    """The request log read and every fit input checked (InputError), before anything is written."""
    from simlab.calibration.fit import format_duration, format_span
    from simlab.calibration.logs import read_log
    from simlab.scenario import load_scenario

    if template:
        load_scenario(template)  # a bad template stops here, before anything is fitted or written
    log = read_log(log_path, mapping, classes, default_class)
    for flag, ms in (("--bin", bin_ms), ("--step", step_ms)):
        if ms is not None and log.span_ms / ms > MAX_BINS:  # each is a rate in the tables, the step also in the TOML
            raise InputError(None, flag, f"{format_duration(ms)} cuts the log's {format_span(log.span_ms)} into more "
                             f"than {MAX_BINS:,} bins; give a longer duration")
    return log


def run_fit(log, out: Path, bin_ms: float | None = None, step_ms: float | None = None, dist: str = "auto",
            arrivals: str = "auto", name: str | None = None, template=None, slo_ms: float | None = None,
            validate_seeds: int = 0) -> FitRun:
    """Fit the log (`read_fit_inputs`), write out/scenario.toml, and simulate it on `validate_seeds` seeds (0: no
    validation)."""
    from simlab.calibration.fit import fit_log
    from simlab.calibration.scenario_writer import write_scenario
    from simlab.calibration.validate import validate
    from simlab.scenario import load_scenario

    fit = fit_log(log, bin_ms, dist, arrivals, step_ms)
    scenario_path, notes = write_scenario(fit, out, name, template, slo_ms)
    val = None
    scenario = load_scenario(scenario_path)
    if validate_seeds:
        first = scenario.experiment.seed
        val = validate(fit, scenario, list(range(first, first + validate_seeds)))
    record = records.FitRecord(
        log=str(log.path), layout=log.layout, columns=[records.LogColumn(k, v) for k, v in log.sources.items()],
        requests=int(len(log.frame)), span_ms=float(log.span_ms), origin=log.origin,
        resolution_ms=float(log.resolution_ms), log_notes=list(log.notes), bin_ms=fit.bin_ms,
        classes=fit.classes(), scenario_file=scenario_path.name, scenario_notes=notes,
        validation=val.record() if val is not None else None, scenario=scenario.facts())
    return FitRun(record, fit, val)


# --- calibrate ---------------------------------------------------------------------------------------------------

def run_calibrate(scenario, options_file: str | None, seeds: list[int], out: Path | None, workers: int = 1,
                  slo_ms: float | None = None, rates: list[float] | None = None, refine: int = 3,
                  verify: bool = True, progress=None, scheduler=None) -> records.CalibrationRecord:
    """The knees and the recommendation; `rates` (req/s) instead of the automatic ramp."""
    from simlab.calibration.knee import calibrate, interactive_workloads, offered_rps

    interactive_workloads(scenario)
    options = base_options(scenario, options_file)
    factors = None
    if rates:
        base = offered_rps(scenario, seeds)
        if base <= 0:
            raise InputError(scenario.path, "workload", "the interactive workloads generate no arrivals")
        factors = [r / base for r in rates]
    return calibrate(scenario, options, seeds, out, workers, slo_ms, factors, refine, verify=verify,
                     progress=progress, scheduler=scheduler)


def base_options(scenario, options_file):
    """The options to start from, with whatever the adaptive policy needs filled in (thresholds are what
    calibrate recommends, so they need not be there yet)."""
    from simlab.policies import ARTICLE_DEFAULTS, load_options, options_from_dict

    if options_file:  # validated as keys and types; the policy's own requirements are filled in below
        data = load_options(options_file, policy="unscheduled").model_dump(by_alias=True, exclude_none=True)
        source = options_file
    else:
        data = dict(scenario.scheduler)
        source = f"{scenario.path}: [scheduler]"
    b = scenario.backend
    cap = b.slots or b.max_num_seqs or b.concurrency
    if "maxConcurrency" not in data and cap:
        data["maxConcurrency"] = cap
    for key, value in ARTICLE_DEFAULTS.items():
        data.setdefault(key, value)
    if data["batchMaxConcurrency"] > data["maxConcurrency"]:
        data["batchMaxConcurrency"] = data["maxConcurrency"]
    data["batchMinConcurrency"] = min(data["batchMinConcurrency"], data["batchMaxConcurrency"])
    data["policy"] = "adaptive"
    return options_from_dict(data, source)


# --- calibrate-gpu -----------------------------------------------------------------------------------------------

def run_calibrate_gpu(tables: list, prompt_tokens: float | None = None, output_tokens: float | None = None,
                      per_token_ms: float | None = None, check=None, open_loop: list | None = None,
                      max_num_seqs: int | None = None) -> records.GpuFitRecord:
    """Fit the tables together (rows named "table:line" when there are several); refit on the `open_loop` runs'
    request records; check the fit on the `check` table."""
    from simlab.calibration.gpu import fit_gpu, held_out_check, read_table
    from simlab.calibration.openloop import read_runs, refit

    tables = [Path(t) for t in tables]
    names = [t.name for t in tables]
    if len(set(names)) < len(names):  # e.g. loadtest-a/loadtest.csv and loadtest-b/loadtest.csv
        names = [f"{t.parent.name}/{t.name}" for t in tables]
    rows = []
    for table, name in zip(tables, names):
        mine = read_table(table, prompt_tokens, output_tokens)
        if len(tables) > 1:
            for r in mine:
                r.line = f"{name}:{r.line}"
        rows += mine
    check_rows = read_table(check, prompt_tokens, output_tokens) if check else None
    runs = read_runs(open_loop) if open_loop else None  # every input read before anything is fitted
    fit = fit_gpu(rows, tables[0], per_token_ms, label=" + ".join(names))
    refitted = None
    if runs is not None:
        fit, refitted = refit(fit, runs, max_num_seqs or int(max(r.c for r in rows)))
    held_out = held_out_check(fit, check_rows, str(check)) if check_rows is not None else None
    return fit.record([str(t) for t in tables], refitted, held_out)
