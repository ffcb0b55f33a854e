"""The asyncio driver: the same clock-free policy objects as the simulator, timed by the event loop's clock.

`await scheduler.submit(kind, fn, *args)` queues a request with the policy, waits until the policy starts it,
then awaits `fn(*args)` in the caller's own task and returns its result (or raises its exception). Whatever
happens (success, error, cancellation, a timeout around `submit`), the slot is given back exactly once:

- cancelled while waiting: the task is withdrawn from its queue (`policy.cancel`), it never starts;
- cancelled after the policy started it but before the caller resumed: the slot is freed at once;
- cancelled or failed while running: `policy.finish` in a `finally`, as the article's `.finally()`.

`next_check_ms()`/`wake()` are honoured with one loop timer (`call_at`), re-armed after every decision.
Time is the loop's clock in milliseconds, so a virtual-time loop (simlab.runtime.virtual) runs it exactly.

`observe=` gives policies that read the backend (holdback) what the service sees of it (e.g. a reading of vLLM's
/metrics as a `simlab.policies.Observation`). With a batch timeout or a policy that stops tasks (`evict`), batch
requests run through simlab.runtime.lifecycle: each attempt in a task of its own, stopped and retried there.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from dataclasses import asdict, dataclass

from simlab.policies import BATCH, INTERACTIVE, KINDS, SchedulerOptions, Task, make_policy
from simlab.policies.window import SlidingWindow
from simlab.runtime.lifecycle import RuntimeLifecycle


@dataclass(frozen=True)
class Snapshot:
    """What the scheduler looks like now (also what the Prometheus gauges read)."""

    t_ms: float
    queued_interactive: int
    queued_batch: int
    in_flight_interactive: int
    in_flight_batch: int
    batch_cap: float
    window_rps: float  # interactive completions per second over the window
    window_p95_ms: float  # interactive end-to-end P95 over the window
    completed: int
    failed: int
    cancelled: int

    def as_dict(self) -> dict:
        return asdict(self)


class Scheduler:
    def __init__(self, options: SchedulerOptions, *, window_ms: float | None = None, observe=None,
                 batch_timeout_ms: float | None = None, batch_max_retries: int = 0):
        self.options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self.policy = make_policy(options, self._now, observe)
        self._stops = self.policy.may_stop()
        self.lifecycle = (RuntimeLifecycle(self, batch_timeout_ms, batch_max_retries)
                          if self._stops or batch_timeout_ms is not None else None)
        self._window = SlidingWindow(window_ms if window_ms is not None else options.window_ms)
        self._ids = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self._listeners = []  # called with each ended Task (Prometheus)

    # --- time -------------------------------------------------------------------------------------------
    def _now(self) -> float:
        return self._loop.time() * 1000.0

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a Scheduler serves one event loop; make a new one for another loop")

    # --- the API ------------------------------------------------------------------------------------------
    async def submit(self, kind: str, fn, *args, **kwargs):
        """Run `await fn(*args, **kwargs)` when the policy allows; return its result or raise its exception."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)} (found {kind!r})")
        self._bind()
        task = Task(next(self._ids), kind, self._now())
        task.payload = self._loop.create_future()
        self._start(self._policy_call(self.policy.submit, task))
        if self.lifecycle is not None and not task.interactive:
            return await self.lifecycle.run(task, fn, args, kwargs)
        if task.start_ms is None:
            await self._wait_start(task)
        outcome = "error"
        try:
            result = await fn(*args, **kwargs)
            outcome = "ok"
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self._end(task, outcome)

    def snapshot(self) -> Snapshot:
        p = self.policy
        qi, qb = p.queued()
        now = self._now() if self._loop is not None else 0.0
        rps, p95 = self._window.snapshot(now)
        return Snapshot(now, qi, qb, p.running - p.batch_running, p.batch_running, p.batch_cap(), rps, p95,
                        self.completed, self.failed, self.cancelled)

    def add_listener(self, fn) -> None:
        """`fn(task)` after each task ends (outcome ok / error / cancelled, times in loop ms)."""
        self._listeners.append(fn)

    # --- driving the policy ---------------------------------------------------------------------------------
    async def _wait_start(self, task: Task) -> None:
        """Until the policy starts `task`; if its caller is cancelled meanwhile, it never runs (or its slot is
        given back, when it was started in the meantime)."""
        try:
            await task.payload
        except asyncio.CancelledError:
            self._withdraw(task)
            raise

    def _withdraw(self, task: Task) -> None:
        if task.start_ms is None:  # still queued: withdraw it, it never runs
            self.policy.cancel(task)
            task.outcome = "cancelled"
            self.cancelled += 1
            self._rearm()
        elif task.end_ms is None:  # started in the meantime: give the slot back
            self._end(task, "cancelled")

    def _policy_call(self, call, *args) -> list[Task]:
        """A policy call; what the policy stops is stopped before anything it starts (policies/base.py)."""
        started = call(*args)
        if self._stops:
            stops = self.policy.take_stops()
            if stops:
                self.lifecycle.stop(stops)
        return started

    def _start(self, started: list[Task]) -> None:
        if started:
            now = self._now()
            todo = deque(started)
            while todo:
                task = todo.popleft()
                task.start_ms = task.dispatch_ms = now
                if task.payload.done():  # its caller gave up after the policy chose it: free the slot now
                    task.end_ms = now
                    task.outcome = "cancelled"
                    self.cancelled += 1
                    todo.extend(self._policy_call(self.policy.finish, task))
                else:
                    task.payload.set_result(None)
        self._rearm()

    def _end(self, task: Task, outcome: str, release: bool = True) -> None:
        """`release=False`: the policy has its slot back already (a stop that came as the attempt ended)."""
        now = self._now()
        task.end_ms = now
        task.outcome = outcome
        if outcome == "ok":
            self.completed += 1
        elif outcome in ("error", "timeout"):
            self.failed += 1
        else:
            self.cancelled += 1
        if task.interactive:
            self._window.add(now, now - task.arrival_ms)
        for fn in self._listeners:
            fn(task)
        if release:
            self._start(self._policy_call(self.policy.finish, task))
        else:
            self._rearm()

    def _rearm(self) -> None:
        at = self.policy.next_check_ms()
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            # The first loop time whose reading in ms is not before `at` (ms -> s -> ms can round down).
            when = at / 1000.0
            while when * 1000.0 < at:
                when = math.nextafter(when, math.inf)
            self._timer = self._loop.call_at(when, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._timer_at = None
        # The loop may run a timer up to its clock resolution early; a policy that finds nothing to do yet
        # asks for the same instant again and is woken once more.
        self._start(self._policy_call(self.policy.wake))


__all__ = ["BATCH", "INTERACTIVE", "Scheduler", "Snapshot"]
