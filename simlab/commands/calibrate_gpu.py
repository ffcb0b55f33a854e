"""`simlab calibrate-gpu TABLE [TABLE ...]`: fit the continuous-batching step-time model to a measured load test."""

from __future__ import annotations

import argparse
from textwrap import fill

from simlab.errors import InputError

EPILOG = """\
the table (CSV): one row per load-test setting
  batch size   batch_size | concurrency | num_seqs | max_concurrency
  lengths      prompt_tokens | input_tokens, output_tokens  (or --prompt-tokens/--output-tokens for all rows)
  any of       step_ms | decode_step_ms            one decode-only iteration
               tpot_ms | itl_ms | mean_tpot_ms      time per output token
               ttft_ms | mean_ttft_ms               time to first token
               latency_ms | e2e_latency_ms | e2el_ms  end-to-end per request
               output_tokens_per_s | output_throughput  server output tokens/s
               request_tokens_per_s                 one request's decode speed
  e.g. vLLM's benchmarks/benchmark_serving.py run at several --max-concurrency values.
model: step = base_ms + per_token_ms * tokens + per_seq_ms * sequences (+ admit_ms per request admitted in
the step, fitted when the table has several output lengths), and each request reaches the engine
request_ms after it is sent (the front end; fitted from TTFT/latency rows), by non-negative least squares
on relative errors; the fit error (R^2 per measurement, mean and largest relative error) is reported.
with --open-loop RUN.csv ...: the decode step and admit_ms refitted on open-loop traffic (see report.md)
outputs (in --out, default results/calibrate-gpu/TABLE-NAME/):
  step.toml ([backend.step] snippet), step-profile.csv (batch_size,step_ms for `profile`), result.json,
  report.md, fit.csv, join-cost.csv (with two output lengths), figures/gpu-fit.png|svg;
  with --open-loop: open-loop.csv (per run); with --check OTHER.csv: check.md, check.csv (held-out error, retest)
example: scenarios/profiles/llama2-7b-a100-roofline.csv (synthesized from a roofline model; see its README)
"""


def register(sub) -> None:
    p = sub.add_parser(
        "calibrate-gpu",
        help="fit the continuous-batching step time (base, per token, per sequence) to a measured load test",
        description=fill("Fit the continuous-batching backend's step-time model to a load-test table (concurrency or "
        "batch size against per-request latency or tokens/s) and report the fit error."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("table", nargs="+", help="load-test CSV (see below); several tables of the same server (e.g. "
                   "load tests before and after a validation) are fitted together")
    p.add_argument("--prompt-tokens", type=float, help="prompt length of every row (when the table has no column)")
    p.add_argument("--output-tokens", type=float, help="output length of every row (when the table has no column)")
    p.add_argument("--per-token-ms", type=float, help="fix per_token_ms (prefill cost) instead of fitting it")
    p.add_argument("--check", help="an independent load test of the same server: report the fit's error on it "
                   "(check.md, check.csv) and the test-retest difference between the two tables")
    p.add_argument("--open-loop", nargs="+", metavar="RUN_CSV", help="request records of open-loop runs of the same "
                   "server (validate-real's measured/*.csv, at a seed other than the one to validate): base_ms, "
                   "per_seq_ms and admit_ms are refitted on each request's decode step at the load it had, "
                   "per_token_ms and request_ms kept from the table(s) (report.md: both fits, per-run errors)")
    p.add_argument("--max-num-seqs", type=int, help="the server's sequence limit, for --open-loop (default: the "
                   "largest concurrency in the table(s))")
    p.add_argument("--out", help="output folder (default results/calibrate-gpu/TABLE-NAME)")
    p.add_argument("--no-figures", action="store_true", help="skip the figure")
    p.set_defaults(func=main)


def main(args) -> int:
    import math
    from dataclasses import replace
    from pathlib import Path

    from simlab.calibration.files import store_gpu
    from simlab.calibration.run import run_calibrate_gpu
    from simlab.outputs import default_folder, output_folder
    from simlab.reporting.blocks.gpu import terminal_blocks, write_report
    from simlab.reporting.terminal import render_terminal

    for flag, v in (("--prompt-tokens", args.prompt_tokens), ("--output-tokens", args.output_tokens)):
        if v is not None and not 1 <= v < math.inf:
            raise InputError(None, flag, f"must be a finite number of at least 1 (found {v:g})")
    if args.per_token_ms is not None and not 0 <= args.per_token_ms < math.inf:
        raise InputError(None, "--per-token-ms", f"must be a finite number, 0 or more (found {args.per_token_ms:g})")
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        raise InputError(None, "--max-num-seqs", f"must be at least 1 (found {args.max_num_seqs})")
    record = run_calibrate_gpu(args.table, args.prompt_tokens, args.output_tokens, args.per_token_ms, args.check,
                               args.open_loop, args.max_num_seqs)  # seconds: bad tables fail before --out is made
    out = (output_folder(args.out) if args.out
           else output_folder(default_folder("calibrate-gpu", Path(args.table[0]).stem), None))
    if not args.no_figures:
        from simlab.reporting.figures.gpu import gpu_figure

        record = replace(record, figures=gpu_figure(record, out / "figures"))
    record = store_gpu(record, out)
    report = write_report(record, out)
    print(render_terminal(terminal_blocks(record)))
    print(f"\nsnippet: {out / record.snippet_file}  report: {report}"
          + (f"  profile: {out / record.profile_file}" if record.profile_file else "")
          + (f"  check: {out / 'check.md'}" if record.check is not None else ""))
    return 0
