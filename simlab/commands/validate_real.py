"""`simlab validate-real SCENARIO --url URL`: a scenario's arrivals on a real server, per policy, against the simulation."""

from __future__ import annotations

import argparse
from textwrap import fill

from simlab.errors import InputError

EPILOG = """\
what it does
  1. generates the scenario's open-loop tasks (seed --seed), arrivals times --time-scale, those arriving
     before --until-ms kept; every workload needs prompt_tokens and output_tokens;
  2. for each repeat and each policy (scenario [scheduler] options, or --options FILE, with the policy
     replaced): drives the tasks through simlab.runtime to the server (streamed, timed) -> measured/;
  3. simulates exactly the same tasks with the scenario's continuous-batching backend -> simulated/;
  4. compares: P50/P95/P99 and TTFT P95 per class, batch throughput; relative error, run-to-run spread,
     policy rankings -> summary.csv, verdict.json, report.md, figures/validate-real.png|svg;
  5. checks the step model alone on every measured run (evaluated at the sequences actually in flight),
     beside the CPU the server's processes, this client and the machine used during the run (report.md).
Finished runs are kept: rerunning the same command resumes (delete the folder to measure afresh).
Loopback servers only; every run is bounded by --max-seconds.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "validate-real",
        help="drive a scenario through the asyncio runtime to a real server and compare with the simulation",
        description=fill("Run a scenario's arrivals and token counts through simlab.runtime against a real "
                         "OpenAI-compatible server for several policies, simulate the same arrivals with the "
                         "calibrated backend, and report predicted vs measured."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", help="scenario TOML with a continuous-batching backend and token counts")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8011 (loopback only)")
    p.add_argument("--policies", default="unscheduled,static,adaptive", help="default unscheduled,static,adaptive")
    p.add_argument("--options", help="options JSON (e.g. simlab tune's best-options.json) instead of [scheduler]")
    p.add_argument("--repeats", type=int, default=2, help="measured runs per policy (default 2)")
    p.add_argument("--seed", type=int, help="workload seed (default: the scenario's experiment seed)")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply arrival times by this (default 1)")
    p.add_argument("--until-ms", type=float, help="keep only tasks arriving before this (after scaling)")
    p.add_argument("--max-seconds", type=float, default=900.0, help="hard limit per measured run (default 900)")
    p.add_argument("--calibration", help="a backend snippet from `simlab loadtest` (backend.toml) that replaces the "
                   "scenario's [backend] for the simulation, or a bare [backend.step] (calibrate-gpu's step.toml) "
                   "that replaces its step time")
    p.add_argument("--node-policies", default="", help="also run these policies through the article's own scheduler "
                   "(tests/conformance/real_server.js under Node.js, real fetch) with the options file simlab "
                   "exports to OUT/options/POLICY.json; reported as 'POLICY (article JS)'")
    p.add_argument("--out", help="output folder (default results/validate-real/SCENARIO-NAME)")
    p.add_argument("--no-figures", action="store_true")
    p.set_defaults(func=main)


def main(args) -> int:
    import asyncio
    import json
    from pathlib import Path

    from simlab.atomic import atomic_write_text
    from simlab.experiments.tables import csv_text
    from simlab.policies import POLICY_NAMES, load_options
    from simlab.realcheck import compare as cmp
    from simlab.realcheck.client import ServerError, loopback_url
    from simlab.realcheck.hostcpu import CpuProbe, CpuUse
    from simlab.realcheck.drive import (RECORD_COLUMNS, decode_ms_per_token, drive, metrics, read_records,
                                         scenario_tasks, simulate, step_at_measured_load, step_error_by_window)
    from simlab.scenario import load_scenario

    loopback_url(args.url, "--url")
    scenario = load_scenario(args.scenario)
    if args.calibration:
        scenario = _with_backend(scenario, Path(args.calibration))
    if scenario.backend.kind != "continuous-batching":
        raise InputError(scenario.path, "backend.kind", "validate-real needs a continuous-batching backend "
                         f"(calibrated with `simlab loadtest`), found {scenario.backend.kind!r}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICY_NAMES]
    if bad or not policies:
        raise InputError(None, "--policies", f"unknown policy {bad[0] if bad else '(none)'}; known: {', '.join(POLICY_NAMES)}")
    if args.repeats < 1:
        raise InputError(None, "--repeats", f"must be at least 1 (found {args.repeats})")
    if not args.time_scale > 0:
        raise InputError(None, "--time-scale", f"must be positive (found {args.time_scale:g})")
    seed = args.seed if args.seed is not None else scenario.experiment.seed
    tasks = scenario_tasks(scenario, seed, args.time_scale, args.until_ms)
    if not tasks:
        raise InputError(scenario.path, "workload", "no tasks arrive in the chosen window")
    if any(t.prompt_tokens is None for t in tasks):
        raise InputError(scenario.path, "workload", "every workload needs prompt_tokens and output_tokens")
    node_policies = [p.strip() for p in args.node_policies.split(",") if p.strip()]
    bad = [p for p in node_policies if p not in policies]
    if bad:
        raise InputError(None, "--node-policies", f"{bad[0]} is not among --policies ({', '.join(policies)})")
    options = {p: (load_options(args.options, p) if args.options else scenario.options(p)) for p in policies}
    out = Path(args.out) if args.out else Path("results") / "validate-real" / scenario.name
    n_i = sum(t.interactive for t in tasks)
    header = [
        f"- scenario `{scenario.name}` ({Path(args.scenario).name}), seed {seed}: {len(tasks)} requests "
        f"({n_i} interactive, {len(tasks) - n_i} batch), arrivals over {tasks[-1].arrival_ms / 1000:.0f} s",
        f"- time scale: arrivals x {args.time_scale:g}" + (f", tasks arriving before {args.until_ms:g} ms"
                                                            if args.until_ms else "") + " (the same for both sides)",
        f"- server: {args.url}; {args.repeats} measured run(s) per policy; simulated with "
        + (f"the calibration {args.calibration}" if args.calibration else "the scenario's backend")
        + f" ({_step_text(scenario.backend)})",
    ]
    print("\n".join(header))
    identity = {"scenario": scenario.name, "seed": seed, "time_scale": args.time_scale, "until_ms": args.until_ms,
                "tasks": len(tasks), "options": {p: o.to_json_dict() for p, o in options.items()}}

    labels = {p: p for p in policies} | {f"{p} (article JS)": p for p in node_policies}
    predicted, measured = {}, {label: [] for label in labels}
    decode_sim, decode_real = {}, {label: [] for label in labels}
    cpu = {label: [] for label in labels}
    at_load = {label: [] for label in labels}
    by_window = {label: [] for label in labels}
    probe = CpuProbe(loopback_url(args.url)[1])
    for p in policies:
        sim = simulate(scenario, options[p], tasks, seed)
        atomic_write_text(out / "simulated" / f"{p}.csv", csv_text(sim, RECORD_COLUMNS))
        predicted[p] = metrics(sim)
        decode_sim[p] = {k: decode_ms_per_token(sim, k) for k in ("interactive", "batch")}
        atomic_write_text(out / "options" / f"{p}.json", json.dumps(options[p].to_json_dict(), indent=1) + "\n")
    if node_policies:
        atomic_write_text(out / "tasks.csv", csv_text(
            [{"id": t.id, "kind": t.kind, "arrival_ms": repr(t.arrival_ms), "prompt_tokens": t.prompt_tokens,
              "output_tokens": t.output_tokens} for t in tasks],
            ("id", "kind", "arrival_ms", "prompt_tokens", "output_tokens")))
    for k in range(args.repeats):
        for label, p in labels.items():
            node = label != p
            path = out / "measured" / f"{p}{'-node' if node else ''}-run{k + 1}.csv"
            meta = path.with_suffix(".json")
            saved = json.loads(meta.read_text()) if path.exists() and meta.exists() else {}
            if saved.get("identity") == identity:
                recs = read_records(path)
                use = CpuUse.from_dict(saved["cpu"]) if saved.get("cpu") else None
                print(f"  {label} run {k + 1}: kept from {path}")
            else:
                print(f"  {label} run {k + 1}: measuring ...", flush=True)
                probe.start()
                if node:
                    recs = _run_node(args.url, out / "options" / f"{p}.json", out / "tasks.csv", path, args.max_seconds)
                else:
                    try:
                        recs = asyncio.run(drive(args.url, options[p], tasks, args.max_seconds,
                                                 progress=lambda s: print(s, flush=True)))
                    except (OSError, ServerError) as exc:
                        raise InputError(None, args.url, f"the server failed: {exc}") from None
                    atomic_write_text(path, csv_text(recs, RECORD_COLUMNS))
                use = probe.stop()
                atomic_write_text(meta, json.dumps({"identity": identity, "cpu": use.to_dict() if use else None},
                                                   indent=1))
            cpu[label].append(use)
            m = metrics(recs)
            measured[label].append(m)
            decode_real[label].append({k: decode_ms_per_token(recs, k) for k in ("interactive", "batch")})
            at_load[label].append({k: step_at_measured_load(recs, scenario.backend, k) for k in ("interactive", "batch")})
            by_window[label].append(step_error_by_window(recs, scenario.backend, "batch"))
            print(f"    interactive P95 {m['interactive']['p95_ms']:.0f} ms (simulated {predicted[p]['interactive']['p95_ms']:.0f}), "
                  f"batch {m['batch']['throughput_tok_s']:.0f} tok/s (simulated {predicted[p]['batch']['throughput_tok_s']:.0f}); "
                  f"{m['interactive']['completed'] + m['batch']['completed']}/{len(recs)} completed", flush=True)
    rows = cmp.compare({label: predicted[p] for label, p in labels.items()}, measured)
    v = cmp.verdict(rows)
    atomic_write_text(out / "summary.csv", csv_text(rows, cmp.ROW_COLUMNS))
    atomic_write_text(out / "verdict.json", json.dumps({"header": header, **v}, indent=1) + "\n")
    report = cmp.markdown(rows, v, header)
    report += ("\n## Where the difference comes from: the decode step each request saw\n\n"
               "Median over requests of (end - first token) / (output tokens - 1), in ms: the engine's step time "
               "as the step model predicts it, without queueing or prefill. 'simulated' is the simulation's own "
               "run (its scheduling, its sequences in flight); 'model at the measured load' evaluates the step "
               "model at the sequences actually in flight and the prefill tokens actually admitted during each "
               "measured request's decode, so it checks the step model alone, run by run.\n\n"
               "| policy | class | simulated | measured (per run) | error | sequences in flight (per run) "
               "| model at the measured load (per run) | error of the model at the measured load (per run) |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|\n")
    for label, p in labels.items():
        for k in ("interactive", "batch"):
            runs = [d[k] for d in decode_real[label]]
            mean = sum(runs) / len(runs)
            checks = [d[k] for d in at_load[label]]
            report += (f"| {label} | {k} | {decode_sim[p][k]:.1f} | {', '.join(f'{x:.1f}' for x in runs)} | "
                       f"{(decode_sim[p][k] - mean) / mean:+.1%} | {', '.join(f'{n:.1f}' for n, _, _ in checks)} | "
                       f"{', '.join(f'{m:.1f}' for _, _, m in checks)} | "
                       f"{', '.join(f'{(m - x) / x:+.1%}' for _, x, m in checks)} |\n")
    report += _window_section(by_window)
    report += _cpu_section(cpu, at_load)
    if not args.no_figures:
        cmp.figure(rows, out / "figures")
        report += "\n![predicted vs measured](figures/validate-real.png)\n"
    atomic_write_text(out / "report.md", report)
    print()
    print(report)
    print(f"written: {out}/summary.csv, verdict.json, report.md")
    return 0


def _window_section(by_window) -> str:
    """The model-at-load error of batch requests by 10-s window of each run: the engine's speed through time."""
    windows = sorted({k for runs in by_window.values() for w in runs for k in w})
    if not windows:
        return ""
    text = ("\n## The engine's speed through each run\n\n"
            "Batch requests grouped by the 10-second window in which their decode began (windows with at least 5); "
            "per window, the median over its requests of (model at the measured load / measured decode step - 1). "
            "The model already accounts for the sequences in flight and the prefill admitted in each window, so "
            "a change from one window to the next, at the same policy and load, is a change of the engine's own "
            "speed, which the step model has no variable for.\n\n"
            "| policy | run | " + " | ".join(f"{10 * k}-{10 * (k + 1)} s" for k in windows)
            + " | range within the run |\n|---|---:|" + "---:|" * (len(windows) + 1) + "\n")
    for label, runs in by_window.items():
        for n, w in enumerate(runs, start=1):
            span = f"{max(w.values()) - min(w.values()):.1%}" if len(w) > 1 else ""
            text += (f"| {label} | {n} | " + " | ".join(f"{w[k]:+.1%}" if k in w else "" for k in windows)
                     + f" | {span} |\n")
    return text


def _cpu_section(cpu, at_load) -> str:
    """Per measured run: how busy the machine's two kinds of work were, beside the decode-step error."""
    uses = [u for runs in cpu.values() for u in runs if u]
    if not uses:
        return "\n(The server's processes were not visible: no CPU measurement.)\n"
    names = sorted({n for u in uses for n, (r, w) in u.server.items() if r + w >= 0.01})  # idle helpers left out
    text = ("\n## CPU on this machine during each run\n\n"
            "Cores' worth of CPU time per wall second (simlab.realcheck.hostcpu, from Linux schedstat): each server "
            "process running, and waiting on a run queue (runnable, no core free); this client (the load "
            "generator and the scheduler); the whole machine. An engine's processes may poll while they wait for "
            "each other, so 'running' includes polling. The step model has no term for run-queue wait: "
            "where the server waited more than during the load test that calibrated it (loadtest.csv's "
            "server_waiting_cores), the decode step is slower than the model at the measured load.\n\n"
            "| policy | run | " + " | ".join(f"{n} running + waiting" for n in names)
            + " | client | machine | model at the measured load: error (batch) |\n|---|---:|" + "---:|" * (len(names) + 3) + "\n")
    for label, runs in cpu.items():
        for k, use in enumerate(runs):
            if use is None:
                continue
            cells = [f"{use.server[n][0]:.2f} + {use.server[n][1]:.2f}" if n in use.server else "" for n in names]
            _, step, model = at_load[label][k]["batch"]
            err = (model - step) / step
            text += (f"| {label} | {k + 1} | " + " | ".join(cells)
                     + f" | {use.client_cores:.2f} | {use.machine_cores:.2f} | {err:+.1%} |\n")
    return text


def _with_backend(scenario, path):
    """The scenario with [backend] taken from a `simlab loadtest` snippet (its profile path made absolute)."""
    import tomllib

    from pydantic import ValidationError

    from simlab.errors import read_text
    from simlab.scenario import Backend

    try:
        data = tomllib.loads(read_text(path, "calibration snippet", "a [backend] TOML snippet"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, None, f"not valid TOML ({exc})") from None
    if "backend" not in data:
        raise InputError(path, None, "no [backend] table (expected the backend.toml that `simlab loadtest` writes)")
    step = data["backend"].get("step") or {}
    if step.get("profile"):
        step["profile"] = str((path.parent / step["profile"]).resolve())
    if "kind" not in data["backend"]:  # a bare [backend.step] (calibrate-gpu's step.toml): the scenario's backend with it
        data["backend"] = scenario.backend.model_dump(exclude_none=True) | data["backend"]
    try:
        backend = Backend.model_validate(data["backend"])
    except ValidationError as exc:
        raise InputError(path, "backend", str(exc.errors()[0]["msg"])) from None
    return scenario.model_copy(update={"backend": backend})


def _run_node(url, options_path, tasks_path, out_path, max_seconds) -> list[dict]:
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        raise InputError(None, "--node-policies", "needs Node.js 20+ (node) on PATH")
    script = Path(__file__).resolve().parents[2] / "tests" / "conformance" / "real_server.js"
    if not script.exists():
        raise InputError(None, "--node-policies", f"the Node driver is not here: {script} (run from a source checkout)")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([node, str(script), url, str(options_path), str(tasks_path), str(out_path), str(max_seconds)],
                          capture_output=True, text=True, timeout=max_seconds + 120)
    if done.returncode != 0:
        raise InputError(None, "--node-policies", f"the Node driver failed: {done.stderr.strip()[-500:]}")
    from simlab.realcheck.drive import read_records

    return read_records(out_path)


def _step_text(backend) -> str:
    st = backend.step
    text = (f"{backend.max_num_seqs} sequences, step {st.base_ms:g} ms + {st.per_seq_ms:g} ms/sequence + "
            f"{st.per_token_ms:g} ms/prefill token"
            + (f" + {st.admit_ms:g} ms/admitted request" if st.admit_ms else "")
            + f", front end {st.request_ms:g} ms/request")
    return text + (f", decode step from profile {st.profile}" if st.profile else "")
