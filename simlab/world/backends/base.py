"""What a backend is: something that serves dispatched tasks on a SimPy clock and reports when each ends.

The engine calls `dispatch(task)` when the policy starts a task. The backend sets `task.start_ms` when
service really begins (after any queueing of its own) and calls `done(task)` exactly once when the task
ends, with `task.outcome` set ("ok" or "failed"). Backends draw randomness only from the generator they
are given, so every policy sees the same draws for the same seed.
"""

from __future__ import annotations

from heapq import heappush
from typing import Callable

import numpy as np
import simpy

from simlab.policies.base import Task
from simlab.world.events import NORMAL, Fire

Done = Callable[[Task], None]


class Backend:
    name = "base"

    def __init__(self, env: simpy.Environment, done: Done, config, rng: np.random.Generator):
        self.env = env
        self.done = done
        self.config = config
        self.rng = rng
        self._pool: list = []  # completion events of ended tasks, for reuse (`_finish_at`)

    def dispatch(self, task: Task) -> None:
        raise NotImplementedError

    def busy(self) -> int:
        """Tasks in service now."""
        raise NotImplementedError

    def waiting(self) -> int:
        """Tasks dispatched to the backend but queued inside it."""
        return 0

    def service_ms(self, task: Task) -> float:
        """A task's service time in isolation: its own service_ms, or the token model's estimate."""
        if task.service_ms is not None:
            return task.service_ms
        model = self.config.token_time
        return model.base_ms + model.per_prompt_token_ms * task.prompt_tokens + model.per_output_token_ms * task.output_tokens

    def _finish_at(self, delay: float, task: Task) -> None:
        """Call `self._end(task)` after `delay` ms, with one SimPy event and no process: one of the pool's
        when there is one (events of ended tasks, reused: an allocation saved per task)."""
        pool, env = self._pool, self.env
        event = pool.pop() if pool else Fire(self._on_timeout, None)
        event._value = task
        heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), event))

    def _on_timeout(self, event) -> None:
        if event.callbacks is not None:  # `run_until` is done with it (`Environment.step()` empties it: no reuse)
            self._pool.append(event)
        self._end(event._value)

    def _end(self, task: Task) -> None:
        raise NotImplementedError
