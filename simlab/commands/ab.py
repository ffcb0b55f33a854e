"""`simlab ab`: every policy on common seeds, paired comparisons with 95% CIs, verdicts, report, figures."""

from __future__ import annotations

from pathlib import Path

from simlab.commands.common import (
    add_experiment_args, capacity_check, out_dir, policy_list, positive, scenario_options, seeds, warn,
)
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


def baseline_of(given: str | None, policies: list[str]) -> str:
    from simlab.policies import POLICY_NAMES

    if given is None:
        return "unscheduled" if "unscheduled" in policies else policies[0]
    if given not in POLICY_NAMES:
        raise InputError(None, "--baseline", f"unknown policy {given!r}{did_you_mean(given, POLICY_NAMES)}; known: "
                         f"{', '.join(POLICY_NAMES)}")
    if given not in policies:
        raise InputError(None, "--baseline", f"{given} is not among the policies compared ({', '.join(policies)}); "
                         "add it to --policies")
    return given


def main(args) -> int:
    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    policies = policy_list(args.policies) if args.policies is not None else list(scenario.experiment.policies)
    baseline = baseline_of(args.baseline, policies)
    run_seeds = seeds(args, scenario)
    workers = positive(args.workers, "--workers")
    options = scenario_options(scenario, args.options, None)
    for p in policies:  # a gateway gate takes its source's defaults for what the options leave out: say which
        if (note := options.with_changes(policy=p).defaults_note()) is not None:
            warn(note, "note")
    # A/B of tuned options goes beside the baseline A/B, never over it
    out = out_dir(args, scenario, f"ab-{Path(args.options).stem}" if args.options else "ab")
    capacity_check(scenario)

    from simlab.decision.frontier import cap_beyond_backend, caps_note
    from simlab.experiments.ab import bound_warning, run_ab, store
    from simlab.experiments.metrics import few_requests_warning
    from simlab.reporting.blocks.ab import terminal_table, write_report
    from simlab.reporting.figures.ab import ab_figures
    from simlab.reporting.words import ab_verdict, cap_beyond_backend as beyond_text

    if not args.no_frontier:
        if (note := caps_note(options, scenario)) is not None:
            warn(note)
        if (beyond := cap_beyond_backend(options, scenario)) is not None:
            warn(beyond_text(*beyond))
    record = run_ab(scenario, options, policies, run_seeds, out, workers, baseline, progress=not args.quiet,
                    scheduler=args.scheduler_address, tasks_format=args.tasks)
    if args.no_frontier:
        for stale in ("decision.json", "frontier.csv"):  # a frontier of an earlier run: not this one
            (out / stale).unlink(missing_ok=True)
    else:
        from simlab.decision.ab import ab_decision

        decision = ab_decision(scenario, options, record, out, workers, not args.quiet, scheduler=args.scheduler_address,
                               adaptive_label="adaptive" if args.options else "adaptive-defaults")
        if decision is not None:
            record.verdict = ab_verdict(decision)
    if not args.no_figures:
        record.figures = ab_figures(out, record)
    record = store(record, out)
    write_report(record, out)
    if (w := bound_warning(scenario, record.bounds)) is not None:
        warn(w)
    if (w := few_requests_warning(record.rows, "run")) is not None:
        warn(w)
    print(f"{scenario.name}: {len(policies)} policies x {len(run_seeds)} seeds, means with 95% CIs\n")
    print(terminal_table(record))
    print(f"\nreport: {out}/report.md  record: {out}/result.json  tables: {out}/summary.csv, {out}/comparison.csv"
          + (f"  figures: {out}/figures/" if record.figures else ""))
    return 0
