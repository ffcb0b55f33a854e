"""`simlab calibrate SCENARIO`: ramp the interactive rate, find the P95 knee, recommend the adaptive thresholds."""

from __future__ import annotations

import argparse
import math
from textwrap import fill

from simlab.commands.common import add_experiment_args, at_most, capacity_check, finite_positive, out_dir, positive, seeds
from simlab.errors import InputError

EPILOG = """\
curves (each point replicated over seeds, 95% CI):
  batch absent              the scenario without its batch workloads
  batch present, full cap   `static` at the scenario's batchMaxConcurrency (batch never throttled)
  adaptive, recommended     the adaptive scheduler with the recommended options (--no-verify skips it)
recommendation:
  interactiveRpsThreshold = the batch-present knee, rounded down to 2 significant digits
  interactiveP95LatencyMs = the SLO (the scenario's slo_p95_ms, or --slo-ms)
outputs (in --out, default results/SCENARIO/calibrate/):
  tune-bounds.json (search ranges for `simlab tune --calibration`), result.json, report.md, knee.csv,
  calibration.json (the verified options among the rest), figures/knee.png|svg
GPU profile: `simlab calibrate-gpu TABLE.csv` fits the continuous-batching step time from a load test.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="ramp the interactive rate, find where P95 crosses the SLO, recommend the adaptive thresholds",
        description=fill("Ramp the interactive rate (batch absent, then present), find the knee where interactive P95 "
        "crosses the scenario's SLO with CIs from replications, and recommend interactiveRpsThreshold and "
        "interactiveP95LatencyMs as an options file, with a plot of P95 against rate."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_experiment_args(p)  # scenario, --options, --seed, --replications (per point; at most 5 by default), ...
    p.add_argument("--rates", help="interactive rates to try, req/s, comma-separated (default: an automatic ramp)")
    p.add_argument("--refine", type=int, default=3, help="bisections of the bracket around each knee (default 3)")
    p.add_argument("--slo-ms", type=float, help="interactive P95 SLO (default: the scenario's slo_p95_ms)")
    p.add_argument("--no-verify", action="store_true", help="skip the adaptive run with the recommended options")
    p.add_argument("--no-figures", action="store_true", help="skip the figure")
    p.set_defaults(func=main)


def main(args) -> int:
    import sys
    from dataclasses import replace

    from simlab.scenario import load_scenario

    scenario = load_scenario(args.scenario)  # bad input fails fast, before the heavy imports
    if args.replications is None:
        args.replications = min(scenario.experiment.replications, 5)
    run_seeds = seeds(args, scenario)
    workers = positive(args.workers, "--workers")
    if args.refine < 0:
        raise InputError(None, "--refine", f"must be 0 or more (found {args.refine})")
    at_most(args.refine, 30, "--refine", "each bisection halves the bracket: 30 is a billionth of it")
    if args.slo_ms is not None:
        finite_positive(args.slo_ms, "--slo-ms")
    wanted = rates(args.rates)
    out = out_dir(args, scenario, "calibrate")

    from simlab.calibration.files import store_calibration
    from simlab.calibration.knee import interactive_workloads
    from simlab.calibration.run import run_calibrate
    from simlab.reporting.blocks.calibrate import terminal_blocks, write_report
    from simlab.reporting.terminal import render_terminal

    interactive_workloads(scenario)
    capacity_check(scenario)  # the ramp goes past it anyway; the scenario's own rate is what the user runs
    progress = None if args.quiet else (lambda msg: print(f"  {msg}", file=sys.stderr))
    record = run_calibrate(scenario, args.options, run_seeds, out, workers, args.slo_ms, wanted,
                           args.refine, verify=not args.no_verify, progress=progress,
                           scheduler=args.scheduler_address)
    if not args.no_figures:
        from simlab.reporting.figures.knee import knee_figure

        record = replace(record, figures=knee_figure(record, out / "figures"))
    record = store_calibration(record, out)
    report = write_report(record, out)
    print(render_terminal(terminal_blocks(record)))
    print(f"\nsearch ranges for tune: {out / 'tune-bounds.json'} (simlab tune {args.scenario} --calibration {out})"
          f"  report: {report}" + "".join(f"  figure: {out / f}" for f in record.figures))
    return 0


def rates(text: str | None) -> list[float] | None:
    """--rates: finite positive req/s, comma-separated (None: the automatic ramp)."""
    if not text:
        return None
    try:
        values = sorted({float(r) for r in text.split(",") if r.strip()})
    except ValueError:
        raise InputError(None, "--rates", f"{text!r} is not a comma-separated list of req/s") from None
    if not values or not all(0 < r < math.inf for r in values):
        raise InputError(None, "--rates", f"give finite positive rates, e.g. 2,4,8,16 (found {text!r})")
    return values
