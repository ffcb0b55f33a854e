"""What the subcommands share: where options come from, output folders, argument checks."""

from __future__ import annotations

import sys
from pathlib import Path

from simlab.errors import InputError


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def scenario_options(scenario, options_file, policy):
    """Options from --options FILE, else the scenario's [scheduler] table, else the article's defaults."""
    from simlab.policies import ARTICLE_DEFAULTS, load_options, options_from_dict

    if options_file:
        options = load_options(options_file, policy=policy)
        where = options_file
    elif scenario.scheduler:
        options = scenario.options(policy)
        where = f"{scenario.path}: [scheduler]"
    else:
        options = options_from_dict({**ARTICLE_DEFAULTS, "policy": policy or "adaptive"}, "article defaults")
        where = "article defaults"
    for w in options.warnings():
        warn(f"{where}: {w}")
    return options


def capacity_check(scenario, announce: bool = True, label: str | None = None):
    """Warn (stderr) when no scheduler can meet the scenario's SLO on its interactive traffic; the Capacity."""
    from simlab.experiments.capacity import check

    cap = check(scenario)
    if announce:
        for w in cap.warnings():
            warn(f"{label}: {w}" if label else w)
    return cap


def bound_warning(scenario, bounds: list[dict]) -> str | None:
    """When the interactive P95 with batch absent (mean over seeds) already exceeds the SLO."""
    p95 = [r["interactive_p95_ms"] for r in bounds if r.get("policy") == "bound-no-batch"]
    p95 = [v for v in p95 if v == v]
    if not p95 or sum(p95) / len(p95) <= scenario.slo_p95_ms:
        return None
    return (f"capacity: with batch work absent, interactive P95 is already {sum(p95) / len(p95):,.0f} ms (mean over "
            f"{len(p95)} seeds), above the SLO ({scenario.slo_p95_ms:,.0f} ms): no scheduler can meet this SLO on "
            "this traffic.")


def out_dir(args, scenario, leaf: str) -> Path:
    """--out (checked: a folder this process can write in), else results/NAME/LEAF from the scenario's name made
    safe (never outside results/: no '..', slashes or control characters). Made if needed."""
    from simlab.outputs import default_folder, output_folder, safe_name

    if args.out:
        return output_folder(args.out)
    if safe_name(scenario.name) != scenario.name:
        warn(f"{scenario.path}: name {scenario.name!r} is not a plain folder name; the outputs go to "
             f"{default_folder(scenario.name)}/")
    return output_folder(default_folder(scenario.name, leaf), None)


def positive(value: int, flag: str) -> int:
    if value < 1:
        raise InputError(None, flag, f"must be at least 1 (found {value})")
    return value


def add_experiment_args(p) -> None:
    p.add_argument("scenario", help="scenario TOML file (see scenarios/)")
    p.add_argument("--options", help="scheduler options JSON (e.g. a tuned best-options.json)")
    p.add_argument("--seed", type=int, help="first seed (default: the scenario's [experiment] seed)")
    p.add_argument("--replications", type=int, help="number of seeds")
    p.add_argument("--out", help="output folder (default results/SCENARIO/...)")
    p.add_argument("--workers", type=int, default=1, help="parallel processes (results do not depend on it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--tasks", choices=["auto", "parquet", "csv", "none"], default="auto",
                   help="per-task file: Parquet from 100,000 tasks and CSV below (auto), either one, or none "
                        "(summaries and time series only)")
    p.add_argument("--scheduler-address", metavar="ADDR",
                   help="run the simulations on a Dask cluster (tcp://host:8786; needs simlab[dask] and an --out "
                        "folder every worker can write); results are identical to a local run")


def seeds(args, scenario, default_replications=None) -> list[int]:
    first = scenario.experiment.seed if args.seed is None else args.seed
    n = args.replications if args.replications is not None else (default_replications or scenario.experiment.replications)
    positive(n, "--replications")
    return list(range(first, first + n))
