"""Speed and memory of simlab, as ratios against floors measured in the same run.

In-process: each policy's simulation of `bench-1h` against `floor.lean_floor` on the same arrivals and
service times (the workload is drawn once, outside the timing, for both). Whole process: `simlab run` with
its default outputs against `floor.py` as a process (read the TOML, draw, simulate). Also: peak memory,
simulated requests per second, continuous batching on a long eval-sweep-like workload and the KV-cache /
engine-priority backend against it on the same workload, a 50-trial x 4-seed `simlab tune` study, and
`simlab replay` of 100,000 tasks. Every timing is repeated; the table gives the
median and the spread (min-max). Results go to benchmarks/results.csv and .md (committed: regressions show
in review). Also `simlab decide` on every bundled scenario with default settings, racing and exhaustive
(benchmarks/decide.md: wall and CPU seconds, simulations saved, whether the answers agree). Never two benchmarks
at once: `make bench` runs it under `flock` on $SIMLAB_BENCH_LOCK (default: simlab-bench.lock in the temporary
folder).

    make bench      # or: .venv/bin/python benchmarks/run.py [--repeat N] [--quick] [--policies-only] [--out-prefix P]
    .venv/bin/python benchmarks/run.py --kv-only       # only the KV backend's rows, to benchmarks/results-kv.*
    .venv/bin/python benchmarks/run.py --decide-only   # only decide, racing against exhaustive (benchmarks/decide.*)
    .venv/bin/python benchmarks/run.py --decide-only --decide-modes racing,trials-half   # two tuning budgets
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
from floor import lean_floor, resource_floor  # noqa: E402

from simlab.policies import options_from_dict  # noqa: E402
from simlab.policies.window import SlidingWindow  # noqa: E402
from simlab.replay import replay  # noqa: E402
from simlab.scenario import load_scenario  # noqa: E402
from simlab.traces import read_trace  # noqa: E402
from simlab.world import workloads  # noqa: E402
from simlab.world.engine import Engine  # noqa: E402

POLICIES = ("unscheduled", "fifo", "priority", "static", "adaptive", "holdback", "aimd", "gradient2")
SIMLAB = str(Path(sys.executable).parent / "simlab")
COLUMNS = ("metric", "unit", "median", "min", "max", "n", "floor", "ratio", "target", "meets")


def timed(run, repeat: int, prepare=None) -> list[float]:
    """CPU seconds of `run(prepare())` per repeat; `prepare` is not timed.

    CPU time, not wall time: other agents load the shared cores, which stretches wall time by 1-3x at
    random, while the work done (and so the CPU time) barely moves.
    """
    times = []
    for _ in range(repeat):
        arg = prepare() if prepare else None
        gc.collect()
        t0 = time.process_time()
        run(arg)
        times.append(time.process_time() - t0)
    return times


def traced_peak(fn) -> int:
    """Peak bytes allocated by Python and numpy while `fn` runs (tracemalloc; slower, so measured apart)."""
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def process(cmd: list[str], repeat: int, before=None) -> tuple[list[float], list[float], list[float]]:
    """CPU seconds (user + system), wall seconds and peak RSS (MiB) of a whole process, measured by a
    wrapper whose only child it is. `before()` runs untimed before each repeat."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); dt = time.perf_counter() - t; "
             "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(r.returncode, u.ru_utime + u.ru_stime, dt, u.ru_maxrss / 1024)")
    cpu, wall, mems = [], [], []
    for _ in range(repeat):
        if before:
            before()
        out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, cwd=ROOT, check=True)
        rc, c, w, mem = out.stdout.split()
        if rc != "0":
            raise SystemExit(f"{' '.join(cmd)} exited with {rc}")
        cpu.append(float(c))
        wall.append(float(w))
        mems.append(float(mem))
    return cpu, wall, mems


def engine_input(scenario, seed: int = 1):
    """(prepare, run) for the engine on a pre-drawn workload, whatever the engine's input type."""
    if hasattr(workloads, "open_loop_columns"):  # columnar: immutable arrays, shared by every repeat
        cols = workloads.open_loop_columns(scenario, seed)
        return (lambda: cols), cols
    tasks = workloads.open_loop_tasks(scenario, seed)  # Task objects are mutated by a run: copy each time
    return (lambda: [_copy(t) for t in tasks]), tasks


def run_engine(scenario, options, workload, seed: int = 1):
    if hasattr(workloads, "open_loop_columns"):
        return Engine(scenario, options, seed, workload=workload).run()
    return Engine(scenario, options, seed, tasks=workload).run()


def floor_arrays(scenario, seed: int = 1):
    if hasattr(workloads, "open_loop_columns"):
        c = workloads.open_loop_columns(scenario, seed)
        return c.arrival_ms.tolist(), c.service_ms.tolist(), c.interactive.tolist()
    tasks = workloads.open_loop_tasks(scenario, seed)
    return [t.arrival_ms for t in tasks], [t.service_ms for t in tasks], [t.interactive for t in tasks]


def _copy(t):
    from simlab.policies import Task

    c = Task(t.id, t.kind, t.arrival_ms, t.service_ms)
    c.source, c.prompt_tokens, c.output_tokens = t.source, t.prompt_tokens, t.output_tokens
    return c


class Table:
    def __init__(self):
        self.rows: list[dict] = []

    def add(self, metric, unit, values, floor=None, target=None, higher_is_better=False):
        med = statistics.median(values)
        ratio = med / floor if floor else None
        meets = "" if target is None or ratio is None else ("yes" if (ratio >= target if higher_is_better else ratio <= target) else "NO")
        row = {"metric": metric, "unit": unit, "median": med, "min": min(values), "max": max(values), "n": len(values),
               "floor": floor, "ratio": ratio, "target": target, "meets": meets}
        self.rows.append(row)
        spread = f"{min(values):.3g}-{max(values):.3g}"
        extra = f"  {ratio:5.2f}x" if ratio is not None else ""
        extra += f" (target <= {target}x: {meets})" if target is not None else ""
        print(f"  {metric:<44} {med:10.4g} {unit:<6} [{spread}]{extra}", flush=True)

    def write(self, prefix: Path, header: str) -> None:
        with open(f"{prefix}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if r[k] is None else (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k])) for k in COLUMNS})
        lines = [header, "", "| metric | median | spread (min-max) | n | ratio to floor | target |", "|---|---:|---:|---:|---:|---|"]
        for r in self.rows:
            ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
            target = f"<= {r['target']}x: {r['meets']}" if r["target"] is not None else ""
            lines.append(f"| {r['metric']} | {r['median']:.4g} {r['unit']} | {r['min']:.4g}-{r['max']:.4g} | {r['n']} | {ratio} | {target} |")
        Path(f"{prefix}.md").write_text("\n".join(lines) + "\n")


def kv_backend(table: Table, rep: int) -> None:
    """The KV-cache / engine-scheduling backend (world/backends/kv_batching.py) against today's continuous
    batching: the same workload (eval-sweep-long-kv.toml is eval-sweep-long.toml with a KV cache and vLLM's
    priority scheduling), CPU per simulated request, rounds interleaved. adaptive, as the continuous-batching
    row above, caps what reaches the engine; unscheduled sends the whole sweep to it, where chat preempts
    batch requests and each preemption is one more admission to simulate."""
    plain = load_scenario(ROOT / "benchmarks" / "eval-sweep-long.toml")
    kv = load_scenario(ROOT / "benchmarks" / "eval-sweep-long-kv.toml")
    for policy, target in (("adaptive", 1.5), ("unscheduled", None)):
        per_request = {"plain": [], "kv": []}
        for _ in range(rep):
            for key, scenario in (("plain", plain), ("kv", kv)):
                prepare, w0 = engine_input(scenario)
                seconds = timed(lambda w, s=scenario: run_engine(s, s.options(policy), w), 1, prepare)
                per_request[key] += [t / len(w0) * 1e6 for t in seconds]
        stats = run_engine(kv, kv.options(policy), engine_input(kv)[0]()).backend_stats
        base = statistics.median(per_request["plain"])
        table.add(f"continuous batching, eval-sweep-long, {policy}: per request", "cpu us", per_request["plain"])
        table.add(f"KV cache + priority, eval-sweep-long-kv, {policy} ({stats['preemptions']:,} preemptions): per request",
                  "cpu us", per_request["kv"], base, target=target)
DECIDE_MODES = ("racing", "exhaustive", "replications2", "trials-half", "trials-double", "trials-quad")  # what --decide-modes may name


def decide_args(mode: str, path: Path) -> list[str]:
    """The flags of one mode: racing (default settings), every arm on every unit, racing at a second budget
    (twice the selection seeds per held-out condition, or half, twice or four times the tuning trials per family:
    four times is the budget a run at twice the trials asks for when its answer still hangs on the trials)."""
    scenario = load_scenario(path)
    return {"racing": [], "exhaustive": ["--exhaustive"],
            "replications2": ["--replications", str(2 * scenario.tune.holdout_seeds)],
            "trials-half": ["--trials", str(max(1, scenario.decision.trials // 2))],
            "trials-double": ["--trials", str(2 * scenario.decision.trials)],
            "trials-quad": ["--trials", str(4 * scenario.decision.trials)]}[mode]


def compared_with(mode: str, row: dict) -> str | None:
    """The run a mode's answer is set against: the next smaller tuning budget for four times the trials (does
    following a run's `trials_needed` keep its answer?), the default run for every other mode."""
    base = "trials-double" if mode == "trials-quad" and "trials-double" in row else "racing"
    return None if mode == base or base not in row else base


def agree(a: dict, b: dict) -> str:
    """Two decide results: the same answer, overlapping tie sets, or different. Arms are compared by their
    options, not their labels: two searches' "holdback-tuned" are different arms when their options differ."""
    if a["choice_options"] == b["choice_options"]:
        return "same answer"
    if a["choice"] == b["choice"]:
        return "same label, other options; " + ("tie sets overlap" if set(a["tie_keys"]) & set(b["tie_keys"])
                                                else "tie sets DIFFERENT")
    return "tie sets overlap" if set(a["tie_keys"]) & set(b["tie_keys"]) else "DIFFERENT"


REFERENCE = ROOT / "scenarios" / "eval-sweep.toml"  # one simulation of its static cap: the machine's speed now


def reference_ms(repeat: int = 5) -> list[float]:
    """CPU milliseconds of one simulation of eval-sweep's static cap (seed 1), `repeat` times: how fast the
    machine runs at this moment. The same cores run up to twice as slow in some hours as in others, so a table of
    decide's wall seconds says beside each run how fast the machine was. Context, not a divisor: the parts of a
    decide run (other scenarios' simulations, the search, the storage, the figures) do not all slow down alike."""
    scenario = load_scenario(REFERENCE)
    prepare, _ = engine_input(scenario)
    options = scenario.options("static")
    return [1000.0 * t for t in timed(lambda w: run_engine(scenario, options, w), repeat, prepare)]


def decide_table(prefix: Path, scenarios: list[Path], workers: int | None = None, modes=("racing", "exhaustive",
                                                                                       "replications2")) -> None:
    """`simlab decide` on every scenario in each mode (`decide_args`), with decide's own default --workers (every
    core it may use) unless `workers` is given: wall and CPU seconds of the whole process,
    simulations run, the answer and its tie set; whether racing agrees with the exhaustive run and with the
    second budgets (the same answer, or overlapping tie sets)."""
    import json

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in scenarios:
            row = {"scenario": path.stem}
            for mode in modes:
                ref = sorted(reference_ms())
                ref_ms = statistics.median(ref)
                out = f"{tmp}/{path.stem}-{mode}"
                probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
                         "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
                         "dt = time.perf_counter() - t; u = resource.getrusage(resource.RUSAGE_CHILDREN); "
                         "print(r.returncode, u.ru_utime + u.ru_stime, dt)")
                cmd = [SIMLAB, "decide", str(path), *(["--workers", str(workers)] if workers else []), "--quiet",
                       "--out", out, *decide_args(mode, path)]
                res = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, cwd=ROOT,
                                     check=True).stdout.split()
                rec = json.loads(Path(out, "result.json").read_text())["record"]
                tied = [a for a in rec["selection"] if a["tie"] in ("leader", "equivalent", "undecided")]
                ties = [a["label"] for a in tied]
                key = lambda a: json.dumps(a["options"], sort_keys=True)  # noqa: E731
                chosen = [key(a) for a in rec["selection"] if a["label"] == rec["choice"]]
                row[mode] = {"wall_s": float(res[2]), "cpu_s": float(res[1]), "runs": rec["runs"],
                             "runs_exhaustive": rec["runs_exhaustive"], "runs_shared": rec.get("runs_shared", 0), "choice": rec["choice"] or "none",
                             "tie": " ".join(ties), "settled": rec["settled"], "exit": int(res[0]),
                             "flags": " ".join(decide_args(mode, path)),
                             # the tuning budgets judged: decide doubles the searches while the answer hangs on them
                             "trials": "→".join(str(x["trials"]) for x in rec.get("budget_steps", [])) or "–",
                             "tie_keys": [key(a) for a in tied], "choice_options": chosen[0] if chosen else None,
                             "reference_ms": ref_ms, "reference_ms_min": ref[0],
                             "reference_ms_max": ref[-1]}
                print(f"  decide {path.stem} {mode}: {float(res[2]):.1f} s wall, {float(res[1]):.1f} cpu s, "
                      f"{rec['runs']} runs, choice {rec['choice']}, exit {res[0]}; reference "
                      f"{ref_ms:.0f} ms", flush=True)
            rows.append(row)
    flat = [{"scenario": r["scenario"], **{f"{m}_{k}": v for m in modes for k, v in r[m].items()
                                             if k not in ("tie_keys", "choice_options")}} for r in rows]
    with open(f"{prefix}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(flat[0]))
        w.writeheader()
        w.writerows(flat)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines = [f"# simlab decide on every bundled scenario\n\nCommit {commit}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             + (f"--workers {workers}. " if workers else f"decide's default --workers ({len(os.sched_getaffinity(0))}: "
                "the cores it may use). ")
             + "Wall and CPU seconds of the whole process (children included); the tie set is the leader, the arms "
             "equivalent to it and the undecided ones on the selection units. The reference: CPU milliseconds of "
             f"one simulation of {REFERENCE.stem}'s static cap, median (min-max) of 5, measured just before the run "
             "(how fast the machine was then). Reproduce: "
             f"`.venv/bin/python benchmarks/run.py --decide-only --decide-modes {','.join(modes)}`.", "",
             "| scenario | mode | flags | trials judged | wall s | reference ms | CPU s | runs | results from a "
             "twin's run | runs of every arm on every unit | choice | settled | exit | agrees with |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for r in rows:
        for m in modes:
            x = r[m]
            base = compared_with(m, r)
            same = "–" if base is None else f"{agree(r[base], x)} ({base})"
            lines.append(f"| {r['scenario']} | {m} | {x['flags'] or 'default'} | {x['trials']} | {x['wall_s']:.1f} | "
                         f"{x['reference_ms']:.0f} ({x['reference_ms_min']:.0f}-{x['reference_ms_max']:.0f}) | "
                         f"{x['cpu_s']:.1f} | "
                         f"{x['runs']} | {x['runs_shared']} | {x['runs_exhaustive']} | {x['choice']} | {x['settled']} | {x['exit']} | {same} |")
    lines += ["", "Tie sets:", ""] + [f"- {r['scenario']} {m}: {r[m]['tie'] or '(none)'}" for r in rows for m in modes]
    Path(f"{prefix}.md").write_text("\n".join(lines) + "\n")
    print(f"written {prefix}.csv and .md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "bench-1h.toml"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="skip the study, the continuous-batching runs and decide")
    parser.add_argument("--policies-only", action="store_true",
                        help="only the in-process simulation of every policy against the lean floor")
    parser.add_argument("--kv-only", action="store_true",
                        help="only the KV backend against continuous batching (default output benchmarks/results-kv)")
    parser.add_argument("--decide-only", action="store_true",
                        help="only `simlab decide` on every bundled scenario (benchmarks/decide.*)")
    parser.add_argument("--decide-modes", default="racing,exhaustive,replications2",
                        help=f"comma-separated, of {', '.join(DECIDE_MODES)}")
    parser.add_argument("--decide-scenarios", default=None, help="comma-separated scenario names (default: all)")
    parser.add_argument("--out-prefix", default=None)
    args = parser.parse_args()
    rep = args.repeat
    table = Table()
    bundled = sorted((ROOT / "scenarios").glob("*.toml"))
    if args.decide_only:
        modes = [m for m in args.decide_modes.split(",") if m]
        bad = [m for m in modes if m not in DECIDE_MODES]
        if bad or not modes:
            parser.error(f"--decide-modes: {', '.join(bad) or 'none given'}; expected some of {', '.join(DECIDE_MODES)}")
        chosen = bundled
        if args.decide_scenarios:
            names = args.decide_scenarios.split(",")
            chosen = [p for p in bundled if p.stem in names]
            missing = sorted(set(names) - {p.stem for p in chosen})
            if missing:
                parser.error(f"--decide-scenarios: no bundled scenario {', '.join(missing)}")
        decide_table(Path(args.out_prefix) if args.out_prefix else ROOT / "benchmarks" / "decide", chosen, modes=modes)
        return 0
    if args.kv_only:
        print(f"KV cache backend against continuous batching; {rep} repeats; median [min-max]", flush=True)
        kv_backend(table, rep)
        prefix = Path(args.out_prefix or ROOT / "benchmarks" / "results-kv")
        table.write(prefix, _header("make bench (KV backend rows only: benchmarks/run.py --kv-only)",
                                    "eval-sweep-long: 22,859 requests, 64 sequences."))
        print(f"written {prefix}.csv and .md")
        return 0

    scenario = load_scenario(args.scenario)
    slots = scenario.backend.slots
    arrival, service, interactive = floor_arrays(scenario)
    n = len(arrival)
    print(f"{scenario.name}: {n:,} requests, {slots} slots; {rep} repeats; median [min-max]", flush=True)

    # --- in process: the floor and every policy once per round, so each round sees similar machine load
    runs = {"floor": [], "resource": [], **{p: [] for p in POLICIES}}
    for _ in range(rep):
        runs["floor"] += timed(lambda _: lean_floor(arrival, service, interactive, slots), 1)
        runs["resource"] += timed(lambda _: resource_floor(arrival, service, slots), 1)
        for policy in POLICIES:
            prepare, _ = engine_input(scenario)
            runs[policy] += timed(lambda w, o=scenario.options(policy): run_engine(scenario, o, w), 1, prepare)
    floor_s = statistics.median(runs["floor"])
    table.add("floor: lean SimPy model", "cpu s", runs["floor"])
    table.add("floor: SimPy Resource model", "cpu s", runs["resource"], floor_s)
    for policy in POLICIES:
        table.add(f"engine {policy}: simulation", "cpu s", runs[policy], floor_s, target=2.0)
        table.add(f"engine {policy}: simulated requests/s", "req/s", [n / t for t in runs[policy]])
    if args.policies_only:
        return write(table, args, scenario, n, slots)
    # adaptive's share that the reference's rule itself asks for: every interactive completion goes into
    # the sliding window (append, sorted insert, trim), whatever the policy then decides. Timed alone, on
    # the completions of the adaptive run, as a lower bound on what adaptive costs over static.
    done = run_engine(scenario, scenario.options("adaptive"), engine_input(scenario)[0]()).table
    ok = done["interactive"] & ~np.isnan(done["end_ms"])
    order = np.argsort(done["end_ms"][ok], kind="stable")
    ends, lats = done["end_ms"][ok][order].tolist(), (done["end_ms"][ok] - done["arrival_ms"][ok])[order].tolist()
    window_ms = scenario.options("adaptive").window_ms

    def feed(_):
        w = SlidingWindow(window_ms)
        add = w.add
        for t, lat in zip(ends, lats):
            add(t, lat)

    table.add(f"adaptive: window bookkeeping alone ({len(ends):,} adds)", "cpu s", timed(feed, rep), floor_s)
    table.add("workload: draw bench-1h", "cpu s", timed(lambda _: engine_input(scenario), rep))
    table.add("floor: lean model peak (traced)", "MiB", [traced_peak(lambda: lean_floor(arrival, service, interactive, slots)) / 2**20])
    for policy in ("unscheduled", "adaptive"):
        w = engine_input(scenario)[0]()
        mem = traced_peak(lambda o=scenario.options(policy), w=w: run_engine(scenario, o, w)) / 2**20
        table.add(f"engine {policy}: peak (traced, workload drawn before)", "MiB", [mem])

    # --- whole process ------------------------------------------------------------------------------
    with tempfile.TemporaryDirectory() as tmp:
        floor_c, floor_w, floor_m = process([sys.executable, str(ROOT / "benchmarks" / "floor.py"), args.scenario], rep)
        table.add("process floor: floor.py bench-1h", "cpu s", floor_c)
        table.add("process floor: wall", "s", floor_w)
        table.add("process floor: peak RSS", "MiB", floor_m)
        cmd = [SIMLAB, "run", args.scenario, "--policy", "adaptive", "--quiet", "--out", f"{tmp}/run"]
        clear = lambda: shutil.rmtree(f"{tmp}/run", ignore_errors=True)  # noqa: E731 (a rerun would be a cache hit)
        c, w, m = process(cmd, rep, before=clear)
        table.add("simlab run bench-1h --policy adaptive", "cpu s", c, statistics.median(floor_c), target=3.0)
        table.add("simlab run: wall", "s", w, statistics.median(floor_w))
        table.add("simlab run: peak RSS", "MiB", m, statistics.median(floor_m))
        table.add("simlab run: output size", "MB", [sum(p.stat().st_size for p in Path(f"{tmp}/run").rglob("*") if p.is_file()) / 1e6])

        if not args.quick:
            # memory with summaries and time series only, on a day at 50 RPS (4.3 million requests)
            day = ["run", str(ROOT / "benchmarks" / "day-50rps.toml"), "--policy", "adaptive", "--quiet", "--tasks", "none"]
            c, w, m = process([SIMLAB, *day, "--out", f"{tmp}/day"], 1)
            table.add("simlab run day-50rps (4.3M req) --tasks none", "cpu s", c)
            table.add("simlab run day-50rps --tasks none: peak RSS", "MiB", m)
            # continuous batching: an eval sweep six times over, an hour long
            cb = load_scenario(ROOT / "benchmarks" / "eval-sweep-long.toml")
            options = cb.options("adaptive")
            prepare, w0 = engine_input(cb)
            cb_n = len(w0)
            times = timed(lambda w: run_engine(cb, options, w), max(1, rep // 2), prepare)
            table.add(f"continuous-batching eval-sweep-long ({cb_n:,} req): simulation", "cpu s", times)
            table.add("continuous-batching: simulated requests/s", "req/s", [cb_n / x for x in times])
            kv_backend(table, max(1, rep // 2))

            # the study a user runs: 50 trials x 4 seeds, then the held-out validation and the report
            study = process([SIMLAB, "tune", str(ROOT / "scenarios" / "seed-article.toml"), "--trials", "50", "--quiet",
                             "--out", f"{tmp}/tune"], max(1, rep // 2), before=lambda: shutil.rmtree(f"{tmp}/tune", ignore_errors=True))
            table.add("simlab tune seed-article, 50 trials x 4 seeds", "cpu s", study[0])
            table.add("simlab tune: wall", "s", study[1])

    # replay of 100,000 tasks through adaptive
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        t, lines = 0.0, ["id,kind,arrival_ms,service_ms"]
        for i in range(100_000):
            batch = rng.random() < 0.2
            lines.append(f"{i},{'batch' if batch else 'interactive'},{t!r},{rng.expovariate(1 / (2000 if batch else 150))!r}")
            t += rng.expovariate(1 / 20)
        path.write_text("\n".join(lines) + "\n")
        options = options_from_dict({"maxConcurrency": 16, "batchMaxConcurrency": 12, "batchMinConcurrency": 1,
                                     "interactiveRpsThreshold": 40, "interactiveP95LatencyMs": 1000, "smoothingAlpha": 0.3})
        table.add("replay 100,000 tasks, adaptive (read + simulate)", "cpu s", timed(lambda _: replay(read_trace(path)[0], options), rep))

    return write(table, args, scenario, n, slots)


def write(table, args, scenario, n: int, slots: int) -> int:
    prefix = Path(args.out_prefix or ROOT / "benchmarks" / "results")
    part = " Only the in-process policy timings (--policies-only)." if args.policies_only else ""
    table.write(prefix, _header("make bench", f"{scenario.name}: {n:,} requests, {slots} slots.{part}"))
    print(f"written {prefix}.csv and .md")
    if not (args.quick or args.policies_only):
        decide_table(ROOT / "benchmarks" / "decide", sorted((ROOT / "scenarios").glob("*.toml")))
    return 0


def _header(title: str, what: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = " (uncommitted changes)" if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "simlab"], cwd=ROOT).returncode else ""
    return (f"# {title}\n\n{what} Commit {commit}{dirty}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores shared with other work "
            f"(run under flock, one benchmark at a time). Times are CPU seconds (wall time on a shared machine varies 1-3x); ratios: median over the floor's median measured in the same run, rounds interleaved.")


if __name__ == "__main__":
    raise SystemExit(main())
