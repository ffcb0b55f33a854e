"""`simlab ab`: every policy on common seeds, paired comparisons with 95% CIs, verdicts, report, figures."""

from __future__ import annotations

from simlab.commands.common import (
    add_experiment_args, bound_warning, capacity_check, out_dir, policy_list, positive, scenario_options, seeds, warn,
)
from pathlib import Path

from simlab.errors import InputError, did_you_mean


def register(sub) -> None:
    p = sub.add_parser("ab", help="compare policies over common seeds, with confidence intervals")
    add_experiment_args(p)
    p.add_argument("--policies", help="comma-separated (default: the scenario's, else unscheduled,priority,static,adaptive)")
    p.add_argument("--baseline", help="policy the others are compared with (one of the policies compared; default "
                   "unscheduled when it is among them, else the first)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.add_argument("--no-frontier", action="store_true",
                   help="skip the static-cap sweep (every cap 1..maxConcurrency-1, sampled above 64) and the verdict")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.policies import POLICY_NAMES
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    policies = policy_list(args.policies) if args.policies is not None else list(scenario.experiment.policies)
    if args.baseline is None:
        baseline = "unscheduled" if "unscheduled" in policies else policies[0]
    elif args.baseline not in POLICY_NAMES:
        raise InputError(None, "--baseline", f"unknown policy {args.baseline!r}"
                         f"{did_you_mean(args.baseline, POLICY_NAMES)}; known: {', '.join(POLICY_NAMES)}")
    elif args.baseline not in policies:
        raise InputError(None, "--baseline", f"{args.baseline} is not among the policies compared "
                         f"({', '.join(policies)}); add it to --policies")
    else:
        baseline = args.baseline
    run_seeds = seeds(args, scenario)
    workers = positive(args.workers, "--workers")
    options = scenario_options(scenario, args.options, None)
    # A/B of tuned options goes beside the baseline A/B, never over it
    out = out_dir(args, scenario, f"ab-{Path(args.options).stem}" if args.options else "ab")
    capacity_check(scenario)

    from simlab.experiments.ab import finish, run_ab
    from simlab.experiments.ab_report import terminal_table

    if not args.no_frontier:
        from simlab.decision.frontier import caps_note

        if (note := caps_note(options)) is not None:
            warn(note)
    result = run_ab(scenario, options, policies, run_seeds, out, workers, baseline,
                    progress=not args.quiet, write=False, scheduler=args.scheduler_address,
                    tasks_format=args.tasks)
    if not args.no_frontier:
        from simlab.decision.ab import ab_decision
        from simlab.decision.frontier import caps_swept

        decision = ab_decision(scenario, options, result, out, workers, not args.quiet,
                               scheduler=args.scheduler_address)
        if decision is not None:
            result.verdict = f"{decision[0].sentence.rstrip('.')} ({scenario.decision.rule} rule, {caps_swept(options)})."
    finish(result, out, figures=not args.no_figures)  # the record complete: written once, with what it says
    if (w := bound_warning(scenario, result.bounds)) is not None:
        warn(w)
    print(f"{scenario.name}: {len(policies)} policies x {len(run_seeds)} seeds, means with 95% CIs\n")
    print(terminal_table(result))
    print(f"\nreport: {out}/report.md  record: {out}/result.json  tables: {out}/summary.csv, {out}/comparison.csv"
          + (f"  figures: {out}/figures/" if result.figures else ""))
    return 0
