"""The cheapest SimPy-compatible events: one slotted object and one heap push, no Event machinery.

`Environment.step()` only needs `callbacks` and `_ok` on what it pops. Scheduling at an absolute time
(rather than now + delay) keeps pre-drawn arrival times exact to the last bit, which is what makes the
engine on `delay` agree with `simlab replay`. This touches SimPy's private queue; simpy is pinned.

`run_until` never touches a `Fire` after calling it, so its callback may push the same object again (the
engine's arrival stream has one; the slots backend keeps a pool): an allocation saved per event.
`Environment.step()` empties `callbacks` before calling, so a reused `Fire` needs `run_until`.
"""

from __future__ import annotations

from heapq import heappop, heappush

from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, URGENT, EventPriority

__all__ = ["NORMAL", "URGENT", "Fire", "fire_after", "fire_at", "run_until"]


class Fire:
    __slots__ = ("callbacks", "_ok", "_value")

    def __init__(self, callback, value):
        self.callbacks = [callback]
        self._ok = True
        self._value = value


def fire_at(env, time: float, callback, value=None, priority=NORMAL) -> None:
    """Call `callback(event)` at absolute `time`; `event._value` is `value`."""
    heappush(env._queue, (time, priority, next(env._eid), Fire(callback, value)))


def fire_after(env, delay: float, callback, value=None, priority=NORMAL) -> None:
    """As SimPy's timeout: at `now + delay`, computed the same way."""
    heappush(env._queue, (env._now + delay, priority, next(env._eid), Fire(callback, value)))


def run_until(env, until) -> None:
    """`env.run(until=until)` for an event `until`, in the same order with the same results, but a `Fire`
    is called straight from the loop: no `step()` call and no callback-list swap for the two events of
    every task. Anything else is processed as `Environment.step()` does (simpy 4.1.2, pinned)."""
    if until.callbacks is None:
        return
    until.callbacks.append(StopSimulation.callback)
    queue = env._queue
    try:
        while queue:
            item = heappop(queue)
            env._now = item[0]
            event = item[3]
            if event.__class__ is Fire:
                event.callbacks[0](event)
                continue
            # SimPy's events (the sampler, closed-loop users): Environment.step()'s body after its heappop
            callbacks, event.callbacks = event.callbacks, None
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                event.callbacks = callbacks[callbacks.index(callback) + 1:]
                env.schedule(event, EventPriority(-1))
                raise
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
    except StopSimulation:
        return
    raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}') from EmptySchedule()
