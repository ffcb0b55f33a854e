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
  step.toml ([backend.step] snippet), step-profile.csv (batch_size,step_ms for `profile`), report.md,
  fit.csv, figures/gpu-fit.png|svg; with --open-loop: open-loop.csv (per run); with --check OTHER.csv: check.md, check.csv (held-out error, retest)
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
    from pathlib import Path

    from simlab.atomic import atomic_write_text
    from simlab.calibration.gpu import MEASURE_LABELS, fit_gpu, profile_csv, read_table, step_toml

    for flag, v in (("--prompt-tokens", args.prompt_tokens), ("--output-tokens", args.output_tokens)):
        if v is not None and not 1 <= v < math.inf:
            raise InputError(None, flag, f"must be a finite number of at least 1 (found {v:g})")
    if args.per_token_ms is not None and not 0 <= args.per_token_ms < math.inf:
        raise InputError(None, "--per-token-ms", f"must be a finite number, 0 or more (found {args.per_token_ms:g})")
    tables = [Path(t) for t in args.table]
    names = [t.name for t in tables]
    if len(set(names)) < len(names):  # e.g. loadtest-a/loadtest.csv and loadtest-b/loadtest.csv
        names = [f"{t.parent.name}/{t.name}" for t in tables]
    rows = []
    for table, name in zip(tables, names):
        mine = read_table(table, args.prompt_tokens, args.output_tokens)
        if len(tables) > 1:
            for r in mine:
                r.line = f"{name}:{r.line}"
        rows += mine
    check_rows = read_table(args.check, args.prompt_tokens, args.output_tokens) if args.check else None
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        raise InputError(None, "--max-num-seqs", f"must be at least 1 (found {args.max_num_seqs})")
    runs = None
    if args.open_loop:
        from simlab.calibration.openloop import read_runs

        runs = read_runs(args.open_loop)
    fit = fit_gpu(rows, tables[0], args.per_token_ms, label=" + ".join(names))
    open_loop = None
    if runs is not None:
        from simlab.calibration.openloop import refit

        closed = fit
        fit, report_ol = refit(fit, runs, args.max_num_seqs or int(max(r.c for r in rows)))
        open_loop = (closed, report_ol)
    from simlab.calibration.report import write_gpu_report
    from simlab.outputs import default_folder, output_folder

    out = output_folder(args.out) if args.out else output_folder(default_folder("calibrate-gpu", tables[0].stem), None)
    profile_name = "step-profile.csv" if fit.profile else None
    if profile_name:
        atomic_write_text(out / profile_name, profile_csv(fit))
    atomic_write_text(out / "step.toml", step_toml(fit, profile_name))
    report = write_gpu_report(fit, out, "step.toml", profile_name, figures=not args.no_figures, open_loop=open_loop)
    print(f"{' + '.join(args.table)}: {len(fit.rows)} measurements")
    print(f"step = {fit.base_ms:.4g} ms + {fit.per_token_ms:.4g} ms x tokens + {fit.per_seq_ms:.4g} ms x sequences"
          + (f" + {fit.admit_ms:.4g} ms per admitted request" if fit.admit_ms else "")
          + f"; front end {fit.request_ms:.4g} ms per request")
    print(f"fit error: mean {fit.mean_rel_error:.2%}, largest {fit.max_rel_error:.2%}; R^2 "
          + ", ".join(f"{MEASURE_LABELS[k]} {v:.4f}" for k, v in fit.r2.items()))
    for n in fit.notes:
        print(f"note: {n}")
    if open_loop is not None:
        closed, ol = open_loop
        print(f"load tests alone: step = {closed.base_ms:.4g} ms + {closed.per_seq_ms:.4g} ms x sequences + "
              f"{closed.admit_ms:.4g} ms per admitted request; model at the open-loop runs' load: mean |error| "
              f"{ol.mean_abs_error_before:.1%} -> {ol.mean_abs_error_after:.1%} refitted ({ol.requests} requests)")
        for r in ol.runs:
            print(f"  {r.name}: {r.requests} requests, {r.mean_sequences:.1f} sequences, median error "
                  f"{r.before:+.1%} -> {r.after:+.1%}")
    if check_rows is not None:
        from simlab.calibration.gpu import held_out_check
        from simlab.calibration.report import write_gpu_check

        check = held_out_check(fit, check_rows)
        write_gpu_check(check, " + ".join(args.table), args.check, out)
        tol = check["tolerance"]

        def error_text(g, suffix=""):  # "within" judges every row, so the largest error is said beside the mean
            return (f"mean {g['mean_abs_error' + suffix]:.1%}, largest {g['max_abs_error' + suffix]:.1%}: "
                    + (f"every row within {tol:.0%}" if g["within" + suffix] else f"not every row within {tol:.0%}"))

        has_profile = check["mean_abs_error_profile"] is not None
        print(f"held-out check on {args.check}: mean |error| {check['mean_abs_error']:.1%} with the straight line"
              + (f", {check['mean_abs_error_profile']:.1%} with the measured profile" if has_profile else "")
              + (f" (test-retest difference {check['retest_mean_abs_difference']:.1%})"
                 if check["retest_mean_abs_difference"] is not None else ""))
        for g in check["by_concurrency"]:
            if g["measure"] == "tpot":
                print(f"  time per output token, {g['batch_size']:g} sequences: |error| {error_text(g)}"
                      + (f"; profile {error_text(g, '_profile')}" if has_profile else ""))
    print(f"\nsnippet: {out / 'step.toml'}  report: {report}" + (f"  profile: {out / profile_name}" if profile_name else ""))
    return 0
