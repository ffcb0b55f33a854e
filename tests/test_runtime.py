"""simlab.runtime: the asyncio scheduler around the clock-free policies.

Run on the virtual-time loop (simlab.runtime.virtual), so sleeps take no wall time and every run is exact.
A recorder wrapped around the policy checks each decision as it happens (caps, interactive first) against
its own count of tasks in flight, not the policy's counters.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simlab.policies import Task, options_from_dict
from simlab.runtime import Scheduler
from simlab.runtime import virtual

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPTIONS = {
    "unscheduled": {"policy": "unscheduled"},
    "fifo": {"policy": "fifo", "maxConcurrency": 3},
    "priority": {"policy": "priority", "maxConcurrency": 3},
    "static": {"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2},
    "adaptive": {"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 3, "batchMinConcurrency": 1,
                 "interactiveRpsThreshold": 4, "interactiveP95LatencyMs": 150, "windowMs": 500},
    "adaptive-min0-recheck": {"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 3,
                              "batchMinConcurrency": 0, "interactiveRpsThreshold": 4,
                              "interactiveP95LatencyMs": 150, "windowMs": 300, "recheckOnExpiry": True,
                              "tieBreak": "seed-heap"},
}


class Boom(Exception):
    pass


def recorder(sched: Scheduler, opts: dict):
    """Wrap the policy's entry points; check every start against an independent count of tasks in flight."""
    policy = sched.policy
    state = {"running": 0, "batch": 0, "violations": [], "submitted": 0}
    mx = opts.get("maxConcurrency")
    bmax = opts.get("batchMaxConcurrency") if opts["policy"] in ("static", "adaptive") else None

    def check(started, ended=None):
        if ended is not None:
            state["running"] -= 1
            state["batch"] -= not ended.interactive
        for t in started:
            state["running"] += 1
            state["batch"] += not t.interactive
            if mx is not None and state["running"] > mx:
                state["violations"].append(f"{state['running']} in flight > maxConcurrency {mx}")
            if bmax is not None and state["batch"] > bmax:
                state["violations"].append(f"{state['batch']} batch in flight > batchMaxConcurrency {bmax}")
            if not t.interactive and t.cap_at_dispatch is not None and state["batch"] > t.cap_at_dispatch:
                state["violations"].append("batch started over the cap in force")
        if opts["policy"] != "fifo" and any(not t.interactive for t in started) and policy.queued()[0]:
            state["violations"].append("a batch task started while an interactive one waited")
        if (state["running"], state["batch"]) != (policy.running, policy.batch_running):
            state["violations"].append("policy counters disagree with the recorder")
        return started

    orig_submit, orig_wake = policy.submit, policy.wake

    def submit(task):
        state["submitted"] += 1
        return check(orig_submit(task))

    policy.submit = submit
    policy.wake = lambda: check(orig_wake())
    orig_finish = policy.finish
    policy.finish = lambda t: check(orig_finish(t), t)
    return state


# --- property: random traffic with errors, timeouts and cancellations --------------------------------------------
ops = st.lists(
    st.tuples(
        st.floats(0, 200),  # gap before the submission (ms)
        st.sampled_from(["interactive", "batch"]),
        st.floats(0, 300),  # work duration (ms)
        st.sampled_from(["ok", "ok", "ok", "error", "cancel", "timeout"]),
        st.floats(0, 400),  # when the caller cancels / its timeout (ms after submission)
    ),
    min_size=1,
    max_size=60,
)


@SETTINGS
@given(name=st.sampled_from(sorted(OPTIONS)), plan=ops)
@example(name="adaptive", plan=[(0.0, "interactive", 0.0, "ok", 0.0)] * 3 + [(0.0, "interactive", 0.0, "timeout", 0.0)])
@example(name="adaptive", plan=[(0.0, "interactive", 0.0, "timeout", 5e-324)])
def test_caps_priority_and_nothing_lost(name, plan):
    opts = OPTIONS[name]

    async def main():
        sched = Scheduler(options_from_dict(opts))
        state = recorder(sched, opts)
        outcomes = {}

        async def work(i, ms, how):
            await asyncio.sleep(ms / 1000)
            if how == "error":
                raise Boom(i)
            return i

        async def caller(i, kind, ms, how, after):
            coro = sched.submit(kind, work, i, ms, how)
            try:
                if how == "timeout":
                    outcomes[i] = ("ok", await asyncio.wait_for(coro, after / 1000))
                else:
                    outcomes[i] = ("ok", await coro)
            except Boom:
                outcomes[i] = ("error", None)
            except asyncio.TimeoutError:
                outcomes[i] = ("timeout", None)
            except asyncio.CancelledError:
                outcomes[i] = ("cancelled", None)
                raise

        tasks = []
        for i, (gap, kind, ms, how, after) in enumerate(plan):
            await asyncio.sleep(gap / 1000)
            t = asyncio.ensure_future(caller(i, kind, ms, how, after))
            tasks.append(t)
            if how == "cancel":
                asyncio.get_running_loop().call_later(after / 1000, t.cancel)
        await asyncio.gather(*tasks, return_exceptions=True)
        return sched, state, outcomes

    sched, state, outcomes = virtual.run(main())
    assert state["violations"] == []
    assert len(outcomes) == len(plan)  # every caller got an answer: nothing lost
    for i, (_, _, _, how, _) in enumerate(plan):
        got = outcomes[i][0]
        if how in ("ok", "error"):
            assert got == how and (how == "error" or outcomes[i][1] == i)
        else:
            assert got in ("ok", "error", "timeout", "cancelled")
    snap = sched.snapshot()
    assert (sched.policy.running, sched.policy.batch_running, sched.policy.queued()) == (0, 0, (0, 0))
    assert (snap.in_flight_interactive, snap.in_flight_batch, snap.queued_interactive, snap.queued_batch) == (0, 0, 0, 0)
    # A caller whose timeout (or cancel) comes before its coroutine first runs never reaches the scheduler
    # (asyncio.wait_for(coro, 0) cancels it unstarted): every other one did, and each that did ended exactly once.
    must = sum(1 for _, _, _, how, _ in plan if how in ("ok", "error"))
    assert must <= state["submitted"] <= len(plan)
    assert snap.completed + snap.failed + snap.cancelled == state["submitted"]


def test_ten_thousand_concurrent_with_random_cancellations():
    opts = OPTIONS["adaptive"] | {"maxConcurrency": 16, "batchMaxConcurrency": 12}
    rng = random.Random(7)

    async def main():
        sched = Scheduler(options_from_dict(opts))
        state = recorder(sched, opts)
        peak = [0, 0]

        async def work(ms):
            peak[0] = max(peak[0], sched.policy.running)
            await asyncio.sleep(ms / 1000)

        tasks = [asyncio.ensure_future(sched.submit(rng.choice(("interactive", "batch")), work, rng.uniform(1, 50)))
                 for _ in range(10_000)]
        loop = asyncio.get_running_loop()
        for t in rng.sample(tasks, 3000):  # some while queued, some while running, some after the end
            loop.call_later(rng.uniform(0, 20), t.cancel)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return sched, state, results, peak

    sched, state, results, peak = virtual.run(main())
    cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
    assert state["violations"] == []
    assert 0 < cancelled <= 3000 and peak[0] == 16
    assert sched.policy.running == 0 and sched.policy.batch_running == 0 and sched.policy.queued() == (0, 0)
    snap = sched.snapshot()
    assert snap.cancelled == cancelled and snap.completed == 10_000 - cancelled and snap.failed == 0


# --- exact paths ---------------------------------------------------------------------------------------------------
def run_static(coro_fn):
    opts = {"policy": "static", "maxConcurrency": 2, "batchMaxConcurrency": 1}

    async def main():
        sched = Scheduler(options_from_dict(opts))
        return sched, await coro_fn(sched)

    return virtual.run(main())


def test_cancel_waiting_removes_it_from_its_queue():
    async def body(sched):
        started = []

        async def work(name, ms):
            started.append(name)
            await asyncio.sleep(ms / 1000)
            return name

        a = asyncio.ensure_future(sched.submit("batch", work, "a", 100))
        b = asyncio.ensure_future(sched.submit("batch", work, "b", 100))  # waits: batch cap 1
        await asyncio.sleep(0.01)
        assert sched.snapshot().queued_batch == 1
        b.cancel()
        await asyncio.sleep(0)
        assert sched.snapshot().queued_batch == 0 and sched.policy.queued() == (0, 0)
        assert await a == "a"
        with pytest.raises(asyncio.CancelledError):
            await b
        return started

    sched, started = run_static(body)
    assert started == ["a"]  # b never ran
    assert sched.snapshot().cancelled == 1


def test_cancel_running_frees_its_slot_and_the_next_starts():
    async def body(sched):
        loop = asyncio.get_running_loop()
        times = {}

        async def work(name, ms):
            times[name] = loop.time() * 1000
            await asyncio.sleep(ms / 1000)

        a = asyncio.ensure_future(sched.submit("batch", work, "a", 1000))
        b = asyncio.ensure_future(sched.submit("batch", work, "b", 10))
        loop.call_later(0.25, a.cancel)
        await asyncio.gather(a, b, return_exceptions=True)
        return times

    sched, times = run_static(body)
    assert times == {"a": 0.0, "b": pytest.approx(250.0)}
    assert sched.policy.running == 0


def test_error_frees_the_slot_and_reaches_the_caller():
    async def body(sched):
        async def bad():
            await asyncio.sleep(0.01)
            raise Boom("x")

        with pytest.raises(Boom):
            await sched.submit("interactive", bad)
        assert await sched.submit("interactive", asyncio.sleep, 0.01, "fine") == "fine"
        return sched.snapshot()

    sched, snap = run_static(body)
    assert (snap.failed, snap.completed, sched.policy.running) == (1, 1, 0)


def test_timeout_while_waiting_and_while_running():
    async def body(sched):
        slow = asyncio.ensure_future(sched.submit("batch", asyncio.sleep, 1.0))
        with pytest.raises(asyncio.TimeoutError):  # waits behind `slow` (batch cap 1), gives up
            await asyncio.wait_for(sched.submit("batch", asyncio.sleep, 0.01), 0.1)
        assert sched.snapshot().queued_batch == 0
        with pytest.raises(asyncio.TimeoutError):  # runs, then gives up: its slot comes back
            await asyncio.wait_for(sched.submit("interactive", asyncio.sleep, 5.0), 0.2)
        assert sched.snapshot().in_flight_interactive == 0
        await slow
        return sched.snapshot()

    sched, snap = run_static(body)
    assert (snap.cancelled, snap.completed, sched.policy.running) == (2, 1, 0)


def test_cancelled_after_the_policy_chose_it_but_before_it_ran():
    """The policy starts a task whose caller was cancelled in the same instant: the slot is freed at once."""

    async def body(sched):
        ran = []

        async def work(name):
            ran.append(name)
            await asyncio.sleep(0.1)

        a = asyncio.ensure_future(sched.submit("batch", work, "a"))
        b = asyncio.ensure_future(sched.submit("batch", work, "b"))
        c = asyncio.ensure_future(sched.submit("batch", work, "c"))
        await asyncio.sleep(0.05)
        # b is chosen when a ends at 100 ms; cancel b in that same instant, before it can resume
        asyncio.get_running_loop().call_at(0.1, b.cancel)
        await asyncio.gather(a, b, c, return_exceptions=True)
        return ran

    sched, ran = run_static(body)
    assert "b" not in ran and ran[0] == "a" and "c" in ran
    assert sched.policy.running == 0 and sched.policy.queued() == (0, 0)


def test_bad_kind():
    async def body(sched):
        with pytest.raises(ValueError, match="kind must be one of"):
            await sched.submit("bulk", asyncio.sleep, 0)
        return None

    run_static(body)


def test_wake_timer_starts_stranded_batch_work():
    """batchMinConcurrency 0 + recheckOnExpiry: the cap rises when window samples expire, with no task event."""
    opts = {"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 2, "batchMinConcurrency": 0,
            "interactiveRpsThreshold": 1, "interactiveP95LatencyMs": 10, "windowMs": 1000, "recheckOnExpiry": True}

    async def main():
        sched = Scheduler(options_from_dict(opts))
        loop = asyncio.get_running_loop()
        for _ in range(3):
            await sched.submit("interactive", asyncio.sleep, 0.05)  # latency 50 ms > 10: full pressure
        t0 = loop.time()
        started = []

        async def work():
            started.append(loop.time())

        await sched.submit("batch", work)
        return t0, started

    t0, started = virtual.run(main())
    # the last sample was added at 150 ms; it leaves the window just after 1150 ms
    assert started and started[0] * 1000 == pytest.approx(1150.0, abs=1e-6) and t0 == pytest.approx(0.15)


# --- the runtime makes the simulator's decisions ------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(OPTIONS)), seed=st.integers(0, 10_000))
def test_same_decisions_as_replay(name, seed):
    """Tasks that are sleeps, driven through the runtime on virtual time, start and end exactly when
    `simlab replay --backend delay` says (continuous random times, so no same-instant ties). The replay is the
    lab's: with only the runtime distribution installed (scripts/test-runtime-alone.sh) this test is skipped."""
    replay = pytest.importorskip("simlab.replay", reason="the lab's replay: not in the runtime distribution").replay
    rng = random.Random(seed)
    rows, t = [], 0.0
    for i in range(80):
        t += rng.expovariate(1 / 40)
        rows.append((i, rng.choice(("interactive", "batch")), t, rng.uniform(5, 200)))
    options = options_from_dict(OPTIONS[name])
    expected = replay([Task(i, k, a, s) for i, k, a, s in rows], options).tasks

    async def main():
        loop = asyncio.get_running_loop()
        sched = Scheduler(options)
        got = {}

        async def work(i, ms):
            start = loop.time() * 1000
            await asyncio.sleep(ms / 1000)
            got[i] = (start, loop.time() * 1000)

        calls = []
        for i, k, a, s in rows:
            loop.call_at(a / 1000, lambda i=i, k=k, s=s: calls.append(asyncio.ensure_future(sched.submit(k, work, i, s))))
        await asyncio.sleep(rows[-1][2] / 1000 + 1e-6)
        while calls and not all(c.done() for c in calls) or len(calls) < len(rows):
            await asyncio.gather(*calls)
        return got

    got = virtual.run(main())
    for task in expected:
        if task.start_ms is None:
            assert task.id not in got
            continue
        assert got[task.id][0] == pytest.approx(task.start_ms, abs=1e-6)
        assert got[task.id][1] == pytest.approx(task.end_ms, abs=1e-6)


def test_prometheus_metrics():
    prometheus_client = pytest.importorskip("prometheus_client")
    from simlab.runtime.prometheus import instrument

    registry = prometheus_client.CollectorRegistry()
    opts = OPTIONS["static"]

    async def main():
        sched = Scheduler(options_from_dict(opts))
        instrument(sched, registry)
        blockers = [asyncio.ensure_future(sched.submit("batch", asyncio.sleep, 1.0)) for _ in range(3)]
        await asyncio.sleep(0.1)
        mid = prometheus_client.generate_latest(registry).decode()
        await sched.submit("interactive", asyncio.sleep, 0.2)
        await asyncio.gather(*blockers)
        return mid, prometheus_client.generate_latest(registry).decode()

    mid, end = virtual.run(main())
    assert 'simlab_scheduler_queued{kind="batch"} 1.0' in mid
    assert 'simlab_scheduler_in_flight{kind="batch"} 2.0' in mid
    assert "simlab_scheduler_batch_cap 2.0" in mid
    assert 'simlab_scheduler_requests_total{kind="batch",outcome="ok"} 3.0' in end
    assert 'simlab_scheduler_latency_seconds_count{kind="interactive"} 1.0' in end
