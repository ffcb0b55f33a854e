"""`simlab validate-real SCENARIO --url URL`: a scenario's arrivals on a real server, per policy, against the simulation."""

from __future__ import annotations

import argparse
from textwrap import fill

EPILOG = """\
what it does (simlab/realcheck/validate.py)
  the scenario's open-loop tasks (seed --seed, arrivals x --time-scale, those before --until-ms) are driven
  through simlab.runtime to the server per policy and repeat (measured/), simulated with the scenario's
  continuous-batching backend (simulated/), and compared: P50/P95/P99 and TTFT P95 per class, batch
  throughput, relative error, run-to-run spread, rankings pair by pair (summary.csv, verdict.json,
  result.json, report.md, figures/); the step model is checked alone on every measured run, beside the CPU
  the server's processes, this client and the machine used.
kept runs: a measured run is reused when its key (measured/*.json) matches: the workload as drawn, the
  policy and options, the driver, the server's address and model, --time-scale, --until-ms, --max-seconds,
  --engine-priority.
  --kept-runs-only re-simulates from kept runs without contacting the server.
Loopback servers only (the URL is checked and resolved once); every run is bounded by --max-seconds.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "validate-real", help="drive a scenario through the asyncio runtime to a real server and compare with the "
        "simulation", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=fill("Run a scenario's arrivals and token counts through simlab.runtime against a real "
                         "OpenAI-compatible server for several policies, simulate the same arrivals with the "
                         "calibrated backend, and report predicted vs measured."))
    p.add_argument("scenario", help="scenario TOML with a continuous-batching backend and token counts")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8011 (loopback only)")
    p.add_argument("--policies", default="unscheduled,static,adaptive", help="default unscheduled,static,adaptive")
    p.add_argument("--options", help="options JSON (e.g. simlab tune's best-options.json) instead of [scheduler]")
    p.add_argument("--repeats", type=int, default=2, help="measured runs per policy (default 2)")
    p.add_argument("--seed", type=int, help="workload seed (default: the scenario's experiment seed)")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply arrival times by this (default 1)")
    p.add_argument("--until-ms", type=float, help="keep only tasks arriving before this (after scaling)")
    p.add_argument("--max-seconds", type=float, default=900.0, help="hard limit per measured run, and on every wait "
                   "for the server (default 900)")
    p.add_argument("--calibration", help="a backend snippet from `simlab loadtest` (backend.toml) that replaces the "
                   "scenario's [backend] for the simulation, or a bare [backend.step] (calibrate-gpu's step.toml) "
                   "that replaces its step time")
    p.add_argument("--node-policies", default="", help="also run these policies through the article's own scheduler "
                   "(tests/conformance/real_server.js under Node.js, real fetch) with the options file simlab "
                   "exports to OUT/options/POLICY.json; reported as 'POLICY (article JS)'")
    p.add_argument("--engine-priority", action="store_true", help="the engine schedules by priority: every request "
                   "carries vLLM's `priority` (interactive 0, batch 1; start the server with --scheduling-policy "
                   "priority) and the simulation's backend has scheduling = \"priority\" (with the scenario's "
                   "kv_cache_tokens, e.g. scenarios/real-engine-priority.toml)")
    p.add_argument("--kept-runs-only", action="store_true", help="never contact the server: re-simulate and compare "
                   "from the kept runs (each must match its key, the model aside); a missing run is an error")
    p.add_argument("--out", help="output folder (default results/validate-real/SCENARIO-NAME)")
    p.add_argument("--no-figures", action="store_true")
    p.set_defaults(func=main)


def main(args) -> int:
    import json
    from pathlib import Path

    from simlab import records
    from simlab.store import atomic_write_text
    from simlab.commands.common import policy_list
    from simlab.store import csv_text
    from simlab.outputs import default_folder
    from simlab.realcheck.validate import run_validate_real
    from simlab.reporting.blocks import validate_real as blocks
    from simlab.reporting.markdown import render_markdown
    from simlab.scenario import load_scenario

    out = args.out or default_folder("validate-real", load_scenario(args.scenario).name)  # made once inputs check
    record = run_validate_real(
        args.scenario, url=args.url, policies=policy_list(args.policies), out=out, options_file=args.options,
        repeats=args.repeats, seed=args.seed, time_scale=args.time_scale, until_ms=args.until_ms,
        max_seconds=args.max_seconds, calibration=args.calibration,
        node_policies=policy_list(args.node_policies, "--node-policies") if args.node_policies else [],
        kept_only=args.kept_runs_only, engine_priority=args.engine_priority,
        progress=lambda line: print(line, flush=True),
        out_flag="--out" if args.out else None)
    out = Path(out)
    if not args.no_figures:
        from simlab.reporting.figures import validate_real as figure

        record.figures = figure.save(record, out)
    record = records.save(record, out)  # everything below is rendered from the record as stored
    atomic_write_text(out / "summary.csv", csv_text(blocks.summary_rows(record), blocks.SUMMARY_COLUMNS))
    atomic_write_text(out / "verdict.json", json.dumps(blocks.verdict_json(record), indent=1) + "\n")
    report = render_markdown(blocks.document(record, out), out)
    atomic_write_text(out / "report.md", report)
    print("\n" + report)
    print(f"written: {out}/summary.csv, verdict.json, result.json, report.md")
    return 0
