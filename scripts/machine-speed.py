"""How steady is this machine's single-core speed? A fixed unit of pure-Python work (like the engine's host-side
step work), timed in thread CPU time (so waiting for a core does not count), again and again on each CPU.

On a dedicated machine the unit's time varies by a few percent. If it varies by tens of percent over seconds
to minutes with nothing else running, no model of a server on this machine can predict a single run more
closely than that: the README's sim-to-real section cites this script's output.

    .venv/bin/python scripts/machine-speed.py [--seconds 180] [--interval 0.5] [--parallel]

--parallel runs one process per CPU at once (both cores busy, as while an engine runs) and reports how
closely the CPUs' speeds move together. Run it on a quiet machine (e.g. under `flock -x "${TMPDIR:-/tmp}/simlab-bench.lock"`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def work_unit() -> int:
    s = 0
    for i in range(100_000):
        s += i * i % 7
    return s


def probe(seconds: float, interval: float, cpus: list[int]) -> None:
    """Print one JSON line per unit: wall time, CPU, thread CPU ms of the unit."""
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        cpu = cpus[k % len(cpus)]
        k += 1
        os.sched_setaffinity(0, {cpu})
        t0 = time.thread_time()
        work_unit()
        ms = (time.thread_time() - t0) * 1e3
        print(json.dumps({"t": time.monotonic(), "cpu": cpu, "ms": ms}), flush=True)
        time.sleep(interval)


def summary(samples: list[dict], window_s: float = 30.0) -> str:
    ms = [s["ms"] for s in samples]
    q = statistics.quantiles(ms, n=20)
    lines = [f"{len(ms)} units: median {statistics.median(ms):.2f} ms CPU, p5 {q[0]:.2f}, p95 {q[-1]:.2f}, "
             f"min {min(ms):.2f}, max {max(ms):.2f} (p95/p5 = {q[-1] / q[0]:.2f}x)"]
    for cpu in sorted({s["cpu"] for s in samples}):
        mine = [s["ms"] for s in samples if s["cpu"] == cpu]
        lines.append(f"  CPU {cpu}: median {statistics.median(mine):.2f} ms over {len(mine)} units")
    t0 = samples[0]["t"]
    windows: dict[int, list[float]] = {}
    for s in samples:
        windows.setdefault(int((s["t"] - t0) // window_s), []).append(s["ms"])
    meds = [statistics.median(v) for _, v in sorted(windows.items())]
    lines.append(f"  median per {window_s:g} s window: " + ", ".join(f"{m:.1f}" for m in meds)
                 + f" (max/min = {max(meds) / min(meds):.2f}x)")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds of sleep between units (default 0.5)")
    ap.add_argument("--parallel", action="store_true", help="one process per CPU at the same time")
    ap.add_argument("--probe-cpus", help=argparse.SUPPRESS)  # internal: run the probe loop on these CPUs
    args = ap.parse_args()
    if args.probe_cpus is not None:
        probe(args.seconds, args.interval, [int(c) for c in args.probe_cpus.split(",")])
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    groups = [[c] for c in cpus] if args.parallel else [cpus]
    procs = [subprocess.Popen([sys.executable, __file__, "--seconds", str(args.seconds), "--interval",
                               str(args.interval), "--probe-cpus", ",".join(map(str, g))],
                              stdout=subprocess.PIPE, text=True) for g in groups]
    runs = [[json.loads(line) for line in p.communicate()[0].splitlines()] for p in procs]
    print(f"fixed work unit (100,000 Python loop iterations), {args.seconds:g} s, "
          + ("one process per CPU at once" if args.parallel else "one process cycling over the CPUs"))
    print(summary(sorted((s for r in runs for s in r), key=lambda s: s["t"])))
    if args.parallel and len(runs) == 2:
        import numpy as np

        a, b = runs
        n = min(len(a), len(b))
        r = np.corrcoef([s["ms"] for s in a[:n]], [s["ms"] for s in b[:n]])[0, 1]
        print(f"  correlation of the two CPUs' unit times, sample by sample: {r:+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
