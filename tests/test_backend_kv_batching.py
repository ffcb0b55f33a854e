"""The KV-cache / engine-scheduling backend (vLLM V1's scheduler): hand-computed cases, invariants, and equality
with a naive step-by-step transcription of vLLM's `Scheduler.schedule()` on random inputs (the backend
fast-forwards over steps whose membership does not change and computes when the KV pool runs dry)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.errors import InputError
from simlab.policies import Task
from simlab.policies.base import Observation
from simlab.scenario import Backend as BackendConfig
from simlab.scenario import StepTime, scenario_from_dict
from simlab.world.backends import make_backend
from simlab.world.backends.continuous_batching import ContinuousBatchingBackend
from simlab.world.backends.kv_batching import KvBatchingBackend
from simlab.world.engine import Engine

TOL = 1e-6
TIE = 1e-7


# --- the naive reference ----------------------------------------------------------------------------
class Req:
    """A request in the naive engine, with vLLM's own counters."""

    def __init__(self, i, at, prompt, output, interactive, cancel_at=None):
        self.i, self.at, self.prompt, self.output = i, at, prompt, max(1, output)
        self.priority = 0 if interactive else 1
        self.cancel_at = cancel_at
        self.computed = 0  # num_computed_tokens
        self.generated = 0  # output tokens so far
        self.blocks = 0
        self.start = self.first = self.end = None
        self.wasted = 0
        self.preemptions = 0
        self.state = "pending"  # waiting, running, done, failed, cancelled


def naive(reqs, max_seqs, max_tokens, step_ms, blocks, block, priority=False, seqs_preempt=False):
    """vLLM V1's schedule() step by step. `reqs`: Req in order of arrival at the engine (times non-decreasing).
    `blocks`: the pool (None: no KV limit). Returns (reqs, stats) with start/first/end/wasted set."""
    kv = blocks is not None
    cap = blocks if kv else 0
    cdiv = lambda a: -(-a // block)  # noqa: E731
    rank = lambda r: (r.priority, r.i)  # noqa: E731
    pending = deque(reqs)
    waiting: list = []
    running: list = []
    stats = {"preemptions": 0, "recomputed": 0, "kv_area": 0.0, "kv_peak": 0, "busy": 0.0, "iterations": 0}
    t = -math.inf

    def preempt(r):
        running.remove(r)
        r.wasted += r.computed
        stats["recomputed"] += r.computed
        stats["preemptions"] += 1
        r.computed, r.blocks, r.state = 0, 0, "waiting"
        r.preemptions += 1
        if priority:
            waiting.append(r)
        else:
            waiting.insert(0, r)

    while pending or waiting or running:
        while pending and pending[0].at <= t + TIE:
            r = pending.popleft()
            if r.cancel_at is not None and r.cancel_at < r.at:
                r.state = "cancelled"  # gave up before reaching the engine
            elif kv and cdiv(r.prompt + r.output - 1) > cap:
                r.state, r.end = "failed", r.at
            else:
                r.state = "waiting"
                waiting.append(r)
        for r in [r for r in waiting if r.cancel_at is not None and r.cancel_at <= t]:
            waiting.remove(r)
            r.state = "cancelled"
        if not running and not waiting:
            if not pending:
                break
            t = pending[0].at
            continue
        while True:  # one step; again at once when it schedules nothing
            scheduled: list = []  # (req, new tokens)
            preempted = False
            free = cap - sum(r.blocks for r in running)
            i = 0
            while i < len(running):  # the running pass
                r = running[i]
                need = cdiv(r.computed + 1) - r.blocks if kv else 0
                gone = False
                while need > free:
                    victim = max(running, key=rank) if priority else running[-1]
                    if any(v is victim for v, _ in scheduled):
                        scheduled = [(v, n) for v, n in scheduled if v is not victim]
                        i -= 1
                    free += victim.blocks
                    preempt(victim)
                    preempted = True
                    if victim is r:
                        gone = True
                        break
                if gone:
                    break
                r.blocks += need
                free -= need
                scheduled.append((r, 1))
                i += 1
            prefill, admitted = 0, set()
            if not preempted:  # the waiting pass
                while waiting:
                    head = min(waiting, key=rank) if priority else waiting[0]
                    tokens = head.prompt + head.generated
                    need = cdiv(tokens) if kv else 0
                    if max_tokens is not None and admitted and prefill + tokens > max_tokens:
                        break
                    if len(running) >= max_seqs:
                        victim = max(running, key=rank)
                        if not (seqs_preempt and head.priority < victim.priority):
                            break
                        if kv and need > free + victim.blocks:
                            break
                        scheduled = [(v, n) for v, n in scheduled if v is not victim]
                        free += victim.blocks
                        preempt(victim)
                    if kv and need > free:
                        break
                    waiting.remove(head)
                    running.append(head)
                    head.state = "running"
                    head.blocks, head.computed = need, 0
                    free -= need
                    prefill += tokens
                    scheduled.append((head, tokens))
                    admitted.add(head)
                    if head.start is None:
                        head.start = t
            if scheduled:
                break
        n_prefill = sum(1 for r, _ in scheduled if r in admitted)
        dt = step_ms(len(scheduled), n_prefill, prefill)
        used = sum(r.blocks for r in running)
        assert used <= cap or not kv
        stats["kv_area"] += used * dt
        stats["kv_peak"] = max(stats["kv_peak"], used)
        stats["busy"] += dt
        stats["iterations"] += 1
        s0 = t
        for r, n in scheduled:
            r.computed += n
        t = t + dt
        for r, _ in scheduled:
            r.generated += 1
            if r.first is None:
                r.first = t
        for r in list(running):
            if r.cancel_at is not None and s0 <= r.cancel_at < t:  # cancelled in this step: leaves at its end
                r.wasted += r.computed
                r.state = "cancelled"
                running.remove(r)
            elif r.generated >= r.output:
                r.end, r.state = t, "done"
                running.remove(r)
    return reqs, stats


def formula(base, per_token, per_seq, admit=0.0):
    def step(n, n_prefill, prefill_tokens):
        return base + per_token * (prefill_tokens + n - n_prefill) + per_seq * n + admit * n_prefill

    return step


# --- driving the backend directly -------------------------------------------------------------------
def config(max_num_seqs, max_batched_tokens=None, kv=None, block=None, scheduling=None, preempt_on=None, **step):
    return BackendConfig(kind="continuous-batching", max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                         step=StepTime(**step), kv_cache_tokens=kv, kv_block_tokens=block, scheduling=scheduling,
                         preempt_on=preempt_on)


def task(i, at, prompt, output, kind="batch"):
    t = Task(i, kind, float(at), None)
    t.prompt_tokens, t.output_tokens = prompt, output
    return t


class Harness:
    """The backend on a fresh SimPy clock; records dispatches, ends and cancels, and checks the KV books at
    every planned span (blocks in use = what the running requests hold, never over capacity) and, with
    priority scheduling, that no batch request is admitted while an interactive one waits."""

    def __init__(self, cfg):
        self.env = simpy.Environment()
        self.ended: list = []
        self.dispatched: list = []
        self.cancelled: list = []
        self.on_done = None
        self.backend = b = make_backend(cfg, self.env, self._done, np.random.default_rng(0))
        assert isinstance(b, KvBatchingBackend)
        self.max_used = 0
        plan = b._plan

        def checked_plan(now):
            plan(now)
            if b._kv:
                held = sum(-(-(s.prefill + b._iter - s.start) // b._block) for _, _, s, _ in b._ends)
                assert b._used == held <= b._blocks, (b._used, held, b._blocks)
                self.max_used = max(self.max_used, b._used)
            assert b._n == len(b._ends) <= b.max_seqs and all(s.running for _, _, s, _ in b._ends)

        b._plan = checked_plan
        admit = b._admit_waiting

        def checked_admit(idx, now):  # priority: no batch request starts while an interactive one waits
            before = len(b._prefill)
            changed = admit(idx, now)
            if b._priority and any(s.priority for s in b._prefill[before:]):
                assert not any(e[2].priority == 0 for e in b._waiting), "batch admitted over a waiting interactive"
            return changed

        b._admit_waiting = checked_admit

    def _done(self, t):
        assert t.end_ms is None, f"{t} finished twice"
        assert t not in self.cancelled, f"{t} finished after its cancel"
        t.end_ms = self.env.now
        self.ended.append(t)
        if self.on_done is not None:
            self.on_done(t)

    def dispatch(self, t):
        self.dispatched.append((self.env.now, t))
        self.backend.dispatch(t)

    def at(self, tasks, cancels=None):
        for t in sorted(tasks, key=lambda t: t.arrival_ms):
            self.env.timeout(t.arrival_ms, t).callbacks.append(lambda e: self.dispatch(e.value))
        for t, when in (cancels or {}).items():
            self.env.timeout(when, t).callbacks.append(lambda e: self.cancel(e.value))
        return self

    def cancel(self, t):
        if t.end_ms is None and any(d is t for _, d in self.dispatched):  # the gateway cancels what it sent
            self.cancelled.append(t)
            self.backend.cancel(t)

    def run(self, until=None):
        self.env.run(until=until)
        return self


def engine_arrivals(h: Harness, cfg, cancels=None):
    """The naive engine's input: each dispatch at the time it reaches the engine (the front end serves one
    request at a time), with its cancel time."""
    front, free, reqs = cfg.step.request_ms, 0.0, []
    for i, (now, t) in enumerate(h.dispatched):
        free = max(now, free) + front if front else now
        reqs.append(Req(i, free, t.prompt_tokens, t.output_tokens, t.interactive, (cancels or {}).get(t)))
    return reqs


def check_against_naive(h: Harness, cfg, step_fn, cancels=None):
    b = h.backend
    reqs, stats = naive(engine_arrivals(h, cfg, cancels), cfg.max_num_seqs, cfg.max_batched_tokens, step_fn,
                        cfg.kv_blocks, cfg.block_tokens, cfg.scheduling == "priority", cfg.preempt_on == "kv-or-seqs")
    assert len({id(t) for t in h.ended}) == len(h.ended)
    for (now, t), r in zip(h.dispatched, reqs):
        if r.state == "cancelled":
            assert t in h.cancelled and t.end_ms is None, (t, r.state)
        else:
            assert r.state in ("done", "failed"), (t, r.state)
            assert t.outcome == ("ok" if r.state == "done" else "failed"), (t, t.outcome, r.state)
            assert abs(t.end_ms - r.end) <= TOL, (t, t.end_ms, r.end)
        if r.start is not None:
            assert abs(t.start_ms - r.start) <= TOL, (t, t.start_ms, r.start)
        if r.first is not None:
            assert abs(t.arrival_ms + t.ttft_ms - r.first) <= TOL, (t, t.arrival_ms + t.ttft_ms, r.first)
        assert t.wasted_tokens == r.wasted, (t, t.wasted_tokens, r.wasted)
    s = b.stats()
    assert s["preemptions"] == stats["preemptions"] and s["recomputed_tokens"] == stats["recomputed"]
    assert s["iterations"] == stats["iterations"]
    assert s["busy_ms"] == pytest.approx(stats["busy"], abs=1e-6)
    if b._kv:
        assert b._kv_peak == stats["kv_peak"] and s["kv_use_peak"] == stats["kv_peak"] / b._blocks
        assert s["kv_use_mean"] * b._blocks * s["busy_ms"] == pytest.approx(stats["kv_area"], rel=1e-9, abs=1e-6)
    assert b.busy() == 0 and b.waiting() == 0 and b._used == 0 and not b._ends


# --- hand-computed cases ----------------------------------------------------------------------------
def test_selected_only_with_kv_or_priority():
    env = simpy.Environment()
    plain = make_backend(config(4, base_ms=10), env, lambda t: None, None)
    assert type(plain) is ContinuousBatchingBackend
    for cfg in (config(4, kv=64, base_ms=10), config(4, scheduling="priority", base_ms=10)):
        assert type(make_backend(cfg, env, lambda t: None, None)) is KvBatchingBackend


def test_decode_growth_preempts_the_last_admitted_and_recomputes_it():
    """4 blocks of 16 tokens; three requests of 20 + 30 tokens (49 at most: 4 blocks each). a and b take 2
    blocks each at admission, c waits. Both need a third block at their 13th token (33 tokens): a is first in
    the running pass and gets it by preempting b (FCFS: the last admitted), which had computed 20 + 12 tokens.
    b resumes when a ends (it needs 3 blocks for 20 + 13 tokens), c when b ends."""
    cfg = config(4, kv=64, block=16, base_ms=10)
    a, b, c = (task(x, 0, 20, 30) for x in "abc")
    h = Harness(cfg).at([a, b, c]).run()
    assert (a.start_ms, a.ttft_ms, a.end_ms, a.wasted_tokens) == (0, 10, 300, 0)
    assert (b.start_ms, b.ttft_ms, b.end_ms, b.wasted_tokens) == (0, 10, 300 + 10 * 17, 32)  # 17 tokens after resuming
    assert (c.start_ms, c.end_ms, c.wasted_tokens) == (470, 770, 0)
    s = h.backend.stats()
    assert s["preemptions"] == 1 and s["recomputed_tokens"] == 32 and s["kv_use_peak"] == 1.0
    assert s["prefill_tokens"] == 20 * 3 + 33  # b's second prefill: its prompt and the 13 tokens it had


def test_priority_preempts_the_lowest_priority_latest_arrival():
    """Priority scheduling: a batch request admitted first needs a block; the victim is the running request
    with the largest (priority, arrival), a later batch one, not the interactive one admitted last."""
    cfg = config(4, kv=96, block=16, scheduling="priority", base_ms=10)  # 6 blocks
    b1, b2 = task("b1", 0, 30, 10), task("b2", 0, 30, 10)  # 2 blocks each, a third at step 3
    chat = task("chat", 5, 30, 10, kind="interactive")  # admitted at step 1: its third block at step 4
    Harness(cfg).at([b1, b2, chat]).run()
    assert (b1.wasted_tokens, chat.wasted_tokens, b2.wasted_tokens) == (0, 0, 30 + 3 - 1)
    assert (b1.end_ms, chat.end_ms) == (100, 110)
    assert b2.start_ms == 0 and b2.end_ms == 100 + 10 * 7  # resumed when b1 ends, 7 tokens to go


def test_fcfs_preempts_the_last_admitted_even_if_interactive():
    cfg = config(4, kv=96, block=16, base_ms=10)
    b1, b2 = task("b1", 0, 30, 10), task("b2", 0, 30, 10)
    chat = task("chat", 5, 30, 10, kind="interactive")
    Harness(cfg).at([b1, b2, chat]).run()
    assert (b1.wasted_tokens, b2.wasted_tokens, chat.wasted_tokens) == (0, 0, 30 + 2 - 1)


def test_kv_or_seqs_preempts_a_batch_request_for_a_waiting_interactive_one():
    """max_num_seqs = 2, no KV limit. With preempt_on = "kv" the interactive request waits for a batch
    request to end (vLLM issue 40004); with "kv-or-seqs" it preempts the latest batch one at the next step."""
    ends = {}
    for preempt_on in ("kv", "kv-or-seqs"):
        cfg = config(2, scheduling="priority", preempt_on=preempt_on, base_ms=10)
        batch = [task(i, 0, 20, 30) for i in range(3)]
        chat = task("chat", 15, 5, 3, kind="interactive")
        h = Harness(cfg).at(batch + [chat]).run()
        ends[preempt_on] = chat.end_ms
        if preempt_on == "kv":
            assert chat.start_ms == 300 and h.backend.stats()["preemptions"] == 0  # when batch 0 ends
        else:
            assert (chat.start_ms, chat.end_ms) == (20, 50)
            assert batch[1].wasted_tokens == 20 + 2 - 1  # its prompt and 2 tokens, the last not yet computed
            assert batch[1].end_ms == 50 + 10 * 28 and batch[2].start_ms == 300
    assert ends["kv-or-seqs"] < ends["kv"]


def test_priority_orders_the_waiting_queue_interactive_first():
    cfg = config(1, scheduling="priority", base_ms=10)
    batch = [task(i, 0, 5, 3) for i in range(3)]
    chat = task("chat", 1, 5, 3, kind="interactive")
    Harness(cfg).at(batch + [chat]).run()
    assert chat.start_ms == 30 and [b.start_ms for b in batch] == [0, 60, 90]


def test_too_large_a_request_fails_at_once():
    cfg = config(4, kv=64, block=16, base_ms=10)
    big, ok = task("big", 0, 60, 10), task("ok", 0, 10, 2)
    h = Harness(cfg).at([big, ok]).run()
    assert big.outcome == "failed" and big.end_ms == 0 and ok.outcome == "ok"
    assert h.backend.stats()["rejected"] == 1


def test_observe_reports_kv_use():
    cfg = config(4, kv=160, block=16, base_ms=10)
    h = Harness(cfg).at([task("a", 0, 32, 40)])
    h.run(until=5)
    o = h.backend.observe()
    assert isinstance(o, Observation)
    assert (o.busy, o.waiting, o.capacity, o.kv_capacity_tokens) == (1, 0, 4, 160)
    assert o.kv_used == pytest.approx(2 / 10)  # 32 prompt tokens: 2 of 10 blocks
    h.run(until=15)
    assert h.backend.observe().kv_used == pytest.approx(3 / 10)  # its first decode step takes a third
    h.run()
    assert h.backend.observe().kv_used == 0
    plain = make_backend(config(4, scheduling="priority", base_ms=10), simpy.Environment(), lambda t: None, None)
    assert plain.observe() == Observation(0, 0, 4, None, None)


def test_cancel_running_frees_its_blocks_and_counts_its_work():
    cfg = config(4, kv=160, block=16, base_ms=10)
    a, b = task("a", 0, 32, 100), task("b", 0, 32, 10)
    h = Harness(cfg).at([a, b], cancels={a: 35.0}).run()
    assert a.end_ms is None and a in h.cancelled
    assert a.wasted_tokens == 32 + 3  # prefill, and steps 1-3 (the one in progress at 35 ms included)
    assert a.wasted_ms == 35
    assert b.end_ms == 100 and h.backend._used == 0
    assert h.backend.stats()["cancelled_tokens"] == 35


def test_cancel_waiting_and_in_the_front_end():
    cfg = config(1, kv=160, block=16, base_ms=10, request_ms=5)
    a, b, c = task("a", 0, 10, 5), task("b", 0, 10, 5), task("c", 0, 10, 5)
    h = Harness(cfg).at([a, b, c], cancels={b: 20.0, c: 12.0})  # b waits in the engine, c in the front end
    h.run()
    assert a.end_ms == 55 and b.end_ms is None and c.end_ms is None
    assert b.wasted_tokens == c.wasted_tokens == 0
    assert h.backend.waiting() == 0 and h.backend.busy() == 0


def test_a_step_that_schedules_nothing_takes_no_time():
    """Priority, 4 blocks of 4 tokens. The batch request, first in the running list, and the interactive one
    both need a block at step 5 and none is free: the batch one is the victim and it is itself, so the pass
    ends (vLLM's `break`) before the interactive one is reached; that step schedules nothing, runs no forward
    pass, and the next one gives the interactive request the freed block at once."""
    cfg = config(4, kv=16, block=4, scheduling="priority", base_ms=10)
    batch = task("batch", 0, 4, 10)  # 1 block; a new one at steps 1, 5, 9
    chat = task("chat", 0.5, 5, 10, kind="interactive")  # admitted at step 1 with 2 blocks; new ones at 5, 9
    h = Harness(cfg).at([batch, chat]).run()
    assert chat.end_ms == 110 and chat.wasted_tokens == 0  # steps 1-10, 10 ms each: the empty step took none
    assert batch.wasted_tokens == 4 + 5 - 1  # prompt and 5 tokens, the last not yet computed
    assert batch.end_ms == 110 + 5 * 10  # resumed when chat ends, 5 tokens to go
    assert h.backend.stats()["iterations"] == 16
    check_against_naive(h, cfg, formula(10, 0, 0))


def test_cancel_from_a_done_callback_leaves_before_the_next_step():
    cfg = config(4, kv=160, block=16, base_ms=10)
    a, b = task("a", 0, 10, 3), task("b", 0, 10, 50)
    h = Harness(cfg).at([a, b])
    h.on_done = lambda t: h.cancel(b) if t is a else None
    h.run()
    assert a.end_ms == 30 and b.end_ms is None and b in h.cancelled
    assert b.wasted_tokens == 10 + 2 and b.wasted_ms == 30  # its prefill and 2 decode steps: steps 0-2
    assert h.backend.stats()["iterations"] == 3 and h.backend._used == 0


# --- equality with the naive transcription --------------------------------------------------------------
def grid(lo, hi, unit):
    """Multiples of a power-of-two `unit`: all sums and products stay exact, so ties are real ties."""
    return st.integers(int(lo / unit), int(hi / unit)).map(lambda k: k * unit)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 16))
    at = st.one_of(grid(0, 150, 0.5), st.sampled_from([0.0, 10.0, 20.0]))
    times = sorted(draw(st.lists(at, min_size=n, max_size=n)))
    block = draw(st.sampled_from([1, 2, 4, 16]))
    reqs = [(t, draw(st.integers(0, 60)), draw(st.integers(1, 40)), draw(st.booleans())) for t in times]
    followers = [(draw(st.integers(0, 60)), draw(st.integers(1, 30)), draw(st.booleans()))
                 for _ in range(draw(st.integers(0, 4)))]
    biggest = max(1, max(p + o - 1 for _, p, o, _ in reqs))
    low = max(block, biggest // 2)  # some requests too large for the cache: they fail
    kv = draw(st.one_of(st.none(), st.integers(low, max(low, biggest * 3))))
    scheduling = draw(st.sampled_from([None, "fcfs", "priority"]))
    if kv is None and scheduling != "priority":
        scheduling = "priority"
    preempt_on = draw(st.sampled_from([None, "kv", "kv-or-seqs"])) if scheduling == "priority" else None
    step = dict(base_ms=draw(grid(0.5, 20, 0.25)), per_token_ms=draw(grid(0, 0.5, 1 / 16)),
                per_seq_ms=draw(grid(0, 4, 0.25)), admit_ms=draw(st.sampled_from([0.0, 0.0, 1.5])),
                request_ms=draw(st.sampled_from([0.0, 0.0, 2.5])))
    cfg = config(draw(st.integers(1, 5)), draw(st.one_of(st.none(), st.integers(1, 150))), kv,
                 block if kv is not None else None, scheduling, preempt_on, **step)
    return reqs, followers, cfg


def drive(reqs, followers, cfg, cancel_at=(), defer=False):
    """`defer`: followers are dispatched by an event at the instant of the completion, after the boundary
    has scheduled its step (a closed-loop user with no think time)."""
    h = Harness(cfg)
    tasks = [task(i, t, p, o, "interactive" if inter else "batch") for i, (t, p, o, inter) in enumerate(reqs)]
    follow = deque(task(f"f{i}", 0, p, o, "interactive" if inter else "batch") for i, (p, o, inter) in enumerate(followers))

    def on_done(t):  # dispatch from inside done(): the finish-then-start pattern of a scheduler
        if follow:
            f = follow.popleft()
            f.arrival_ms = h.env.now
            if defer:
                h.env.timeout(0, f).callbacks.append(lambda e: h.dispatch(e.value))
            else:
                h.dispatch(f)

    h.on_done = on_done
    cancels = {tasks[i]: when for i, when in cancel_at if i < len(tasks)}
    h.at(tasks, cancels).run()
    return h, {t: c for t, c in cancels.items() if t in h.cancelled}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_matches_naive_transcription(case):
    reqs, followers, cfg = case
    h, _ = drive(reqs, followers, cfg)
    s = cfg.step
    check_against_naive(h, cfg, formula(s.base_ms, s.per_token_ms, s.per_seq_ms, s.admit_ms))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(st.tuples(st.integers(0, 15), st.floats(0, 600).map(lambda x: x + 1 / 3)), max_size=5))
def test_matches_naive_transcription_with_cancels(case, cancel_at):
    """Cancels at times off the step grid (a third of a ms off): a cancel never lands on a boundary."""
    reqs, followers, cfg = case
    h, cancels = drive(reqs, followers, cfg, cancel_at)
    s = cfg.step
    check_against_naive(h, cfg, formula(s.base_ms, s.per_token_ms, s.per_seq_ms, s.admit_ms), cancels)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_fcfs_matches_naive_transcription_with_late_joins(case):
    """A request that reaches the engine at a boundary's instant after that step was scheduled joins it (a
    second pass of the waiting queue at that instant). In FCFS order that is the same as one pass."""
    reqs, followers, cfg = case
    if cfg.scheduling == "priority":
        cfg = cfg.model_copy(update={"scheduling": None, "preempt_on": None, "kv_cache_tokens": cfg.kv_cache_tokens or 10_000})
    h, _ = drive(reqs, followers, cfg, defer=True)
    s = cfg.step
    check_against_naive(h, cfg, formula(s.base_ms, s.per_token_ms, s.per_seq_ms, s.admit_ms))


def test_matches_naive_transcription_on_random_floats():
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(5, 60))
        times = np.sort(rng.uniform(0, 3000, n))
        reqs = [(t, int(rng.integers(1, 800)), int(rng.integers(1, 300)), bool(rng.random() < 0.4)) for t in times]
        kv = int(rng.integers(1200, 6000))
        cfg = config(int(rng.integers(2, 12)), None if rng.random() < 0.5 else int(rng.integers(200, 3000)), kv, 16,
                     "priority" if seed % 2 else "fcfs", "kv-or-seqs" if seed % 4 == 1 else None,
                     base_ms=float(rng.uniform(1, 30)), per_token_ms=float(rng.uniform(0, 0.05)),
                     per_seq_ms=float(rng.uniform(0, 3)), admit_ms=float(rng.uniform(0, 8)) if seed % 3 else 0.0)
        h, _ = drive(reqs, [], cfg)
        s = cfg.step
        check_against_naive(h, cfg, formula(s.base_ms, s.per_token_ms, s.per_seq_ms, s.admit_ms))


# --- through the engine ----------------------------------------------------------------------------
def small_scenario(**backend):
    return {
        "name": "kv",
        "duration_ms": 20_000,
        "backend": {"kind": "continuous-batching", "max_num_seqs": 8,
                    "step": {"base_ms": 12, "per_token_ms": 0.01, "per_seq_ms": 0.8}, **backend},
        "scheduler": {"maxConcurrency": 12, "batchMaxConcurrency": 8, "batchMinConcurrency": 1,
                      "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 2000},
        "workload": [
            {"class": "batch", "arrivals": {"process": "burst", "count": 15, "at_ms": [0, 8000]},
             "prompt_tokens": {"dist": "uniform", "low": 200, "high": 2000},
             "output_tokens": {"dist": "uniform", "low": 50, "high": 400}},
            {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 3},
             "prompt_tokens": {"dist": "uniform", "low": 20, "high": 300},
             "output_tokens": {"dist": "uniform", "low": 5, "high": 60}},
            {"class": "interactive", "arrivals": {"process": "closed-loop", "users": 2, "think": {"dist": "exponential", "mean": 300}},
             "prompt_tokens": {"dist": "constant", "value": 50},
             "output_tokens": {"dist": "constant", "value": 10}},
        ],
    }  # fmt: skip


WORLDS = [
    {"kv_cache_tokens": 6000},
    {"kv_cache_tokens": 6000, "scheduling": "priority"},
    {"kv_cache_tokens": 6000, "kv_block_tokens": 32, "scheduling": "priority", "preempt_on": "kv-or-seqs"},
    {"scheduling": "priority", "preempt_on": "kv-or-seqs"},
]


@pytest.mark.parametrize("policy", ["unscheduled", "fifo", "adaptive"])
@pytest.mark.parametrize("world", WORLDS)
def test_engine_runs_every_task_once_and_matches_naive(policy, world):
    s = scenario_from_dict(small_scenario(**world))
    engine = Engine(s, s.options(policy), seed=3)
    backend = engine.backend
    assert isinstance(backend, KvBatchingBackend)
    recorded, ends = [], []
    dispatch = backend.dispatch
    backend.dispatch = lambda t: (recorded.append((engine.env.now, t)), dispatch(t))
    done = engine._done
    backend.done = lambda t: (ends.append(t), done(t))
    admit = backend._admit_waiting

    def checked_admit(idx, now):  # priority: no batch request starts while an interactive one waits
        before = len(backend._prefill)
        changed = admit(idx, now)
        if backend._priority and any(s.priority for s in backend._prefill[before:]):
            assert not any(e[2].priority == 0 for e in backend._waiting), "batch admitted over a waiting interactive"
        return changed

    backend._admit_waiting = checked_admit
    result = engine.run()
    assert len(ends) == len(recorded) == len(result.tasks) == len({id(t) for t in ends})
    assert all(t.outcome == "ok" and t.start_ms >= t.dispatch_ms for t in result.tasks)
    assert all(0 < t.ttft_ms <= t.end_ms - t.arrival_ms for t in result.tasks)
    stats = result.backend_stats
    # every token the engine computed: each request's final life (prompt + output - 1) and what was thrown away
    lives = len(ends) + stats["preemptions"]
    computed = stats["prefill_tokens"] + stats["output_tokens"] - lives
    assert computed == sum(t.prompt_tokens + t.output_tokens - 1 for t in ends) + stats["recomputed_tokens"]
    assert stats["recomputed_tokens"] == sum(t.wasted_tokens for t in ends)
    if "kv_cache_tokens" in world:
        assert 0 < stats["kv_use_mean"] <= stats["kv_use_peak"] <= 1
    reqs = [Req(i, now, t.prompt_tokens, t.output_tokens, t.interactive) for i, (now, t) in enumerate(recorded)]
    cfg = s.backend
    st_ = cfg.step
    expect, naive_stats = naive(reqs, 8, None, formula(st_.base_ms, st_.per_token_ms, st_.per_seq_ms), cfg.kv_blocks,
                                cfg.block_tokens, cfg.scheduling == "priority", cfg.preempt_on == "kv-or-seqs")
    for (now, t), r in zip(recorded, expect):
        assert abs(t.start_ms - r.start) <= TOL and abs(t.end_ms - r.end) <= TOL
        assert t.wasted_tokens == r.wasted
    assert stats["preemptions"] == naive_stats["preemptions"]


def test_kv_pressure_preempts_in_the_engine():
    s = scenario_from_dict(small_scenario(kv_cache_tokens=4000, scheduling="priority"))
    stats = Engine(s, s.options("unscheduled"), seed=3).run().backend_stats
    assert stats["preemptions"] > 0 and stats["recomputed_tokens"] > 0 and stats["kv_use_peak"] > 0.9


# --- scenario fields ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend, message", [
    ({"kv_cache_tokens": 8}, r"kv_cache_tokens \(8\) is smaller than one block of kv_block_tokens \(16\)"),
    ({"kv_block_tokens": 32}, "give kv_cache_tokens too"),
    ({"preempt_on": "kv-or-seqs"}, "needs scheduling = 'priority'"),
    ({"kv_cache_tokens": 0}, "greater than or equal to 1"),
    ({"scheduling": "lifo"}, "'fcfs' or 'priority'"),
    ({"kv_cache_tokens": 2000}, r"cannot hold the largest request of workload\[0\] \(2000 prompt \+ 400 output"),
])  # fmt: skip
def test_bad_backend_fields_are_named(backend, message):
    with pytest.raises(InputError, match=message):
        scenario_from_dict(small_scenario(**backend))


def test_kv_fields_belong_to_continuous_batching():
    data = small_scenario()
    data["backend"] = {"kind": "slots", "slots": 4, "scheduling": "priority"}
    for w in data["workload"]:
        w["service"] = {"dist": "constant", "value": 10}
    with pytest.raises(InputError, match="scheduling is a setting of the continuous-batching backend"):
        scenario_from_dict(data)


def test_unbounded_lengths_pass_the_loader_and_fail_at_run_time_when_too_large():
    data = small_scenario(kv_cache_tokens=3000)
    data["workload"][0]["prompt_tokens"] = {"dist": "lognormal", "median": 1500, "p95": 4000}
    s = scenario_from_dict(data)
    result = Engine(s, s.options("unscheduled"), seed=1).run()
    failed = [t for t in result.tasks if t.outcome == "failed"]
    assert failed and all(t.prompt_tokens + t.output_tokens - 1 > 3000 for t in failed)
    assert result.backend_stats["rejected"] == len(failed)
