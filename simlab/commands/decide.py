"""`simlab decide`: deploy the adaptive scheduler or not, and with which options (simlab/decision/run.py)."""

from __future__ import annotations

import sys

from simlab.commands.common import (
    MAX_SEEDS, at_most, both_classes, capacity_check, nonnegative, out_dir, positive, scenario_options, warn,
)
from simlab.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("decide", help="tune every policy family equally, race them and every static cap on held-out "
                       "traffic, confirm on fresh seeds -> one answer and best-options.json")
    p.add_argument("scenario", help="scenario TOML file; [conditions] sets the traffic family, [decision] the rule")
    p.add_argument("--trials", type=int, help="tuning trials per family, the same for each (default: [decision] trials, "
                   "20); 0 skips tuning")
    p.add_argument("--max-trials", type=int, help="while the answer hangs on the tuning budget, every search is "
                   "doubled up to this many trials per family (default: [decision] max_trials, else 4 x the larger "
                   "of --trials and [decision] trials); equal to --trials: never")
    p.add_argument("--replications", type=int,
                   help="at most this many selection seeds per held-out condition (default: [tune] holdout_seeds)")
    p.add_argument("--exhaustive", action="store_true",
                   help="every arm on every selection unit of the budget, nothing put out of measurement; the same "
                        "rounds judged, to check what racing's savings change")
    p.add_argument("--options", help="production options to start from (default: the scenario's [scheduler])")
    p.add_argument("--workers", type=int, help="parallel processes (default: the cores this process may use; the "
                   "results do not depend on it)")
    p.add_argument("--out", help="output folder (default results/SCENARIO/decide)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--scheduler-address", metavar="ADDR",
                   help="run the held-out simulations on a Dask cluster (tcp://host:8786; needs simlab[dask] and an "
                        "--out folder every worker can write); the answer is identical to a local run. Tuning stays "
                        "local")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.experiments.runner import usable_cores
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    both_classes(scenario, "decide")
    workers = positive(args.workers, "--workers") if args.workers is not None else usable_cores()
    if args.trials is not None:
        nonnegative(args.trials, "--trials", " (0 skips tuning)")
    trials = args.trials if args.trials is not None else scenario.decision.trials
    if args.max_trials is not None:
        nonnegative(args.max_trials, "--max-trials", "")
        if args.max_trials < trials:
            raise InputError(None, "--max-trials", f"must be at least the trials the searches start with ({trials}, "
                             f"{'--trials' if args.trials is not None else '[decision] trials'}); found "
                             f"{args.max_trials}")
    n = args.replications if args.replications is not None else scenario.tune.holdout_seeds
    if n < 2:  # as [tune] holdout_seeds: the rule's paired CIs need two seeds at least
        raise InputError(None, "--replications", f"must be at least 2: the decision's confidence intervals need two "
                         f"seeds or more per held-out condition (found {n})")
    at_most(n, MAX_SEEDS, "--replications", "one run per seed, arm and condition")
    base = scenario_options(scenario, args.options, "adaptive")
    from simlab.decision import files
    from simlab.decision.frontier import cap_beyond_backend, caps_note
    from simlab.decision.run import run_decide
    from simlab.reporting import words
    from simlab.reporting.blocks.decide import terminal, write_report
    from simlab.reporting.figures.decision import decision_figures

    capacity_check(scenario, held_out=True)
    if (note := caps_note(base, scenario)) is not None:
        warn(note)
    if (beyond := cap_beyond_backend(base, scenario)) is not None:
        warn(words.cap_beyond_backend(*beyond))
    if trials > 0:
        from simlab.tuning.run import check_units

        check_units(scenario)
    out = out_dir(args, scenario, "decide")
    record = run_decide(scenario, base, out, trials=args.trials, replications=args.replications, workers=workers,
                        progress=not args.quiet, scheduler=args.scheduler_address, exhaustive=args.exhaustive,
                        warn=warn, max_trials=args.max_trials)
    search = _render_search_aside(out / "tune")  # the search's own report, drawn beside the decision's figures
    try:
        record.figures = decision_figures(record, out)
    except Exception as exc:  # noqa: BLE001 - a figure must never cost the answer
        warn(f"decision figures failed: {exc}")
    if search is not None:
        search.join(120)
        if search.exitcode != 0:
            warn(f"the search's report in {out / 'tune'} was not drawn (exit {search.exitcode})")
    options = files.write(record, out)
    write_report(record, out)
    print(terminal(record))
    print(f"\nreport: {out}/report.md  record: {out}/result.json  arms: {out}/frontier.csv"
          + (f"  options: {options}" if options is not None else ""))
    if record.exit_code:
        print("not exported: " + words.not_exported(record), file=sys.stderr)
    return record.exit_code


def _render_search_aside(folder):
    """Draw the search's figures and report.md (folder/result.json) in a forked process, so that it runs beside
    the decision's figures on a second core; None when there is no search."""
    if not (folder / "result.json").is_file():
        return None
    import multiprocessing

    proc = multiprocessing.get_context("fork").Process(target=_render_search, args=(folder,), daemon=True)
    proc.start()
    return proc


def _render_search(folder) -> None:
    import os
    import signal
    import sys

    # Ctrl-C is the parent's to answer ("interrupted: ..."); this daemon ends with it, and never with a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from simlab.records import load
        from simlab.reporting.blocks.tune import write_files

        write_files(load(folder / "result.json", "tune"), folder, 0.0)  # files only: decide prints its own summary
    except Exception as exc:  # noqa: BLE001 - said by the parent as a warning, never a traceback
        print(f"warning: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
