"""`simlab replay`: a trace through a policy on the `delay` backend (the conformance interface)."""

from __future__ import annotations

import sys

from simlab.commands.common import warn
from simlab.errors import InputError

STRANDED_WHY = (
    "The reference policy re-evaluates the batch cap only when a task is submitted or finishes; once pressure "
    "drove the cap to batchMinConcurrency = 0 and interactive traffic stopped, nothing woke the batch queue "
    'again. Set batchMinConcurrency >= 1 or "recheckOnExpiry": true.'
)


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a trace through a policy (conformance with the reference)")
    p.add_argument("trace", help="CSV with id,kind,arrival_ms,service_ms")
    p.add_argument("--options", help="scheduler options JSON (the production SchedulerOptions, camelCase)")
    p.add_argument("--policy", help="override the options' policy (unscheduled, fifo, priority, static, adaptive)")
    p.add_argument("--backend", default="delay", help="only 'delay': unlimited capacity, exact service times")
    p.add_argument("--out", required=True, help="output CSV: id,kind,arrival_ms,service_ms,start_ms,end_ms,latency_ms")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.policies import ARTICLE_DEFAULTS, load_options, options_from_dict
    from simlab.replay import replay, write_replay
    from simlab.traces import read_trace

    if args.backend != "delay":
        raise InputError(None, "--backend", f"replay supports only 'delay' (found {args.backend!r}); use `simlab run` for contended backends")
    if args.options:
        options = load_options(args.options, policy=args.policy)
        for w in options.warnings():
            warn(f"{args.options}: {w}")
    else:
        options = options_from_dict({**ARTICLE_DEFAULTS, "policy": args.policy or "adaptive"}, "article defaults")
    from simlab.outputs import output_file

    tasks, _ = read_trace(args.trace)
    output_file(args.out)
    result = replay(tasks, options)
    write_replay(result, args.out)
    stranded = result.stranded
    if stranded:
        kinds = sorted({t.kind for t in stranded})
        print(f"{len(stranded)} of {len(tasks)} tasks never started ({', '.join(kinds)}): they are reported with "
              f"empty start_ms/end_ms. {STRANDED_WHY}", file=sys.stderr)
    print(f"replayed {len(tasks)} tasks with policy '{options.policy}' -> {args.out}", file=sys.stderr)
    return 0
