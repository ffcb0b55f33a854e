"""`continuous-batching`: a vLLM-like inference server that runs many sequences in one forward pass.

The server works in iterations. At each iteration boundary it admits waiting requests in FIFO order while
fewer than `max_num_seqs` sequences run (and, if `max_batched_tokens` is set, while the prompt tokens
admitted in this step fit; a lone request whose prompt is larger than the budget is admitted by itself).
A newly admitted request does its prefill in that iteration and gets its first token at its end; every
later iteration gives each running sequence one more token; a request leaves at the end of the iteration
that produced its `output_tokens`-th token. A request dispatched mid-iteration waits for the next boundary;
one dispatched exactly at a boundary joins the iteration that starts there. An idle server starts an
iteration as soon as a request arrives.

An iteration takes `base_ms + per_token_ms * tokens + per_seq_ms * sequences + admit_ms * admitted`
(tokens: the prompt tokens of the sequences in prefill plus one per decoding sequence; admitted: the
sequences whose prefill runs in it, each costing the engine a fixed amount to take in), or, with a measured
`profile`, the profile's step time interpolated on the number of sequences plus `per_token_ms` per prefill
token and `admit_ms` per admitted sequence. Either way a step
slows down as the batch grows, so batch work in flight slows an interactive request even when a sequence
slot is free: that is the effect this backend exists to show. With `request_ms`, a request passes through
the server's front end before the iteration loop sees it: HTTP, validation and hand-off to the engine process
take `request_ms` each, one request at a time (a real server's front end is one event loop), so a burst of
dispatches queues there (200 requests sent at once reach the engine over 200 x request_ms). Meanwhile the
request is in flight for the scheduler but holds no sequence.

Fast-forward. Simulating each decode iteration as a SimPy event would cost one event per generated token.
Instead the backend keeps a "span": a run of iterations with the same membership. Its first iteration
(index `_iter`, starting at `_t0`) may include prefill and ends at `_t1`; every later one takes the
decode-only step `_d`, so boundary `_iter + 1 + k` is at `_t1 + k * _d`. Each running sequence is keyed by
the index of the iteration that produces its last token, in a heap, so the span's next completion is one
heap peek away and is reached with one timeout. A request dispatched mid-span computes the first boundary
at or after now; if that comes before the scheduled completion, the span's event is moved there (a
generation counter makes the old timeout a no-op); at the boundary the span is closed and a new one begins.
Dispatches made from inside `done()` callbacks at a boundary only queue, and are admitted together right
after, so the common finish-then-start pattern costs no extra event. The result equals an iteration-by-
iteration simulation (tests/test_backend_continuous_batching.py checks this against a naive simulator).
"""

from __future__ import annotations

import csv
import heapq
import io
import math
from collections import deque

import numpy as np

from simlab.errors import CONFIG_MAX_BYTES, InputError, read_text
from simlab.scenario import StepTime
from simlab.world.backends.base import Backend
from simlab.world.events import fire_at


class ContinuousBatchingBackend(Backend):
    name = "continuous-batching"

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self.max_seqs = config.max_num_seqs
        self.max_tokens = config.max_batched_tokens
        step = config.step if config.step is not None else StepTime()
        self._base = step.base_ms
        self._per_token = step.per_token_ms
        self._per_seq = step.per_seq_ms
        self._admit_ms = step.admit_ms
        self._request_ms = step.request_ms
        self._in_front = 0  # dispatched, still in the front end (request_ms)
        self._front_free = 0.0  # when the front end has handled every request dispatched so far
        self._table: list[float] | None = None  # with a profile: step ms by number of sequences
        self._queue: deque = deque()
        self._running: list = []  # heap of (index of the iteration giving the last token, admission no., task)
        self._admitted = 0
        # the current span (see the module docstring)
        self._active = False
        self._iter = 0  # index of the span's first iteration (= iterations completed before it)
        self._t0 = 0.0
        self._t1 = 0.0
        self._d = 0.0
        self._prefill: list = []  # tasks admitted at iteration `_iter`
        self._prefill_tokens = 0
        self._next_idx = -1  # the boundary the span stops at next (a completion, or a join)
        self._next_at = 0.0  # its time
        self._pending_at = None  # time of the live SimPy timeout, if any (may be earlier than _next_at)
        self._gen = 0  # generation of the live timeout; older ones are no-ops
        self._holding = False  # inside a boundary's done() callbacks: dispatches only queue
        self._leaving: list = []  # (boundary index, running entry) of stopped sequences still in the batch
        self._finishing = ()  # inside a boundary's done() callbacks: the tasks ending there, in turn
        # statistics
        self._seq_iters = 0
        self._busy_ms = 0.0
        self._prefill_total = 0
        self._max_batch = 0

    # --- configuration ---------------------------------------------------------------------------------
    def load_profile(self, scenario) -> None:
        """Read `step.profile` (CSV `batch_size,step_ms`), resolved from the scenario's folder."""
        step = self.config.step
        if step is None or step.profile is None:
            return
        path = scenario.resolve(step.profile)
        sizes, times = read_profile(path)
        self.set_profile(sizes, times)

    def set_profile(self, batch_sizes, step_ms) -> None:
        """Use measured step times (ms) by batch size; linear in between, clamped at the ends."""
        xs = np.asarray(batch_sizes, dtype=float)
        ys = np.asarray(step_ms, dtype=float)
        if xs.ndim != 1 or xs.shape != ys.shape or len(xs) == 0:
            raise ValueError("a step profile needs equal, non-empty lists of batch sizes and step times")
        if np.any(np.diff(xs) <= 0):
            raise ValueError("profile batch sizes must be strictly increasing")
        if np.any(ys <= 0):
            raise ValueError("profile step times must be positive")
        n = np.arange(self.max_seqs + 1, dtype=float)
        self._table = [float(v) for v in np.interp(n, xs, ys)]

    # --- the Backend interface ---------------------------------------------------------------------
    def dispatch(self, task) -> None:
        if self._request_ms:
            self._in_front += 1
            now = self.env._now
            self._front_free = (now if now > self._front_free else self._front_free) + self._request_ms
            fire_at(self.env, self._front_free, self._reach_engine, task)
            return
        self._join(task)

    def _reach_engine(self, event) -> None:
        self._in_front -= 1
        self._join(event._value)

    def _join(self, task) -> None:
        queue = self._queue
        queue.append(task)
        if self._holding:
            return
        now = self.env._now
        if not self._active:  # idle: an iteration starts right now
            self._active = True
            self._t0 = now
            self._admit(now)
            self._plan(now)
            return
        if len(queue) > 1 or len(self._running) >= self.max_seqs:
            return  # behind a blocked head, or full: it can only join when a sequence leaves
        if now == self._t0:  # the current iteration starts now and has done nothing yet: re-plan it
            if self._admit(now):
                self._plan(now)
            elif self._next_idx != self._iter + 1:  # held back by the token budget: retry next boundary
                self._set_event(self._iter + 1)
            return
        idx, b = self._boundary_from(now)  # mid-span
        if idx >= self._next_idx:
            return  # the scheduled boundary comes first, or is this one: it admits the task
        if b == now:  # a boundary right now: close the span here and start the next one
            self._close(now, idx)
            self._admit(now)
            self._plan(now)
        else:
            self._set_event(idx)

    def _boundary_from(self, now: float) -> tuple[int, float]:
        """The current span's first boundary at or after `now`: (its index, its time)."""
        t1, d = self._t1, self._d
        if now <= t1:
            k, b = 0, t1
        else:
            k = math.ceil((now - t1) / d)
            b = t1 + k * d
            while b < now:
                k += 1
                b = t1 + k * d
            while k > 0 and t1 + (k - 1) * d >= now:
                k -= 1
                b = t1 + k * d
        return self._iter + 1 + k, b

    def busy(self) -> int:
        return len(self._running)

    def capacity(self) -> int:
        return self.max_seqs

    # --- stopping a request (timeouts, eviction) ------------------------------------------------------------
    def cancel(self, task) -> None:
        """Stop `task`. In the front end or the queue it has done nothing. A running sequence cannot leave an
        iteration in progress: it leaves at the first boundary at or after now (at once when the iteration starts
        now, or inside a boundary's done() callbacks), and the work it has done by then is thrown away: its prompt
        once the prefill ran, one token per iteration since, and the time since admission."""
        if self._request_ms and self._disarm(self._reach_engine, task):
            self._in_front -= 1
            return
        try:
            self._queue.remove(task)
            return
        except ValueError:
            pass
        entry = next((e for e in self._running if e[2] is task), None)
        now = self.env._now
        if entry is None:
            if task in self._finishing:  # it ended at this boundary, unreported yet: all its work is thrown away
                self._finishing[self._finishing.index(task)] = None
                task.wasted_tokens += (task.prompt_tokens or 0) + (task.output_tokens or 1)
                task.wasted_ms += now - task.start_ms
            return
        out = task.output_tokens or 1
        admitted = entry[0] - (out if out > 1 else 1) + 1  # the iteration of its prefill
        at_once = self._holding or now == self._t0  # the iteration starting now has done nothing yet
        leave, at = (self._iter, now) if at_once else self._boundary_from(now)
        if leave > admitted:
            task.wasted_tokens += (task.prompt_tokens or 0) + leave - admitted
        task.wasted_ms += at - task.start_ms
        if not at_once:
            self._leaving.append((leave, entry))
            if leave < self._next_idx:
                self._set_event(leave)
            return
        self._remove(entry)
        if task in self._prefill:  # admitted into the iteration that starts now: its prefill never runs
            self._prefill.remove(task)
            prompt = task.prompt_tokens or 0
            self._prefill_tokens -= prompt
            self._prefill_total -= prompt
        if self._holding:
            return  # the boundary admits and plans after its callbacks
        if self._running or self._queue:
            self._admit(now)
            self._plan(now)
        else:
            self._active = False
            self._next_idx = -1
            self._gen += 1  # the pending boundary is no longer one
            self._pending_at = None

    def _remove(self, entry) -> None:
        running = self._running
        running.remove(entry)
        heapq.heapify(running)

    def _drop_leaving(self, idx: int) -> None:
        """At boundary `idx`: the stopped sequences that leave here leave the batch."""
        keep = []
        for leave, entry in self._leaving:
            if leave <= idx:
                self._remove(entry)
            else:
                keep.append((leave, entry))
        self._leaving = keep

    def waiting(self) -> int:
        return len(self._queue) + self._in_front

    def stats(self) -> dict:
        iterations = self._iter
        return {
            "iterations": iterations,
            "mean_batch_size": self._seq_iters / iterations if iterations else 0.0,
            "max_batch_size": self._max_batch,
            "busy_ms": self._busy_ms,
            "prefill_tokens": self._prefill_total,
            "output_tokens": self._seq_iters,  # one token per sequence per iteration
        }

    # --- internals -----------------------------------------------------------------------------------
    def _admit(self, now: float) -> bool:
        """Admit waiting tasks (FIFO) into iteration `_iter`, which starts now. True if any joined."""
        queue, running, budget = self._queue, self._running, self.max_tokens
        joined = False
        while queue and len(running) < self.max_seqs:
            task = queue[0]
            prompt = task.prompt_tokens or 0
            if budget is not None and self._prefill and self._prefill_tokens + prompt > budget:
                break
            queue.popleft()
            task.start_ms = now
            self._prefill.append(task)
            self._prefill_tokens += prompt
            self._prefill_total += prompt
            out = task.output_tokens or 1
            heapq.heappush(running, (self._iter + (out if out > 1 else 1) - 1, self._admitted, task))
            self._admitted += 1
            joined = True
        if len(running) > self._max_batch:
            self._max_batch = len(running)
        return joined

    def _plan(self, now: float) -> None:
        """Time the span that starts now at iteration `_iter` and schedule its next event."""
        n = len(self._running)
        prefill = self._prefill_tokens
        if self._table is None:
            decoding = n - len(self._prefill)
            first = self._base + self._per_token * (prefill + decoding) + self._per_seq * n
            d = self._base + (self._per_token + self._per_seq) * n
        else:
            d = self._table[n]
            first = d + self._per_token * prefill
        if self._admit_ms:
            first += self._admit_ms * len(self._prefill)
        self._t0, self._t1, self._d = now, now + first, d
        t1 = self._t1
        for task in self._prefill:
            task.ttft_ms = t1 - task.arrival_ms
        if self._queue and n < self.max_seqs:
            self._set_event(self._iter + 1)  # the head waits only for the token budget: next boundary
        else:
            self._set_event(self._running[0][0] + 1)

    def _set_event(self, idx: int) -> None:
        """Make boundary `idx` of the current span the next stop. A live timeout that fires no later is
        kept (it re-arms itself for the new time when it fires), so a burst of dispatches at one instant,
        each re-planning the iteration, costs one extra event rather than one each."""
        k = idx - self._iter - 1
        at = self._t1 + k * self._d if k else self._t1
        self._next_idx = idx
        self._next_at = at
        if self._pending_at is None or self._pending_at > at:
            self._arm(at)

    def _arm(self, at: float) -> None:
        self._gen += 1
        self._pending_at = at
        now = self.env._now
        fire_at(self.env, at if at > now else now, self._on_boundary, (self._gen, at))  # lands exactly on `at`

    def _close(self, now: float, idx: int) -> None:
        """End the current span at boundary `idx` (now): count its iterations, reset the prefill set."""
        n = len(self._running)
        self._seq_iters += n * (idx - self._iter)
        self._busy_ms += now - self._t0
        self._iter = idx
        self._t0 = now
        if self._prefill:
            self._prefill = []
            self._prefill_tokens = 0

    def _on_boundary(self, event) -> None:
        gen, at = event._value
        if gen != self._gen:
            return  # superseded by an earlier stop
        self._pending_at = None
        if self._next_at > at:  # the stop moved later since this timeout was armed
            self._arm(self._next_at)
            return
        now = self.env._now
        idx = self._next_idx
        self._close(now, idx)
        if self._leaving:
            self._drop_leaving(idx)
        running = self._running
        last = idx - 1
        if running and running[0][0] <= last:
            finished = []
            while running and running[0][0] <= last:
                task = heapq.heappop(running)[2]
                task.outcome = "ok"
                finished.append(task)
            self._holding = True
            self._finishing = finished
            try:
                for task in finished:
                    if task is not None:  # None: stopped by a callback before its own turn came
                        self.done(task)
            finally:
                self._holding = False
                self._finishing = ()
        if running or self._queue:
            self._admit(now)
            self._plan(now)
        else:
            self._active = False
            self._next_idx = -1


def read_profile(path) -> tuple[list[float], list[float]]:
    """A step-time profile CSV with columns batch_size,step_ms, sorted by batch size."""
    text = read_text(path, "step profile", "a CSV with columns batch_size,step_ms", CONFIG_MAX_BYTES)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputError(path, None, f"not a readable CSV ({exc})") from None
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise InputError(path, None, "empty step profile (expected a header batch_size,step_ms)")
    header = [c.strip() for c in rows[0]]
    missing = [c for c in ("batch_size", "step_ms") if c not in header]
    if missing:
        raise InputError(path, "header", f"missing column(s) {', '.join(missing)} (expected batch_size,step_ms)")
    ib, it = header.index("batch_size"), header.index("step_ms")
    pairs = []
    for line, row in enumerate(rows[1:], start=2):
        try:
            b, t = float(row[ib]), float(row[it])
        except (ValueError, IndexError):
            raise InputError(path, f"line {line}", f"expected numbers batch_size,step_ms, found {','.join(row)!r}") from None
        if not (math.isfinite(b) and b >= 1):
            raise InputError(path, f"line {line}", f"batch_size must be at least 1 (found {row[ib]!r})")
        if not (math.isfinite(t) and t > 0):
            raise InputError(path, f"line {line}", f"step_ms must be positive (found {row[it]!r})")
        pairs.append((b, t, line))
    if not pairs:
        raise InputError(path, None, "no rows after the header")
    pairs.sort()
    for (b0, _, _), (b1, _, line) in zip(pairs, pairs[1:]):
        if b1 == b0:
            raise InputError(path, f"line {line}", f"batch_size {b1:g} appears twice")
    return [p[0] for p in pairs], [p[1] for p in pairs]
