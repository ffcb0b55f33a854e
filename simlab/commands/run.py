"""`simlab run`: one policy on a scenario, per-task times and time series for every seed."""

from __future__ import annotations

from simlab.commands.common import add_experiment_args, capacity_check, out_dir, positive, scenario_options, seeds


def register(sub) -> None:
    p = sub.add_parser("run", help="simulate one policy on a scenario")
    add_experiment_args(p)
    p.add_argument("--policy", help="policy name (default: the options' policy)")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    run_seeds = seeds(args, scenario, default_replications=1)
    workers = positive(args.workers, "--workers")
    options = scenario_options(scenario, args.options, args.policy)
    out = out_dir(args, scenario, f"run-{options.policy}")
    capacity_check(scenario)

    from simlab.store import atomic_write_text
    from simlab.experiments.metrics import metric_columns
    from simlab.experiments.runner import Job, run_jobs
    from simlab.experiments.tables import fmt_num, text_table
    from simlab.store import csv_text

    jobs = [Job(options.policy, options, s, keep_tasks=True, tasks_format=args.tasks) for s in run_seeds]
    rows = run_jobs(scenario, jobs, out, workers, progress=not args.quiet, scheduler=args.scheduler_address)
    atomic_write_text(out / "summary.csv", csv_text(rows, metric_columns(rows)))
    cols = ["seed", "interactive_p50_ms", "interactive_p95_ms", "interactive_p99_ms", "batch_completed",
            "batch_throughput_per_min", "max_in_flight", "stranded"]
    print(text_table(cols, [[str(r[c]) if c == "seed" else fmt_num(r[c]) for c in cols] for r in rows]))
    where = "" if args.tasks == "none" else f"per-task times: {out}/runs/{options.policy}/seed-N/tasks.parquet or .csv; "
    print(f"\n{where}time series: series.csv beside them; summary: {out}/summary.csv")
    return 0
