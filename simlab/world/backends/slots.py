"""`slots`: K GPU slots. A task that arrives when all are busy waits in the server's own FIFO queue.

This is an inference server's max concurrency: the `Promise.all` arm dispatches everything at once, so
interactive requests queue behind the whole batch backlog here, not in the scheduler.
"""

from collections import deque

from simlab.world.backends.base import Backend


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

    def _start(self, task) -> None:
        task.start_ms = self.env.now
        self._busy += 1
        service = self.service_ms(task)
        self.busy_ms += service
        self._finish_at(service, task)

    def _end(self, task) -> None:
        self._busy -= 1
        task.outcome = "ok"
        if self._queue:
            self._start(self._queue.popleft())
        self.done(task)

    def busy(self) -> int:
        return self._busy

    def waiting(self) -> int:
        return len(self._queue)
