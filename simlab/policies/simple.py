"""The baselines the adaptive scheduler is compared with."""

from __future__ import annotations

from simlab.policies.base import Policy, Task
from simlab.policies.queues import FifoQueue, make_queue


class Unscheduled(Policy):
    """The article's `Promise.all` arm: every task starts the moment it arrives."""

    name = "unscheduled"

    def submit(self, task: Task) -> list[Task]:
        task.submitted_ms = self.clock()
        self._started(task)
        return [task]

    def finish(self, task: Task) -> list[Task]:
        self._ended(task)
        return []

    def queued(self) -> tuple[int, int]:
        return (0, 0)


class Fifo(Policy):
    """One queue in arrival order, total cap only."""

    name = "fifo"

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        self.max_concurrency = options.max_concurrency
        # Always submission order: tieBreak is about the two-class queues; a seed-heap here would make
        # this policy LIFO-ish among its (all equal) tasks, which is not what "fifo" means.
        self._queue = FifoQueue()
        self._batch_queued = 0

    def submit(self, task: Task) -> list[Task]:
        task.submitted_ms = self.clock()
        self._queue.push(task)
        if not task.interactive:
            self._batch_queued += 1
        return self._drain()

    def finish(self, task: Task) -> list[Task]:
        self._ended(task)
        return self._drain()

    def cancel(self, task: Task) -> bool:
        if not self._queue.remove(task):
            return False
        if not task.interactive:
            self._batch_queued -= 1
        return True

    def _drain(self) -> list[Task]:
        started = []
        while self.running < self.max_concurrency:
            task = self._queue.pop()
            if task is None:
                break
            if not task.interactive:
                self._batch_queued -= 1
            self._started(task)
            started.append(task)
        return started

    def queued(self) -> tuple[int, int]:
        return (len(self._queue) - self._batch_queued, self._batch_queued)


class Priority(Policy):
    """Two queues, interactive first, total cap only: "just a priority queue".

    `static` adds a fixed batch cap; `adaptive` overrides `_batch_limit` with the article's rule.
    """

    name = "priority"

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        self.max_concurrency = options.max_concurrency
        self._interactive = make_queue(options.tie_break, 0)
        self._batch = make_queue(options.tie_break, 10)
        self._cap = float("inf")

    def submit(self, task: Task) -> list[Task]:
        task.submitted_ms = self.clock()
        (self._interactive if task.interactive else self._batch).push(task)
        return self._drain()

    def finish(self, task: Task) -> list[Task]:
        self._ended(task)
        return self._drain()

    def cancel(self, task: Task) -> bool:
        return (self._interactive if task.interactive else self._batch).remove(task)

    def _batch_limit(self) -> float:
        return self._cap

    def _drain(self) -> list[Task]:
        # The reference's drain(): interactive first; the batch limit is evaluated afresh on every pass
        # that reaches it (this matters for per-evaluation smoothing).
        started = []
        interactive, batch = self._interactive, self._batch
        running, most = self.running, self.max_concurrency
        while running < most:
            if interactive:
                started.append(interactive.take())
                running += 1
                continue
            self.running = running
            limit = self._batch_limit()
            if self.batch_running >= limit or not batch:
                break
            task = batch.take()
            running += 1
            self.batch_running += 1
            task.cap_at_dispatch = limit
            started.append(task)
        self.running = running
        return started

    def queued(self) -> tuple[int, int]:
        return (len(self._interactive), len(self._batch))

    def batch_cap(self) -> float:
        return self._cap


class Static(Priority):
    """`priority` plus a fixed batch cap, `batchMaxConcurrency`."""

    name = "static"

    def __init__(self, options, clock, observe=None):
        super().__init__(options, clock, observe)
        self._cap = options.batch_max_concurrency
