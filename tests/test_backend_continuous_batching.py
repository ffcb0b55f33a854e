"""The continuous-batching backend: hand-computed cases, and equality with a naive iteration-by-iteration
simulator on random inputs (the backend fast-forwards over iterations whose membership does not change)."""

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
from simlab.scenario import Backend as BackendConfig
from simlab.scenario import StepTime, scenario_from_dict
from simlab.world.backends import BACKENDS, make_backend
from simlab.world.backends.continuous_batching import ContinuousBatchingBackend
from simlab.world.engine import Engine

TOL = 1e-6
TIE = 1e-7


# --- the naive reference ----------------------------------------------------------------------------
def naive(reqs, max_seqs, max_tokens, step_ms):
    """Iteration by iteration. `reqs`: (dispatch_ms, prompt, output) in dispatch order (times non-decreasing).
    `step_ms(n_seqs, n_prefill, prefill_tokens)`. Returns [(start, first_token, end)] per request.

    A request joins the first iteration that starts at or after its dispatch (FIFO, within the limits);
    an idle server starts an iteration at the next dispatch. A dispatch within TIE of a boundary counts as
    at it: a scheduler dispatches at the backend's own completion times, which this reference, summing
    steps one by one, reproduces only up to rounding."""
    out = [[None, None, None] for _ in reqs]
    pending = deque(range(len(reqs)))
    queue: deque = deque()
    running: list = []  # [index, tokens produced]
    t = -math.inf
    while pending or queue or running:
        while pending and reqs[pending[0]][0] <= t + TIE:
            queue.append(pending.popleft())
        if not running and not queue:
            t = reqs[pending[0]][0]
            continue
        new, prefill = [], 0
        while queue and len(running) < max_seqs:
            i = queue[0]
            p = reqs[i][1]
            if max_tokens is not None and new and prefill + p > max_tokens:
                break
            queue.popleft()
            new.append(i)
            prefill += p
            running.append([i, 0])
            out[i][0] = t
        t = t + step_ms(len(running), len(new), prefill)
        still = []
        for r in running:
            r[1] += 1
            i = r[0]
            if r[1] == 1:
                out[i][1] = t
            if r[1] >= max(1, reqs[i][2]):
                out[i][2] = t
            else:
                still.append(r)
        running = still
    return out


def formula(base, per_token, per_seq, admit=0.0):
    def step(n, n_prefill, prefill_tokens):
        return base + per_token * (prefill_tokens + n - n_prefill) + per_seq * n + admit * n_prefill

    return step


def profiled(xs, ys, per_token, admit=0.0):
    def step(n, n_prefill, prefill_tokens):
        return float(np.interp(n, xs, ys)) + per_token * prefill_tokens + admit * n_prefill

    return step


# --- driving the backend directly -------------------------------------------------------------------
def config(max_num_seqs, max_batched_tokens=None, **step):
    return BackendConfig(
        kind="continuous-batching", max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens, step=StepTime(**step)
    )


def task(i, at, prompt, output, kind="batch"):
    t = Task(i, kind, float(at), None)
    t.prompt_tokens, t.output_tokens = prompt, output
    return t


class Harness:
    """A backend on a fresh SimPy clock. Records every dispatch (time, task) and every done (time, task)."""

    def __init__(self, cfg, profile=None):
        self.env = simpy.Environment()
        self.ended: list = []
        self.dispatched: list = []
        self.on_done = None
        self.backend = ContinuousBatchingBackend(self.env, self._done, cfg, np.random.default_rng(0))
        if profile is not None:
            self.backend.set_profile(*profile)

    def _done(self, t):
        assert t.end_ms is None, f"{t} finished twice"
        t.end_ms = self.env.now
        self.ended.append(t)
        if self.on_done is not None:
            self.on_done(t)

    def dispatch(self, t):
        self.dispatched.append((self.env.now, t))
        self.backend.dispatch(t)

    def at(self, tasks, chain=False):
        """Dispatch each task at its arrival_ms. `chain`: each arrival schedules the next, so arrivals at the
        instant of a backend event are processed after it (the other order from pre-scheduled ones)."""
        tasks = sorted(tasks, key=lambda t: t.arrival_ms)
        if not chain:
            for t in tasks:
                self.env.timeout(t.arrival_ms, t).callbacks.append(lambda e: self.dispatch(e.value))
        elif tasks:
            it = iter(tasks)

            def fire(event):
                self.dispatch(event.value)
                nxt = next(it, None)
                if nxt is not None:
                    self.env.timeout(nxt.arrival_ms - self.env.now, nxt).callbacks.append(fire)

            first = next(it)
            self.env.timeout(first.arrival_ms, first).callbacks.append(fire)
        return self

    def run(self, until=None):
        self.env.run(until=until)
        return self


def check_against_naive(h: Harness, step_ms, cfg):
    front, free, reqs = cfg.step.request_ms, 0.0, []  # the front end handles one request at a time
    for now, t in h.dispatched:
        free = max(now, free) + front if front else now
        reqs.append((free, t.prompt_tokens, t.output_tokens))
    expect = naive(reqs, cfg.max_num_seqs, cfg.max_batched_tokens, step_ms)
    assert len(h.ended) == len(h.dispatched)
    assert len({id(t) for t in h.ended}) == len(h.ended)
    for (now, t), (start, first, end) in zip(h.dispatched, expect):
        assert t.outcome == "ok"
        assert abs(t.start_ms - start) <= TOL, (t, t.start_ms, start)
        assert abs(t.arrival_ms + t.ttft_ms - first) <= TOL, (t, t.arrival_ms + t.ttft_ms, first)
        assert abs(t.end_ms - end) <= TOL, (t, t.end_ms, end)
        assert now <= t.start_ms < t.arrival_ms + t.ttft_ms <= t.end_ms + TOL
    assert h.backend.busy() == 0 and h.backend.waiting() == 0


# --- hand-computed cases ----------------------------------------------------------------------------
def test_registered():
    assert BACKENDS["continuous-batching"] is ContinuousBatchingBackend


def test_single_request():
    cfg = config(4, base_ms=10, per_token_ms=0.1, per_seq_ms=1)
    a = task("a", 3, prompt=100, output=5)
    h = Harness(cfg).at([a]).run()
    first = 10 + 0.1 * 100 + 1  # prefill step: 21 ms
    decode = 10 + 0.1 * 1 + 1  # one decoding sequence: 11.1 ms
    assert a.start_ms == 3
    assert a.ttft_ms == pytest.approx(first)
    assert a.end_ms == pytest.approx(3 + first + 4 * decode)
    assert a.outcome == "ok"
    s = h.backend.stats()
    assert s["iterations"] == 5 and s["mean_batch_size"] == 1 and s["prefill_tokens"] == 100
    assert s["busy_ms"] == pytest.approx(first + 4 * decode)


def test_single_token_output_ends_at_first_token():
    a = task("a", 0, prompt=7, output=1)
    Harness(config(2, base_ms=5, per_token_ms=1)).at([a]).run()
    assert a.ttft_ms == a.end_ms == 12


def test_two_requests_joining():
    cfg = config(4, base_ms=10, per_token_ms=0.5, per_seq_ms=1)
    a = task("a", 0, prompt=10, output=4)
    b = task("b", 5, prompt=20, output=2)
    Harness(cfg).at([a, b]).run()
    # iter 0 [0, 16]: a prefill 10 + 0.5*10 + 1 = 16
    # iter 1 [16, 38.5]: a decodes (1 token) + b prefills 20: 10 + 0.5*21 + 2 = 22.5
    # iter 2 [38.5, 51.5]: both decode: 10 + 0.5*2 + 2 = 13; b's 2nd token: b ends
    # iter 3 [51.5, 63]: a alone: 10 + 0.5 + 1 = 11.5; a's 4th token: a ends
    assert (a.start_ms, a.ttft_ms, a.end_ms) == (0, 16, 63)
    assert (b.start_ms, b.ttft_ms, b.end_ms) == (16, 38.5 - 5, 51.5)


def test_max_num_seqs_queues_fifo():
    cfg = config(1, base_ms=10)
    a, b, c = task("a", 0, 1, 3), task("b", 0, 1, 3), task("c", 1, 1, 2)
    h = Harness(cfg).at([a, b, c])
    h.run(until=5)
    assert h.backend.busy() == 1 and h.backend.waiting() == 2
    h.run()
    assert (a.start_ms, a.end_ms) == (0, 30)
    assert (b.start_ms, b.ttft_ms, b.end_ms) == (30, 40, 60)
    assert (c.start_ms, c.ttft_ms, c.end_ms) == (60, 69, 80)


def test_max_batched_tokens_limits_prefill_per_step():
    cfg = config(8, max_batched_tokens=100, base_ms=10)
    a, b, c = task("a", 0, 60, 3), task("b", 0, 30, 3), task("c", 0, 50, 3)
    huge = task("huge", 100, 500, 1)
    Harness(cfg).at([a, b, c, huge]).run()
    assert a.start_ms == b.start_ms == 0  # 60 + 30 fit
    assert c.start_ms == 10  # 90 + 50 does not: next step
    assert huge.start_ms == 100 and huge.end_ms == 110  # over the budget on its own: admitted alone


def test_join_exactly_at_a_boundary_and_just_after():
    cfg = config(4, base_ms=10)
    a = task("a", 0, 1, 10)
    b = task("b", 30, 1, 2)  # boundary 30 exists (10-ms steps): joins it
    c = task("c", 30.5, 1, 1)  # just after: waits for 40
    for chain in (False, True):
        for t in (a, b, c):
            t.start_ms = t.end_ms = t.ttft_ms = None
        Harness(cfg).at([a, b, c], chain=chain).run()
        assert (b.start_ms, b.end_ms) == (30, 50)
        assert (c.start_ms, c.end_ms) == (40, 50)
        assert a.end_ms == 100


def test_same_instant_dispatches_share_the_iteration():
    cfg = config(4, base_ms=10, per_token_ms=1)
    a, b = task("a", 0, 5, 2), task("b", 0, 7, 2)
    Harness(cfg).at([a, b], chain=True).run()  # b is dispatched after the server already started a's step
    assert a.start_ms == b.start_ms == 0
    assert a.ttft_ms == b.ttft_ms == 10 + 12  # one step with both prefills


def test_same_instant_dispatch_over_the_token_budget_waits_one_step():
    cfg = config(4, max_batched_tokens=100, base_ms=10)
    a, b = task("a", 0, 80, 5), task("b", 0, 50, 1)
    Harness(cfg).at([a, b], chain=True).run()
    assert a.start_ms == 0 and a.end_ms == 50
    assert b.start_ms == 10 and b.end_ms == 20


def test_dispatch_from_done_joins_the_next_iteration_at_once():
    cfg = config(1, base_ms=10)
    a = task("a", 0, 1, 2)
    follow = task("f", 0, 1, 1)
    h = Harness(cfg).at([a])
    h.on_done = lambda t: h.dispatch(follow) if t is a else None
    h.run()
    assert a.end_ms == 20 and follow.start_ms == 20 and follow.end_ms == 30


def test_interference_batch_in_flight_slows_interactive_with_free_slots():
    """The point of the backend: same interactive request, a free slot every time, more batch sequences in
    flight => slower tokens, later end."""
    cfg = config(64, base_ms=8, per_token_ms=0.02, per_seq_ms=0.5)
    latencies = []
    for n_batch in (0, 4, 16, 48):
        batch = [task(f"b{i}", 0, 500, 1000) for i in range(n_batch)]
        chat = task("chat", 2000, 50, 20, kind="interactive")  # after the batch prefills
        Harness(cfg).at(batch + [chat]).run()
        assert chat.start_ms - chat.arrival_ms < 8 + 0.02 * 48 + 0.5 * 48  # at most one decode step: a slot was free
        latencies.append((chat.ttft_ms, chat.end_ms - chat.arrival_ms))
    ttfts, totals = zip(*latencies)
    assert all(x < y for x, y in zip(ttfts, ttfts[1:]))
    assert all(x < y for x, y in zip(totals, totals[1:]))
    assert totals[-1] > 3 * totals[0]


def test_front_end_handles_one_request_at_a_time():
    """Three requests dispatched at once reach the engine 40, 80 and 120 ms later."""
    cfg = config(8, base_ms=10, per_token_ms=0, per_seq_ms=0, request_ms=40)
    h = Harness(cfg).at([task(i, 0, 10, 1) for i in range(3)]).run()
    assert [t.start_ms for t in h.ended] == [40, 80, 120]
    assert [t.end_ms for t in h.ended] == [50, 90, 130]


def test_front_end_latency_delays_the_engine_not_the_slot():
    """request_ms: the request reaches the iteration loop that long after dispatch; it counts as waiting."""
    cfg = config(4, base_ms=10, per_token_ms=0.1, per_seq_ms=1, request_ms=40)
    h = Harness(cfg).at([task(0, 0, 100, 3)])
    h.run(until=39.0)
    assert h.backend.waiting() == 1 and h.backend.busy() == 0
    h.run()
    t = h.ended[0]
    assert t.start_ms == 40
    first = 40 + 10 + 0.1 * 100 + 1  # front end, then one prefill iteration
    assert t.ttft_ms == pytest.approx(first)
    assert t.end_ms == pytest.approx(first + 2 * (10 + 0.1 + 1))


def test_profile_interpolates_and_clamps():
    cfg = config(8, base_ms=99, per_token_ms=0.5)  # base_ms is unused with a profile
    h = Harness(cfg, profile=([2, 4], [10.0, 20.0]))
    assert h.backend._table[1:] == [10.0, 10.0, 15.0, 20.0, 20.0, 20.0, 20.0, 20.0]
    a, b, c = task("a", 0, 4, 3), task("b", 0, 4, 3), task("c", 0, 4, 3)
    h.at([a, b, c]).run()
    assert a.ttft_ms == 15 + 0.5 * 12  # 3 sequences, 12 prefill tokens
    assert a.end_ms == 21 + 2 * 15


def test_load_profile_from_scenario(tmp_path):
    prof = tmp_path / "gpu.csv"
    prof.write_text("batch_size,step_ms\n4,20\n1,10\n")
    s = small_scenario(step={"base_ms": 5, "profile": "gpu.csv"})
    s = scenario_from_dict(s, tmp_path / "s.toml")
    backend = make_backend(s.backend, simpy.Environment(), lambda t: None, np.random.default_rng(0), s)
    assert backend._table[1:5] == [10, 10 + 10 / 3, 10 + 20 / 3, 20]
    prof.write_text("batch_size,step_ms\n1,10\n1,12\n")
    with pytest.raises(InputError, match="appears twice"):
        make_backend(s.backend, simpy.Environment(), lambda t: None, np.random.default_rng(0), s)
    prof.write_text("batch,ms\n1,10\n")
    with pytest.raises(InputError, match="missing column"):
        make_backend(s.backend, simpy.Environment(), lambda t: None, np.random.default_rng(0), s)
    prof.write_text("batch_size,step_ms\n1,0\n")
    with pytest.raises(InputError, match="positive"):
        make_backend(s.backend, simpy.Environment(), lambda t: None, np.random.default_rng(0), s)


def test_zero_step_time_is_rejected():
    with pytest.raises(InputError, match="decode step must take time"):
        scenario_from_dict(small_scenario(step={"base_ms": 0}))
    scenario_from_dict(small_scenario(step={"base_ms": 0, "per_seq_ms": 1}))


def test_long_outputs_cost_a_few_events_not_one_per_token():
    cfg = config(8, base_ms=10)
    for chain in (False, True):
        h = Harness(cfg)
        tasks = [task(f"b{i}", 0, 100, 2000 + 100 * i) for i in range(8)]
        h.at(tasks, chain=chain).run()
        tokens = sum(t.output_tokens for t in tasks)
        assert len(h.ended) == 8 and tokens > 16_000
        events = next(h.env._eid)  # every event, SimPy's or a fire_at, takes one id
        assert events <= 8 + 8 + 2  # arrivals + one per completion (+ one re-arm after a same-instant burst)
    assert h.backend.stats()["iterations"] == 2700


# --- equality with the naive simulator ----------------------------------------------------------------
def grid(lo, hi, unit):
    """Multiples of a power-of-two `unit`: all sums and products stay exact, so ties are real ties."""
    return st.integers(int(lo / unit), int(hi / unit)).map(lambda k: k * unit)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 14))
    at = st.one_of(grid(0, 150, 0.5), st.sampled_from([0.0, 10.0, 20.0]))  # many same-instant dispatches
    times = sorted(draw(st.lists(at, min_size=n, max_size=n)))
    reqs = [(t, draw(st.integers(0, 120)), draw(st.integers(1, 25))) for t in times]
    followers = [(draw(st.integers(0, 120)), draw(st.integers(1, 25))) for _ in range(draw(st.integers(0, 4)))]
    max_seqs = draw(st.integers(1, 5))
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 250)))
    per_token = draw(grid(0, 0.5, 1 / 16))
    if draw(st.booleans()):
        step = dict(base_ms=draw(grid(0.5, 20, 0.25)), per_token_ms=per_token, per_seq_ms=draw(grid(0, 4, 0.25)),
                    admit_ms=draw(st.sampled_from([0.0, 0.0, 1.5, 6.25])))
        profile = None
        step_fn = formula(step["base_ms"], per_token, step["per_seq_ms"], step["admit_ms"])
    else:  # batch sizes 1, 2, 4, 8 (power-of-two gaps: exact interpolation)
        ys = draw(st.lists(grid(0.5, 30, 0.25), min_size=4, max_size=4))
        profile = ([1, 2, 4, 8], ys)
        step = dict(base_ms=1.0, per_token_ms=per_token, admit_ms=draw(st.sampled_from([0.0, 2.5])))
        step_fn = profiled(*profile, per_token, step["admit_ms"])
    step["request_ms"] = draw(st.sampled_from([0.0, 0.0, 2.5, 10.0, 37.25]))
    chain = draw(st.booleans())
    return reqs, followers, max_seqs, max_tokens, step, profile, step_fn, chain


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_matches_naive_simulator(case):
    reqs, followers, max_seqs, max_tokens, step, profile, step_fn, chain = case
    cfg = config(max_seqs, max_tokens, **step)
    h = Harness(cfg, profile)
    tasks = [task(i, t, p, o) for i, (t, p, o) in enumerate(reqs)]
    follow = deque(task(f"f{i}", 0, p, o) for i, (p, o) in enumerate(followers))

    def on_done(t):  # dispatch from inside done(): the finish-then-start pattern of a scheduler
        if follow:
            f = follow.popleft()
            f.arrival_ms = h.env.now
            h.dispatch(f)

    h.on_done = on_done
    h.at(tasks, chain=chain).run()
    check_against_naive(h, step_fn, cfg)


def test_matches_naive_simulator_on_random_floats():
    """Arbitrary floats (ties have probability 0): the fast-forward differs from step-by-step sums only by
    rounding."""
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, 40))
        times = np.sort(rng.uniform(0, 2000, n))
        cfg = config(
            int(rng.integers(1, 9)),
            None if rng.random() < 0.5 else int(rng.integers(50, 2000)),
            base_ms=float(rng.uniform(1, 30)),
            per_token_ms=float(rng.uniform(0, 0.05)),
            per_seq_ms=float(rng.uniform(0, 3)),
            request_ms=float(rng.uniform(0, 50)) if seed % 3 == 0 else 0.0,
            admit_ms=float(rng.uniform(0, 8)) if seed % 2 == 0 else 0.0,
        )
        tasks = [task(i, t, int(rng.integers(1, 1500)), int(rng.integers(1, 300))) for i, t in enumerate(times)]
        h = Harness(cfg).at(tasks, chain=bool(seed % 2)).run()
        s = cfg.step
        check_against_naive(h, formula(s.base_ms, s.per_token_ms, s.per_seq_ms, s.admit_ms), cfg)


# --- through the engine ----------------------------------------------------------------------------
def small_scenario(step=None, **backend):
    return {
        "name": "cb",
        "duration_ms": 20_000,
        "backend": {"kind": "continuous-batching", "max_num_seqs": 8, "step": step or {"base_ms": 12, "per_token_ms": 0.01, "per_seq_ms": 0.8}, **backend},
        "scheduler": {"maxConcurrency": 12, "batchMaxConcurrency": 8, "batchMinConcurrency": 1,
                      "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 2000},  # fmt: skip
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


@pytest.mark.parametrize("policy", ["unscheduled", "fifo", "adaptive"])
@pytest.mark.parametrize("budget", [None, 1500])
def test_engine_runs_and_matches_naive(policy, budget):
    s = scenario_from_dict(small_scenario(max_batched_tokens=budget))
    engine = Engine(s, s.options(policy), seed=3)
    recorded = []
    dispatch = engine.backend.dispatch
    engine.backend.dispatch = lambda t: (recorded.append((engine.env.now, t)), dispatch(t))
    done = engine._done
    ends = []
    engine.backend.done = lambda t: (ends.append(t), done(t))
    result = engine.run()
    assert len(ends) == len(recorded) == len(result.tasks) == len({id(t) for t in ends})
    assert all(t.outcome == "ok" and t.start_ms >= t.dispatch_ms for t in result.tasks)
    assert all(0 < t.ttft_ms <= t.end_ms - t.arrival_ms for t in result.tasks)
    reqs = [(now, t.prompt_tokens, t.output_tokens) for now, t in recorded]
    st_ = s.backend.step
    expect = naive(reqs, 8, budget, formula(st_.base_ms, st_.per_token_ms, st_.per_seq_ms))
    for (now, t), (start, first, end) in zip(recorded, expect):
        assert abs(t.start_ms - start) <= TOL and abs(t.end_ms - end) <= TOL
        assert abs(t.arrival_ms + t.ttft_ms - first) <= TOL
    stats = result.backend_stats
    assert stats["iterations"] > 0 and 1 <= stats["mean_batch_size"] <= 8 and stats["max_batch_size"] <= 8
