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


def out_dir(args, scenario, leaf: str) -> Path:
    return Path(args.out) if args.out else Path("results") / scenario.name / leaf


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
