"""Writing the fitted scenario: a TOML file that `simlab.scenario.load_scenario` reads, and beside it one
CSV of lengths per class for the `empirical` distributions.

TOML is written by hand (no writer is installed): strings through JSON escaping (valid TOML basic strings),
floats with repr, arrays and inline tables. The written file is loaded back before the command succeeds.

The world around the workloads (backend, scheduler options, SLO, experiment) cannot be fitted from a
request log: it comes from `--template SCENARIO` when given, else a placeholder `delay` backend (unlimited
capacity, so simulated latency is the fitted service time) is written and marked as such.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from pathlib import Path

import numpy as np

from simlab import records
from simlab.store import atomic_write_text
from simlab.calibration.fit import LogFit, format_duration, format_span
from simlab.errors import CONFIG_MAX_BYTES, InputError, read_text

MAX_EMPIRICAL_ROWS = 20_000  # beyond this, the CSV holds this many quantiles of the log's values
PLACEHOLDER_TOKEN_TIME = {"base_ms": 40.0, "per_prompt_token_ms": 0.08, "per_output_token_ms": 7.0}
TEMPLATE_KEYS = ("slo_p95_ms", "sample_ms", "max_sim_ms", "backend", "scheduler", "experiment", "criteria", "tune")
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


# --- a small TOML emitter ------------------------------------------------------------------------------
def toml_key(key: str) -> str:
    return key if _BARE.match(key) else json.dumps(key, ensure_ascii=False)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def toml_table(name: str | None, data: dict, array: bool = False) -> str:
    lines = []
    if name is not None:
        lines.append(f"[[{name}]]" if array else f"[{name}]")
    for k, v in data.items():
        lines.append(f"{toml_key(k)} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


def number_list(values, per_line: int = 10) -> str:
    """A long TOML array over several lines."""
    items = [toml_value(round_sig(v)) for v in values]
    if len(items) <= per_line:
        return "[" + ", ".join(items) + "]"
    rows = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
    return "[\n  " + ",\n  ".join(rows) + ",\n]"


def round_sig(x: float, digits: int = 6) -> float:
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


# --- the scenario -------------------------------------------------------------------------------------
def read_template(path: str | Path, out_dir: Path) -> dict:
    """The world of an existing scenario: backend, scheduler, SLO, experiment, criteria (paths re-based)."""
    from simlab.scenario import load_scenario

    path = Path(path)
    load_scenario(path)  # validates it (and raises InputError naming the file)
    data = tomllib.loads(read_text(path, "template scenario", "a TOML scenario", CONFIG_MAX_BYTES))  # BOM allowed
    world = {k: data[k] for k in TEMPLATE_KEYS if k in data}
    step = world.get("backend", {}).get("step")
    if isinstance(step, dict) and step.get("profile"):
        profile = Path(step["profile"])
        if not profile.is_absolute():
            profile = (path.parent / profile).resolve()
        step["profile"] = os.path.relpath(profile, out_dir.resolve())
    return world


def lengths_file(fit: LogFit, kind: str, out_dir: Path) -> tuple[str, list[records.ScenarioNote]]:
    """Write the class's empirical values (CSV, one column per fitted quantity); its name and notes."""
    fits = fit.lengths[kind]
    columns = list(fits)
    n = len(next(iter(fits.values())).values)
    notes = []
    if n > MAX_EMPIRICAL_ROWS:
        probs = (np.arange(MAX_EMPIRICAL_ROWS) + 0.5) / MAX_EMPIRICAL_ROWS
        data = {c: np.quantile(fits[c].values, probs, method="inverted_cdf") for c in columns}
        notes.append(records.ScenarioNote("empirical-quantiles", kind, n, MAX_EMPIRICAL_ROWS))
    else:
        data = {c: fits[c].values for c in columns}
    rows = [",".join(columns)]
    for i in range(len(data[columns[0]])):
        rows.append(",".join(_num(data[c][i]) for c in columns))
    name = f"lengths-{kind}.csv"
    atomic_write_text(out_dir / name, "\n".join(rows) + "\n")
    return name, notes


def _num(v: float) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def _dist(fit, file: str | None) -> dict:
    if fit.choice == "lognormal":
        return {"dist": "lognormal", "median": round_sig(fit.median), "p95": round_sig(fit.p95)}
    return {"dist": "empirical", "file": file, "column": fit.column}


def write_scenario(fit: LogFit, out_dir: Path, name: str | None = None, template: str | Path | None = None,
                   slo_ms: float | None = None, seed: int = 1,
                   replications: int = 5) -> tuple[Path, list[records.ScenarioNote]]:
    """Write out_dir/scenario.toml (and lengths CSVs); return its path and notes for the report."""
    from simlab.scenario import load_scenario

    out_dir = Path(out_dir)
    log = fit.log
    world = read_template(template, out_dir) if template else {}  # a bad template: nothing written yet
    out_dir.mkdir(parents=True, exist_ok=True)
    name = name or f"{log.path.stem}-fit"
    has_service = any("service_ms" in f for f in fit.lengths.values())
    has_tokens = any("prompt_tokens" in f for f in fit.lengths.values())
    duration = float(math.ceil(max(log.span_ms, 1.0)))

    head = [
        f"# Fitted by `simlab fit` from {log.path.name}: {len(log.frame):,} requests over "
        f"{format_span(log.span_ms)}" + (f", the first at {log.origin}" if log.origin else "") + ".",
        "# Columns: " + "; ".join(f"{k} <- {v}" for k, v in log.sources.items()) + ".",
        "# Report: report.md beside this file (tests, figures, and the simulated-vs-log validation).",
    ]
    top = {"name": name, "description": f"Fitted from {log.path.name}: " + ", ".join(
        f"{kind} {a.rate_per_s:.3g} req/s (CV {a.cv:.2f})" for kind, a in fit.arrivals.items()),
        "duration_ms": duration}
    text = "\n".join(head) + "\n" + toml_table(None, top)
    slo = slo_ms if slo_ms is not None else world.get("slo_p95_ms")
    if slo is None:
        text += "slo_p95_ms = 2000.0  # placeholder: set the interactive P95 your users accept (--slo-ms)\n"
    else:
        text += f"slo_p95_ms = {toml_value(float(slo))}\n"
    for k in ("sample_ms", "max_sim_ms"):
        if k in world:
            text += f"{k} = {toml_value(world[k])}\n"

    backend_text, notes = _backend(world, template, has_service)
    text += backend_text
    for kind in fit.arrivals:
        workload_text, more = _workload(fit, kind, out_dir, duration)
        text += workload_text
        notes += more
        if not has_tokens and not has_service:  # pragma: no cover - read_log refuses such logs
            raise InputError(log.path, None, "nothing to fit: no token or latency columns")

    experiment = world.get("experiment", {"seed": seed, "replications": replications})
    text += "\n" + toml_table("experiment", experiment)
    for table in ("criteria", "tune"):
        if table in world:
            text += "\n" + toml_table(table, world[table])
    path = out_dir / "scenario.toml"
    atomic_write_text(path, text)
    try:
        load_scenario(path)
    except InputError as exc:
        if template:  # the template's world does not suit this log (e.g. slots without token_time, tokens only)
            path.unlink(missing_ok=True)
            found = f"{exc.where}: {exc.message}" if exc.where else exc.message
            raise InputError(template, None, f"does not fit this log: with its backend the fitted scenario would "
                             f"not load ({found})") from None
        raise RuntimeError(f"the fitted scenario does not load: {exc}") from exc  # a bug in this writer
    return path, notes


def _backend(world: dict, template, has_service: bool) -> tuple[str, list[records.ScenarioNote]]:
    """The template's backend and scheduler, or the placeholder `delay` backend (and a note saying so)."""
    notes = []
    if "backend" in world:
        text = f"\n# backend, scheduler, experiment, criteria and tune copied from {Path(template).name}\n"
        text += toml_table("backend", world["backend"])
    else:
        backend = {"kind": "delay"}
        text = "\n# Placeholder world: unlimited capacity (`delay`), so a request takes its service time. Put your\n"
        text += "# server here (slots, continuous-batching with a step profile from `simlab calibrate-gpu`, api),\n"
        text += "# or fit again with --template YOUR-SCENARIO.toml.\n"
        if not has_service:
            backend["token_time"] = dict(PLACEHOLDER_TOKEN_TIME)
            text += "# token_time is a placeholder GPU cost (ms per token) that turns token counts into service times.\n"
            notes.append(records.ScenarioNote("placeholder-token-time"))
        else:
            notes.append(records.ScenarioNote("placeholder-delay"))
        text += toml_table("backend", backend)
    if "scheduler" in world:
        text += "\n" + toml_table("scheduler", world["scheduler"])
    return text, notes


def _workload(fit: LogFit, kind: str, out_dir: Path, duration: float) -> tuple[str, list[records.ScenarioNote]]:
    """One class's [[workload]]: its arrival process and lengths (with their empirical CSV when one is used)."""
    a = fit.arrivals[kind]
    notes: list[records.ScenarioNote] = []
    text = f"\n# {kind}: {a.n:,} requests, {a.rate_per_s:.4g} req/s on average, inter-arrival CV {a.cv:.3f}.\n"
    detail = {"piecewise": f", a rate per {format_duration(a.step_ms)} (predicted CV {a.predicted_cv:.3f})",
              "resampled": f", the log's own arrivals in blocks of {format_duration(a.step_ms)}"}.get(a.process, "")
    text += f"# Arrivals: {a.process}{detail}; why: report.md.\n"
    lines = [f"name = {toml_value(kind)}", f"class = {toml_value(kind)}"]
    if a.process == "poisson":
        lines.append("arrivals = " + toml_value({"process": "poisson", "rate_per_s": round_sig(a.rate_per_s)}))
    elif a.process == "resampled":
        arr_file = f"{kind}-arrivals.csv"
        own = fit.log.of(kind)["arrival_ms"].to_numpy(dtype=float)
        atomic_write_text(out_dir / arr_file, "arrival_ms\n" + "".join(f"{float(t)!r}\n" for t in np.sort(own)))
        lines.append("arrivals = " + toml_value({"process": "resampled", "file": arr_file,
                                                  "block_ms": float(a.step_ms), "span_ms": duration}))
    elif a.process == "burst":
        lines.append("arrivals = " + toml_value({"process": "burst", "count": a.n,
                                                  "at_ms": _first_arrival(fit, kind)}))
    else:
        lines.append(f"arrivals = {{ process = \"piecewise\", step_ms = {toml_value(float(a.step_ms))}, "
                     f"rates_per_s = {number_list(a.step_rates_per_s)} }}")
    file = None
    if any(f.choice == "empirical" for f in fit.lengths[kind].values()):
        file, notes = lengths_file(fit, kind, out_dir)
    for col, lf in fit.lengths[kind].items():
        key = "service" if col == "service_ms" else col
        lines.append(f"# {col}: {lf.choice} (KS D = {lf.ks.statistic:.3f} against the fitted lognormal)")
        lines.append(f"{key} = {toml_value(_dist(lf, file))}")
    text += "[[workload]]\n" + "\n".join(lines) + "\n"
    return text, notes


def _first_arrival(fit: LogFit, kind: str) -> float:
    return float(fit.log.of(kind)["arrival_ms"].min())

