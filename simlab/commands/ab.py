"""`simlab ab`: every policy on common seeds, paired comparisons with 95% CIs, verdicts, report, figures."""

from __future__ import annotations

from simlab.commands.common import (
    add_experiment_args, bound_warning, capacity_check, out_dir, positive, scenario_options, seeds, warn,
)
from pathlib import Path

from simlab.errors import InputError, did_you_mean


def register(sub) -> None:
    p = sub.add_parser("ab", help="compare policies over common seeds, with confidence intervals")
    add_experiment_args(p)
    p.add_argument("--policies", help="comma-separated (default: the scenario's, else unscheduled,priority,static,adaptive)")
    p.add_argument("--baseline", default="unscheduled", help="policy the others are compared with")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--no-frontier", action="store_true",
                   help="skip the static-cap sweep (every cap 1..maxConcurrency-1) and the verdict")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    capacity_check(scenario)

    from simlab.experiments.ab import finish, run_ab
    from simlab.experiments.ab_report import terminal_table
    from simlab.policies import POLICY_NAMES

    policies = [p.strip() for p in args.policies.split(",")] if args.policies else list(scenario.experiment.policies)
    for p in policies:
        if p not in POLICY_NAMES:
            raise InputError(None, "--policies", f"unknown policy {p!r}{did_you_mean(p, POLICY_NAMES)}; known: {', '.join(POLICY_NAMES)}")
    baseline = args.baseline if args.baseline in policies else policies[0]
    options = scenario_options(scenario, args.options, None)
    run_seeds = seeds(args, scenario)
    # A/B of tuned options goes beside the baseline A/B, never over it
    out = out_dir(args, scenario, f"ab-{Path(args.options).stem}" if args.options else "ab")
    result = run_ab(scenario, options, policies, run_seeds, out, positive(args.workers, "--workers"), baseline,
                    progress=not args.quiet, write=False, scheduler=args.scheduler_address,
                    tasks_format=args.tasks)
    if args.no_frontier:
        for stale in ("decision.json", "answer.json", "frontier.csv"):  # a frontier of an earlier run: not this one
            (out / stale).unlink(missing_ok=True)
    else:
        from simlab.decision.ab import ab_decision
        from simlab.decision.frontier import cap_beyond_backend
        from simlab.reporting.words import ab_verdict, cap_beyond_backend as beyond_text

        if (beyond := cap_beyond_backend(options, scenario)) is not None:
            warn(beyond_text(*beyond))
        decision = ab_decision(scenario, options, result, out, positive(args.workers, "--workers"), not args.quiet,
                               scheduler=args.scheduler_address,
                               adaptive_label="adaptive" if args.options else "adaptive-defaults")
        if decision is not None:
            result.verdict = ab_verdict(decision)
    finish(result, out, figures=not args.no_figures)  # the record complete: written once, with what it says
    if (w := bound_warning(scenario, result.bounds)) is not None:
        warn(w)
    print(f"{scenario.name}: {len(policies)} policies x {len(run_seeds)} seeds, means with 95% CIs\n")
    print(terminal_table(result))
    print(f"\nreport: {out}/report.md  record: {out}/result.json  tables: {out}/summary.csv, {out}/comparison.csv"
          + (f"  figures: {out}/figures/" if result.figures else ""))
    return 0
