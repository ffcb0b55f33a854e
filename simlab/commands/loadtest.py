"""`simlab loadtest URL`: measure a real OpenAI-compatible server's step time and fit the continuous-batching model."""

from __future__ import annotations

import argparse
from textwrap import fill

from simlab.errors import InputError

EPILOG = """\
what it does (bounded: --requests per level, --max-seconds per level and per request; loopback servers only)
  for each prompt length, output length and concurrency C: C workers send back-to-back requests of exactly
  that many output tokens (prompts as token ids, ignore_eos), every streamed chunk timed; the whole sweep
  --rounds times (alternately forwards and backwards), the median over rounds kept. Two output lengths
  (e.g. --output-tokens 16,64) let the fit tell the engine's cost of taking a request in (admit_ms) from
  a running sequence's (per_seq_ms). During each level the server's processes (found by the URL's port)
  and this client are measured: cores used and cores' worth of run-queue wait (Linux only).
outputs (in --out, default results/loadtest/):
  loadtest.csv   one row per level: batch_size, prompt_tokens, output_tokens, tpot_ms (mean time per
                 output token), ttft_ms, latency_ms (medians over rounds; tpot_min_ms/tpot_max_ms:
                 the spread between rounds) -> `simlab calibrate-gpu`; gap_median_ms (median
                 token gap with C sequences in flight, p10/p90) for reference; server_cores,
                 server_waiting_cores, client_cores, machine_cores: who used the CPUs meanwhile
  tokens.csv     every streamed token: level, request, token index, time, gap, sequences in flight
  fit/           `simlab calibrate-gpu loadtest.csv` (step.toml, step-profile.csv, report.md)
  backend.toml   the fitted continuous-batching [backend] as a scenario snippet (also printed)
example: scripts/real-engine.sh start; simlab loadtest http://127.0.0.1:8011
"""


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(None, flag, f"expected comma-separated whole numbers (found {text!r})") from None
    if not values or any(v < 1 for v in values):
        raise InputError(None, flag, f"expected whole numbers of at least 1 (found {text!r})")
    return values


def register(sub) -> None:
    p = sub.add_parser(
        "loadtest",
        help="measure a real server's step time by sequences in flight and prompt length; fit the backend",
        description=fill("Load-test an OpenAI-compatible completions server on this machine (closed loop at several "
                         "concurrencies and prompt lengths, streamed per-token timings), write the table that "
                         "`simlab calibrate-gpu` fits, fit it, and print the continuous-batching backend."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8011 (loopback only)")
    p.add_argument("--concurrency", default="1,2,4,8,12,16", help="sequences in flight (default 1,2,4,8,12,16)")
    p.add_argument("--prompt-tokens", default="32,512", help="prompt lengths (default 32,512); cover the lengths your "
                   "traffic has: the fit draws a straight line in the prompt length, and a real engine's prefill "
                   "cost need not be one (fit/report.md gives the cost of a joining request per length)")
    p.add_argument("--output-tokens", default="64", help="tokens per request, one or several (default 64; e.g. 16,64 "
                   "separates a request's own cost from a sequence's, which one length cannot)")
    p.add_argument("--requests", type=int, default=24, help="measured requests per level, at least C (default 24)")
    p.add_argument("--max-seconds", type=float, default=60.0, help="time limit per level, and on every request and "
                   "every wait for the server (default 60)")
    p.add_argument("--rounds", type=int, default=3, help="repeat the whole sweep, alternately forwards and "
                   "backwards; the table keeps the median over rounds and their spread (default 3)")
    p.add_argument("--max-num-seqs", type=int, help="the server's sequence limit (default: the largest concurrency)")
    p.add_argument("--out", default="results/loadtest", help="output folder (default results/loadtest)")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.store import atomic_write_text
    from simlab.store import csv_text
    from simlab.outputs import output_folder
    from simlab.realcheck.loadtest import TABLE_COLUMNS, TOKEN_COLUMNS, run_loadtest
    from simlab.realcheck.urls import check_url

    conc = _ints(args.concurrency, "--concurrency")
    check_url(args.url, "URL")  # a refused URL makes no folder
    out = output_folder(args.out)  # checked before any load is sent
    _, rows, tokens = run_loadtest(args.url, conc, _ints(args.prompt_tokens, "--prompt-tokens"),
                                   _ints(args.output_tokens, "--output-tokens"), args.requests, args.max_seconds,
                                   args.rounds)
    atomic_write_text(out / "loadtest.csv", csv_text(rows, TABLE_COLUMNS))
    atomic_write_text(out / "tokens.csv", csv_text(tokens, TOKEN_COLUMNS, None))
    print(f"table: {out / 'loadtest.csv'}  tokens: {out / 'tokens.csv'}")
    print("\n" + fit_and_snippet(out, max(conc) if args.max_num_seqs is None else args.max_num_seqs))
    return 0


def fit_and_snippet(out, max_num_seqs: int) -> str:
    """Fit loadtest.csv as `simlab calibrate-gpu` does, into out/fit (its files, report and figure); write and
    return the backend snippet."""
    from dataclasses import replace

    from simlab.store import atomic_write_text
    from simlab.calibration.files import store_gpu
    from simlab.calibration.gpu import backend_toml
    from simlab.calibration.run import run_calibrate_gpu
    from simlab.reporting.blocks.gpu import write_report
    from simlab.reporting.figures.gpu import gpu_figure

    record = run_calibrate_gpu([out / "loadtest.csv"])
    record = replace(record, figures=gpu_figure(record, out / "fit" / "figures"))
    record = store_gpu(record, out / "fit")
    write_report(record, out / "fit")
    snippet = backend_toml(record, max_num_seqs, "fit/step-profile.csv")
    atomic_write_text(out / "backend.toml", snippet)
    return snippet
