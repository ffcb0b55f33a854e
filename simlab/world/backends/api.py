"""`api`: a third-party LLM provider behind a gateway that retries rate-limit errors.

The provider enforces three quotas: `concurrency` requests in progress, `rpm` requests and `tpm` tokens
(prompt + output) per minute, the last two over a sliding 60 s window of accepted requests (`rpm`/`tpm`
None: unlimited). Only accepted requests count against the windows; a request is charged its tokens when
it is accepted, and its window entry expires 60 000 ms later. A request that arrives over any limit gets a
429 at once; the gateway retries it after an exponential backoff with jitter,
`min(cap_ms, base_ms * 2**attempt) * (1 - jitter * u)`, u ~ U(0, 1), attempt = retries so far, and gives up
(outcome "failed") when the 429 comes after `retry.max_retries` retries. One u is drawn from
`self.rng` per retry, in the order the 429s happen. An accepted request takes
`Backend.service_ms(task)` (its own service_ms, or the `token_time` model). A request whose tokens exceed
`tpm` on their own can never be accepted: it fails after its retries, as a real provider would refuse it.

No SimPy processes: service ends and retries are timeouts with callbacks.
"""

from __future__ import annotations

from collections import deque

from simlab.world.backends.base import Backend
from simlab.world.events import fire_after

WINDOW_MS = 60_000.0


class ApiBackend(Backend):
    name = "api"

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self.concurrency = config.concurrency
        self.rpm = config.rpm
        self.tpm = config.tpm
        self.retry = config.retry
        self._busy = 0
        self._backoff = 0
        self._window: deque = deque()  # (accepted at ms, tokens), oldest first
        self._window_tokens = 0
        self.rejections_429 = 0
        self.retries = 0
        self.failures = 0
        self.accepted = 0

    # --- the Backend interface ---------------------------------------------------------------------
    def dispatch(self, task) -> None:
        self._attempt(task)

    def busy(self) -> int:
        return self._busy

    def waiting(self) -> int:
        return self._backoff

    def capacity(self) -> int:
        return self.concurrency

    def cancel(self, task) -> None:
        """In service: the provider stops (its quota windows keep the charge: it was accepted). In backoff: the
        retry never happens."""
        if self._disarm(self._on_timeout, task):
            self._busy -= 1
            self._throw_away(task, self.env._now)
        elif self._disarm(self._on_retry, task):
            self._backoff -= 1

    def stats(self) -> dict:
        return {
            "rejections_429": self.rejections_429,
            "retries": self.retries,
            "failures": self.failures,
            "accepted": self.accepted,
        }

    # --- internals -----------------------------------------------------------------------------------
    def _attempt(self, task) -> None:
        now = self.env._now
        tokens = (task.prompt_tokens or 0) + (task.output_tokens or 0)
        if self._admissible(now, tokens):
            self._accept(task, now, tokens)
            return
        self.rejections_429 += 1
        retry = self.retry
        attempt = task.retries
        if attempt >= retry.max_retries:
            self.failures += 1
            task.outcome = "failed"
            self.done(task)
            return
        delay = min(retry.cap_ms, retry.base_ms * 2.0 ** min(attempt, 1023)) * (1.0 - retry.jitter * self.rng.random())
        task.retries = attempt + 1
        self.retries += 1
        self._backoff += 1
        fire_after(self.env, delay, self._on_retry, task)

    def _on_retry(self, event) -> None:
        self._backoff -= 1
        self._attempt(event._value)

    def _admissible(self, now: float, tokens: int) -> bool:
        if self._busy >= self.concurrency:
            return False
        if self.rpm is None and self.tpm is None:
            return True
        window = self._window
        while window and window[0][0] + WINDOW_MS <= now:
            self._window_tokens -= window.popleft()[1]
        if self.rpm is not None and len(window) + 1 > self.rpm:
            return False
        if self.tpm is not None and self._window_tokens + tokens > self.tpm:
            return False
        return True

    def _accept(self, task, now: float, tokens: int) -> None:
        task.start_ms = now
        self._busy += 1
        self.accepted += 1
        if self.rpm is not None or self.tpm is not None:
            self._window.append((now, tokens))
            self._window_tokens += tokens
        self._finish_at(self.service_ms(task), task)

    def _end(self, task) -> None:
        self._busy -= 1
        task.outcome = "ok"
        self.done(task)
