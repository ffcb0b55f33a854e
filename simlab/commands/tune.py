"""`simlab tune`: search the adaptive policy's options with Optuna, validate on held-out seeds, export them
(simlab/tuning/run.py)."""

from __future__ import annotations

import sys
import time

from simlab.commands.common import both_classes, capacity_check, out_dir, positive, scenario_options, warn


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune thresholds, window and smoothing with Optuna; export best-options.json")
    p.add_argument("scenario", help="scenario TOML file; its [tune] table sets the search (see README)")
    p.add_argument("--trials", type=int, help="total trials in the study (default: [tune] trials); a rerun continues")
    p.add_argument("--workers", type=int, default=1, help="processes evaluating trials (results do not depend on it)")
    p.add_argument("--out", help="output folder (default results/SCENARIO/tune)")
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///OUT/study.db; postgresql://... to scale out)")
    p.add_argument("--study", help="study name (default: the scenario's name)")
    p.add_argument("--options", help="production options to start from (default: the scenario's [scheduler])")
    p.add_argument("--objective", choices=["p95", "p99"], help="minimise interactive P95 or P99 (default: [tune])")
    p.add_argument("--mode", choices=["single", "multi"], help="single objective, or a P95 vs throughput Pareto front")
    p.add_argument("--join", action="store_true",
                   help="join a shared study as one more worker (many machines on PostgreSQL; not reproducible)")
    p.add_argument("--force", action="store_true",
                   help="export best-options.json even when no policy can meet the SLO on this traffic")
    p.add_argument("--calibration", help="a `simlab calibrate` output folder (or its tune-bounds.json): its knee sets the "
                   "threshold ranges, unless [tune.bounds] sets them")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    both_classes(scenario, "tune")
    if args.calibration:
        from simlab.tuning.space import with_calibration

        scenario = with_calibration(scenario, args.calibration)
    trials = positive(args.trials, "--trials") if args.trials is not None else None
    workers = positive(args.workers, "--workers")
    base = scenario_options(scenario, args.options, "adaptive")
    from simlab.tuning.run import Refused, check_units, run_tune

    check_units(scenario)
    capacity_check(scenario, held_out=True)
    out = out_dir(args, scenario, "tune")
    started = time.perf_counter()
    try:
        record = run_tune(scenario, base, out, trials=trials, workers=workers, storage=args.storage, study=args.study,
                          objective=args.objective, mode=args.mode, join=args.join, progress=not args.quiet,
                          force=args.force, warn=warn)
    except Refused as refused:  # nothing exported, but the study's report is written
        render(refused.record, out, time.perf_counter() - started)
        raise
    render(record, out, time.perf_counter() - started)
    pick = record.config(record.pick) if record.pick else None
    if pick is not None and record.best_options is None:
        from simlab.tuning.report import CANDIDATE_FILE

        print(f"\nnot exported: the chosen options miss the batch-throughput constraint on held-out seeds "
              f"(paired margin's lower CI bound {pick.throughput_margin_ci_low:,.1f}/min < 0); candidate written to "
              f"{out}/{CANDIDATE_FILE}", file=sys.stderr)
        return 3
    return 0


def render(record, out, elapsed_s: float) -> None:
    """Figures and report.md from the record (saved again with its figures); the summary on the terminal."""
    from simlab.reporting.blocks.tune import terminal, write_files

    write_files(record, out, elapsed_s)
    print(terminal(record, out, elapsed_s))
