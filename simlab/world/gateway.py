"""N gateway instances in front of one backend, and their crashes (the scenario's `[gateway]`, issue 24).

The article's scheduler is one process. Deployed N times, each instance runs the policy on what the load balancer
sends it; `Gateway` is those N instances seen from the engine: it answers the engine's policy calls (`submit`,
`finish`, `wake`, ...) by routing each task to one instance's policy (made by `make_policy`, clock-free as ever).
The engine uses it only for a `[gateway]` with more than one instance or with crashes: every other run keeps the
plain policy, not one call more per event.

Limiters:
- `local`: every instance has the full options and its own counts: the backend may see N x `maxConcurrency`.
- `split`: every instance has `maxConcurrency`, `batchMaxConcurrency` and `batchMinConcurrency` divided by N
  (rounded down, at least 1): never more than the caps in all, idle slots when the load is uneven.
- `shared`: full options, and a task an instance's policy starts is sent only once the global limit grants it,
  as `simlab.runtime.shared.RedisLimiter`'s script does: total < `maxConcurrency`, and for batch also batch <
  the instance's batch cap and total + interactive waiting elsewhere < `maxConcurrency`; interactive first, each
  instance's waiting tasks in order, stopping at the first refusal. The instance sees the global counts
  `shared_delay_ms` late: its own changes at once, the other instances' only once they are that old. With a delay
  of 0 that is the atomic Lua script (never above the cap); with d > 0 a grant can overshoot the cap by at most
  what the other instances were granted in the last d ms. A grant refused is tried again when a slot frees: at
  once on the instance that freed it, d ms later on the others. Each slot is a lease: when its instance crashes,
  the slot stays counted for `lease_ms` (a dead process renews nothing; its leases lapse).

Crashes (`crash_at_ms` or `mtbf_ms`): the instance's policy is gone with its counts and queues; it comes back
`restart_ms` later with a fresh policy. Its tasks in service at the backend are cancelled (the connection drops:
their work is wasted). Then, by `delivery`:
- "at-most-once": each running task is abandoned: it ends "failed" (`abandoned`).
- "at-least-once" (needs `queue = "persistent"`): each is delivered again to the restarted instance
  (`redelivered`), and counted `duplicated` unless `idempotent` (its request had reached the backend).
And its queued tasks (waiting in its policy, or for a grant) by `queue`:
- "memory": `lost`; with `client_retry_ms` their clients send them again that long after the crash, through the
  balancer (`resubmitted`); without, they end "failed".
- "persistent": kept, and submitted to the restarted instance in their order (after the redelivered ones).
A task sent while no instance is up waits for the first restart (the balancer has nowhere to send it). Counts are
of events: a task lost by two crashes counts twice in `lost` (and in `resubmitted` if sent again both times).

Time above the cap: how long the backend held more tasks in service than `maxConcurrency` (one instance's cap).
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush

from simlab.errors import InputError
from simlab.policies import make_policy

GATEWAY_STREAM = 2_000_000  # random streams: the balancer's and the crashes' (beside the backend's and workloads')
SPLIT_KEYS = ("max_concurrency", "batch_max_concurrency", "batch_min_concurrency")


def split_options(options, n: int):
    """The options of one of n instances sharing the caps: each cap divided by n, rounded down, at least 1."""
    changes = {k: max(1, getattr(options, k) // n) for k in SPLIT_KEYS if getattr(options, k) is not None}
    if options.batch_min_concurrency == 0:
        changes["batch_min_concurrency"] = 0
    return options.with_changes(**changes) if n > 1 else options


class _Instance:
    __slots__ = ("number", "policy", "up", "owned", "held", "sent", "durable")

    def __init__(self, number: int, policy):
        self.number = number
        self.policy = policy
        self.up = True
        self.owned: dict[int, object] = {}  # row -> task sent here and not ended (queued, held or running)
        self.held: list = []  # started by the policy, waiting for the shared limit's grant (policy order)
        self.sent: dict[int, object] = {}  # row -> task in service at the backend
        self.durable: list = []  # persistent queue kept across a crash, for the restart


class Gateway:
    """The engine's policy for N instances (see the module docstring). `engine` gives the backend (to cancel),
    the record of tasks that end here (`_record`) and the table of tasks in flight."""

    def __init__(self, config, options, clock, observe, seed: int, engine, rng_factory):
        self.config = c = config
        self.n = n = c.instances
        self.clock = clock
        self.observe = observe
        self.engine = engine
        self.options = options
        self.cap = options.max_concurrency  # the planned cap, reported against (unscheduled has it and ignores it)
        # what the shared limit enforces: the policy's own hard cap (none for unscheduled: nothing to share)
        self.limit = None if options.policy == "unscheduled" else options.max_concurrency
        if options.evicts:
            raise InputError(engine.scenario.path, "gateway", "evict (stopping running tasks) is not modelled across gateway "
                             "instances: drop evict from the options or [gateway]")
        self.instance_options = split_options(options, n) if c.limiter == "split" else options
        self.shared = c.limiter == "shared" and self.limit is not None
        self.delay = c.shared_delay_ms
        self.instances = [_Instance(i, self._policy()) for i in range(n)]
        # one set of options for every instance: if one policy never asks for a wake, none does
        self.policy_wakes = self.instances[0].policy.may_wake()
        self.balancer = c.balancer
        self.balance_rng = rng_factory(seed, GATEWAY_STREAM, "balancer")
        self.next_rr = 0
        self.owner: dict[int, _Instance] = {}
        self.orphans: list = []  # sent while no instance was up
        # global counts: tasks in service (the backend's), and leases (shared: those + crashed instances' slots)
        self.running = 0
        self.batch_running = 0
        self.leased = 0
        self.leased_batch = 0
        self.waiting_interactive = 0  # held interactive tasks, all instances (the limiter's P:waiting)
        # the other instances' recent lease changes, for a view d ms late: (time, instance, d_total, d_batch)
        self.recent: deque = deque()
        self.recent_total = [0] * n
        self.recent_batch = [0] * n
        self.recent_sum = [0, 0]
        # timed events: (time, order, kind, payload)
        self.events: list = []
        self.order = 0
        self.retry_times: set[float] = set()  # retries already due at these times
        for t, i in self._crash_times(seed, rng_factory):
            self._at(t, "crash", i)
        self.peak = 0
        self.above_ms = 0.0
        self.changed_at = 0.0
        self.counts = dict(crashes=0, lost=0, resubmitted=0, abandoned=0, redelivered=0, duplicated=0)
        self.wasted_ms = 0.0

    def _policy(self):
        return make_policy(self.instance_options, self.clock, self.observe)

    def _crash_times(self, seed, rng_factory):
        c = self.config
        if c.crash_at_ms:
            return [(t, k % self.n) for k, t in enumerate(c.crash_at_ms)]
        if c.mtbf_ms is None:
            return []
        out = []
        for i in range(self.n):  # one stream per instance: N does not change instance 0's crash times
            rng, t = rng_factory(seed, GATEWAY_STREAM, "crashes", i), 0.0
            while True:
                t += float(rng.exponential(c.mtbf_ms))
                if t >= self.engine.scenario.duration_ms:
                    break
                out.append((t, i))
                t += c.restart_ms
        return sorted(out)

    def _at(self, t: float, kind: str, payload) -> None:
        self.order += 1
        heappush(self.events, (t, self.order, kind, payload))

    # --- the policy interface the engine drives ----------------------------------------------------
    def may_wake(self) -> bool:
        # timed events come only from crashes (scheduled now) and from a shared limit seen late (retries)
        return self.policy_wakes or bool(self.events) or (self.shared and self.delay > 0)

    def may_stop(self) -> bool:
        return False

    def take_stops(self) -> list:
        return []

    def next_check_ms(self):
        best = self.events[0][0] if self.events else None
        if not self.policy_wakes:
            return best
        for inst in self.instances:
            if inst.up:
                t = inst.policy.next_check_ms()
                if t is not None and (best is None or t < best):
                    best = t
        return best

    def submit(self, task) -> list:
        inst = self._choose()
        if inst is None:
            self.orphans.append(task)
            return []
        return self._send(inst, task)

    def finish(self, task) -> list:
        inst = self.owner.pop(task.index)
        del inst.owned[task.index]
        del inst.sent[task.index]
        self._ended(task, inst.number)
        started = inst.policy.finish(task)
        if not self.shared:
            return self._admit(inst, started)
        self._hold(inst, started)
        return self._freed(inst)  # this instance's grants (what it just started among them), then the others'

    def wake(self) -> list:
        now = self.clock()
        out = []
        events = self.events
        while events and events[0][0] <= now:
            _, _, kind, payload = heappop(events)
            out += getattr(self, "_on_" + kind)(payload)
        if not self.policy_wakes:
            return out
        for inst in self.instances:
            if inst.up:
                t = inst.policy.next_check_ms()
                if t is not None and t <= now:
                    out += self._admit(inst, inst.policy.wake())
        return out

    def queued(self) -> tuple[int, int]:
        qi = qb = 0
        for inst in self.instances:
            if inst.up:
                i, b = inst.policy.queued()
                held_b = sum(1 for t in inst.held if not t.interactive)
                qi, qb = qi + i + len(inst.held) - held_b, qb + b + held_b
        return qi, qb

    def batch_cap(self) -> float:
        caps = [inst.policy.batch_cap() for inst in self.instances if inst.up]
        if not caps:
            return 0.0
        return max(caps) if self.shared else float(sum(caps))

    def pressure(self) -> float:
        live = [inst.policy.pressure() for inst in self.instances if inst.up]
        return sum(live) / len(live) if live else 0.0

    def window_stats(self) -> tuple[float, float]:
        stats = [inst.policy.window_stats() for inst in self.instances if inst.up]
        if not stats:
            return (0.0, 0.0)
        return (sum(s[0] for s in stats), max(s[1] for s in stats))

    # --- routing -------------------------------------------------------------------------------------
    def _choose(self):
        balancer, instances, n = self.balancer, self.instances, self.n
        if balancer == "round-robin":
            first = self.next_rr
            for k in range(n):
                inst = instances[(first + k) % n]
                if inst.up:
                    self.next_rr = (inst.number + 1) % n
                    return inst
            return None
        if balancer == "random":
            live = [inst for inst in instances if inst.up]
            return live[int(self.balance_rng.integers(len(live)))] if live else None
        best, fewest = None, 0  # least-loaded; ties to the lowest number
        for inst in instances:
            if inst.up and (best is None or len(inst.owned) < fewest):
                best, fewest = inst, len(inst.owned)
        return best

    def _send(self, inst: _Instance, task) -> list:
        self.owner[task.index] = inst
        inst.owned[task.index] = task
        return self._admit(inst, inst.policy.submit(task))

    # --- admission: what an instance's policy started goes to the backend, or waits for a grant ----------
    def _admit(self, inst: _Instance, started: list) -> list:
        if not started:
            return started
        if not self.shared:
            for task in started:
                self._sent(inst, task)
            return started
        self._hold(inst, started)
        return self._grant(inst)

    def _hold(self, inst: _Instance, started: list) -> None:
        if started:
            for task in started:
                if task.interactive:
                    self.waiting_interactive += 1
            inst.held += started

    def _grant(self, inst: _Instance) -> list:
        """Grants in the limiter's order: the held interactive tasks, then batch, each class stopping at its first
        refusal; sent in the policy's order (all of one call, when everything fits: as a single gateway).
        Counted, not tried one by one: every grant moves the seen total by one, every batch grant the batch count."""
        held = inst.held
        if not held:
            return []
        number = inst.number
        if self.delay:
            self._forget_old()
        free = self.limit - self.leased + self.recent_sum[0] - self.recent_total[number]  # as this instance sees it
        if free <= 0:  # full: neither class gets a grant
            self._retry_when_visible(number)
            return []
        held_interactive = 0
        for task in held:
            held_interactive += task.interactive
        n_interactive = held_interactive if held_interactive <= free else free
        self.waiting_interactive -= n_interactive
        free -= n_interactive
        n_batch, held_batch = 0, len(held) - held_interactive
        if held_batch and free > 0:
            # a batch grant also leaves room for the interactive tasks waiting elsewhere, and stays under the
            # instance's batch cap
            room = free - (self.waiting_interactive - (held_interactive - n_interactive))
            seen_batch = self.leased_batch - self.recent_sum[1] + self.recent_batch[number]
            batch_cap = inst.policy.batch_cap()
            while n_batch < held_batch and n_batch < room and seen_batch + n_batch < batch_cap:
                n_batch += 1
        granted = n_interactive + n_batch
        if not granted:
            self._retry_when_visible(number)
            return []
        if granted == len(held):
            out, inst.held = held, []
        else:
            out, keep, ki, kb = [], [], n_interactive, n_batch
            for task in held:
                if task.interactive:
                    if ki:
                        ki -= 1
                        out.append(task)
                        continue
                elif kb:
                    kb -= 1
                    out.append(task)
                    continue
                keep.append(task)
            inst.held = keep
            self._retry_when_visible(number)
        self.leased += granted
        self.leased_batch += n_batch
        self._note(number, granted, n_batch)
        # in flight in the limiter's order (interactive first): a crash cancels them in that order
        sent = inst.sent
        if n_interactive:
            for task in out:
                if task.interactive:
                    sent[task.index] = task
        if n_batch:
            for task in out:
                if not task.interactive:
                    sent[task.index] = task
        self._count(granted)
        self.batch_running += n_batch
        return out

    def _retry_when_visible(self, number: int) -> None:
        """A refusal: try again when the first slot another instance freed lately becomes visible here."""
        for t, other, d_total, _ in self.recent:
            if other != number and d_total < 0:
                self._retry_at(t + self.delay)
                return

    def _retry_at(self, t: float) -> None:
        if t not in self.retry_times:
            self.retry_times.add(t)
            self._at(t, "retry", t)

    def _note(self, number: int, d_total: int, d_batch: int) -> None:
        if self.delay > 0:
            self.recent.append((self.clock(), number, d_total, d_batch))
            self.recent_total[number] += d_total
            self.recent_batch[number] += d_batch
            self.recent_sum[0] += d_total
            self.recent_sum[1] += d_batch

    def _forget_old(self) -> None:
        # visible once t + d <= now: the very sum a retry is scheduled at (now - d could round the other way)
        recent, now, delay = self.recent, self.clock(), self.delay
        while recent and recent[0][0] + delay <= now:
            _, number, d_total, d_batch = recent.popleft()
            self.recent_total[number] -= d_total
            self.recent_batch[number] -= d_batch
            self.recent_sum[0] -= d_total
            self.recent_sum[1] -= d_batch

    def _unlease(self, number: int | None, batch: bool) -> None:
        self.leased -= 1
        self.leased_batch -= batch
        if number is not None:
            self._note(number, -1, batch)

    def _freed(self, inst: _Instance | None) -> list:
        """A lease ended: this instance tries its held tasks now, the others once they can see it (d ms)."""
        out = self._grant(inst) if inst is not None and inst.up else []
        if self.delay == 0:
            # every other instance at once; `inst` again would change nothing: a refusal stands until a lease ends
            for other in self.instances:
                if other is not inst and other.up and other.held:
                    out += self._grant(other)
            return out
        if any(other.held for other in self.instances if other is not inst):
            self._retry_at(self.clock() + self.delay)
        return out

    def _on_retry(self, t) -> list:
        self.retry_times.discard(t)
        out = []
        for inst in self.instances:
            if inst.up and inst.held:
                out += self._grant(inst)
        return out

    # --- the backend's in-flight count, against one instance's cap -------------------------------------
    def _sent(self, inst: _Instance, task) -> None:
        inst.sent[task.index] = task
        self._count(1)
        self.batch_running += not task.interactive

    def _ended(self, task, number: int) -> None:
        self._count(-1)
        self.batch_running -= not task.interactive
        if self.shared:
            self._unlease(number, not task.interactive)

    def _count(self, d: int) -> None:
        now = self.clock()
        if self.cap is not None and self.running > self.cap:
            self.above_ms += now - self.changed_at
        self.changed_at = now
        self.running += d
        if self.running > self.peak:
            self.peak = self.running

    # --- crashes and restarts -----------------------------------------------------------------------
    def _on_crash(self, number: int) -> list:
        inst = self.instances[number]
        if not inst.up:
            return []  # already down: nothing more to lose
        c, e, now = self.config, self.engine, self.clock()
        self.counts["crashes"] += 1
        inst.up = False
        for task in inst.held:
            if task.interactive:
                self.waiting_interactive -= 1
        running = list(inst.sent.values())
        queued = [t for row, t in inst.owned.items() if row not in inst.sent]
        for task in running:
            before = task.wasted_ms
            e.backend.cancel(task)
            self.wasted_ms += task.wasted_ms - before
            del e._in_flight[task.index]
            self._count(-1)
            self.batch_running -= not task.interactive
            task.start_ms = None
            if self.shared:  # the slot stays leased until its lease lapses
                self._at(now + c.lease_ms, "lease_expired", not task.interactive)
        inst.owned, inst.sent, inst.held, inst.policy = {}, {}, [], None
        for task in running + queued:
            del self.owner[task.index]
        durable = []
        if c.delivery == "at-least-once":
            self.counts["redelivered"] += len(running)
            if not c.idempotent:
                self.counts["duplicated"] += len(running)
            durable += running
        else:
            self.counts["abandoned"] += len(running)
            for task in running:
                self._end_failed(task, now)
        if c.queue == "persistent":
            durable += queued
        else:
            self.counts["lost"] += len(queued)
            for task in queued:
                if c.client_retry_ms is not None:
                    self._at(now + c.client_retry_ms, "resubmit", task)
                else:
                    self._end_failed(task, now)
        inst.durable = durable
        self._at(now + c.restart_ms, "restart", number)
        return []

    def _end_failed(self, task, now: float) -> None:
        task.outcome = "failed"
        task.end_ms = now
        self.engine._end_here(task)

    def _on_restart(self, number: int) -> list:
        inst = self.instances[number]
        inst.up, inst.policy = True, self._policy()
        out = []
        durable, inst.durable = inst.durable, []
        for task in durable:
            out += self._send(inst, task)
        orphans, self.orphans = self.orphans, []
        for task in orphans:
            out += self.submit(task)
        return out

    def _on_resubmit(self, task) -> list:
        self.counts["resubmitted"] += 1
        return self.submit(task)

    def _on_lease_expired(self, batch: bool) -> list:
        self._unlease(None, batch)
        return self._freed(None)

    # --- the run's summary ----------------------------------------------------------------------------
    def stats(self, end_ms: float) -> dict:
        if self.cap is not None and self.running > self.cap:
            self.above_ms += end_ms - self.changed_at
            self.changed_at = end_ms
        return {
            "gateway_instances": self.n,
            "global_cap": math.nan if self.cap is None else self.cap,
            "backend_peak_in_flight": self.peak,
            "time_above_cap_ms": self.above_ms,
            **self.counts,
            "abandoned_work_ms": self.wasted_ms,
        }
