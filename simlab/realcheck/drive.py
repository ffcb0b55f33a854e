"""Sim-to-real: the same arrivals through simlab.runtime to a real server and through the simulator.

The scenario's open-loop tasks (seeded arrivals, prompt and output token counts) are generated once. Each
policy drives them through `simlab.runtime.Scheduler` to the server, every request streamed and timed; the
simulator runs exactly the same task list with the scenario's (calibrated) continuous-batching backend. Both
give, per request, arrival, start, first token and end in ms from the run's origin; the same code turns
either into metrics (simlab.realcheck.measures), so predicted and measured are computed alike.
"""

from __future__ import annotations

import asyncio
import copy

from simlab.policies import SchedulerOptions, Task
from simlab.realcheck.client import Client
from simlab.realcheck.http import Limits
from simlab.realcheck.urls import Target
from simlab.runtime.scheduler import Scheduler

LEAD_MS = 300.0  # from starting the run to its origin (t = 0): the first arrivals are not sent late
# vLLM's `priority` request field under `--scheduling-policy priority` (lower is served first), per class: the
# simulated engine's priorities (simlab.world.backends.kv_batching: interactive 0, batch 1)
ENGINE_PRIORITY = {"interactive": 0, "batch": 1}


def scenario_tasks(scenario, seed: int, time_scale: float = 1.0, until_ms: float | None = None) -> list[Task]:
    """The scenario's open-loop tasks, arrivals multiplied by `time_scale`, those arriving before `until_ms`
    (after scaling) kept. Needs token counts (prompt_tokens/output_tokens) on every workload."""
    from simlab.world.workloads import open_loop_tasks

    tasks = open_loop_tasks(scenario, seed)
    out = []
    for t in tasks:
        a = t.arrival_ms * time_scale
        if until_ms is not None and a >= until_ms:
            continue
        n = Task(t.id, t.kind, a, t.service_ms)
        n.prompt_tokens, n.output_tokens, n.source = t.prompt_tokens, t.output_tokens, t.source
        out.append(n)
    return out


# A request's own bounds lie this far beyond the run's end, so that a request still open then is cancelled by
# the end (a timer the loop runs before any later one), never reported as a stalled server.
STALL_GRACE_S = 10.0


async def drive(target: Target, model: str, options: SchedulerOptions, tasks: list[Task], max_seconds: float,
                lead_ms: float = LEAD_MS, progress=None, priorities: dict[str, int] | None = None) -> list[dict]:
    """Submit every task at its arrival time through the runtime scheduler to the server; one record each.
    With `priorities` (class -> vLLM request priority, e.g. ENGINE_PRIORITY) every request carries its class's.
    Requests still open `max_seconds` after the origin are cancelled (outcome 'cancelled'). A request the server
    fails (a malformed or unexpected answer, a closed connection, a stall past the limits) stops the run: the
    others are cancelled and its ServerError is raised (a measurement with a broken server means nothing)."""
    loop = asyncio.get_running_loop()
    client = Client(target, Limits.within(max_seconds + STALL_GRACE_S), model=model)
    sched = Scheduler(options)
    t0 = loop.time() * 1000.0 + lead_ms
    end = t0 / 1000.0 + max_seconds
    records = {t.id: {"id": t.id, "kind": t.kind, "prompt_tokens": t.prompt_tokens,
                      "output_tokens": t.output_tokens, "arrival_ms": None, "start_ms": None, "ttft_ms": None,
                      "end_ms": None, "outcome": "not sent"} for t in tasks}
    failed: list[Exception] = []

    async def call(rec, p, o):
        rec["start_ms"] = loop.time() * 1000.0 - t0
        priority = None if priorities is None else priorities[rec["kind"]]
        done = await client.complete(p, o, deadline=end + STALL_GRACE_S, priority=priority)
        rec["ttft_ms"] = done.first_ms - t0 - rec["arrival_ms"]
        return done

    async def one(task: Task):
        rec = records[task.id]
        rec["arrival_ms"] = loop.time() * 1000.0 - t0
        try:
            await sched.submit(task.kind, call, rec, task.prompt_tokens, task.output_tokens)
            rec["outcome"] = "ok"
        except asyncio.CancelledError:
            rec["outcome"] = "cancelled"
            raise
        except Exception as exc:  # noqa: BLE001 - the run stops on it (below); a bug is raised as it is
            rec["outcome"] = f"error: {type(exc).__name__}"
            failed.append(exc)
        finally:
            rec["end_ms"] = loop.time() * 1000.0 - t0

    running: list[asyncio.Task] = []
    timers = [loop.call_at((t0 + t.arrival_ms) / 1000.0, lambda t=t: running.append(asyncio.ensure_future(one(t))))
              for t in tasks]
    stopped = False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        for timer in timers:
            timer.cancel()
        for r in running:
            r.cancel()

    # The end is a timer of its own, not a check in the polling loop below: the loop runs due timers in the order
    # of their times, so when it wakes late (a busy machine) past both the end and a request's own bound, the
    # end's cancel still reaches the request first and it reads as cancelled, not as a stalled server.
    at_end = loop.call_at(end, stop)
    last_arrival = (t0 + (tasks[-1].arrival_ms if tasks else 0)) / 1000.0
    next_report = loop.time() + 15
    while not stopped:
        await asyncio.sleep(0.2)
        now = loop.time()
        if now >= last_arrival and len(running) == len(tasks) and all(r.done() for r in running):
            break
        if failed:
            stop()
        elif progress is not None and now >= next_report:
            s = sched.snapshot()
            progress(f"    t={now - t0 / 1000:6.0f} s  in flight {s.in_flight_interactive}i/{s.in_flight_batch}b, "
                     f"queued {s.queued_interactive}i/{s.queued_batch}b, cap {s.batch_cap:g}, done {s.completed}")
            next_report = now + 15
    at_end.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    if failed:
        raise failed[0]
    assert sched.policy.running == 0 and sched.policy.queued() == (0, 0), "a slot leaked"
    return [records[t.id] for t in tasks]


def simulate(scenario, options: SchedulerOptions, tasks: list[Task], seed: int) -> list[dict]:
    """The simulator on exactly these tasks (copies), with the scenario's backend."""
    from simlab.world.engine import Engine

    mine = [copy.copy(t) for t in tasks]
    result = Engine(scenario, options, seed, tasks=mine).run()
    out = []
    for t in result.tasks:
        ok = t.end_ms is not None
        out.append({"id": t.id, "kind": t.kind, "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens,
                    "arrival_ms": t.arrival_ms, "start_ms": t.start_ms, "ttft_ms": t.ttft_ms, "end_ms": t.end_ms,
                    "outcome": "ok" if ok else "not finished"})
    return out
