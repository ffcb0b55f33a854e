"""`simlab calibrate SCENARIO`: ramp the interactive rate, find the P95 knee, recommend the adaptive thresholds."""

from __future__ import annotations

import argparse
import math
from textwrap import fill
import sys

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
  recommended-options.json (load with --options), report.md, knee.csv, calibration.json, figures/knee.png|svg
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


def base_options(scenario, options_file):
    """The options to start from, with whatever the adaptive policy needs filled in (thresholds are what
    calibrate recommends, so they need not be there yet)."""
    from simlab.policies import ARTICLE_DEFAULTS, load_options, options_from_dict

    if options_file:  # validated as keys and types; the policy's own requirements are filled in below
        data = load_options(options_file, policy="unscheduled").model_dump(by_alias=True, exclude_none=True)
        source = options_file
    else:
        data = dict(scenario.scheduler)
        source = f"{scenario.path}: [scheduler]"
    b = scenario.backend
    cap = b.slots or b.max_num_seqs or b.concurrency
    if "maxConcurrency" not in data and cap:
        data["maxConcurrency"] = cap
    for key, value in ARTICLE_DEFAULTS.items():
        data.setdefault(key, value)
    if data["batchMaxConcurrency"] > data["maxConcurrency"]:
        data["batchMaxConcurrency"] = data["maxConcurrency"]
    data["batchMinConcurrency"] = min(data["batchMinConcurrency"], data["batchMaxConcurrency"])
    data["policy"] = "adaptive"
    return options_from_dict(data, source)


def tune_bounds(recommended: dict) -> dict:
    """Ranges for `simlab tune --calibration`: a factor of two either side of the knee's threshold and the SLO."""
    thr, p95 = recommended["interactiveRpsThreshold"], recommended["interactiveP95LatencyMs"]
    return {"interactiveRpsThreshold": [thr / 2, thr * 2], "interactiveP95LatencyMs": [p95 / 2, p95 * 2]}


def main(args) -> int:
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

    from simlab.atomic import atomic_write_text
    from simlab.calibration.knee import CURVE_LABELS, calibrate, interactive_workloads, offered_rps
    from simlab.calibration.report import write_calibration_report

    interactive_workloads(scenario)
    capacity_check(scenario)  # the ramp goes past it anyway; the scenario's own rate is what the user runs
    options = base_options(scenario, args.options)
    factors = None
    if args.rates:
        try:
            rates = sorted({float(r) for r in args.rates.split(",") if r.strip()})
        except ValueError:
            raise InputError(None, "--rates", f"{args.rates!r} is not a comma-separated list of req/s") from None
        if not rates or not all(0 < r < math.inf for r in rates):
            raise InputError(None, "--rates", f"give finite positive rates, e.g. 2,4,8,16 (found {args.rates!r})")
        base = offered_rps(scenario, run_seeds)
        if base <= 0:
            raise InputError(scenario.path, "workload", "the interactive workloads generate no arrivals")
        factors = [r / base for r in rates]
    out = out_dir(args, scenario, "calibrate")

    def progress(msg):
        if not args.quiet:
            print(f"  {msg}", file=sys.stderr)

    cal = calibrate(scenario, options, run_seeds, out, workers, args.slo_ms, factors, args.refine,
                    verify=not args.no_verify, progress=progress, scheduler=args.scheduler_address)
    import json

    # One recommendation per scenario: calibrate does not export competing options; its knee sets tune's ranges
    (out / "recommended-options.json").unlink(missing_ok=True)
    atomic_write_text(out / "tune-bounds.json", json.dumps(tune_bounds(cal.recommended), indent=2) + "\n")
    report = write_calibration_report(cal, out, figures=not args.no_figures)
    print(f"{scenario.name}: interactive P95 against rate, SLO {cal.slo_ms:,.0f} ms, {len(run_seeds)} seeds per point")
    for curve, knee in cal.knees.items():
        print(f"  knee, {CURVE_LABELS[curve]}: {knee.describe()}")
    rec = cal.recommended
    print(f"recommended: interactiveRpsThreshold = {rec['interactiveRpsThreshold']:g} ({rec['threshold_from']}), "
          f"interactiveP95LatencyMs = {rec['interactiveP95LatencyMs']:g} (the SLO)")
    for n in cal.notes:
        print(f"note: {n}")
    print(f"\nsearch ranges for tune: {out / 'tune-bounds.json'} (simlab tune {args.scenario} --calibration {out})"
          f"  report: {report}"
          + ("" if args.no_figures else f"  figure: {out / 'figures' / 'knee.png'}"))
    return 0
