"""The `simlab` command line. Bad input is one message on stderr and exit code 2 (a traceback only with --debug)."""

from __future__ import annotations

import argparse
import sys

from simlab.errors import InputError

EXIT_INPUT = 2


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def cmd_replay(args) -> int:
    from simlab.policies import load_options, options_from_dict
    from simlab.replay import replay, write_replay
    from simlab.traces import read_trace

    if args.backend != "delay":
        raise InputError(None, "--backend", f"replay supports only 'delay' (found {args.backend!r}); use `simlab run` for contended backends")
    if args.options:
        options = load_options(args.options, policy=args.policy)
        for w in options.warnings():
            _warn(f"{args.options}: {w}")
    else:
        from simlab.policies import ARTICLE_DEFAULTS

        options = options_from_dict({**ARTICLE_DEFAULTS, "policy": args.policy or "adaptive"}, "article defaults")
    tasks, _ = read_trace(args.trace)
    result = replay(tasks, options)
    write_replay(result, args.out)
    stranded = result.stranded
    if stranded:
        kinds = sorted({t.kind for t in stranded})
        print(
            f"{len(stranded)} of {len(tasks)} tasks never started ({', '.join(kinds)}): they are reported with empty "
            "start_ms/end_ms. The reference policy re-evaluates the batch cap only when a task is submitted or "
            "finishes; once pressure drove the cap to batchMinConcurrency = 0 and interactive traffic stopped, "
            "nothing woke the batch queue again. Set batchMinConcurrency >= 1 or \"recheckOnExpiry\": true.",
            file=sys.stderr,
        )
    print(f"replayed {len(tasks)} tasks with policy '{options.policy}' -> {args.out}", file=sys.stderr)
    return 0


def _scenario_options(scenario, options_file, policy):
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
        _warn(f"{where}: {w}")
    return options


def _out_dir(args, scenario, leaf: str):
    from pathlib import Path

    return Path(args.out) if args.out else Path("results") / scenario.name / leaf


def _workers(n: int) -> int:
    if n < 1:
        raise InputError(None, "--workers", f"must be at least 1 (found {n})")
    return n


def cmd_run(args) -> int:
    from simlab.experiments.ab import seeds_for
    from simlab.experiments.runner import Job, run_jobs
    from simlab.experiments.tables import fmt_num, text_table
    from simlab.experiments.ab import _csv
    from simlab.experiments.metrics import SUMMARY_COLUMNS
    from simlab.atomic import atomic_write_text
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    options = _scenario_options(scenario, args.options, args.policy)
    seeds = seeds_for(_seed(args, scenario), _replications(args, scenario, default=1))
    out = _out_dir(args, scenario, f"run-{options.policy}")
    jobs = [Job(options.policy, options, s, keep_tasks=True) for s in seeds]
    rows = run_jobs(scenario, jobs, out, _workers(args.workers), progress=not args.quiet)
    atomic_write_text(out / "summary.csv", _csv(rows, SUMMARY_COLUMNS))
    cols = ["seed", "interactive_p50_ms", "interactive_p95_ms", "interactive_p99_ms", "batch_completed",
            "batch_throughput_per_min", "max_in_flight", "stranded"]
    print(text_table(cols, [[fmt_num(r[c]) if c != "seed" else str(r[c]) for c in cols] for r in rows]))
    print(f"\nper-task times: {out}/runs/{options.policy}/seed-N/tasks.csv; summary: {out}/summary.csv")
    return 0


def _seed(args, scenario) -> int:
    return scenario.experiment.seed if args.seed is None else args.seed


def _replications(args, scenario, default=None) -> int:
    n = args.replications if args.replications is not None else (default or scenario.experiment.replications)
    if n < 1:
        raise InputError(None, "--replications", f"must be at least 1 (found {n})")
    return n


def cmd_ab(args) -> int:
    from simlab.experiments.ab import run_ab, seeds_for
    from simlab.experiments.ab_report import terminal_table, write_report
    from simlab.policies import POLICY_NAMES
    from simlab.errors import did_you_mean
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else list(scenario.experiment.policies)
    for p in policies:
        if p not in POLICY_NAMES:
            raise InputError(None, "--policies", f"unknown policy {p!r}{did_you_mean(p, POLICY_NAMES)}; known: {', '.join(POLICY_NAMES)}")
    if args.baseline not in policies:
        args.baseline = policies[0]
    options = _scenario_options(scenario, args.options, None)
    seeds = seeds_for(_seed(args, scenario), _replications(args, scenario))
    out = _out_dir(args, scenario, "ab")
    result = run_ab(scenario, options, policies, seeds, out, _workers(args.workers), args.baseline, progress=not args.quiet)
    figures = []
    if not args.no_figures:
        try:
            from simlab.plots.ab import ab_figures
        except ImportError:
            ab_figures = None
        if ab_figures is not None:
            figures = ab_figures(out)
    write_report(result, scenario, options, out, figures)
    print(f"{scenario.name}: {len(policies)} policies x {len(seeds)} seeds, means with 95% CIs\n")
    print(terminal_table(result))
    print(f"\nreport: {out}/report.md  tables: {out}/summary.csv, {out}/comparison.csv" + (f"  figures: {out}/figures/" if figures else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simlab", description="Simulate and tune LLM traffic scheduling.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("replay", help="replay a trace through a policy (conformance with the reference)")
    p.add_argument("trace", help="CSV with id,kind,arrival_ms,service_ms")
    p.add_argument("--options", help="scheduler options JSON (the production SchedulerOptions, camelCase)")
    p.add_argument("--policy", help="override the options' policy (unscheduled, fifo, priority, static, adaptive)")
    p.add_argument("--backend", default="delay", help="only 'delay': unlimited capacity, exact service times")
    p.add_argument("--out", required=True, help="output CSV: id,kind,arrival_ms,service_ms,start_ms,end_ms,latency_ms")
    p.set_defaults(func=cmd_replay)

    def experiment_args(p):
        p.add_argument("scenario", help="scenario TOML file (see scenarios/)")
        p.add_argument("--options", help="scheduler options JSON (e.g. a tuned best-options.json)")
        p.add_argument("--seed", type=int, help="first seed (default: the scenario's [experiment] seed)")
        p.add_argument("--replications", type=int, help="number of seeds")
        p.add_argument("--out", help="output folder (default results/SCENARIO/...)")
        p.add_argument("--workers", type=int, default=1, help="parallel processes (results do not depend on it)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("run", help="simulate one policy on a scenario")
    experiment_args(p)
    p.add_argument("--policy", help="policy name (default: the options' policy)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("ab", help="compare policies over common seeds, with confidence intervals")
    experiment_args(p)
    p.add_argument("--policies", help="comma-separated (default: the scenario's, else unscheduled,priority,static,adaptive)")
    p.add_argument("--baseline", default="unscheduled", help="policy the others are compared with")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.set_defaults(func=cmd_ab)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted; finished work is saved, run the same command again to continue", file=sys.stderr)
        return 130
