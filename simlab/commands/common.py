"""What the subcommands share: where options come from, output folders, argument checks."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from simlab.errors import InputError, did_you_mean


def warn(message: str, label: str = "warning") -> None:
    print(f"{label}: {message}", file=sys.stderr)


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


def capacity_check(scenario, held_out: bool = False) -> None:
    """`simlab.experiments.capacity.announce` on stderr: when no scheduler can meet the SLO on the scenario's
    interactive traffic (and, with `held_out`, on each held-out condition's)."""
    from simlab.experiments.capacity import announce

    announce(scenario, warn, held_out)


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


MAX_SEEDS = 100_000  # seeds per command line (a run each): more is a typo, not an experiment, and would fill memory


def finite_positive(value: float, flag: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise InputError(None, flag, f"must be a finite number above 0 (found {value:g})")
    return value


def at_most(value: int, limit: int, flag: str, why: str) -> int:
    if value > limit:
        raise InputError(None, flag, f"must be at most {limit:,} ({why}; found {value:,})")
    return value


def nonnegative(value: int, flag: str, meaning: str = "") -> int:
    if value < 0:
        raise InputError(None, flag, f"must be 0 or more{meaning} (found {value})")
    return value


def policy_list(text: str, flag: str = "--policies") -> list[str]:
    """Comma-separated policy names, each known and given once (an empty list or a repeat is an error, not the
    defaults or a duplicated row)."""
    from simlab.policies import POLICY_NAMES

    known = ", ".join(POLICY_NAMES)
    names = [p.strip() for p in text.split(",")]
    if not any(names):
        raise InputError(None, flag, f"no policy given (found {text!r}); known: {known}")
    for p in names:
        if not p:
            raise InputError(None, flag, f"an empty name in {text!r}; give comma-separated policies, known: {known}")
        if p not in POLICY_NAMES:
            raise InputError(None, flag, f"unknown policy {p!r}{did_you_mean(p, POLICY_NAMES)}; known: {known}")
        if names.count(p) > 1:
            raise InputError(None, flag, f"{p} is given twice (found {text!r})")
    return names


def both_classes(scenario, command: str) -> None:
    """decide and tune weigh interactive latency against batch throughput: with one class there is nothing to
    weigh, and an answer would rest on a P95 of nothing (nan) or a throughput of zero."""
    kinds = {w.kind for w in scenario.workload}
    if kinds == {"interactive", "batch"}:
        return
    (only,) = kinds
    other, measure = ("interactive", "interactive P95") if only == "batch" else ("batch", "batch throughput")
    article = "an" if other == "interactive" else "a"
    raise InputError(scenario.path, "workload", (
        f"every workload is {only}: simlab {command} weighs interactive P95 against batch throughput, and with no "
        f"{other} workload there is no {measure} to weigh, so nothing to decide. Add {article} {other} workload, or "
        f"measure the policies with `simlab ab`"))


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
    first = scenario.experiment.seed if args.seed is None else nonnegative(args.seed, "--seed")
    n = args.replications if args.replications is not None else (default_replications or scenario.experiment.replications)
    at_most(positive(n, "--replications"), MAX_SEEDS, "--replications", "one run per seed and policy")
    return list(range(first, first + n))
