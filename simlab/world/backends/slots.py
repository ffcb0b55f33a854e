"""`slots`: K GPU slots. A task that arrives when all are busy waits in the server's own FIFO queue.

This is an inference server's max concurrency: the `Promise.all` arm dispatches everything at once, so
interactive requests queue behind the whole batch backlog here, not in the scheduler.
"""

from collections import deque
from heapq import heappush

from simlab.policies.base import Observation
from simlab.world.backends.base import Backend
from simlab.world.events import NORMAL, Fire


class SlotsBackend(Backend):
    name = "slots"

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self.slots = config.slots
        self._busy = 0
        self._queue = deque()
        self.busy_ms = 0.0  # slot-milliseconds of service delivered, for conservation checks

    def dispatch(self, task) -> None:
        if self._busy < self.slots:
            self._start(task)
        else:
            self._queue.append(task)

    # Once per task: `_finish_at`, inlined (at most `slots` events exist, reused through the pool).
    def _start(self, task) -> None:
        env = self.env
        now = task.start_ms = env._now
        self._busy += 1
        service = task.service_ms
        if service is None:
            service = self.service_ms(task)
        self.busy_ms += service
        pool = self._pool
        event = pool.pop() if pool else Fire(self._on_timeout, None)
        event._value = task
        heappush(env._queue, (now + service, NORMAL, next(env._eid), event))

    def _end(self, task) -> None:
        task.outcome = "ok"
        self._busy -= 1
        if self._queue:
            self._start(self._queue.popleft())
        self.done(task)

    def busy(self) -> int:
        return self._busy

    def waiting(self) -> int:
        return len(self._queue)

    def capacity(self) -> int:
        return self.slots

    def observe(self) -> Observation:
        # `Backend.observe` without its three calls: a gate reads it on every decision
        return Observation(self._busy, len(self._queue), self.slots, None, None)

    def cancel(self, task) -> None:
        if self._disarm(self._on_timeout, task):
            now = self.env._now
            service = task.service_ms if task.service_ms is not None else self.service_ms(task)
            self.busy_ms -= task.start_ms + service - now  # the part never served
            self._busy -= 1
            self._throw_away(task, now)
            if self._queue:
                self._start(self._queue.popleft())
        else:
            try:
                self._queue.remove(task)  # still waiting for a slot: nothing done, nothing lost
            except ValueError:
                pass
