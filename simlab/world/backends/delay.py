"""`delay`: unlimited capacity, each task takes exactly its service time (the article's simulate.ts sleeps)."""

from simlab.world.backends.base import Backend


class DelayBackend(Backend):
    name = "delay"

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self._busy = 0

    def dispatch(self, task) -> None:
        task.start_ms = self.env.now
        self._busy += 1
        self._finish_at(self.service_ms(task), task)

    def _end(self, task) -> None:
        self._busy -= 1
        task.outcome = "ok"
        self.done(task)

    def busy(self) -> int:
        return self._busy

    def cancel(self, task) -> None:
        if self._disarm(self._on_timeout, task):
            self._busy -= 1
            self._throw_away(task, self.env._now)
