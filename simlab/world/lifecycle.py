"""Batch lifecycle in the engine: timeouts, retries, and the policy's stops (eviction).

Installed only when a run needs it (a workload with `timeout_ms`, or a policy that may stop tasks), by
rebinding the engine's `_submit`, `_finish`, `_wake_policy` and `_dispatch`: a run without them keeps the plain
path, not one check more per event.

- Each dispatch is an attempt (`task.attempts`). A batch task of a workload with `timeout_ms` is stopped that long
  after its dispatch (the time it has been the backend's, its own queue included: what a client's request timeout
  measures) unless it ended: the backend cancels it (the work thrown away goes to `task.wasted_*`), the policy
  gets `finish` with outcome "timeout", and the task is sent again (`submit`, the back of the batch queue) if it
  has timed out at most `max_retries` times, or ends with outcome "timeout".
- After every policy call the engine takes the policy's stops (`take_stops`, simlab/policies/base.py) and
  cancels their service before dispatching what the call started; the policy has already queued them again.

Counters for the run's summary: `timeouts` (attempts stopped by a timeout), `evictions` (attempts stopped by the
policy), `retries` (attempts sent again after a timeout).
"""

from __future__ import annotations

from simlab.world.events import fire_at
from simlab.world.workloads import workload_keys


def workload_limits(scenario) -> tuple[dict[str, tuple[float, int]], dict[str, float]]:
    """By workload label: (timeout_ms, max_retries) of those with a timeout, deadline_ms of those with one."""
    from simlab.world.workloads import _label

    limits, deadlines = {}, {}
    for key, w in zip(workload_keys(scenario), scenario.workload):
        label = _label(w, key)
        if w.timeout_ms is not None:
            limits[label] = (w.timeout_ms, w.max_retries)
        if w.deadline_ms is not None:
            deadlines[label] = w.deadline_ms
    return limits, deadlines


class Lifecycle:
    def __init__(self, engine, limits: dict[str, tuple[float, int]]):
        """`limits`: workload label -> (timeout_ms, max_retries), for the workloads with a timeout."""
        self.engine = engine
        self.limits = limits
        self.live: dict[int, int] = {}  # row -> attempt number, for attempts in the backend now
        self.timed_out: dict[int, int] = {}  # row -> timeouts so far
        self.timeouts = 0
        self.evictions = 0
        self.retries = 0

    def install(self) -> None:
        e, policy = self.engine, self.engine.policy
        dispatch = e.backend.dispatch
        live, limits, env = self.live, self.limits, e.env
        labels = e.workload.labels
        codes = e.workload.source

        def send(task) -> None:
            task.attempts = attempt = task.attempts + 1
            live[task.index] = attempt
            if limits and not task.interactive:
                label = task.source if task.source is not None else labels[codes[task.index]]
                limit = limits.get(label)
                if limit is not None:
                    fire_at(env, env._now + limit[0], self._on_timeout, (task, attempt))
            dispatch(task)

        e._dispatch = send
        if policy.may_stop():
            take = policy.take_stops

            def stopping(call):
                def wrapped(*args):
                    started = call(*args)
                    stops = take()
                    if stops:
                        self._stop(stops)
                    return started
                return wrapped

            e._submit, e._finish, e._wake_policy = stopping(e._submit), stopping(e._finish), stopping(e._wake_policy)
        finish = e._finish

        def finished(task):  # an attempt that ended in the backend is no longer live
            live.pop(task.index, None)
            return finish(task)

        e._finish = finished

    def _stop(self, tasks) -> None:
        cancel = self.engine.backend.cancel
        for task in tasks:
            if self.live.pop(task.index, None) is None:
                continue  # dispatched in this very call and not yet sent: nothing runs to stop
            cancel(task)
            task.start_ms = None  # its next attempt starts afresh
            self.evictions += 1

    def _on_timeout(self, event) -> None:
        task, attempt = event._value
        if self.live.get(task.index) != attempt:
            return  # that attempt ended, or was stopped, before its time was up
        e = self.engine
        del self.live[task.index]
        e.backend.cancel(task)
        self.timeouts += 1
        n = self.timed_out.get(task.index, 0) + 1
        self.timed_out[task.index] = n
        label = task.source if task.source is not None else e.workload.labels[e.workload.source[task.index]]
        task.outcome = "timeout"
        if n > self.limits[label][1]:
            e._done(task)  # for good: recorded with outcome "timeout", its slot given back, its caller told
            return
        self.retries += 1
        started = e._finish(task)
        task.outcome = None
        task.start_ms = None
        started = started + e._submit(task)  # a new attempt, at the back of the queue
        e._start(started)

    def counters(self) -> dict:
        return {"timeouts": self.timeouts, "evictions": self.evictions, "timeout_retries": self.retries}
