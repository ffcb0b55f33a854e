"""Batch lifecycle for the asyncio Scheduler: timeouts, retries and the policy's stops (eviction).

Only batch requests of a scheduler that needs it (a batch timeout, or a policy that may stop tasks) take this
path; every other request runs `fn` in its caller's own task as before. Here each attempt of `fn` runs in a task
of its own, so it can be stopped without cancelling the caller:

- stopped by the policy (`take_stops`, simlab/policies/base.py): the attempt is cancelled and the caller waits
  until the policy starts the request again (it has queued it at the front of the batch queue), then calls `fn`
  again; the policy's slot was given back by the policy itself, so no `finish` follows;
- past `batch_timeout_ms` since its start: the attempt is cancelled, the policy gets `finish` with outcome
  "timeout", and the request is submitted again (at most `batch_max_retries` times; then the caller gets
  `TimeoutError`).

So `fn` must be safe to call again. The time an attempt ran before it was stopped is added to `wasted_ms`.
"""

from __future__ import annotations

import asyncio
import math

from simlab.policies import Task


class RuntimeLifecycle:
    def __init__(self, scheduler, timeout_ms: float | None, max_retries: int):
        self.s = scheduler
        self.timeout_ms = timeout_ms
        self.max_retries = max_retries
        self.live: dict[int, asyncio.Task] = {}  # id(task) -> the attempt running now
        self.reason: dict[int, str] = {}  # id(task) -> why its attempt was cancelled: "evicted" or "timeout"
        self.released: set[int] = set()  # stopped too late (the attempt had finished): its slot is already free
        self.timed_out: dict[int, int] = {}
        self.evictions = 0
        self.timeouts = 0
        self.retries = 0
        self.wasted_ms = 0.0

    async def run(self, task: Task, fn, args, kwargs):
        s = self.s
        while True:
            if task.start_ms is None:
                await s._wait_start(task)
            attempt = s._loop.create_task(fn(*args, **kwargs))
            self.live[id(task)] = attempt
            timer = None
            if self.timeout_ms is not None:
                timer = s._loop.call_at(_loop_time(task.start_ms + self.timeout_ms), self._time_out, task, attempt)
            try:
                result = await attempt
            except asyncio.CancelledError:
                reason = self.reason.pop(id(task), None)
                if reason is None:  # the caller was cancelled, and the attempt with it
                    self._end(task, "cancelled")
                    raise
                again = reason == "evicted" or self.timed_out[id(task)] <= self.max_retries
                if asyncio.current_task().cancelling():  # its caller gave up as it was being stopped
                    if again:
                        s._withdraw(task)  # queued again: it never runs again
                    raise
                if again:
                    continue  # queued again by the policy (evicted) or by `_time_out` (retry): wait for it
                raise TimeoutError(f"batch request timed out {self.timed_out[id(task)]} times "
                                   f"(batch_timeout_ms = {self.timeout_ms:g})") from None
            except BaseException:
                self._end(task, "error")
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            self._end(task, "ok")
            return result

    def _end(self, task: Task, outcome: str) -> None:
        self.live.pop(id(task), None)
        if id(task) in self.released:  # the policy gave its slot back when it stopped it, too late
            self.released.discard(id(task))
            self.s._end(task, outcome, release=False)
        else:
            self.s._end(task, outcome)

    # --- what the policy stops ------------------------------------------------------------------------
    def stop(self, victims: list[Task]) -> None:
        now = self.s._now()
        for task in victims:
            attempt = self.live.pop(id(task), None)
            task.payload = self.s._loop.create_future()  # it waits for its next start
            start, task.start_ms = task.start_ms, None
            if attempt is None or attempt.done():
                # It ended already (its caller has yet to resume): the stop came too late. Take it back out of the
                # queue; the caller returns its result, and its slot, given back by the stop, is not freed again.
                self.s.policy.cancel(task)
                self.released.add(id(task))
                task.start_ms = start
                continue
            self.reason[id(task)] = "evicted"
            attempt.cancel()
            self.evictions += 1
            self.wasted_ms += now - start
            task.wasted_ms += now - start

    def _time_out(self, task: Task, attempt: asyncio.Task) -> None:
        if self.live.get(id(task)) is not attempt or attempt.done():
            return
        s = self.s
        del self.live[id(task)]
        self.reason[id(task)] = "timeout"
        attempt.cancel()
        now = s._now()
        self.timeouts += 1
        self.wasted_ms += now - task.start_ms
        task.wasted_ms += now - task.start_ms
        n = self.timed_out[id(task)] = self.timed_out.get(id(task), 0) + 1
        if n > self.max_retries:
            s._end(task, "timeout")  # for good: the policy's finish sees outcome "timeout"
            return
        self.retries += 1
        task.outcome = "timeout"
        started = s._policy_call(s.policy.finish, task)
        task.outcome = task.start_ms = None
        task.payload = s._loop.create_future()
        s._start(started + s._policy_call(s.policy.submit, task))


def _loop_time(ms: float) -> float:
    """The first loop time (s) whose reading in ms is not before `ms` (as the Scheduler's wake timer)."""
    when = ms / 1000.0
    while when * 1000.0 < ms:
        when = math.nextafter(when, math.inf)
    return when
