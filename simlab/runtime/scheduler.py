"""The asyncio driver: the same clock-free policy objects as the simulator, timed by the event loop's clock.

`await scheduler.submit(kind, fn, *args)` queues a request with the policy, waits until the policy starts it,
then awaits `fn(*args)` in the caller's own task and returns its result (or raises its exception). Whatever
happens (success, error, cancellation, a timeout around `submit`), the slot is given back exactly once:

- cancelled while waiting: the task is withdrawn from its queue (`policy.cancel`), it never starts;
- cancelled after the policy started it but before the caller resumed: the slot is freed at once;
- cancelled or failed while running: `policy.finish` in a `finally`, as the article's `.finally()`.

`next_check_ms()`/`wake()` are honoured with one loop timer (`call_at`), re-armed after every decision.
Time is the loop's clock in milliseconds, so a virtual-time loop (simlab.runtime.virtual) runs it exactly.

With a `limiter` (simlab.runtime.shared.RedisLimiter: one limit shared by several gateway instances), a task the
policy starts also needs a slot from the limiter before its caller runs: `limiter.admit(task)` resolves the task's
future once it holds one, and `limiter.release(task)` is called exactly once when it ends (or gives up waiting).
Callers of `submit` see no difference.

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
    def __init__(self, options: SchedulerOptions, *, window_ms: float | None = None, limiter=None, observe=None,
                 batch_timeout_ms: float | None = None, batch_max_retries: int = 0):
        """ValueError for options under which a submit could wait forever (`SchedulerOptions.waits_forever`),
        and for a shared limiter combined with batch timeouts or a policy that stops tasks (a stopped attempt's
        shared slot would need a release the limiter does not know of: not supported)."""
        if (why := options.waits_forever()) is not None:
            raise ValueError(f"simlab.runtime.Scheduler refuses these options: {why}")
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
        self._submit_listeners = []  # called with each submitted Task (arrival counts)
        if limiter is not None and self.lifecycle is not None:
            raise ValueError("simlab.runtime.Scheduler: a shared limiter with batch timeouts or eviction is not "
                             "supported; give one or the other")
        self.limiter = limiter
        if limiter is not None:
            limiter.attach(self)

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
        if self.limiter is not None:
            self.limiter.check_ready()
        self._bind()
        task = Task(next(self._ids), kind, self._now())
        task.payload = self._loop.create_future()
        for listener in self._submit_listeners:
            listener(task)
        self._start(self._policy_call(self.policy.submit, task))
        if self.lifecycle is not None and not task.interactive:
            return await self.lifecycle.run(task, fn, args, kwargs)
        if not task.payload.done():  # queued with the policy, or (with a limiter) waiting for a shared slot
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
        ri, rb = p.running - p.batch_running, p.batch_running
        if self.limiter is not None:  # started by the policy, still waiting for a shared slot: queued, not running
            wi, wb = self.limiter.waiting_counts()
            qi, qb, ri, rb = qi + wi, qb + wb, ri - wi, rb - wb
        return Snapshot(now, qi, qb, ri, rb, p.batch_cap(), rps, p95, self.completed, self.failed, self.cancelled)

    def window_quantile(self, q: float) -> float:
        """Interactive end-to-end latency quantile (ms) over the window, by the article's index rule
        (`sorted[min(n - 1, floor(n * q))]`); 0 when empty. Sorts a copy: for scrapes, not the hot path."""
        if self._loop is None:
            return 0.0
        latencies = sorted(self._window.latencies(self._now()))
        n = len(latencies)
        return latencies[min(n - 1, math.floor(n * q))] if n else 0.0

    def add_listener(self, fn) -> None:
        """`fn(task)` after each task ends (outcome ok / error / cancelled, times in loop ms)."""
        self._listeners.append(fn)

    def add_submit_listener(self, fn) -> None:
        """`fn(task)` when a task is submitted (before the policy sees it)."""
        self._submit_listeners.append(fn)

    def note_remote_completion(self, latency_ms: float) -> None:
        """An interactive completion served by another instance sharing the policy's window (the limiter's)."""
        self._bind()
        self._start(self._policy_call(self.policy.note_completion, latency_ms))

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
                elif self.limiter is not None:
                    self.limiter.admit(task)  # resolves the future once a shared slot is held
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
        if self.limiter is not None:
            self.limiter.release(task)
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
