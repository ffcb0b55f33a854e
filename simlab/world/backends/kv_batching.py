"""`continuous-batching` with a KV cache and engine scheduling: vLLM's V1 scheduler, preemption by recompute.

Selected instead of `continuous_batching.py` when `[backend]` sets `kv_cache_tokens` or `scheduling =
"priority"`; the step-time model (base/per_token/per_seq/admit/request_ms/profile) and the front end are
that backend's, so a calibration carries over. What is added, rule by rule, with where vLLM does it
(vllm/v1/core/sched/scheduler.py `Scheduler.schedule()` unless said otherwise):

- KV cache. `kv_cache_tokens // kv_block_tokens` blocks (vLLM's num_gpu_blocks; `kv_block_tokens` is its
  --block-size, default 16). A request holds ceil(tokens / block) blocks for the tokens it has computed
  plus the one it computes next (kv_cache_manager.py `KVCacheManager.allocate_slots`: blocks for
  num_computed_tokens + num_new_tokens): its prompt at admission, one more token per decode step, so it
  needs a new block every `kv_block_tokens` steps. Blocks are freed when it finishes, is preempted or is
  cancelled (`KVCacheManager.free`). KV use is used / total blocks (block_pool.py `BlockPool.get_usage`,
  exported as `vllm:kv_cache_usage_perc`).
- One step = one schedule() and one forward pass. First the running requests, in the order they were
  admitted (`self.running`): each needs its next block; when the pool has none, the scheduler preempts
  (FCFS: the last request of `self.running`, `self.running.pop()`; priority: the running request with the
  largest (priority, arrival), `max(self.running, key=lambda r: (r.priority, r.arrival_time))`), and retries,
  until the block is found or the request itself was the one preempted, which ends the running pass for
  this step (the requests after it are not scheduled in this step: `break`). A preempted request frees its
  KV, its computed tokens are reset (`_preempt_request`: num_computed_tokens = 0) and it goes back to the
  waiting queue (FCFS: at its front, `prepend_request`; priority: into the heap). On resumption it prefills
  its prompt and every token generated so far in one step (preemption = recompute): the tokens it had
  computed (vLLM's num_computed_tokens at preemption: prompt + generated - 1) are counted as recomputed.
- Then, only if nothing was preempted in this step (`if not preempted_reqs`), the waiting queue: in FCFS
  order, or by (priority, arrival) (request_queue.py `PriorityRequestQueue`, a heap on `Request.__lt__`).
  Its head is admitted while fewer than `max_num_seqs` run, the prompt tokens of this step fit
  `max_batched_tokens` (as today's backend: a lone larger prompt is admitted alone) and the pool has
  ceil(tokens / block) free blocks for what it prefills (prompt, or prompt + generated after a preemption);
  the first head that cannot be admitted stops the pass (`break`).
- Priority: interactive requests have priority 0, batch 1 (a lower value is served first, as in vLLM);
  "arrival" is the order in which requests reached the engine.
- `preempt_on = "kv"` (default) is V1 as released: a waiting request never preempts. Under KV pressure it
  gets the blocks that running requests' preemptions free (those preempt the lowest priority first), but
  when `max_num_seqs` is full it waits for a running request to end (vLLM issue 40004).
  `preempt_on = "kv-or-seqs"` adds the fix proposed for that issue (vLLM pull requests 45561 and 54530):
  with priority scheduling, when `max_num_seqs` is full, a waiting request of strictly higher priority
  preempts the running request with the largest (priority, arrival), if it can then be admitted (its
  prompt fits the step's token budget and the blocks free once the victim's are released). As there, a
  waiting request blocked by KV alone still does not preempt.
- A step that schedules nothing (every request it reached was preempted) runs no forward pass
  (gpu_model_runner.py returns at once when no token is scheduled): it takes no time and the next step is
  scheduled at once.
- A request larger than the whole cache (prompt + output - 1 tokens) could never run; vLLM refuses such a
  request (prompt + max_tokens over max_model_len, which its KV cache must hold at start-up). It ends at
  once as failed. The scenario loader rejects a cache too small for the largest request when that is known.
- `cancel(task)` (the gateway gives up on a request): one waiting in the engine or its front end leaves at
  once; a running one leaves the batch at the end of the step in progress (vLLM aborts between steps), its
  blocks freed then. Its computed tokens (including those of the step in progress) go to
  `task.wasted_tokens`, the time since its admission to `task.wasted_ms`.

Not modelled: chunked prefill (V1 splits long prefills across steps under max_num_batched_tokens; here a
prefill runs whole in one step and only prompt tokens count against the budget, as in today's backend),
prefix caching (no block is shared between requests: every prompt is computed), the allocation watermark
(0 by default in V1), speculative decoding, async scheduling and KV offloading or swapping.

Fast-forward, as in today's backend: a span is a run of steps with the same membership, its first step
perhaps with prefills; every request in it needs a new block once every `kv_block_tokens` steps, at the
steps congruent to its `phase` modulo the block size. With `counts[phase]` (running requests per phase)
the blocks in use at any step of a span are known in O(block), so the first step at which the pool runs
dry is computed when the span is planned and becomes one more stop beside the next completion. Steps are
simulated one by one only there (preemptions) and at admissions and completions. Boundaries run after
every other event of their instant (`LATE`), so every request that reaches the engine at a boundary's
instant is in its queue when that step is scheduled, whatever the event order. One that a later event of
that instant brings (a closed-loop user with no think time) is admitted by a second waiting pass at that
instant: in FCFS order the same as one pass; with priority, after what the first pass admitted. The result
equals a step-by-step transcription of the rules above (tests/test_backend_kv_batching.py).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from simlab.policies.base import Observation
from simlab.world.backends.continuous_batching import ContinuousBatchingBackend
from simlab.world.events import NORMAL, fire_at

LATE = NORMAL + 1  # a boundary runs after every other event of its instant
INTERACTIVE_PRIORITY, BATCH_PRIORITY = 0, 1  # vLLM: the lower value is served first


class _Seq:
    """One request inside the engine, kept across preemptions. A life: from an admission at step `start`
    (prefilling `prefill` tokens) to its end; `generated`: tokens generated before this life."""

    __slots__ = ("task", "priority", "no", "prompt", "output", "generated", "prefill", "start", "last", "phase",
                 "since", "admission", "cancelled")

    def __init__(self, task, no: int):
        self.task = task
        self.priority = INTERACTIVE_PRIORITY if task.interactive else BATCH_PRIORITY
        self.no = no  # order of arrival at the engine
        self.prompt = task.prompt_tokens or 0
        out = task.output_tokens or 1
        self.output = out if out > 1 else 1
        self.generated = 0
        self.prefill = 0
        self.start = 0
        self.last = 0  # the step that gives its last token (this life)
        self.phase = 0  # it needs a new block at the steps k with k % block == phase
        self.since = 0.0  # when this life began (ms)
        self.admission = 0  # admission number of this life: the order of `self.running` in vLLM
        self.cancelled = False


class KvBatchingBackend(ContinuousBatchingBackend):
    name = "continuous-batching"

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self._block = config.block_tokens
        blocks = config.kv_blocks
        self._kv = blocks is not None
        self._blocks = blocks if blocks is not None else 0
        self._priority = config.scheduling == "priority"
        self._seqs_preempt = self._priority and config.preempt_on == "kv-or-seqs"
        self._waiting: deque | list = [] if self._priority else deque()  # priority: a heap of (priority, no, seq)
        self._members: dict = {}  # running, in admission order (vLLM's self.running)
        self._ends: list = []  # heap of (last step, admission, seq)
        self._counts = [0] * self._block  # running requests by phase
        self._used = 0  # blocks in use at the span's first step (after its allocations)
        self._low = 0  # running batch requests (what kv-or-seqs may preempt for an interactive one)
        self._seqs: dict = {}  # task -> its _Seq, while in the engine
        self._front: set = set()  # dispatched, in the front end (request_ms)
        self._rejected: set = set()  # too large for the cache: failed at the next instant
        self._finishing: dict = {}  # task -> seq, ending at the boundary being processed
        self._arrivals = 0
        self._n_first = 0  # requests scheduled in the span's first step
        self._no_admit = -1  # a step whose scheduling preempted: it admits nothing
        # statistics
        self._preemptions = 0
        self._recomputed = 0
        self._cancelled_tokens = 0
        self._rejections = 0
        self._kv_area = 0.0  # block-milliseconds in use, over busy time
        self._kv_peak = 0

    # --- the Backend interface ---------------------------------------------------------------------
    def dispatch(self, task) -> None:
        if self._request_ms:
            self._in_front += 1
            self._front.add(task)
            now = self.env._now
            self._front_free = (now if now > self._front_free else self._front_free) + self._request_ms
            fire_at(self.env, self._front_free, self._reach_engine, task)
            return
        self._join(task)

    def _reach_engine(self, event) -> None:
        task = event._value
        if task in self._front:  # not cancelled on the way
            self._front.remove(task)
            self._in_front -= 1
            self._join(task)

    def busy(self) -> int:
        return len(self._members)

    def waiting(self) -> int:
        return len(self._waiting) + self._in_front

    def observe(self) -> Observation:
        if not self._kv:
            return Observation(len(self._members), self.waiting(), self.max_seqs, None, None)
        used = self._used
        if self._members and not self._holding:  # inside a span: what its steps so far have taken
            used += self._crossings(self._step_now() - self._iter)
        return Observation(len(self._members), self.waiting(), self.max_seqs, used / self._blocks,
                           self._blocks * self._block)

    def cancel(self, task) -> None:
        """Stop serving `task` now; `done(task)` is never called for it afterwards."""
        seq = self._seqs.pop(task, None)
        if seq is None:
            if task in self._front:
                self._front.remove(task)
                self._in_front -= 1
            self._rejected.discard(task)
            seq = self._finishing.pop(task, None)  # ending at this boundary, its done() not called yet
            if seq is not None:
                self._waste(seq, seq.last)
            return
        if seq in self._members:
            if self._holding:  # between two steps (a boundary's done() callbacks): it leaves before the next
                c = seq.last = self._iter - 1
                self._waste(seq, c)
                seq.cancelled = True
                self._leave(seq)
                self._rebuild_ends()
                return
            c = self._step_now()  # the step in progress: it finishes with the request in it
            self._waste(seq, c)
            seq.cancelled = True
            if seq.last > c:
                seq.last = c
                self._rebuild_ends()
            if c + 1 < self._next_idx:
                self._set_event(c + 1)
            return
        head = self._head() is seq
        self._remove_waiting(seq)
        if head and self._waiting and not self._holding:
            self._head_changed(self.env._now)

    def _waste(self, seq, c: int) -> None:
        """A cancelled running request's computed tokens (steps up to `c` included) and time, thrown away."""
        computed = seq.prefill + c - seq.start
        seq.task.wasted_tokens += computed
        seq.task.wasted_ms += self.env._now - seq.since
        self._cancelled_tokens += computed

    def stats(self) -> dict:
        out = super().stats()
        busy = self._busy_ms
        out.update({
            "preemptions": self._preemptions,
            "recomputed_tokens": self._recomputed,
            "cancelled_tokens": self._cancelled_tokens,
            "rejected": self._rejections,
            "kv_cache_tokens": self._blocks * self._block if self._kv else None,
            "kv_use_mean": self._kv_area / (busy * self._blocks) if self._kv and busy > 0 else (0.0 if self._kv else None),
            "kv_use_peak": self._kv_peak / self._blocks if self._kv else None,
        })
        return out

    # --- arrival at the engine -----------------------------------------------------------------------
    def _join(self, task) -> None:
        seq = _Seq(task, self._arrivals)
        self._arrivals += 1
        if self._kv and -(-(seq.prompt + seq.output - 1) // self._block) > self._blocks:
            self._rejected.add(task)
            fire_at(self.env, self.env._now, self._reject, task)
            return
        self._seqs[task] = seq
        if self._priority:
            heapq.heappush(self._waiting, (seq.priority, seq.no, seq))
            head = self._waiting[0][2] is seq
        else:
            self._waiting.append(seq)
            head = len(self._waiting) == 1
        if self._holding:
            return  # inside a boundary's done() callbacks: that boundary schedules it
        if not self._active:  # idle: a step starts now, after every other event of this instant
            self._active = True
            self._set_stop(self._iter, self.env._now)
            return
        if head:
            self._head_changed(self.env._now)

    def _reject(self, event) -> None:
        task = event._value
        if task in self._rejected:
            self._rejected.remove(task)
            self._rejections += 1
            task.outcome = "failed"
            self.done(task)

    def _head_changed(self, now: float) -> None:
        """The head of the waiting queue is new: stop at the first boundary where it could be admitted."""
        if not self._members:
            return  # a step starts at this instant and will see it
        if now == self._t0:  # the span's first step starts now: admit into it as well
            if self._no_admit != self._iter and self._admit_waiting(self._iter, now):
                self._n_first = len(self._members)
                self._plan(now)
            elif self._iter + 1 < self._next_idx and self._head_admissible(self._iter + 1):
                self._set_event(self._iter + 1)  # held back by the token budget: the next boundary
            return
        idx = self._boundary_at_or_after(now)
        if idx < self._next_idx and self._head_admissible(idx):
            self._set_event(idx)

    # --- the span's arithmetic -----------------------------------------------------------------------
    def _boundary_at_or_after(self, now: float) -> int:
        """The first step of the current span that starts at or after `now` (not the first one)."""
        t1, d = self._t1, self._d
        if now <= t1:
            return self._iter + 1
        k = math.ceil((now - t1) / d)
        while t1 + k * d < now:
            k += 1
        while k > 0 and t1 + (k - 1) * d >= now:
            k -= 1
        return self._iter + 1 + k

    def _step_now(self) -> int:
        """The step in progress now; at a boundary's instant, the step that starts there, unless that
        boundary is still to be processed (then the step that ends there)."""
        idx = self._boundary_at_or_after(self.env._now)
        k = idx - self._iter - 1
        if (self._t1 + k * self._d if k else self._t1) > self.env._now:
            idx -= 1
        return idx if idx < self._next_idx else self._next_idx - 1

    def _crossings(self, j: int) -> int:
        """New blocks the span's running requests take in its steps 1..j (after the first)."""
        if j <= 0 or not self._kv:
            return 0
        q, t = divmod(j - 1, self._block)
        counts, b, base = self._counts, self._block, self._iter + 1
        acc = len(self._members) * q
        for u in range(t + 1):
            acc += counts[(base + u) % b]
        return acc

    def _dry_step(self, before: int) -> int:
        """The first step of the span (before `before`) at which the pool has no block for a running request
        that needs one, or `before`."""
        n = len(self._members)
        if not self._kv or not n:
            return before
        spare = self._blocks - self._used
        q, s = divmod(spare, n)
        b = self._block
        if self._iter + q * b + 1 >= before:
            return before  # q full rounds of new blocks fit: the pool lasts past `before`
        counts, base, acc = self._counts, self._iter + 1, 0
        for t in range(b):
            acc += counts[(base + t) % b]
            if acc > s:
                step = self._iter + q * b + t + 1
                return step if step < before else before
        return before  # unreachable: one round takes n blocks

    def _kv_area_of_span(self, j: int) -> int:
        """Block-steps of steps 1..j of the span beyond `_used` each (the sum of `_crossings` over 1..j)."""
        counts, b, base, area = self._counts, self._block, self._iter + 1, 0
        for o in range(b):
            c = counts[(base + o) % b]
            if c and j > o:
                m = (j - 1 - o) // b + 1  # crossings of this phase in steps 1..j, at o + 1 + i * b
                area += c * (m * (j - o) - b * m * (m - 1) // 2)
        return area

    def _head(self):
        w = self._waiting
        if not w:
            return None
        return w[0][2] if self._priority else w[0]

    def _head_admissible(self, idx: int) -> bool:
        """Whether the head of the waiting queue could be admitted at boundary `idx` of the current span
        (no completion before it, no prefill yet in that step). May say yes when it cannot (a stop for
        nothing); never says no when it could."""
        head = self._head()
        if head is None:
            return False
        free = self._blocks - self._used - self._crossings(idx - self._iter)
        if len(self._members) >= self.max_seqs:
            if not (self._seqs_preempt and head.priority < BATCH_PRIORITY and self._low > 0):
                return False
            if not self._kv:
                return True
            victim = max(self._members, key=_rank)
            free += -(-(victim.prefill + idx - victim.start) // self._block)
        elif not self._kv:
            return True
        return -(-(head.prompt + head.generated) // self._block) <= free

    # --- boundaries ------------------------------------------------------------------------------------
    def _arm(self, at: float) -> None:
        self._gen += 1
        self._pending_at = at
        now = self.env._now
        fire_at(self.env, at if at > now else now, self._on_boundary, (self._gen, at), LATE)

    def _set_stop(self, idx: int, at: float) -> None:
        self._next_idx = idx
        self._next_at = at
        if self._pending_at is None or self._pending_at > at:
            self._arm(at)

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
        if self._members:
            self._close(now, idx)
        else:
            self._t0 = now  # idle until now: the first step starts here
        ends, last, finishing = self._ends, idx - 1, self._finishing
        while ends and ends[0][0] <= last:
            seq = heapq.heappop(ends)[2]
            self._leave(seq)
            if not seq.cancelled:
                seq.task.outcome = "ok"
                finishing[seq.task] = seq
        if finishing:
            self._holding = True
            try:
                while finishing:  # in admission order (the heap's); a done() may cancel one still to come
                    task = next(iter(finishing))
                    del finishing[task]
                    self.done(task)
            finally:
                self._holding = False
                finishing.clear()
        if self._members or self._waiting:
            self._schedule(idx, now)
            self._plan(now)
        else:
            self._active = False
            self._next_idx = -1

    def _close(self, now: float, idx: int) -> None:
        """End the current span at boundary `idx` (now): count its steps, bring `_used` to step idx - 1."""
        j = idx - 1 - self._iter  # steps after the first
        n = len(self._members)
        self._seq_iters += self._n_first + n * j
        self._busy_ms += now - self._t0
        if self._kv:
            if j > 0:
                self._kv_area += self._used * (now - self._t0) + self._d * self._kv_area_of_span(j)
                self._used += self._crossings(j)
            else:
                self._kv_area += self._used * (now - self._t0)
            if self._used > self._kv_peak:
                self._kv_peak = self._used
        self._iter = idx
        self._t0 = now
        if self._prefill:
            self._prefill = []
            self._prefill_tokens = 0

    def _leave(self, seq) -> None:
        """A running request leaves after its step `seq.last` (finished, or cancelled): free its blocks."""
        del self._members[seq]
        self._seqs.pop(seq.task, None)
        if seq.priority:
            self._low -= 1
        if self._kv:
            self._counts[seq.phase] -= 1
            self._used -= -(-(seq.prefill + seq.last - seq.start) // self._block)

    # --- one step's scheduling ---------------------------------------------------------------------------
    def _schedule(self, idx: int, now: float) -> None:
        """Schedule step `idx` (it starts now): the running requests, then the waiting queue."""
        rebuild = False
        while True:
            skipped = None
            demand = self._counts[idx % self._block] if self._kv else 0
            if self._used + demand <= self._blocks or not self._kv:
                self._used += demand
                preempted = False
            else:
                skipped = self._schedule_running_slowly(idx, now)
                preempted = True
            self._no_admit = idx if preempted else -1
            if not preempted:
                self._admit_waiting(idx, now)
            rebuild = rebuild or preempted
            scheduled = len(self._members) - (len(skipped) if skipped else 0)
            if scheduled or not (self._members or self._waiting):
                break
            # nothing scheduled: no forward pass; the same step is scheduled again at once
        if skipped:  # not scheduled in this step: one step later for everything they do
            b, counts = self._block, self._counts
            for seq in skipped:
                counts[seq.phase] -= 1
                seq.start += 1
                seq.last += 1
                seq.phase = (seq.phase + 1) % b
                counts[seq.phase] += 1
        if rebuild:
            self._rebuild_ends()
        self._n_first = scheduled

    def _schedule_running_slowly(self, idx: int, now: float) -> list:
        """The running pass of a step at which the pool runs dry, request by request (vLLM's loop).
        Returns the requests it did not reach (not scheduled in this step)."""
        members, b, phase = self._members, self._block, idx % self._block
        got = set()  # given this step's new block
        order = list(members)
        for pos, seq in enumerate(order):
            if seq not in members or seq.phase != phase:
                continue  # preempted already, or needs no new block
            while self._used >= self._blocks:
                if self._priority:
                    victim = max(members, key=_rank)
                else:
                    victim = next(reversed(members))
                held = -(-(victim.prefill + idx - 1 - victim.start) // b) + (victim in got)
                self._preempt(victim, idx, now, held)
                if victim is seq:
                    return [s for s in order[pos + 1:] if s in members]
            self._used += 1
            got.add(seq)
        return []

    def _admit_waiting(self, idx: int, now: float) -> bool:
        """vLLM's waiting pass at step `idx`. True if it admitted or preempted anything."""
        waiting, members, budget, b = self._waiting, self._members, self.max_tokens, self._block
        changed = False
        while waiting:
            head = waiting[0][2] if self._priority else waiting[0]
            tokens = head.prompt + head.generated
            if budget is not None and self._prefill and self._prefill_tokens + tokens > budget:
                break
            need = -(-tokens // b) if self._kv else 0
            if len(members) >= self.max_seqs:
                if not (self._seqs_preempt and head.priority < BATCH_PRIORITY and self._low):
                    break
                victim = max(members, key=_rank)
                held = -(-(victim.prefill + idx - victim.start) // b) if self._kv else 0
                if self._kv and need > self._blocks - self._used + held:
                    break  # no preemption for a request that still could not be admitted
                self._preempt(victim, idx, now, held)
                self._rebuild_ends()
            elif self._kv and need > self._blocks - self._used:
                break
            if self._priority:
                heapq.heappop(waiting)
            else:
                waiting.popleft()
            self._start(head, idx, now, tokens)
            changed = True
        if len(members) > self._max_batch:
            self._max_batch = len(members)
        return changed

    def _start(self, seq, idx: int, now: float, tokens: int) -> None:
        """Admit `seq` at step `idx`: a prefill of `tokens` (its prompt and what it had generated)."""
        seq.prefill = tokens
        seq.start = idx
        seq.last = idx + seq.output - seq.generated - 1
        seq.since = now
        seq.admission = self._admitted
        self._admitted += 1
        self._members[seq] = None
        heapq.heappush(self._ends, (seq.last, seq.admission, seq))
        if seq.priority:
            self._low += 1
        if self._kv:
            seq.phase = (idx + 1 - tokens) % self._block
            self._counts[seq.phase] += 1
            self._used += -(-tokens // self._block)
        task = seq.task
        if task.start_ms is None:
            task.start_ms = now
        self._prefill.append(seq)
        self._prefill_tokens += tokens
        self._prefill_total += tokens

    def _preempt(self, seq, idx: int, now: float, held: int) -> None:
        """Preempt running `seq` before step `idx`: free its `held` blocks, count what it had computed, and
        put it back in the waiting queue (FCFS: at the front)."""
        ran = idx - seq.start  # steps it ran in this life
        computed = seq.prefill + ran - 1 if ran > 0 else 0
        del self._members[seq]
        if seq.priority:
            self._low -= 1
        if self._kv:
            self._counts[seq.phase] -= 1
            self._used -= held
        if ran == 0:  # admitted at this very step (a second pass at its instant): its prefill never ran
            self._prefill.remove(seq)
            self._prefill_tokens -= seq.prefill
            self._prefill_total -= seq.prefill
        seq.generated += ran
        task = seq.task
        task.wasted_tokens += computed
        task.wasted_ms += now - seq.since
        self._preemptions += 1
        self._recomputed += computed
        if self._priority:
            heapq.heappush(self._waiting, (seq.priority, seq.no, seq))
        else:
            self._waiting.appendleft(seq)

    def _remove_waiting(self, seq) -> None:
        if self._priority:
            self._waiting.remove((seq.priority, seq.no, seq))
            heapq.heapify(self._waiting)
        else:
            self._waiting.remove(seq)

    def _rebuild_ends(self) -> None:
        self._ends = [(s.last, s.admission, s) for s in self._members]
        heapq.heapify(self._ends)

    def _plan(self, now: float) -> None:
        """Time the span that starts now at step `_iter` and schedule its next stop."""
        n, n1 = len(self._members), self._n_first
        admitted, prefill = len(self._prefill), self._prefill_tokens
        if self._table is None:
            first = self._base + self._per_token * (prefill + n1 - admitted) + self._per_seq * n1
            d = self._base + (self._per_token + self._per_seq) * n
        else:
            first = self._table[n1] + self._per_token * prefill
            d = self._table[n]
        if self._admit_ms:
            first += self._admit_ms * admitted
        self._t0, self._t1, self._d = now, now + first, d
        t1 = self._t1
        for seq in self._prefill:
            if seq.generated == 0:  # its first life: the first token comes at the end of this step
                seq.task.ttft_ms = t1 - seq.task.arrival_ms
        stop = self._dry_step(self._ends[0][0] + 1)
        if stop > self._iter + 1 and self._waiting and self._head_admissible(self._iter + 1):
            stop = self._iter + 1  # the head waits only for the token budget: the next boundary
        self._set_event(stop)


def _rank(seq):
    """vLLM's victim order: the largest (priority, arrival) is preempted first."""
    return (seq.priority, seq.no)
