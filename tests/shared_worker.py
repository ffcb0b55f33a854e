"""One gateway instance for tests/test_shared_acceptance.py: a Scheduler with a RedisLimiter under random traffic.

    python tests/shared_worker.py URL PREFIX NAME SECONDS SEED EVENTS [--lease-ms MS]

Submits Poisson arrivals of both classes for SECONDS (random lengths; some callers time out with
`asyncio.wait_for`, some are cancelled at random), then waits for every caller, closes the limiter and prints a
JSON summary. Each start and end of the work itself goes to EVENTS as `s|e kind monotonic_seconds`, flushed at once,
so a process killed with -9 leaves what it had started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from simlab.policies import options_from_dict
from simlab.runtime import Scheduler
from simlab.runtime.shared import RedisLimiter

OPTIONS = {"policy": "adaptive", "maxConcurrency": 6, "batchMaxConcurrency": 4, "batchMinConcurrency": 1,
           "interactiveRpsThreshold": 400, "interactiveP95LatencyMs": 1000, "windowMs": 2000}
INSTANCES = 4


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("url", "prefix", "name"):
        ap.add_argument(name)
    ap.add_argument("seconds", type=float)
    ap.add_argument("seed", type=int)
    ap.add_argument("events")
    ap.add_argument("--lease-ms", type=float, default=2000.0)
    ap.add_argument("--rate", type=float, default=45.0, help="arrivals per second, both classes")
    ap.add_argument("--long", action="store_true", help="longer work (holds slots: the kill test)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


async def run(args) -> dict:
    rng = random.Random(args.seed)
    limiter = RedisLimiter(args.url, key_prefix=args.prefix, instance_id=args.name, instances=INSTANCES,
                           lease_ms=args.lease_ms, renew_ms=args.lease_ms / 4, timeout_ms=300)
    sched = Scheduler(options_from_dict(OPTIONS), limiter=limiter)
    await limiter.start()
    events = open(args.events, "w", buffering=1)
    counts = {"submitted": 0, "ok": 0, "timeout": 0, "cancelled": 0, "starts": 0, "ends": 0}

    async def work(kind: str, ms: float) -> None:
        counts["starts"] += 1
        events.write(f"s {kind} {time.monotonic()!r}\n")
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            events.write(f"e {kind} {time.monotonic()!r}\n")
            counts["ends"] += 1

    async def caller(kind: str, ms: float, how: str, after: float) -> None:
        counts["submitted"] += 1
        coro = sched.submit(kind, work, kind, ms)
        try:
            await (asyncio.wait_for(coro, after) if how == "timeout" else coro)
            counts["ok"] += 1
        except asyncio.TimeoutError:
            counts["timeout"] += 1
        except asyncio.CancelledError:
            counts["cancelled"] += 1

    jobs = []
    loop = asyncio.get_running_loop()
    end = loop.time() + args.seconds
    while loop.time() < end:
        kind = "interactive" if rng.random() < 0.5 else "batch"
        if args.long:
            ms = rng.uniform(100, 400) if kind == "interactive" else rng.uniform(300, 900)
        else:
            ms = rng.uniform(5, 60) if kind == "interactive" else rng.uniform(20, 150)
        how = rng.choices(["ok", "timeout", "cancel"], [0.75, 0.15, 0.10])[0]
        job = loop.create_task(caller(kind, ms, how, rng.uniform(0.01, 0.3)))
        if how == "cancel":
            loop.call_later(rng.uniform(0, 0.3), job.cancel)
        jobs.append(job)
        await asyncio.sleep(rng.expovariate(args.rate))
    await asyncio.gather(*jobs, return_exceptions=True)
    snap, state = sched.snapshot(), limiter.state()
    await limiter.close()
    events.close()
    return {"name": args.name, **counts, "scheduler": snap.as_dict(), "limiter": state.as_dict()}


if __name__ == "__main__":
    main()
