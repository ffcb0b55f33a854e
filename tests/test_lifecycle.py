"""Batch lifecycle in the engine: timeouts, retries, eviction, wasted work and the deadline share.

Hand cases first (every number below is computed in the comment beside it), then a property over random small
worlds on every backend, with a monitor at the engine's seams (backend.dispatch / cancel / done) that keeps its
own account: no task lost or run twice (each attempt ends once: done, or stopped, never both; a stopped task is
retried or fails with outcome "timeout"), caps and interactive first, and the wasted work of each stop exactly.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.errors import InputError
from simlab.experiments.metrics import LIFECYCLE_COLUMNS, summarize
from simlab.policies import options_from_dict
from simlab.scenario import scenario_from_dict
from simlab.world.engine import Engine
from tests.gate_strategies import gate_options, never_strands

TWO_QUEUES = ("priority", "static", "adaptive", "holdback", "aimd", "gradient2")


def world(backend, workloads, **extra):
    return scenario_from_dict({"name": "hand", "duration_ms": 1000.0, "max_sim_ms": 1e6, "sample_ms": 50.0,
                               "backend": backend, "workload": workloads, **extra})


def batch_burst(count, at=0.0, **kw):
    return {"name": "b", "class": "batch", "arrivals": {"process": "burst", "count": count, "at_ms": at}, **kw}


def run(scenario, **options):
    o = options_from_dict({"policy": "priority", "maxConcurrency": 1, **options})
    engine = Engine(scenario, o, 1)
    result = engine.run()
    return engine, result, summarize(result, scenario.slo_p95_ms)


# --- hand cases ---------------------------------------------------------------------------------------------------

TOKEN_TIME = {"base_ms": 10.0, "per_prompt_token_ms": 0.1, "per_output_token_ms": 2.0}
TOKENS = {"prompt_tokens": {"dist": "constant", "value": 100.0}, "output_tokens": {"dist": "constant", "value": 50.0}}


def test_timeouts_on_slots_throw_away_what_was_computed():
    # service = 10 + 0.1 x 100 + 2 x 50 = 120 ms; a 70 ms timeout: prefill done at 20 ms, then (70 - 20) / 2 = 25
    # output tokens: 100 + 25 = 125 tokens and 70 ms thrown away per attempt; two attempts, then outcome "timeout"
    sc = world({"kind": "slots", "slots": 1, "token_time": TOKEN_TIME},
               [batch_burst(1, timeout_ms=70.0, max_retries=1, **TOKENS)])
    engine, result, row = run(sc)
    (task,) = result.tasks
    assert task.outcome == "timeout" and task.end_ms == 140.0
    assert (task.attempts, task.wasted_tokens, task.wasted_ms) == (2, 250, 140.0)
    assert (row["timeouts"], row["retries"], row["wasted_tokens"], row["wasted_ms"]) == (2, 1, 250, 140.0)
    assert (row["batch_completed"], row["batch_failed"]) == (0, 1)
    assert engine.backend.busy_ms == 140.0  # service delivered: only what ran


def test_a_retry_that_fits_finishes():
    # 120 ms of service under a 130 ms timeout: no timeout at all; under 100 ms with 3 retries: fails after 4 x 100
    sc = world({"kind": "delay", "token_time": TOKEN_TIME}, [batch_burst(1, timeout_ms=130.0, **TOKENS)])
    _, result, row = run(sc)
    assert result.tasks[0].outcome == "ok" and row["timeouts"] == 0 and row["wasted_ms"] == 0
    sc = world({"kind": "delay", "token_time": TOKEN_TIME}, [batch_burst(1, timeout_ms=100.0, max_retries=3, **TOKENS)])
    _, result, row = run(sc)
    assert result.tasks[0].end_ms == 400.0 and (row["timeouts"], row["retries"]) == (4, 3)
    # each attempt: prefill done at 20 ms, (100 - 20) / 2 = 40 output tokens: 140 tokens, 100 ms
    assert (row["wasted_tokens"], row["wasted_ms"]) == (4 * 140, 400.0)


def test_a_timeout_counts_the_backend_queue_too():
    # one slot, two 100 ms jobs at 0, timeout 150: the second waits in the server until 100 and is stopped at 150
    # (50 ms of service thrown away), retried at the back: it runs 150..250
    sc = world({"kind": "slots", "slots": 1},
               [batch_burst(2, timeout_ms=150.0, max_retries=1, service={"dist": "constant", "value": 100.0})])
    _, result, row = run(sc, policy="unscheduled")
    first, second = sorted(result.tasks, key=lambda t: t.end_ms)
    assert (first.end_ms, second.end_ms, second.attempts, second.wasted_ms) == (100.0, 250.0, 2, 50.0)
    assert (row["timeouts"], row["retries"], row["wasted_ms"]) == (1, 1, 50.0)


def test_continuous_batching_stops_a_sequence_at_the_next_boundary():
    # 10 ms decode steps (base 10, nothing per token); prompt 10, 100 output tokens; the first step (prefill) ends
    # at 10, then one token per step. A 35 ms timeout falls in the step 30..40: the sequence leaves at 40, having
    # run 4 steps: 10 prompt tokens + 4 tokens, and 40 ms, thrown away.
    sc = world({"kind": "continuous-batching", "max_num_seqs": 4, "step": {"base_ms": 10.0}},
               [batch_burst(1, timeout_ms=35.0, prompt_tokens={"dist": "constant", "value": 10.0},
                            output_tokens={"dist": "constant", "value": 100.0})])
    engine, result, row = run(sc)
    (task,) = result.tasks
    assert task.outcome == "timeout" and task.end_ms == 35.0
    assert (task.wasted_tokens, task.wasted_ms) == (14, 40.0)
    assert engine.backend.busy() == 0 and engine.backend.stats()["iterations"] == 4


def test_eviction_stops_the_newest_batch_task_and_requeues_it_at_the_front():
    # 2 slots, batch b0 (0 ms) and b1 (5 ms) of 1000 ms each; interactive at 10 ms (50 ms). At 110 ms it has waited
    # 100 ms: b1, the newest, is stopped (105 ms thrown away), the interactive request runs 110..160, then b1 again
    # from the front of the batch queue: 160..1160
    sc = world({"kind": "slots", "slots": 2}, [
        {"name": "b", "class": "batch", "arrivals": {"process": "burst", "count": 1, "at_ms": [0.0, 5.0]},
         "service": {"dist": "constant", "value": 1000.0}},
        {"name": "i", "class": "interactive", "arrivals": {"process": "burst", "count": 1, "at_ms": 10.0},
         "service": {"dist": "constant", "value": 50.0}},
    ])
    _, result, row = run(sc, policy="static", maxConcurrency=2, batchMaxConcurrency=2, evict="newest", evictAfterMs=100)
    by = {t.arrival_ms: t for t in result.tasks}
    assert (by[10.0].start_ms, by[10.0].end_ms) == (110.0, 160.0)
    assert (by[5.0].dispatch_ms, by[5.0].end_ms, by[5.0].attempts, by[5.0].wasted_ms) == (160.0, 1160.0, 2, 105.0)
    assert (by[0.0].end_ms, by[0.0].attempts) == (1000.0, 1)
    assert (row["evictions"], row["timeouts"], row["wasted_ms"]) == (1, 0, 105.0)


def test_deadline_share():
    # one slot, four 100 ms jobs at 0: done at 100, 200, 300, 400; a 250 ms deadline from arrival: 2 of 4 make it
    sc = world({"kind": "slots", "slots": 1},
               [batch_burst(4, deadline_ms=250.0, service={"dist": "constant", "value": 100.0})])
    _, _, row = run(sc)
    assert row["batch_deadline_share"] == 0.5
    assert (row["timeouts"], row["evictions"], row["wasted_ms"]) == (0, 0, 0.0)


def test_runs_without_lifecycle_keep_their_columns():
    sc = world({"kind": "slots", "slots": 1}, [batch_burst(2, service={"dist": "constant", "value": 10.0})])
    engine, result, row = run(sc)
    assert not any(c in row for c in LIFECYCLE_COLUMNS)
    assert result.counters == {} and result.table["attempts"] is None


@pytest.mark.parametrize("bad, where", [
    ({"class": "interactive", "timeout_ms": 10.0}, "workload[0]"),
    ({"class": "batch", "max_retries": 2}, "workload[0]"),
])
def test_lifecycle_keys_are_checked(bad, where):
    w = {"arrivals": {"process": "burst", "count": 1}, "service": {"dist": "constant", "value": 1.0}, **bad}
    with pytest.raises(InputError) as err:
        world({"kind": "delay"}, [w])
    assert where in str(err.value)


def test_a_deadline_share_rule_needs_a_deadline():
    with pytest.raises(InputError, match="decision.batch_deadline_share"):
        world({"kind": "delay"}, [batch_burst(1, service={"dist": "constant", "value": 1.0})],
              decision={"rule": "slo", "batch_deadline_share": 0.9})


# --- the property -------------------------------------------------------------------------------------------------

@st.composite
def lifecycle_worlds(draw):
    kind = draw(st.sampled_from(["delay", "slots", "continuous-batching", "api"]))
    backend = {"kind": kind}
    if kind == "slots":
        backend["slots"] = draw(st.integers(1, 4))
    if kind in ("delay", "slots", "api"):
        backend["token_time"] = {"base_ms": draw(st.sampled_from([0.0, 5.0])), "per_prompt_token_ms": 0.05,
                                 "per_output_token_ms": draw(st.sampled_from([0.5, 2.0]))}
    if kind == "continuous-batching":
        backend["max_num_seqs"] = draw(st.integers(1, 4))
        backend["step"] = {"base_ms": draw(st.sampled_from([2.0, 10.0])), "per_seq_ms": draw(st.sampled_from([0.0, 1.0])),
                           "request_ms": draw(st.sampled_from([0.0, 0.0, 3.0]))}
    if kind == "api":
        backend["concurrency"] = draw(st.integers(1, 4))
        if draw(st.booleans()):
            backend["rpm"] = float(draw(st.integers(2, 30)))
            backend["retry"] = {"max_retries": 2, "base_ms": 50.0, "cap_ms": 200.0}
    tok = st.integers(1, 80).map(float)
    tokens = {"prompt_tokens": {"dist": "uniform", "low": 1.0, "high": draw(tok)},
              "output_tokens": {"dist": "uniform", "low": 1.0, "high": draw(tok)}}
    batch = {"name": "jobs", "class": "batch", **tokens,
             "arrivals": draw(st.sampled_from([{"process": "burst", "count": 12, "at_ms": [0.0, 300.0]},
                                                {"process": "poisson", "rate_per_s": 40.0}]))}
    if draw(st.integers(0, 4)):
        batch["timeout_ms"] = draw(st.sampled_from([15.0, 40.0, 120.0]))
        batch["max_retries"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        batch["deadline_ms"] = draw(st.sampled_from([50.0, 500.0]))
    chat = {"name": "chat", "class": "interactive", **tokens,
            "arrivals": {"process": "poisson", "rate_per_s": draw(st.sampled_from([5.0, 30.0]))}}
    return {"name": "life", "duration_ms": 600.0, "max_sim_ms": 1e6, "sample_ms": 25.0, "backend": backend,
            "workload": [chat, batch]}


@st.composite
def lifecycle_options(draw):
    policy = draw(st.sampled_from(["unscheduled", "fifo", *TWO_QUEUES]))
    d = {"policy": policy, "tieBreak": draw(st.sampled_from(["fifo", "seed-heap"]))}
    if policy != "unscheduled":
        d["maxConcurrency"] = draw(st.integers(1, 5))
    if policy in ("static", "adaptive"):
        d["batchMaxConcurrency"] = draw(st.integers(1, 5))
    if policy == "adaptive":
        d.update(batchMinConcurrency=1, interactiveRpsThreshold=draw(st.sampled_from([5, 50])),
                 interactiveP95LatencyMs=draw(st.sampled_from([20, 200])), windowMs=200)
    if policy in ("holdback", "aimd", "gradient2"):
        d.update(draw(gate_options(policy, d["maxConcurrency"])))
    if policy in TWO_QUEUES and draw(st.booleans()):
        d["evict"] = "newest"
        d["evictAfterMs"] = draw(st.sampled_from([1.0, 10.0, 60.0]))
    return d


class Seams:
    """Own account at the backend's seams, in event order."""

    def __init__(self, engine: Engine):
        self.e, self.o = engine, engine.options
        backend, policy = engine.backend, engine.policy
        dispatch, cancel, done, submit = backend.dispatch, backend.cancel, backend.done, policy.submit
        # by the task's row (unique in a run)
        self.live: set[int] = set()  # attempts in the backend
        self.dispatches: dict[int, int] = {}
        self.waiting_interactive: set[int] = set()
        self.in_flight = self.batch_in_flight = 0
        self.cancels = 0

        def on_submit(task):
            if task.interactive:
                self.waiting_interactive.add(task.index)
            return submit(task)

        def on_dispatch(task):
            assert task.index not in self.live, f"{task} dispatched while an attempt of it runs"
            self.live.add(task.index)
            self.dispatches[task.index] = self.dispatches.get(task.index, 0) + 1
            self.in_flight += 1
            if task.interactive:
                self.waiting_interactive.discard(task.index)
            else:
                self.batch_in_flight += 1
                if self.o.policy != "fifo":
                    assert not self.waiting_interactive, f"batch {task} dispatched while interactive work waited"
            if self.o.policy != "unscheduled":
                assert self.in_flight <= self.o.max_concurrency, "in flight above maxConcurrency"
            if not task.interactive and task.cap_at_dispatch is not None:
                assert self.batch_in_flight <= task.cap_at_dispatch, "batch in flight above the cap in force"
            dispatch(task)

        def on_cancel(task):
            assert task.index in self.live, f"{task} stopped while not in the backend"
            assert not task.interactive, "an interactive task was stopped"
            self.live.discard(task.index)
            self.in_flight -= 1
            self.batch_in_flight -= 1
            self.cancels += 1
            before_ms, before_tok = task.wasted_ms, task.wasted_tokens
            started, now = task.start_ms, engine.env.now
            cancel(task)
            got = task.wasted_ms - before_ms
            assert got >= 0 and task.wasted_tokens >= before_tok
            if engine.scenario.backend.kind in ("delay", "slots", "api"):
                # exactly the service time consumed (0 when still queued in the server, or in a 429 backoff)
                expect = now - started if started is not None else 0.0
                assert got == pytest.approx(expect, abs=1e-9), (got, expect)

        def on_done(task):
            assert task.index in self.live, f"done for {task} after it was stopped (or twice)"
            self.live.discard(task.index)
            self.in_flight -= 1
            if not task.interactive:
                self.batch_in_flight -= 1
            done(task)

        policy.submit, backend.dispatch, backend.cancel, backend.done = on_submit, on_dispatch, on_cancel, on_done


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.data_too_large])


@SETTINGS
@given(lifecycle_worlds(), lifecycle_options(), st.integers(0, 1000))
def test_lifecycle_invariants(scenario_dict, option_dict, seed):
    scenario = scenario_from_dict(scenario_dict)
    o = options_from_dict(option_dict)
    engine = Engine(scenario, o, seed)
    seams = Seams(engine)
    result = engine.run()
    row = summarize(result, scenario.slo_p95_ms)
    tasks = result.tasks
    batch = next(w for w in scenario.workload if w.kind == "batch")
    retries_allowed = batch.max_retries if batch.timeout_ms is not None else None
    assert not seams.live and seams.in_flight == 0, "an attempt never ended"
    if not result.counters:  # nothing of the lifecycle in this run: the plain path, nothing stopped
        assert seams.cancels == 0 and not any(c in row for c in LIFECYCLE_COLUMNS)
        assert all(t.outcome in ("ok", "failed") or not never_strands(o) for t in tasks)
        return
    counted = result.table["attempts"] is not None  # a run with a deadline alone has no attempts to count
    ended = 0
    for t in tasks:
        assert not counted or t.attempts == seams.dispatches.get(t.index, 0)
        if t.outcome == "timeout":
            assert not t.interactive and retries_allowed is not None
        elif t.outcome == "ok":
            pass
        elif t.outcome == "failed":
            assert scenario.backend.kind == "api", "only a provider refuses requests"
        else:
            # never dispatched, or stopped and never sent again: only where the batch cap can sit at 0
            assert not t.interactive, f"interactive {t} never finished"
            assert not never_strands(o), f"{t} left behind under {option_dict}"
        ended += t.outcome is not None
    # counters agree with the seams and with the tasks
    assert row["timeouts"] + row["evictions"] == seams.cancels
    assert row["evictions"] == 0 or o.evicts
    assert row["timeouts"] == 0 or batch.timeout_ms is not None
    timed_out_for_good = sum(t.outcome == "timeout" for t in tasks)
    assert row["retries"] - sum(t.retries for t in tasks) == row["timeouts"] - timed_out_for_good
    assert row["wasted_ms"] == pytest.approx(math.fsum(t.wasted_ms for t in tasks))
    assert row["wasted_tokens"] == sum(t.wasted_tokens for t in tasks)
    assert not counted or sum(t.attempts for t in tasks) == sum(seams.dispatches.values())
    if batch.deadline_ms is not None:
        jobs = [t for t in tasks if not t.interactive]
        met = sum(t.outcome == "ok" and t.end_ms - t.arrival_ms <= batch.deadline_ms for t in jobs)
        share = row["batch_deadline_share"]
        assert share == met / len(jobs) if jobs else math.isnan(share)
    if scenario.backend.kind == "slots":
        # the slot-time delivered is what completed plus what was thrown away
        work = math.fsum(t.end_ms - t.start_ms for t in tasks if t.outcome == "ok") + row["wasted_ms"]
        assert engine.backend.busy_ms == pytest.approx(work, rel=1e-9, abs=1e-6)
