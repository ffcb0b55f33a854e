#!/usr/bin/env python3
"""The simulated `shared` limiter against N runtime processes sharing one RedisLimiter (issue 24's last point).

    python scripts/shared-limit-vs-redis.py [SCENARIO] --redis redis://127.0.0.1:6379/0 [--seeds 1 2 3]
                                            [--time-scale 0.5] [--out results.json]

SCENARIO (default docs/many-instances/shared-vs-redis.toml) must have open-loop arrivals only, a [gateway] with
limiter = "shared" and balancer = "round-robin", no crashes. For each seed:

(a) the simulation runs the scenario (`simlab.world.engine.Engine`);
(b) the same tasks (`simlab.world.workloads.open_loop_tasks`, same seed: same arrivals and service times) are dealt
    round-robin in arrival order to N processes (as the simulated balancer does), each a `simlab.runtime.Scheduler`
    with one `RedisLimiter` on the given Redis; each process submits its tasks at their arrival times and the work
    is `asyncio.sleep(service time)`, all times multiplied by --time-scale (0.5: twice as fast as the scenario),
    with the options' time fields scaled alike (windowMs, interactiveP95LatencyMs; interactiveRpsThreshold divided).
    Runtime times are divided by the scale before comparison.

Reported per seed and as mean and spread over seeds: interactive P95 end-to-end latency, mean queue wait per class
(start of service minus arrival; in the runtime minus the actual submit, so the harness's timer lateness is not
counted as waiting), the share of each class that waited more than 5 ms, batch throughput (batch tasks ended by
duration_ms, per second), the peak in flight across all processes (from their own start/end logs, one system-wide monotonic clock) against maxConcurrency, and
the runtime's own overheads, the measurements that explain a gap: the round trip of one limiter step, the
harness's timer lateness (actual minus intended submit), the overrun of the service sleeps, and the grant lag (see
`overheads`). A last column re-simulates the same tasks with every service time lengthened by the runtime's
measured median cost per task (sleep overrun + interactive grant lag, divided by the scale): if that closes the gap,
the gap is the runtime's per-grant overhead, not a difference in who the limiter lets through.

Bounded: each runtime run ends by duration * scale + a grace; a worker that overruns is killed and the run fails.
Load goes only to the loopback Redis given (checked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_SCENARIO = ROOT / "docs" / "many-instances" / "shared-vs-redis.toml"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
WAITED_MS = 5.0  # "waited": started more than this (scenario ms) after it arrived
START_DELAY_S = 10.0  # generous: a busy 2-core machine takes seconds to start a Python worker; every worker starts and connects first, then all begin at one agreed monotonic instant


# --- the runtime side: one gateway instance per process ------------------------------------------------------
async def instance(job: dict) -> dict:
    from simlab.policies import options_from_dict
    from simlab.runtime import Scheduler
    from simlab.runtime.shared import RedisLimiter

    scale = job["scale"]
    limiter = RedisLimiter(job["url"], key_prefix=job["prefix"], instance_id=f"i{job['number']}",
                           instances=job["instances"], lease_ms=job["lease_ms"], window=job["window"])
    sched = Scheduler(options_from_dict(job["options"]), limiter=limiter)
    await limiter.start()
    steps: list[float] = []
    real_call = limiter._call  # timed to measure the round trip of one limiter step (Lua script on Redis)

    async def timed_call(*args):
        t = time.perf_counter()
        try:
            return await real_call(*args)
        finally:
            steps.append((time.perf_counter() - t) * 1000)

    limiter._call = timed_call
    loop = asyncio.get_running_loop()
    t0 = job["t0"]  # time.monotonic() instant of scenario time 0 (the loop's clock is time.monotonic)
    # kind, submitted, started, ended (scenario ms from the monotonic clock), submit lateness (wall ms), service ms
    rows: list[list] = []
    slack_s = t0 - time.monotonic()  # < 0: this worker was not ready at time 0 (its first arrivals would bunch)
    await asyncio.sleep(max(0.0, slack_s))

    def scenario_ms(mono: float) -> float:
        return (mono - t0) * 1000 / scale

    async def work(service_ms: float, row: list) -> None:
        row[2] = scenario_ms(time.monotonic())
        await asyncio.sleep(service_ms * scale / 1000)
        row[3] = scenario_ms(time.monotonic())

    async def caller(kind: str, arrival_ms: float, service_ms: float) -> None:
        now = scenario_ms(time.monotonic())
        row = [kind, now, math.nan, math.nan, (now - arrival_ms) * scale, service_ms]
        rows.append(row)
        await sched.submit(kind, work, service_ms, row)

    jobs = []
    for kind, arrival_ms, service_ms in job["tasks"]:
        delay = t0 + arrival_ms * scale / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        jobs.append(loop.create_task(caller(kind, arrival_ms, service_ms)))
    await asyncio.gather(*jobs)
    state = limiter.state().as_dict()
    await limiter.close()
    return {"rows": rows, "steps_ms": steps, "limiter": state, "ready_slack_s": slack_s}


# --- the parent: draw, simulate, spawn, compare --------------------------------------------------------------
def fail(message: str) -> None:
    """Bad input or an unusable Redis: one line, exit code 2, no traceback."""
    print(f"shared-limit-vs-redis: {message}", file=sys.stderr)
    sys.exit(2)


def check_redis(url: str) -> None:
    """Loopback only, and answering (a bounded ping) before any process starts."""
    import redis

    from simlab.runtime.shared import redact

    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        fail(f"--redis {redact(url)}: not a URL ({exc})")
    if host not in LOOPBACK:
        fail(f"--redis {redact(url)}: load goes to loopback only (127.0.0.1, localhost, ::1), found host {host!r}")
    try:
        r = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        r.ping()
        r.close()
    except (redis.RedisError, ValueError) as exc:
        fail(f"--redis {redact(url)}: Redis does not answer ({exc})")


def quantile(values, q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q)) if len(values) else math.nan


def measures(kinds, arrival, start, end, duration_ms: float) -> dict:
    import numpy as np

    kinds, arrival, start, end = (np.asarray(x) for x in (kinds, arrival, start, end))
    inter, batch = kinds == "interactive", kinds == "batch"
    done = ~np.isnan(end)
    return {
        "interactive_p95_ms": quantile((end - arrival)[inter & done], 0.95),
        "interactive_wait_ms": float(np.mean((start - arrival)[inter & done])),
        "batch_wait_ms": float(np.mean((start - arrival)[batch & done])),
        "batch_per_s": float(np.sum(batch & done & (end <= duration_ms))) / (duration_ms / 1000),
        "peak_in_flight": peak(start[done], end[done]),
        "interactive_waited_pct": float(np.mean((start - arrival)[inter & done] > WAITED_MS)) * 100,
        "batch_waited_pct": float(np.mean((start - arrival)[batch & done] > WAITED_MS)) * 100,
        "tasks": int(len(kinds)),
        "completed": int(np.sum(done)),
    }


def peak(start, end) -> int:
    events = sorted([(float(e), -1) for e in end] + [(float(s), 1) for s in start])  # ends first at a tie
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def simulated(scenario, options, seed: int, extra_service_ms: float = 0.0) -> dict:
    """The simulation's measures; with `extra_service_ms`, of the same tasks each served that much longer."""
    from simlab.world.engine import Engine
    from simlab.world.workloads import open_loop_tasks

    tasks = None
    if extra_service_ms:
        tasks = open_loop_tasks(scenario, seed)
        for task in tasks:
            task.service_ms += extra_service_ms
    table = Engine(scenario, options, seed, tasks=tasks).run().table
    kinds = table.kinds()
    return measures(kinds, table["arrival_ms"], table["start_ms"], table["end_ms"], scenario.duration_ms)


def scaled_options(raw: dict, scale: float) -> dict:
    out = dict(raw)
    for key in ("windowMs", "interactiveP95LatencyMs"):
        if key in out:
            out[key] = out[key] * scale
    if "interactiveRpsThreshold" in out:
        out["interactiveRpsThreshold"] = out["interactiveRpsThreshold"] / scale
    return out


def on_redis(scenario, seed: int, url: str, scale: float, grace_s: float, window: str) -> dict:
    from simlab.world.workloads import open_loop_tasks

    gw = scenario.gateway
    n = gw.instances
    tasks = open_loop_tasks(scenario, seed)
    prefix = f"simlab:vs:{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic() + START_DELAY_S
    bound_s = START_DELAY_S + scenario.duration_ms * scale / 1000 + grace_s
    procs: list[subprocess.Popen] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(n):
                job = {"url": url, "prefix": prefix, "number": i, "instances": n, "lease_ms": gw.lease_ms,
                       "scale": scale, "t0": t0, "window": window,
                       "options": scaled_options(scenario.scheduler, scale),
                       "tasks": [[t.kind, t.arrival_ms, t.service_ms] for t in tasks[i::n]]}
                path = Path(tmp) / f"job{i}.json"
                path.write_text(json.dumps(job))
                procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(path)], cwd=ROOT,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            outs = []
            deadline = time.monotonic() + bound_s
            for p in procs:
                try:
                    out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    fail(f"a runtime worker ran past {bound_s:.0f} s and was stopped (machine too busy? "
                         "raise --grace-s)")
                if p.returncode != 0:
                    fail(f"a runtime worker failed (exit {p.returncode}): {err.strip()[-2000:]}")
                outs.append(json.loads(out.strip().splitlines()[-1]))
                if outs[-1]["ready_slack_s"] < 0:
                    fail(f"a runtime worker was ready {-outs[-1]['ready_slack_s']:.1f} s after the common start "
                         f"(machine too busy? raise START_DELAY_S, {START_DELAY_S} s)")
    finally:
        for p in procs:  # on any failure, the other workers this run started stop too
            if p.poll() is None:
                p.kill()
                p.wait(5)
        drop_keys(url, prefix)
    rows = [r for o in outs for r in o["rows"]]
    kinds, submitted, start, end, late, service = zip(*rows)
    result = measures(kinds, submitted, start, end, scenario.duration_ms)
    result.update(overheads(kinds, submitted, start, end, service, scale))
    steps = [s for o in outs for s in o["steps_ms"]]
    result.update(step_p50_ms=quantile(steps, 0.5), step_p99_ms=quantile(steps, 0.99), steps=len(steps),
                  late_p50_ms=quantile(late, 0.5), late_p99_ms=quantile(late, 0.99),
                  fallbacks=sum(o["limiter"].get("fallbacks", 0) for o in outs))
    return result


def overheads(kinds, submitted, start, end, service, scale: float) -> dict:
    """What the runtime adds that the simulation (shared_delay_ms = 0) does not have, in wall ms:
    - service overrun: how much longer `asyncio.sleep(service)` took than asked (timer granularity, a busy CPU);
    - grant lag: from the moment a task could have started (its submit, or the last end anywhere in all
      processes before its start, whichever is later) to its start: in the simulation every task starts at such
      an instant (lag 0); in the runtime it is the Redis round trip of the grant, plus the pub/sub hop and the next
      step when the freed slot was another instance's."""
    import numpy as np

    kinds, submitted, start, end, service = (np.asarray(x) for x in (kinds, submitted, start, end, service))
    ends = np.sort(end)
    before = np.searchsorted(ends, start, side="left") - 1  # the last end strictly before each start
    last_end = np.where(before >= 0, ends[np.maximum(before, 0)], -np.inf)
    lag = (start - np.maximum(submitted, last_end)) * scale
    over = ((end - start) - service) * scale
    inter = kinds == "interactive"
    return {"service_overrun_p50_ms": quantile(over, 0.5), "service_overrun_p99_ms": quantile(over, 0.99),
            "grant_lag_interactive_p50_ms": quantile(lag[inter], 0.5),
            "grant_lag_interactive_p95_ms": quantile(lag[inter], 0.95),
            "grant_lag_batch_p50_ms": quantile(lag[~inter], 0.5)}


def drop_keys(url: str, prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    keys = list(r.scan_iter(f"{prefix}:*", count=100))
    if keys:
        r.delete(*keys)
    r.close()


def spread(values) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    mean = statistics.fmean(values)
    return f"{mean:.1f} [{min(values):.1f}, {max(values):.1f}]"


def gap_pct(values, base) -> str:
    b = statistics.fmean(base)
    return f"{(statistics.fmean(values) / b - 1) * 100:+.1f}%" if b else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO))
    ap.add_argument("--redis", default=os.environ.get("SIMLAB_TEST_REDIS"),
                    help="Redis URL on loopback (default $SIMLAB_TEST_REDIS)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--time-scale", type=float, default=0.5, help="runtime wall time per scenario time")
    ap.add_argument("--grace-s", type=float, default=20.0, help="bound beyond the scaled duration")
    ap.add_argument("--window", choices=["local", "shared"], default="local",
                    help="the RedisLimiter's window: local (each instance counts its own completions, as the "
                         "simulated instances do; the default here) or shared (the runtime's default)")
    ap.add_argument("--out", help="write the per-seed numbers here as JSON")
    args = ap.parse_args()
    if not args.redis:
        fail("give --redis URL (or set SIMLAB_TEST_REDIS; scripts/ensure-redis.sh starts one)")
    if not 0.05 <= args.time_scale <= 10:
        fail(f"--time-scale must be within [0.05, 10] (found {args.time_scale})")
    if not 0 < args.grace_s <= 600:
        fail(f"--grace-s must be within (0, 600] (found {args.grace_s})")
    if not 1 <= len(args.seeds) <= 20:
        fail(f"--seeds takes 1 to 20 seeds (found {len(args.seeds)})")

    from simlab.errors import InputError
    from simlab.policies import options_from_dict
    from simlab.scenario import load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except InputError as exc:
        fail(str(exc))
    gw = scenario.gateway
    if gw is None or gw.limiter != "shared" or gw.balancer != "round-robin" or gw.crash_at_ms or gw.mtbf_ms:
        fail(f"{args.scenario}: [gateway] needs limiter = \"shared\", balancer = \"round-robin\" and no crashes")
    if any(type(w.arrivals).__name__ == "ClosedLoop" for w in scenario.workload):
        fail(f"{args.scenario}: closed-loop arrivals cannot be replayed; use open-loop workloads")
    options = options_from_dict(scenario.scheduler)
    check_redis(args.redis)

    per_seed = []
    for seed in args.seeds:
        sim = simulated(scenario, options, seed)
        run = on_redis(scenario, seed, args.redis, args.time_scale, args.grace_s, args.window)
        # the runtime's measured cost per task (median sleep overrun + median grant lag), in scenario ms
        extra = (run["service_overrun_p50_ms"] + run["grant_lag_interactive_p50_ms"]) / args.time_scale
        plus = simulated(scenario, options, seed, extra)
        plus["extra_service_ms"] = extra
        per_seed.append({"seed": seed, "sim": sim, "redis": run, "sim_plus_overhead": plus})
        print(f"seed {seed}: sim {json.dumps(sim)}\n        redis {json.dumps(run)}", flush=True)

    cap = options.max_concurrency
    print(f"\n{scenario.name}: {gw.instances} instances, cap {cap}, time scale {args.time_scale}, "
          f"runtime window {args.window}, seeds {' '.join(map(str, args.seeds))} (mean [min, max])\n")
    extra = statistics.fmean(p["sim_plus_overhead"]["extra_service_ms"] for p in per_seed)
    print("| measure | simulation (shared_delay_ms = %g) | runtime on Redis | gap | simulation, service + %.1f ms "
          "(the runtime's cost per task) | its gap to the runtime |" % (gw.shared_delay_ms, extra))
    print("|---|---|---|---|---|---|")
    for key, label in (("interactive_p95_ms", "interactive P95 (ms)"),
                       ("interactive_wait_ms", "interactive mean queue wait (ms)"),
                       ("batch_wait_ms", "batch mean queue wait (ms)"),
                       ("interactive_waited_pct", f"interactive tasks waiting > {WAITED_MS:g} ms (%)"),
                       ("batch_waited_pct", f"batch tasks waiting > {WAITED_MS:g} ms (%)"),
                       ("batch_per_s", "batch throughput (/s)"),
                       ("peak_in_flight", f"peak in flight (cap {cap})")):
        s = [p["sim"][key] for p in per_seed]
        r = [p["redis"][key] for p in per_seed]
        x = [p["sim_plus_overhead"][key] for p in per_seed]
        print(f"| {label} | {spread(s)} | {spread(r)} | {gap_pct(r, s)} | {spread(x)} | {gap_pct(r, x)} |")
    for key, label in (("step_p50_ms", "limiter step round trip p50 (ms, wall)"),
                       ("step_p99_ms", "limiter step round trip p99 (ms, wall)"),
                       ("late_p50_ms", "arrival timer lateness p50 (ms, wall)"),
                       ("late_p99_ms", "arrival timer lateness p99 (ms, wall)"),
                       ("service_overrun_p50_ms", "service sleep overrun p50 (ms, wall)"),
                       ("service_overrun_p99_ms", "service sleep overrun p99 (ms, wall)"),
                       ("grant_lag_interactive_p50_ms", "interactive grant lag p50 (ms, wall)"),
                       ("grant_lag_interactive_p95_ms", "interactive grant lag p95 (ms, wall)"),
                       ("grant_lag_batch_p50_ms", "batch grant lag p50 (ms, wall)")):
        print(f"| {label} | - | {spread([p['redis'][key] for p in per_seed])} | | | |")
    if args.out:
        Path(args.out).write_text(json.dumps(per_seed, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(asyncio.run(instance(json.loads(Path(sys.argv[2]).read_text())))), flush=True)
    else:
        main()
