"""The cheapest SimPy-compatible events: one slotted object and one heap push, no Event machinery.

`Environment.step()` only needs `callbacks` and `_ok` on what it pops. Scheduling at an absolute time
(rather than now + delay) keeps pre-drawn arrival times exact to the last bit, which is what makes the
engine on `delay` agree with `simlab replay`. This touches SimPy's private queue; simpy is pinned.
"""

from __future__ import annotations

from heapq import heappush

from simpy.events import NORMAL, URGENT

__all__ = ["NORMAL", "URGENT", "Fire", "fire_after", "fire_at"]


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
