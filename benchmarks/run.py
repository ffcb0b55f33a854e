"""Speed and memory of the engine, as ratios against a bare SimPy model of the same traffic in the same run.

The bare model is what one would write by hand: a source process, one process per request, a
`simpy.Resource` for the slots. The engine does more (a real policy, recording, time series), and the
budget is a small multiple of the bare model. Also times `simlab replay` on 100,000 tasks.

    make bench                # or: .venv/bin/python benchmarks/run.py [--scenario S] [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import simpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simlab.policies import options_from_dict  # noqa: E402
from simlab.replay import replay  # noqa: E402
from simlab.scenario import load_scenario  # noqa: E402
from simlab.traces import read_trace  # noqa: E402
from simlab.world.engine import Engine  # noqa: E402
from simlab.world.workloads import open_loop_tasks  # noqa: E402


def bare_simpy(tasks, slots: int) -> int:
    """The same arrivals and service times through a hand-written SimPy model; returns completions."""
    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=slots)
    done = [0]

    def request(service):
        with gpu.request() as req:
            yield req
            yield env.timeout(service)
        done[0] += 1

    def source():
        for t in tasks:
            yield env.timeout(t.arrival_ms - env.now)
            env.process(request(t.service_ms))

    env.process(source())
    env.run()
    return done[0]


def timed(fn, repeat: int):
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_memory(fn) -> int:
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "bench-1h.toml"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench.json"))
    args = parser.parse_args()

    scenario = load_scenario(args.scenario)
    tasks = open_loop_tasks(scenario, 1)
    slots = scenario.backend.slots
    print(f"{scenario.name}: {len(tasks):,} tasks, {slots} slots; median of {args.repeat} runs", flush=True)

    report = {"scenario": scenario.name, "tasks": len(tasks)}
    base = timed(lambda: bare_simpy(tasks, slots), args.repeat)
    base_mem = peak_memory(lambda: bare_simpy(tasks, slots))
    report["bare_simpy_s"] = base
    print(f"  bare SimPy model           {base:7.2f} s   1.00x   peak {base_mem / 2**20:6.1f} MiB")
    for policy in ("unscheduled", "priority", "static", "adaptive"):
        options = scenario.options(policy)

        def run(options=options):
            Engine(scenario, options, 1, tasks=[_copy(t) for t in tasks]).run()

        t = timed(run, args.repeat)
        mem = peak_memory(run)
        report[f"engine_{policy}_s"] = t
        report[f"engine_{policy}_ratio"] = t / base
        report[f"engine_{policy}_mem_ratio"] = mem / base_mem
        print(f"  engine, {policy:<12}       {t:7.2f} s  {t / base:5.2f}x   peak {mem / 2**20:6.1f} MiB ({mem / base_mem:.2f}x)", flush=True)

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
        replay_s = timed(lambda: replay(read_trace(path)[0], options), args.repeat)
    report["replay_100k_adaptive_s"] = replay_s
    print(f"  replay, 100,000 tasks, adaptive (read + simulate): {replay_s:.2f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"written {args.out}")
    return 0


def _copy(t):
    from simlab.policies import Task

    c = Task(t.id, t.kind, t.arrival_ms, t.service_ms)
    c.source = t.source
    return c


if __name__ == "__main__":
    raise SystemExit(main())
