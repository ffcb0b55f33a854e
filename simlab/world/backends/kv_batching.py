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
(0 by default in V1), speculative decoding, async scheduling, KV offloading or swapping, and the block vLLM
keeps as its null block (N blocks here are N usable blocks).

Fast-forward, as in today's backend: a span is a run of steps with the same membership, its first step
perhaps with prefills; every request in it needs a new block once every `kv_block_tokens` steps, at the
steps congruent to its `phase` modulo the block size. With `counts[phase]` (running requests per phase)
the blocks in use at any step of a span (and their sum over the span, for the mean KV use) are known in
O(block), so the first step at which the pool runs dry is computed when the span is planned and becomes one
more stop beside the next completion; only that step is scheduled request by request, as vLLM's loop does
(`_schedule_running_slowly`). Boundaries run after
every other event of their instant (`LATE`), so every request that reaches the engine at a boundary's
instant is in its queue when that step is scheduled, whatever the event order. One that a later event of
that instant brings (a closed-loop user with no think time) is admitted by a second waiting pass at that
instant: in FCFS order the same as one pass; with priority, after what the first pass admitted. The result
equals a step-by-step transcription of the rules above (tests/test_backend_kv_batching.py).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque
from itertools import accumulate
from operator import attrgetter, itemgetter

from simlab.policies.base import Observation
from simlab.world.backends.continuous_batching import ContinuousBatchingBackend
from simlab.world.events import NORMAL, fire_at

LATE = NORMAL + 1  # a boundary runs after every other event of its instant
INTERACTIVE_PRIORITY, BATCH_PRIORITY = 0, 1  # vLLM: the lower value is served first



class _Seq:
    """One request inside the engine, kept across preemptions. A life: from an admission at step `start`
    (prefilling `prefill` tokens) to its end. Filled in at arrival (`_join`) and at each admission (`_start`);
    reused once the request has left (a pool: no allocation per request)."""

    __slots__ = (
        "task",
        "priority",  # 0 interactive, 1 batch
        "no",  # order of arrival at the engine
        "prompt",
        "output",
        "generated",  # tokens generated before this life
        "running",
        "cancelled",
        "prefill",  # tokens prefilled at this life's admission
        "start",  # the step of that admission
        "last",  # the step that gives its last token (this life)
        "phase",  # it needs a new block at the steps k with k % kv_block_tokens == phase
        "since",  # when this life began (ms)
        "admission",  # admission number of this life: the order of vLLM's `self.running`
        "rank",  # vLLM's victim order, (priority, arrival) as one number: the largest is preempted first
    )


RANK_OF_PRIORITY = 1 << 48  # rank = priority * RANK_OF_PRIORITY + arrival number
_rank = attrgetter("rank")
_entry_rank = itemgetter(3)  # `_ends` entries: (last step, admission, seq, rank)


class KvBatchingBackend(ContinuousBatchingBackend):
    name = "continuous-batching"
    # slots for this class's own state: faster to read and write than entries of an instance dict this large
    __slots__ = ("_arrivals", "_block", "_blocks", "_cancelled_tokens", "_counts", "_ends", "_finishing", "_fits", "_front",
                 "_kv", "_kv_area", "_kv_peak", "_low", "_n", "_n_first", "_no_admit", "_preemptions", "_priority",
                 "_recomputed", "_rejected", "_rejections", "_seq_pool", "_seqs_preempt", "_used", "_waiting")

    def __init__(self, env, done, config, rng):
        super().__init__(env, done, config, rng)
        self._block = config.block_tokens
        blocks = config.kv_blocks
        self._kv = blocks is not None
        self._blocks = blocks if blocks is not None else 0
        self._fits = self._blocks * self._block + 1 if blocks is not None else math.inf  # prompt + output at most
        self._priority = config.scheduling == "priority"
        self._seqs_preempt = self._priority and config.preempt_on == "kv-or-seqs"
        self._waiting: deque | list = [] if self._priority else deque()  # priority: a heap of (priority, no, seq)
        self._ends: list = []  # the running requests: a heap of (last step, admission, seq, rank)
        self._n = 0  # running requests
        self._counts = [0] * (2 * self._block)  # running requests by phase, twice over: counts[s:s + b] is a round
        self._used = 0  # blocks in use at the span's first step (after its allocations)
        self._low = 0  # running batch requests (what kv-or-seqs may preempt for an interactive one)
        self._front: set = set()  # dispatched, in the front end (request_ms)
        self._rejected: set = set()  # too large for the cache: failed at the next instant
        self._finishing: list | tuple = ()  # requests ending at the boundary being processed, done() not called yet
        self._seq_pool: list = []  # _Seq objects of requests that left, for reuse
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
        return self._n

    def waiting(self) -> int:
        return len(self._waiting) + self._in_front

    def observe(self) -> Observation:
        if not self._kv:
            return Observation(self._n, self.waiting(), self.max_seqs, None, None)
        used = self._used
        if self._n and not self._holding:  # inside a span: what its steps so far have taken
            used += self._crossings(self._step_now() - self._iter)
        return Observation(self._n, self.waiting(), self.max_seqs, used / self._blocks, self._blocks * self._block)

    def cancel(self, task) -> None:
        """Stop serving `task` now; `done(task)` is never called for it afterwards."""
        if task in self._front:
            self._front.remove(task)
            self._in_front -= 1
            return
        if task in self._rejected:
            self._rejected.remove(task)
            return
        for seq in self._finishing:  # ending at this boundary, its done() not called yet
            if seq.task is task and not seq.cancelled:
                seq.cancelled = True
                self._waste(seq, seq.last)
                return
        entry = next((e for e in self._ends if e[2].task is task), None)
        if entry is not None:
            seq = entry[2]
            if seq.cancelled:
                return
            seq.cancelled = True
            if self._holding:  # between two steps (a boundary's done() callbacks): it leaves before the next
                c = seq.last = self._iter - 1
                self._waste(seq, c)
                self._leave(seq)
                self._ends.remove(entry)
                heapq.heapify(self._ends)
                return
            c = self._step_now()  # the step in progress: it finishes with the request in it
            self._waste(seq, c)
            if seq.last > c:
                seq.last = c
                self._rebuild_ends([e[2] for e in self._ends])
            if c + 1 < self._next_idx:
                self._set_event(c + 1)
            return
        waiting = self._waiting
        for i, item in enumerate(waiting):
            seq = item[2] if self._priority else item
            if seq.task is task:
                head = i == 0
                if self._priority:
                    waiting[i] = waiting[-1]
                    waiting.pop()
                    heapq.heapify(waiting)
                else:
                    del waiting[i]
                if head and waiting and not self._holding:
                    self._head_changed(self.env._now)
                return

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
        prompt, output = task.prompt_tokens or 0, task.output_tokens or 1
        if output < 1:
            output = 1
        if prompt + output > self._fits:  # it would need more blocks than the cache has
            self._rejected.add(task)
            fire_at(self.env, self.env._now, self._reject, task)
            return
        pool = self._seq_pool
        seq = pool.pop() if pool else _Seq()
        seq.task = task
        seq.priority = INTERACTIVE_PRIORITY if task.interactive else BATCH_PRIORITY
        seq.no = no = self._arrivals
        seq.rank = seq.priority * RANK_OF_PRIORITY + no
        self._arrivals += 1
        seq.prompt = prompt
        seq.output = output
        seq.generated = 0
        seq.running = seq.cancelled = False
        waiting = self._waiting
        if self._priority:
            heapq.heappush(waiting, (seq.priority, seq.no, seq))
            head = waiting[0][2] is seq
        else:
            waiting.append(seq)
            head = len(waiting) == 1
        if self._holding or not head:
            return  # inside a boundary's done() callbacks (that boundary schedules it), or behind the head
        now = self.env._now
        if not self._active:  # idle: a step starts now, after every other event of this instant
            self._active = True
            self._set_stop(self._iter, now)
        elif self._n and now != self._t0:  # mid-span: stop at the next boundary if it can be admitted there
            t1, d = self._t1, self._d  # the first boundary at or after now (`_boundary_at_or_after`)
            if now <= t1:
                k = 0
            else:
                k = math.ceil((now - t1) / d)
                while t1 + k * d < now:
                    k += 1
                while k > 0 and t1 + (k - 1) * d >= now:
                    k -= 1
            idx = self._iter + 1 + k
            if idx < self._next_idx:
                if self._n < self.max_seqs and (not self._kv or -(-prompt // self._block) + self._n * (k // self._block + 1)
                                                <= self._blocks - self._used):
                    self._set_event(idx)  # a seat, and blocks even if every running request took one each step
                elif self._head_admissible(idx):
                    self._set_event(idx)
        else:
            self._head_changed(now)

    def _reject(self, event) -> None:
        task = event._value
        if task in self._rejected:
            self._rejected.remove(task)
            self._rejections += 1
            task.outcome = "failed"
            self.done(task)

    def _head_changed(self, now: float) -> None:
        """The head of the waiting queue is new: stop at the first boundary where it could be admitted."""
        if not self._n:
            return  # a step starts at this instant and will see it
        if now == self._t0:  # the span's first step starts now: admit into it as well
            if self._no_admit != self._iter and self._admit_waiting(self._iter, now):
                self._n_first = self._n
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
        b = self._block
        s = (self._iter + 1) % b  # the phase of the span's step 1
        q, t = divmod(j - 1, b)
        return self._n * q + sum(self._counts[s:s + t + 1])

    def _dry_step(self, before: int) -> int:
        """The first step of the span (before `before`) at which the pool has no block for a running request
        that needs one, or `before`."""
        q, spare = divmod(self._blocks - self._used, self._n)
        b = self._block
        if self._iter + q * b + 1 >= before:
            return before  # q full rounds of new blocks fit: the pool lasts past `before`
        s = (self._iter + 1) % b
        step = self._iter + q * b + bisect_right(list(accumulate(self._counts[s:s + b])), spare) + 1
        return step if step < before else before

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
        if self._n >= self.max_seqs:
            if not (self._seqs_preempt and head.priority < BATCH_PRIORITY and self._low > 0):
                return False
            if not self._kv:
                return True
            victim = max(self._ends, key=_entry_rank)[2]
            free = self._blocks - self._used - self._crossings(idx - self._iter)
            free += -(-(victim.prefill + idx - victim.start) // self._block)
        elif not self._kv:
            return True
        else:
            free = self._blocks - self._used
            need = -(-(head.prompt + head.generated) // self._block)
            if free - self._n * -(-(idx - self._iter) // self._block) >= need:
                return True  # room even if every running request took a block each step of the way
            free -= self._crossings(idx - self._iter)
            return need <= free
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
        if self._n:
            self._close(now, idx)
        else:
            self._t0 = now  # idle until now: the first step starts here
        ends = self._ends
        if ends and ends[0][0] < idx:
            finishing = self._finishing = []
            counts, b, kv, freed, low = self._counts, self._block, self._kv, 0, 0
            while ends and ends[0][0] < idx:  # `_leave`, written out: the common case of a step
                seq = heapq.heappop(ends)[2]
                seq.running = False
                low += seq.priority
                if kv:
                    ph = seq.phase
                    counts[ph] -= 1
                    counts[ph + b] -= 1
                    freed += -(-(seq.prefill + seq.last - seq.start) // b)
                finishing.append(seq)
            self._n -= len(finishing)
            self._low -= low
            self._used -= freed
            self._holding = True
            try:
                done = self.done
                for seq in finishing:  # a done() may cancel one still to come: it is then skipped
                    if not seq.cancelled:
                        task = seq.task
                        task.outcome = "ok"
                        done(task)
            finally:
                self._holding = False
                self._finishing = ()
            self._seq_pool += finishing
        if self._n or self._waiting:
            if self._kv and self._used + self._counts[idx % self._block] > self._blocks:
                self._schedule(idx, now)  # the pool runs dry: preemptions
            else:  # `_schedule` when every running request gets the block it needs, written out
                if self._kv:
                    self._used += self._counts[idx % self._block]
                self._no_admit = -1
                if self._waiting:
                    self._admit_waiting(idx, now)
                self._n_first = self._n
            self._plan(now)
        else:
            self._active = False
            self._next_idx = -1

    def _close(self, now: float, idx: int) -> None:
        """End the current span at boundary `idx` (now): count its steps, bring `_used` to step idx - 1."""
        j = idx - 1 - self._iter  # steps after the first
        n = self._n
        span = now - self._t0
        self._seq_iters += self._n_first + n * j
        self._busy_ms += span
        if self._kv:
            # Blocks in use: `_used` in the first step, plus those taken in steps 1..j after it. Steps 1..b
            # take the counts of the phases from the one of step 1 on (p: blocks taken by then); each further
            # round of b steps takes one block per running request. `extra`: the sum over steps 1..j of the
            # blocks taken by each.
            used = self._used
            area = used * span
            if j:
                b = self._block
                s = (idx - j) % b  # the phase of step 1
                p = extra = 0
                if j < b:  # the common case: a span shorter than a block
                    for c in self._counts[s:s + j]:
                        p += c
                        extra += p
                    taken = p
                else:
                    q, r = divmod(j, b)
                    t = (j - 1) % b
                    whole = part = taken = 0
                    for v, c in enumerate(self._counts[s:s + b]):
                        p += c
                        whole += p
                        if v < r:
                            part += p
                        if v == t:
                            taken = p
                    taken += n * ((j - 1) // b)
                    extra = n * b * q * (q - 1) // 2 + n * q * r + q * whole + part
                area += self._d * extra
                used += taken
            self._used = used
            self._kv_area += area
            if used > self._kv_peak:
                self._kv_peak = used
        self._iter = idx
        self._t0 = now
        if self._prefill:
            self._prefill = []
            self._prefill_tokens = 0

    def _leave(self, seq) -> None:
        """A running request leaves after its step `seq.last` (finished, or cancelled): free its blocks. The
        caller takes it out of `_ends`."""
        seq.running = False
        self._n -= 1
        if seq.priority:
            self._low -= 1
        if self._kv:
            counts, ph, b = self._counts, seq.phase, self._block
            counts[ph] -= 1
            counts[ph + b] -= 1
            self._used -= -(-(seq.prefill + seq.last - seq.start) // b)

    # --- one step's scheduling ---------------------------------------------------------------------------
    def _schedule(self, idx: int, now: float) -> None:
        """Schedule step `idx` (it starts now): the running requests, then the waiting queue."""
        while self._kv:
            demand = self._counts[idx % self._block]  # the running requests that need a block now
            if self._used + demand <= self._blocks:
                self._used += demand
                break
            run, skipped = self._schedule_running_slowly(idx, now)
            self._no_admit = idx  # a step that preempted admits nothing
            if len(skipped) < len(run):
                b, counts = self._block, self._counts
                for seq in skipped:  # not scheduled in this step: one step later for everything they do
                    counts[seq.phase] -= 1
                    counts[seq.phase + b] -= 1
                    seq.start += 1
                    seq.last += 1
                    seq.phase = (seq.phase + 1) % b
                    counts[seq.phase] += 1
                    counts[seq.phase + b] += 1
                self._rebuild_ends(run)
                self._n_first = len(run) - len(skipped)
                return
            self._rebuild_ends(run)
            # nothing scheduled: no forward pass; the same step is scheduled again at once
        self._no_admit = -1
        if self._waiting:
            self._admit_waiting(idx, now)
        self._n_first = self._n

    def _schedule_running_slowly(self, idx: int, now: float) -> tuple[list, list]:
        """The running pass of a step at which the pool runs dry, request by request (vLLM's loop). Returns
        the requests still running, in admission order, and those of them it did not reach (not scheduled
        in this step)."""
        b, phase = self._block, idx % self._block
        run = [e[2] for e in sorted(self._ends, key=itemgetter(1))]  # vLLM's self.running
        got = set()  # given this step's new block
        for pos, seq in enumerate(list(run)):
            if not seq.running or seq.phase != phase:
                continue  # preempted already, or needs no new block
            while self._used >= self._blocks:
                victim = max(run, key=_rank) if self._priority else run[-1]
                run.remove(victim)
                held = -(-(victim.prefill + idx - 1 - victim.start) // b) + (victim in got)
                self._preempt(victim, idx, now, held)
                if victim is seq:
                    return run, [s for s in run if s.admission > seq.admission]  # not reached: `break`
            self._used += 1
            got.add(seq)
        return run, []

    def _admit_waiting(self, idx: int, now: float) -> bool:
        """vLLM's waiting pass at step `idx`: admit the head of the queue while it fits (a prefill of its
        prompt and what it had generated, `tokens`). True if it admitted or preempted anything."""
        waiting, budget, b, kv, priority = self._waiting, self.max_tokens, self._block, self._kv, self._priority
        ends, counts, prefill = self._ends, self._counts, self._prefill
        changed = False
        while waiting:
            head = waiting[0][2] if priority else waiting[0]
            full = self._n >= self.max_seqs
            if full and not (self._seqs_preempt and head.priority < BATCH_PRIORITY and self._low):
                break
            tokens = head.prompt + head.generated
            if budget is not None and prefill and self._prefill_tokens + tokens > budget:
                break
            need = -(-tokens // b) if kv else 0
            if full:
                entry = max(ends, key=_entry_rank)
                victim = entry[2]
                held = -(-(victim.prefill + idx - victim.start) // b) if kv else 0
                if kv and need > self._blocks - self._used + held:
                    break  # no preemption for a request that still could not be admitted
                self._preempt(victim, idx, now, held)
                ends.remove(entry)
                heapq.heapify(ends)
            elif kv and need > self._blocks - self._used:
                break
            if priority:
                heapq.heappop(waiting)
            else:
                waiting.popleft()
            head.prefill = tokens
            head.start = idx
            head.last = last = idx + head.output - head.generated - 1
            head.since = now
            head.admission = adm = self._admitted
            head.running = changed = True
            self._admitted += 1
            self._n += 1
            heapq.heappush(ends, (last, adm, head, head.rank))
            if head.priority:
                self._low += 1
            if kv:
                head.phase = ph = (idx + 1 - tokens) % b
                counts[ph] += 1
                counts[ph + b] += 1
                self._used += need
            task = head.task
            if task.start_ms is None:
                task.start_ms = now
            prefill.append(head)
            self._prefill_tokens += tokens
            self._prefill_total += tokens
        if self._n > self._max_batch:
            self._max_batch = self._n
        return changed

    def _preempt(self, seq, idx: int, now: float, held: int) -> None:
        """Preempt running `seq` before step `idx`: free its `held` blocks, count what it had computed, and
        put it back in the waiting queue (FCFS: at the front). The caller takes it out of `_ends`."""
        ran = idx - seq.start  # steps it ran in this life
        computed = seq.prefill + ran - 1 if ran > 0 else 0
        seq.running = False
        self._n -= 1
        if seq.priority:
            self._low -= 1
        if self._kv:
            self._counts[seq.phase] -= 1
            self._counts[seq.phase + self._block] -= 1
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

    def _rebuild_ends(self, running) -> None:
        self._ends = [(s.last, s.admission, s, s.rank) for s in running]
        heapq.heapify(self._ends)

    def _plan(self, now: float) -> None:
        """Time the span that starts now at step `_iter` and schedule its next stop."""
        n, n1 = self._n, self._n_first
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
            if not seq.generated:  # its first life: the first token comes at the end of this step
                task = seq.task
                task.ttft_ms = t1 - task.arrival_ms
        stop = self._ends[0][0] + 1
        if self._kv and self._iter + (self._blocks - self._used) // n * self._block + 1 < stop:
            stop = self._dry_step(stop)  # perhaps dry before the next completion
        if stop > self._iter + 1 and self._waiting and self._head_admissible(self._iter + 1):
            stop = self._iter + 1  # the head waits only for the token budget: the next boundary
        self._set_event(stop)
