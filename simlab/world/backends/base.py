"""What a backend is: something that serves dispatched tasks on a SimPy clock and reports when each ends.

The engine calls `dispatch(task)` when the policy starts a task. The backend sets `task.start_ms` when
service really begins (after any queueing of its own) and calls `done(task)` exactly once when the task
ends, with `task.outcome` set ("ok" or "failed"). Backends draw randomness only from the generator they
are given, so every policy sees the same draws for the same seed.

`cancel(task)` stops a dispatched task now (a timeout, an eviction): the backend frees what it holds, adds the
work thrown away to `task.wasted_tokens` (prefill tokens computed plus tokens generated) and `task.wasted_ms`
(service time consumed), and never calls `done(task)` for that dispatch. `observe()` is the backend as a policy
sees it (`simlab.policies.base.Observation`).
"""

from __future__ import annotations

from heapq import heappush
from typing import Callable

import numpy as np
import simpy

from simlab.policies.base import Observation, Task
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

    def capacity(self) -> int | None:
        """How many tasks it serves at once (None: unlimited)."""
        return None

    def observe(self) -> Observation:
        """The backend now, for policies that read it (no KV cache here: a KV backend fills those fields)."""
        return Observation(self.busy(), self.waiting(), self.capacity(), None, None)

    def cancel(self, task: Task) -> None:
        """Stop serving `task` now (see the module docstring)."""
        raise NotImplementedError(f"the {self.name} backend cannot stop a running task")

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

    # --- stopping work (rare: a heap scan here keeps the per-task path free of bookkeeping) -----------------------
    def _disarm(self, callback, task: Task) -> bool:
        """Turn the pending event that would call `callback` for `task` into a no-op; False if there is none."""
        for item in self.env._queue:
            event = item[3]
            if event.__class__ is Fire and event._value is task and event.callbacks[0] == callback:
                event.callbacks = [self._on_disarmed]
                return True
        return False

    def _on_disarmed(self, event) -> None:
        if event.callbacks is not None:  # a pooled completion event: back to the pool, as `_on_timeout` does
            event.callbacks = [self._on_timeout]
            self._pool.append(event)

    def _throw_away(self, task: Task, now: float) -> None:
        """Count the work of a task stopped at `now` after starting at `task.start_ms`: its service time, and,
        with a token model, the prompt once its prefill is done plus the output tokens produced since."""
        if task.start_ms is None:
            return
        elapsed = now - task.start_ms
        task.wasted_ms += elapsed
        task.wasted_tokens += tokens_done(task, elapsed, self.config.token_time)


def tokens_done(task: Task, elapsed_ms: float, model) -> int:
    """Tokens a task has computed `elapsed_ms` into its service under a `token_time` model: its prompt once the
    prefill (base + per prompt token) is over, then one per `per_output_token_ms`; 0 without tokens or a model."""
    if task.prompt_tokens is None or model is None:
        return 0
    prefill = model.base_ms + model.per_prompt_token_ms * task.prompt_tokens
    if elapsed_ms < prefill:
        return 0
    per = model.per_output_token_ms
    out = task.output_tokens if per <= 0 else min(task.output_tokens, int((elapsed_ms - prefill) // per))
    return task.prompt_tokens + out
