"""The floors the engine is measured against: what a hand-written SimPy model of the same traffic costs.

`lean_floor` is the leanest honest model: one timeout per arrival and one per service, the slots as a
counter with two FIFO deques (interactive first), no policy, no recording. `resource_floor` is the heavier
textbook model (a process per request, a `simpy.Resource`). Run as a script, this file is the whole-process
floor for `simlab run`: read the TOML, draw the traffic with numpy, simulate with `lean_floor`, print one line.

    python benchmarks/floor.py scenarios/bench-1h.toml
"""

from __future__ import annotations

import math
import sys
import tomllib
from collections import deque

import numpy as np
import simpy


def lean_floor(arrival: list[float], service: list[float], interactive: list[bool], slots: int) -> int:
    """Arrivals sorted by time; returns completions."""
    env = simpy.Environment()
    timeout = env.timeout
    qi, qb = deque(), deque()
    n = len(arrival)
    state = {"free": slots, "next": 0, "done": 0}

    def start(i):
        timeout(service[i]).callbacks.append(finish)

    def finish(_):
        state["done"] += 1
        if qi:
            start(qi.popleft())
        elif qb:
            start(qb.popleft())
        else:
            state["free"] += 1

    def arrive(_):
        i = state["next"]
        state["next"] = i + 1
        if i + 1 < n:
            timeout(arrival[i + 1] - env.now).callbacks.append(arrive)
        if state["free"]:
            state["free"] -= 1
            start(i)
        else:
            (qi if interactive[i] else qb).append(i)

    if n:
        timeout(arrival[0]).callbacks.append(arrive)
    env.run()
    return state["done"]


def resource_floor(arrival: list[float], service: list[float], slots: int) -> int:
    """The textbook model: a source process, one process per request, a `simpy.Resource`."""
    env = simpy.Environment()
    gpu = simpy.Resource(env, capacity=slots)
    done = [0]

    def request(s):
        with gpu.request() as req:
            yield req
            yield env.timeout(s)
        done[0] += 1

    def source():
        for a, s in zip(arrival, service):
            yield env.timeout(a - env.now)
            env.process(request(s))

    env.process(source())
    env.run()
    return done[0]


def draw(path: str, seed: int = 1) -> tuple[list[float], list[float], list[bool], int]:
    """The scenario's traffic drawn by hand (poisson and burst arrivals; lognormal and exponential service)."""
    with open(path, "rb") as f:
        sc = tomllib.load(f)
    rng = np.random.default_rng(seed)
    duration = sc["duration_ms"]
    times, services, kinds = [], [], []
    for w in sc["workload"]:
        a = w["arrivals"]
        if a["process"] == "poisson":
            rate = a["rate_per_s"] / 1000.0
            n = int(rate * duration * 1.1 + 100)
            t = np.cumsum(rng.exponential(1 / rate, n))
            t = t[t < duration]
        elif a["process"] == "burst":
            at = a["at_ms"] if isinstance(a["at_ms"], list) else [a["at_ms"]]
            t = np.repeat(np.asarray(at, dtype=float), a["count"])
        else:
            raise SystemExit(f"floor.py: arrivals {a['process']!r} not supported")
        s = w["service"]
        if s["dist"] == "lognormal":
            sigma = math.log(s["p95"] / s["median"]) / 1.6448536269514722
            d = rng.lognormal(math.log(s["median"]), sigma, len(t))
        elif s["dist"] == "exponential":
            d = rng.exponential(s["mean"], len(t))
        else:
            raise SystemExit(f"floor.py: service {s['dist']!r} not supported")
        times.append(t)
        services.append(d)
        kinds.append(np.full(len(t), w["class"] == "interactive"))
    t, d, k = np.concatenate(times), np.concatenate(services), np.concatenate(kinds)
    order = np.argsort(t, kind="stable")
    return t[order].tolist(), d[order].tolist(), k[order].tolist(), sc["backend"]["slots"]


if __name__ == "__main__":
    arrival, service, interactive, slots = draw(sys.argv[1])
    print(f"{lean_floor(arrival, service, interactive, slots)} of {len(arrival)} requests completed")
