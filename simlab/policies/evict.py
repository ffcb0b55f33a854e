"""Eviction at the gateway: `evict = "newest"`, `evictAfterMs`, around any policy with two queues.

When an interactive request has waited `evictAfterMs` in the gateway's queue, the newest running batch task is
stopped: one victim per such request (a request that has triggered one never triggers another), newest dispatch
first, as llm-d's in-flight eviction orders its victims (github.com/llm-d/llm-d-router,
pkg/epp/framework/plugins/flowcontrol/eviction/ordering/priority_time.go `PriorityThenTimeOrdering.Less`: lowest
priority first, then the most recently dispatched, "the least sunk cost"). llm-d triggers eviction when a band is
held back at saturation (controller/internal/reclamation.go); simlab triggers it on the interactive request's
wait, the article's own symptom. The victim's slot is given back at once, the victim is queued again at the front
of the batch queue, and the freed slot goes to interactive work first; the driver stops the victim's service
(`take_stops`, policies/base.py) and counts the work thrown away.
"""

from __future__ import annotations

from math import inf, nextafter

from simlab.policies.base import Policy, Task


def overdue_at(submitted_ms: float, after_ms: float) -> float:
    """The first float instant `now` with `now - submitted_ms >= after_ms`."""
    t = submitted_ms + after_ms
    while t - submitted_ms < after_ms:
        t = nextafter(t, inf)
    return t


class Evicting:
    """`inner` (a Priority-family policy) with eviction; everything else is the inner policy's."""

    def __init__(self, inner: Policy, options):
        self.inner = inner
        self.after = options.evict_after_ms
        self._running_batch: dict[Task, None] = {}  # batch tasks in flight, in dispatch order (the newest last)
        self._triggered: set[int] = set()  # ids of waiting interactive tasks that have caused an eviction
        self._stops: list[Task] = []
        self.evictions = 0

    # --- what the drivers read ----------------------------------------------------------------------------
    name = property(lambda self: self.inner.name)
    options = property(lambda self: self.inner.options)
    clock = property(lambda self: self.inner.clock)
    running = property(lambda self: self.inner.running)
    batch_running = property(lambda self: self.inner.batch_running)

    def queued(self):
        return self.inner.queued()

    def batch_cap(self):
        return self.inner.batch_cap()

    def pressure(self):
        return self.inner.pressure()

    def window_stats(self):
        return self.inner.window_stats()

    def may_wake(self) -> bool:
        return True

    def may_stop(self) -> bool:
        return True

    def take_stops(self) -> list[Task]:
        stops, self._stops = self._stops, []
        return stops

    # --- events -------------------------------------------------------------------------------------------
    def submit(self, task: Task) -> list[Task]:
        return self._after(self.inner.submit(task))

    def finish(self, task: Task) -> list[Task]:
        if not task.interactive:
            self._running_batch.pop(task, None)
        return self._after(self.inner.finish(task))

    def wake(self) -> list[Task]:
        return self._after(self.inner.wake())

    def cancel(self, task: Task) -> bool:
        self._triggered.discard(id(task))
        return self.inner.cancel(task)

    def next_check_ms(self) -> float | None:
        times = [t for t in (self.inner.next_check_ms(), self._next_overdue()) if t is not None]
        return min(times) if times else None

    # --- eviction -----------------------------------------------------------------------------------------
    def _after(self, started: list[Task]) -> list[Task]:
        self._note(started)
        if self._running_batch and self.inner._interactive:
            more = self._evict()
            if more:
                started = started + more
        return started

    def _note(self, started: list[Task]) -> None:
        running, triggered = self._running_batch, self._triggered
        for t in started:
            if t.interactive:
                triggered.discard(id(t))
            else:
                running[t] = None

    def _evict(self) -> list[Task]:
        inner = self.inner
        now = inner.clock()
        due = [t for t in inner._interactive
               if id(t) not in self._triggered and now - t.submitted_ms >= self.after]
        victims = min(len(due), len(self._running_batch))
        if not victims:
            return []
        for t in due[:victims]:
            self._triggered.add(id(t))
        for _ in range(victims):
            victim, _ = self._running_batch.popitem()  # the newest dispatch
            inner._ended(victim)
            inner._batch.push_front(victim)
            self._stops.append(victim)
        self.evictions += victims
        started = inner._drain()
        self._note(started)
        return started

    def _next_overdue(self) -> float | None:
        """When the next waiting interactive task becomes overdue (only while batch work runs to evict)."""
        if not self._running_batch:
            return None
        now = self.inner.clock()
        soonest = None
        for t in self.inner._interactive:
            if id(t) in self._triggered:
                continue
            at = overdue_at(t.submitted_ms, self.after)
            if soonest is None or at < soonest:
                soonest = at
        if soonest is None:
            return None
        if not soonest > now:  # overdue already, and nothing to evict it for yet: the next event looks again
            return None
        return soonest
