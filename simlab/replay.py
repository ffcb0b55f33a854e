"""Trace replay: drive a policy with a trace on the `delay` backend (unlimited capacity, exact service times).

No SimPy: a heap of (time, sequence) events, so ties resolve exactly as a virtual-clock run of the
article's code does. Every arrival is scheduled before anything else, so at one instant arrivals come first,
in trace order; finishes follow in the order their tasks started.
"""

from __future__ import annotations

import csv
import heapq
import io
from dataclasses import dataclass
from pathlib import Path

from simlab.store import atomic_write_text
from simlab.policies import Observation, SchedulerOptions, Task, make_policy
from simlab.traces import format_ms


class VirtualClock:
    __slots__ = ("now",)

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class ReplayResult:
    tasks: list[Task]  # in trace order, times filled in

    @property
    def stranded(self) -> list[Task]:
        return [t for t in self.tasks if t.start_ms is None]


def replay(tasks: list[Task], options: SchedulerOptions) -> ReplayResult:
    """Run `tasks` (fresh Task objects) through the policy named in `options`; fills start_ms and end_ms.
    A task the policy stops (eviction) loses the time it ran (`wasted_ms`) and starts again when chosen."""
    arrivals = sorted(tasks, key=lambda t: t.arrival_ms)  # stable: ties keep trace order
    clock = VirtualClock()
    serving: dict[int, int] = {}  # id(task) -> the sequence number of its live finish event

    made: list = []  # the policy, once made (it may observe while being made)

    def observe() -> Observation:  # the delay backend: everything the policy runs is in service
        return Observation(made[0].running if made else 0, 0, None, None, None)

    policy = make_policy(options, clock, observe)
    made.append(policy)
    stops = policy.may_stop()
    heap: list[tuple[float, int, Task | None]] = []
    push, pop = heapq.heappush, heapq.heappop
    seq = 0
    wake_at = None
    i, n = 0, len(arrivals)
    while True:
        if i < n and (not heap or arrivals[i].arrival_ms <= heap[0][0]):
            task = arrivals[i]
            i += 1
            clock.now = task.arrival_ms
            started = policy.submit(task)
        elif heap:
            t, key, task = pop(heap)
            clock.now = t
            if task is None:
                if t != wake_at:
                    continue  # superseded wake-up
                wake_at = None
                started = policy.wake()
            else:
                if stops:
                    if serving.get(id(task)) != key:
                        continue  # the finish of an attempt the policy stopped
                    del serving[id(task)]
                task.end_ms = t
                started = policy.finish(task)
        else:
            break
        now = clock.now
        if stops:
            for s in policy.take_stops():
                del serving[id(s)]
                s.wasted_ms += now - s.start_ms
        for s in started:
            s.start_ms = s.dispatch_ms = now
            if stops:
                serving[id(s)] = seq
            push(heap, (now + s.service_ms, seq, s))
            seq += 1
        check = policy.next_check_ms()
        if check != wake_at:
            wake_at = check
            if check is not None:
                push(heap, (check, seq, None))
                seq += 1
    return ReplayResult(tasks)


def replay_csv(result: ReplayResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("id", "kind", "arrival_ms", "service_ms", "start_ms", "end_ms", "latency_ms"))
    for t in result.tasks:
        latency = None if t.end_ms is None else t.end_ms - t.arrival_ms
        writer.writerow((t.id, t.kind, *(format_ms(v) for v in (t.arrival_ms, t.service_ms, t.start_ms, t.end_ms, latency))))
    return out.getvalue()


def write_replay(result: ReplayResult, path: str | Path) -> None:
    atomic_write_text(path, replay_csv(result))
