"""A bounded load test of an OpenAI-compatible server: step time against sequences in flight and prompt length.

For every prompt length P and concurrency C, C workers send requests back to back (a closed loop), each asking
for exactly O tokens. The workers' first requests are shortened (1 + j*O/C tokens for worker j) so that
completions, and so new prefills, are spread out instead of arriving in lockstep; those priming requests are
not measured. Every streamed chunk is timed. A gap between two chunks of one request is one decode iteration
(or several, divided by the tokens it carried); the number of sequences in the engine during the gap is
counted from every request's send and end times. The level's `step_ms` is the median gap while exactly C
sequences were in flight (`gap_median_ms`, with p10/p90). On a loaded machine the server's front end
delivers tokens in bursts, so single gaps are unreliable; the table's `tpot_ms` is therefore the robust one:
per request (last token - first token) / (tokens - 1), averaged over the measured requests, i.e. the mean
iteration time with C sequences, prefills of the others included (calibrate-gpu models exactly that).
`server_cores`, `server_waiting_cores`, `client_cores` and `machine_cores` say how busy this machine was
during the level (simlab.realcheck.hostcpu: cores' worth of CPU time, and of run-queue wait, per wall second).
`ttft_ms` and `latency_ms` are means over the measured requests. With several rounds (the whole sweep
repeated, alternately forwards and backwards), each column is the median over rounds of those per-round
means, and `tpot_min_ms`/`tpot_max_ms` give the spread between rounds: on a shared machine one round of a
level can be disturbed by other work, and the median is what the fit should see.

Bounded: at most `requests` measured requests per level and `max_seconds` per level (no request is sent after
it), each request's whole exchange within `max_seconds` too (a server that does not answer, stalls or streams
forever fails the test there, with a ServerError); loopback only (the client connects to a checked Target).
"""

from __future__ import annotations

import asyncio
import bisect
import statistics
import time
from dataclasses import dataclass

from simlab.realcheck.client import Client, Completion
from simlab.realcheck.http import Limits
from simlab.realcheck.urls import Target
from simlab.realcheck.hostcpu import CpuProbe, CpuUse

TABLE_COLUMNS = ("batch_size", "prompt_tokens", "output_tokens", "tpot_ms", "ttft_ms", "latency_ms",
                 "tpot_min_ms", "tpot_max_ms", "gap_median_ms", "gap_p10_ms", "gap_p90_ms", "rounds", "requests",
                 "gaps", "server_cores", "server_waiting_cores", "client_cores", "machine_cores")
TOKEN_COLUMNS = ("round", "batch_size", "prompt_tokens", "request", "token", "t_ms", "gap_ms", "in_flight")


@dataclass
class Level:
    c: int
    p: int
    o: int
    done: list  # measured Completions
    all: list  # every Completion of the level, priming ones too
    cpu: CpuUse | None = None


async def run_level(client: Client, c: int, p: int, o: int, requests: int, max_seconds: float) -> Level:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_seconds
    measured: list[Completion] = []
    every: list[Completion] = []
    budget = [requests]

    async def worker(j: int):
        first = True
        while True:
            if first:
                n = 1 + (j * o) // c
                first = False
                priming = True
            else:
                if budget[0] <= 0 or loop.time() >= deadline:
                    return
                budget[0] -= 1
                n, priming = o, False
            done = await client.complete(p, n, deadline=loop.time() + max_seconds)
            every.append(done)
            if not priming:
                measured.append(done)

    await first_error(worker(j) for j in range(c))
    return Level(c, p, o, measured, every)


async def first_error(coros) -> None:
    """Run `coros` together; the first to fail cancels the others and its exception is raised as it is."""
    try:
        async with asyncio.TaskGroup() as group:
            for coro in coros:
                group.create_task(coro)
    except* Exception as failed:
        raise failed.exceptions[0] from None


def in_flight_counter(completions: list[Completion]):
    """count(t): requests sent and not ended at time t (sends and ends sorted once)."""
    sends = sorted(x.sent_ms for x in completions)
    ends = sorted(x.end_ms for x in completions)
    return lambda t: bisect.bisect_right(sends, t) - bisect.bisect_right(ends, t)


def summarize(rounds: list[Level]) -> tuple[dict, list[dict]]:
    """One table row from every round of one level: per round the mean over its measured requests, then the
    median over rounds (min and max kept as the spread); token gaps pooled over rounds."""
    first = rounds[0]
    gaps, tokens, tpot_r, ttft_r, lat_r = [], [], [], [], []
    for rnd, level in enumerate(rounds, start=1):
        count = in_flight_counter(level.all)
        for ri, x in enumerate(level.done):
            prev_t, prev_n = x.first_ms, x.chunk_tokens[0] if x.chunk_tokens else 0
            for k, (t, n) in enumerate(zip(x.chunk_ms, x.chunk_tokens)):
                gap = None
                inflight = count(t)
                if k > 0 and n > prev_n:
                    gap = (t - prev_t) / (n - prev_n)
                    inflight = count((t + prev_t) / 2)
                    if inflight == level.c:
                        gaps.append(gap)
                tokens.append({"round": rnd, "batch_size": level.c, "prompt_tokens": level.p, "request": ri,
                               "token": n, "t_ms": round(t, 4), "gap_ms": "" if gap is None else round(gap, 4),
                               "in_flight": inflight})
                prev_t, prev_n = t, n
        tpots = [(x.chunk_ms[-1] - x.first_ms) / (x.output_tokens - 1) for x in level.done if x.output_tokens > 1]
        if tpots:
            tpot_r.append(statistics.fmean(tpots))
        if level.done:
            ttft_r.append(statistics.fmean(x.ttft_ms for x in level.done))
            lat_r.append(statistics.fmean(x.latency_ms for x in level.done))
    row = {"batch_size": first.c, "prompt_tokens": first.p, "output_tokens": first.o, "rounds": len(rounds),
           "requests": sum(len(lv.done) for lv in rounds), "gaps": len(gaps)}
    if gaps:
        q = statistics.quantiles(gaps, n=10) if len(gaps) > 1 else [gaps[0]] * 9
        row |= {"gap_median_ms": statistics.median(gaps), "gap_p10_ms": q[0], "gap_p90_ms": q[-1]}
    else:
        row |= {"gap_median_ms": "", "gap_p10_ms": "", "gap_p90_ms": ""}
    row["tpot_ms"] = statistics.median(tpot_r) if tpot_r else ""
    row["tpot_min_ms"] = min(tpot_r) if tpot_r else ""
    row["tpot_max_ms"] = max(tpot_r) if tpot_r else ""
    uses = [lv.cpu for lv in rounds if lv.cpu is not None]
    for col, of in (("server_cores", lambda u: u.server_cores), ("server_waiting_cores", lambda u: u.server_wait),
                    ("client_cores", lambda u: u.client_cores), ("machine_cores", lambda u: u.machine_cores)):
        row[col] = round(statistics.median(of(u) for u in uses), 4) if uses else ""
    row["ttft_ms"] = statistics.median(ttft_r) if ttft_r else ""
    row["latency_ms"] = statistics.median(lat_r) if lat_r else ""
    return row, tokens


async def loadtest(target: Target, concurrency: list[int], prompts: list[int], outputs: list[int] | int, requests: int,
                   max_seconds: float, rounds: int = 1, progress=print) -> tuple[list[dict], list[dict]]:
    """Every (prompt, concurrency) level `rounds` times; the sweep runs forwards, then backwards, and so on, so
    a slow drift of the machine's speed touches every level alike instead of biasing the slope."""
    loop = asyncio.get_running_loop()
    client = Client(target, Limits.within(max_seconds))
    await client.model_name()
    await client.complete(8, 4, deadline=loop.time() + max_seconds)  # warm-up: the first request pays start-up costs
    outputs = [outputs] if isinstance(outputs, int) else outputs
    levels = [(p, o, c) for p in prompts for o in outputs for c in concurrency]
    runs: dict[tuple[int, int, int], list[Level]] = {lv: [] for lv in levels}
    probe = CpuProbe(client.port)
    for r in range(rounds):
        for p, o, c in (levels if r % 2 == 0 else levels[::-1]):
            t0 = time.monotonic()
            probe.start()
            level = await run_level(client, c, p, o, max(requests, c), max_seconds)
            level.cpu = probe.stop()
            runs[(p, o, c)].append(level)
            row, _ = summarize([level])
            step = f"{row['tpot_ms']:.3f} ms" if row["tpot_ms"] != "" else "n/a"
            ttft = f"{row['ttft_ms']:.1f} ms" if row["ttft_ms"] != "" else "n/a"
            progress(f"  {f'round {r + 1}/{rounds}: ' if rounds > 1 else ''}prompt {p:>5}"
                     f"{f' output {o:>4}' if len(outputs) > 1 else ''} x {c:>2} sequences: "
                     f"time per token {step}, TTFT {ttft}, {row['requests']} requests, {row['gaps']} gaps "
                     f"({time.monotonic() - t0:.0f} s){_cpu_text(level.cpu)}")
    rows, tokens = [], []
    for lv in levels:
        row, toks = summarize(runs[lv])
        rows.append(row)
        tokens.extend(toks)
    return rows, tokens


def _cpu_text(use: CpuUse | None) -> str:
    if use is None:
        return ""
    return (f"; server {use.server_cores:.2f} cores + {use.server_wait:.2f} waiting, client {use.client_cores:.2f}, "
            f"machine {use.machine_cores:.2f}")


def run_loadtest(url: str, concurrency: list[int], prompts: list[int], outputs: list[int], requests: int,
                 max_seconds: float, rounds: int, progress=print) -> tuple[Target, list[dict], list[dict]]:
    """The checked target and the load test's table and token rows (the arguments checked first: InputError)."""
    from simlab.errors import InputError
    from simlab.realcheck.urls import check_url

    target = check_url(url, "URL")
    for flag, v in (("--output-tokens", min(outputs)), ("--requests", requests)):
        if v < 2:
            raise InputError(None, flag, f"must be at least 2 (found {v})")
    if rounds < 1:
        raise InputError(None, "--rounds", f"must be at least 1 (found {rounds})")
    if not max_seconds > 0:
        raise InputError(None, "--max-seconds", f"must be positive (found {max_seconds:g})")
    progress(f"load test of {target.url}: concurrency {concurrency}, prompts {prompts}, outputs {outputs} tokens, "
             f"{rounds} round(s)")
    rows, tokens = asyncio.run(loadtest(target, concurrency, prompts, outputs, requests, max_seconds, rounds,
                                        progress))
    return target, rows, tokens

