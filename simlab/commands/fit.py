"""`simlab fit LOG`: fit a workload from a request log, write a scenario, a fit report and its validation."""

from __future__ import annotations

import argparse
from textwrap import fill

from simlab.errors import InputError

EPILOG = """\
log formats (CSV or JSON Lines, recognised by their column names):
  generic    arrival_ms, and kind, service_ms, prompt_tokens, output_tokens (any of them)
  Azure      TIMESTAMP (date-time), ContextTokens, GeneratedTokens   (the Azure LLM inference traces)
  Mooncake   timestamp (ms), input_length, output_length              (JSONL)
  BurstGPT   Timestamp (s), Request tokens, Response tokens
other column names:
  --map arrival=ts:s,prompt_tokens=in_tok,output_tokens=out_tok,class=queue,service_ms=latency:s
  roles: arrival (date-time, or a number in the unit after ':' -- ns, us, ms (default), s, min, h),
         class, service_ms (latency or service time; ms unless ':s' etc.), prompt_tokens, output_tokens
  class values must be interactive or batch; map other labels: --classes chat=interactive,offline=batch
  without a class column every request is --class (interactive)

outputs (in --out, default results/fit/LOG-NAME/):
  scenario.toml (+ lengths-CLASS.csv for empirical distributions), result.json, report.md, fit.json,
  rates.csv, validation.csv, validation-bins.csv, figures/*.png|svg
"""


def register(sub) -> None:
    p = sub.add_parser(
        "fit",
        help="fit a workload (arrivals, burstiness, token/latency distributions) from a request log",
        description=fill("Fit arrival rate per bin, burstiness (inter-arrival CV, Poisson tests) and token-length or "
        "service-time distributions (lognormal and empirical, with goodness of fit) from a request log; write a "
        "scenario TOML that uses them, a report with figures, and a validation of the scenario against the log."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", help="request log: CSV or JSON Lines (.jsonl)")
    p.add_argument("--out", help="output folder (default results/fit/LOG-NAME)")
    p.add_argument("--map", dest="mapping", help="column names: ROLE=COLUMN[:UNIT],... (see below)")
    p.add_argument("--classes", help="class labels: LABEL=interactive|batch,...")
    p.add_argument("--class", dest="default_class", default="interactive", choices=("interactive", "batch"),
                   help="class of every request when the log has no class column (default interactive)")
    p.add_argument("--bin", default="auto", help="rate bin: auto (hourly for logs of 10 h or more, else about "
                   "10+ bins), or a duration such as 1h, 5min, 30s")
    p.add_argument("--step", default="auto", help="the scenario's piecewise rate step: auto (the coarsest that "
                   "reproduces the inter-arrival CV) or a duration")
    p.add_argument("--arrivals", default="auto", choices=("auto", "poisson", "piecewise", "resampled"),
                   help="the scenario's arrival process (default auto)")
    p.add_argument("--dist", default="auto", choices=("auto", "lognormal", "empirical"),
                   help="token/latency distributions: auto = lognormal unless KS rejects it, else empirical")
    p.add_argument("--template", help="scenario whose backend, scheduler, SLO, experiment and criteria to reuse")
    p.add_argument("--slo-ms", type=float, help="interactive P95 SLO written to the scenario (ms)")
    p.add_argument("--name", help="scenario name (default LOG-NAME-fit)")
    p.add_argument("--validate-seeds", type=int, default=5, help="seeds to simulate for the validation (default 5)")
    p.add_argument("--no-validate", action="store_true", help="skip simulating the fitted scenario")
    p.add_argument("--no-figures", action="store_true", help="skip the figures")
    p.set_defaults(func=main)


def main(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from simlab.commands.common import MAX_SEEDS, at_most, finite_positive

    if args.validate_seeds < 2 and not args.no_validate:
        raise InputError(None, "--validate-seeds", f"must be at least 2 (found {args.validate_seeds})")
    if args.slo_ms is not None:
        finite_positive(args.slo_ms, "--slo-ms")
    at_most(args.validate_seeds, MAX_SEEDS, "--validate-seeds", "one simulation per seed")

    from simlab.calibration.files import store_fit
    from simlab.calibration.fit import parse_duration_ms
    from simlab.calibration.logs import parse_classes, parse_map
    from simlab.calibration.run import read_fit_inputs, run_fit
    from simlab.outputs import default_folder, output_folder
    from simlab.reporting.blocks.fit import terminal_blocks, write_report
    from simlab.reporting.terminal import render_terminal

    mapping, classes = parse_map(args.mapping), parse_classes(args.classes)
    bin_ms = None if args.bin == "auto" else parse_duration_ms(args.bin, "--bin")
    step_ms = None if args.step == "auto" else parse_duration_ms(args.step, "--step")
    log = read_fit_inputs(args.log, mapping, classes, args.default_class, bin_ms, step_ms, args.template)
    out = output_folder(args.out) if args.out else output_folder(default_folder("fit", Path(args.log).stem), None)
    run = run_fit(log, out, bin_ms, step_ms, args.dist, args.arrivals, args.name, args.template, args.slo_ms,
                  0 if args.no_validate else args.validate_seeds)
    record = run.record
    if not args.no_figures:
        from simlab.reporting.figures.fit import draw

        record = replace(record, figures=draw(run.fit, run.validation, out / "figures"))
    record = store_fit(record, run.fit, out)
    report = write_report(record, out)
    print(render_terminal(terminal_blocks(record)))
    print(f"\nscenario: {out / record.scenario_file}  report: {report}  fit: {out / 'fit.json'}")
    return 0
