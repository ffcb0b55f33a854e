"""What every policy is: a clock-free object driven by task events.

A driver (the SimPy engine, the replay tool, an asyncio service) owns time. It tells the policy when a task
is submitted or has finished, and the policy answers with the tasks that start now, in start order. A driver
also asks `next_check_ms()` after each call and calls `wake()` at that time, for policies that re-evaluate
without a task event. A driver whose callers can give up withdraws a waiting task with `cancel()`.
Policies read time only through the injected `clock` (milliseconds), and the backend only through the
optional injected `observe` (an `Observation` of the backend now: the engine passes `backend.observe`, a
service whatever it reads, e.g. vLLM's /metrics). Policies that do not read it never call it.

What stops (preemption at the gateway). A policy whose `may_stop()` is True can decide that running tasks
stop, e.g. the newest batch task when an interactive request has waited too long. After every call that
returns starts (`submit`, `finish`, `wake`) such a driver polls `take_stops()`: the running tasks to stop now,
in order. The policy has already given their slots back and queued them again (they start again when it
chooses them, as a new attempt); the driver stops their service (a backend's `cancel`, an asyncio task's
`cancel()`), counts the work thrown away, and never calls `finish` for a stopped attempt. It stops them
before it starts anything the same call returned (a stopped task may be among the starts: its next attempt).
Drivers set `task.dispatch_ms` to the clock when the policy starts a task, before the next call.

What ends by itself (timeouts). A driver that gives up on a running task (it ran too long) calls `finish` with
`task.outcome` already set to "timeout", and, when the task is to be retried, `submit` again: a new attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

INTERACTIVE = "interactive"
BATCH = "batch"
KINDS = (INTERACTIVE, BATCH)


@dataclass(slots=True)
class Observation:
    """The backend as a policy sees it. `capacity`: what it serves at once (slots, max_num_seqs, a provider's
    concurrency; None when unlimited); `kv_used`: the fraction of the KV cache in use, `kv_capacity_tokens`
    its size (None without a KV cache)."""

    busy: int  # in service now
    waiting: int  # dispatched to the backend, queued inside it
    capacity: int | None
    kv_used: float | None
    kv_capacity_tokens: int | None


Observe = Callable[[], Observation]


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
        "_attempts",
        "_wasted_tokens",
        "_wasted_ms",
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
        # attempts, wasted_tokens and wasted_ms (work a backend threw away: cancelled, or preempted and
        # recomputed) stay unset: their properties read 0 until a lifecycle writes them

    # Lifecycle (timeouts, eviction): dispatches so far, and the work thrown away by stopped attempts. Slots left
    # unset until first written, read through these properties (0 until then): a run that never stops a task
    # pays nothing for them per task (three stores per task are 0.5% of a bench-1h simulation).
    @property
    def attempts(self) -> int:
        try:
            return self._attempts
        except AttributeError:
            return 0

    @attempts.setter
    def attempts(self, value: int) -> None:
        self._attempts = value

    @property
    def wasted_tokens(self) -> int:
        try:
            return self._wasted_tokens
        except AttributeError:
            return 0

    @wasted_tokens.setter
    def wasted_tokens(self, value: int) -> None:
        self._wasted_tokens = value

    @property
    def wasted_ms(self) -> float:
        try:
            return self._wasted_ms
        except AttributeError:
            return 0.0

    @wasted_ms.setter
    def wasted_ms(self, value: float) -> None:
        self._wasted_ms = value

    def __repr__(self) -> str:
        return f"Task({self.id!r}, {self.kind}, arrival={self.arrival_ms})"


Clock = Callable[[], float]


class Policy:
    """Base class: counts tasks in flight; subclasses decide what starts."""

    name = "base"

    def __init__(self, options, clock: Clock, observe: Observe | None = None):
        self.options = options
        self.clock = clock
        self.observe = observe
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

    def note_completion(self, latency_ms: float) -> list[Task]:
        """An interactive completion served elsewhere (another gateway instance sharing this policy's window,
        simlab.runtime.shared): counted as if a task had ended here now, without freeing a slot here. Returns the
        tasks that start now. Policies without a window ignore it."""
        return []

    def next_check_ms(self) -> float | None:
        """When the policy wants `wake()` without a task event; None if never."""
        return None

    def wake(self) -> list[Task]:
        return []

    def may_wake(self) -> bool:
        """False when `next_check_ms()` is always None, so a driver may skip asking after every event."""
        return type(self).next_check_ms is not Policy.next_check_ms

    def may_stop(self) -> bool:
        """True when the policy can stop running tasks: the driver then polls `take_stops()` after each call."""
        return False

    def take_stops(self) -> list[Task]:
        """The running tasks to stop now, in order (see the module docstring); each is returned once."""
        return []

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
