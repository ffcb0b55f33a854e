"""What every policy is: a clock-free object driven by task events.

A driver (the SimPy engine, the replay tool, an asyncio service) owns time. It tells the policy when a task
is submitted or has finished, and the policy answers with the tasks that start now, in start order. A driver
also asks `next_check_ms()` after each call and calls `wake()` at that time, for policies that re-evaluate
without a task event. A driver whose callers can give up withdraws a waiting task with `cancel()`.
Policies read time only through the injected `clock` (milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

INTERACTIVE = "interactive"
BATCH = "batch"
KINDS = (INTERACTIVE, BATCH)


class Task:
    """One request. Drivers fill in the times; policies only read `interactive` and set `submitted_ms`."""

    __slots__ = (
        "id",
        "kind",
        "interactive",
        "arrival_ms",
        "service_ms",
        "submitted_ms",
        "dispatch_ms",
        "start_ms",
        "end_ms",
        "cap_at_dispatch",
        "payload",
        "prompt_tokens",
        "output_tokens",
        "outcome",
        "ttft_ms",
        "retries",
        "source",
        "index",
        "wasted_tokens",
        "wasted_ms",
    )

    def __init__(self, id, kind: str, arrival_ms: float, service_ms: float | None = 0.0, payload=None, index=None):
        self.id = id
        self.kind = kind
        self.interactive = kind == INTERACTIVE
        self.arrival_ms = arrival_ms
        self.service_ms = service_ms
        self.submitted_ms = None
        self.dispatch_ms = None
        self.start_ms = None
        self.end_ms = None
        self.cap_at_dispatch = None
        self.payload = payload
        self.prompt_tokens = None
        self.output_tokens = None
        self.outcome = None
        self.ttft_ms = None
        self.retries = 0
        self.source = None  # the workload that made it
        self.index = index  # the task's row in a run's records (the engine's; None elsewhere)
        self.wasted_tokens = 0  # work a backend threw away: cancelled, or preempted and recomputed
        self.wasted_ms = 0.0

    def __repr__(self) -> str:
        return f"Task({self.id!r}, {self.kind}, arrival={self.arrival_ms})"


Clock = Callable[[], float]


@dataclass(slots=True)
class Observation:
    """What a backend reports of its own load (`Backend.observe()`): sequences in service, requests queued
    inside it, its concurrency limit, and its KV cache (fraction in use, capacity) where it has one."""

    busy: int
    waiting: int
    capacity: int | None
    kv_used: float | None
    kv_capacity_tokens: int | None


class Policy:
    """Base class: counts tasks in flight; subclasses decide what starts."""

    name = "base"

    def __init__(self, options, clock: Clock):
        self.options = options
        self.clock = clock
        self.running = 0
        self.batch_running = 0

    # --- events from the driver -------------------------------------------------------------
    def submit(self, task: Task) -> list[Task]:
        raise NotImplementedError

    def finish(self, task: Task) -> list[Task]:
        raise NotImplementedError

    def cancel(self, task: Task) -> bool:
        """Withdraw a task that is still waiting (its caller gave up). True if it was queued; the driver then
        never starts it. A task already started is ended with `finish` instead, which frees its slot."""
        return False

    def next_check_ms(self) -> float | None:
        """When the policy wants `wake()` without a task event; None if never."""
        return None

    def wake(self) -> list[Task]:
        return []

    def may_wake(self) -> bool:
        """False when `next_check_ms()` is always None, so a driver may skip asking after every event."""
        return type(self).next_check_ms is not Policy.next_check_ms

    # --- observation, for time series and tests ---------------------------------------------
    def queued(self) -> tuple[int, int]:
        """(interactive, batch) tasks waiting in the policy's queues."""
        raise NotImplementedError

    def batch_cap(self) -> float:
        """The batch cap last in force (inf when the policy has none)."""
        return float("inf")

    def pressure(self) -> float:
        return 0.0

    def window_stats(self) -> tuple[float, float]:
        """(interactive RPS, interactive P95 ms) as the policy last saw them."""
        return (0.0, 0.0)

    def _started(self, task: Task) -> None:
        self.running += 1
        if not task.interactive:
            self.batch_running += 1

    def _ended(self, task: Task) -> None:
        self.running -= 1
        if not task.interactive:
            self.batch_running -= 1
