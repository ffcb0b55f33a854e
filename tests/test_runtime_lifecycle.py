"""simlab.runtime honours batch timeouts and the policy's stops (eviction), on the virtual-time loop: every instant
below is computed by hand from the sleeps."""

from __future__ import annotations

import asyncio

import pytest

from simlab.policies import Observation, options_from_dict
from simlab.runtime import Scheduler, virtual

EVICT = {"policy": "static", "maxConcurrency": 2, "batchMaxConcurrency": 2, "evict": "newest", "evictAfterMs": 100}


def now_ms() -> float:
    return asyncio.get_running_loop().time() * 1000


def test_eviction_stops_the_newest_batch_attempt_and_runs_it_again():
    calls = []

    async def main():
        sched = Scheduler(options_from_dict(EVICT))

        async def work(name, ms):
            calls.append((name, now_ms()))
            await asyncio.sleep(ms / 1000)
            return name, now_ms()

        async def later(delay, *args):
            await asyncio.sleep(delay / 1000)
            return await sched.submit(*args)

        got = await asyncio.gather(
            sched.submit("batch", work, "b1", 1000),
            later(5, "batch", work, "b2", 1000),
            later(10, "interactive", work, "i", 50),
        )
        return sched, got

    sched, got = virtual.run(main())
    # b2 (the newest) is stopped at 110 (the interactive request waited 100 ms), i runs 110..160, b2 again 160..1160
    assert got == [("b1", 1000.0), ("b2", 1160.0), ("i", 160.0)]
    assert calls == [("b1", 0.0), ("b2", 5.0), ("i", 110.0), ("b2", 160.0)]
    life = sched.lifecycle
    assert (life.evictions, life.timeouts, life.retries) == (1, 0, 0)
    assert life.wasted_ms == pytest.approx(105.0)
    p = sched.policy
    assert (p.running, p.batch_running, p.queued()) == (0, 0, (0, 0))
    assert (sched.completed, sched.failed, sched.cancelled) == (3, 0, 0)


def test_timeout_retries_then_fails_with_timeout_error():
    async def main():
        sched = Scheduler(options_from_dict({"policy": "priority", "maxConcurrency": 1}), batch_timeout_ms=300,
                          batch_max_retries=1)
        starts = []

        async def slow():
            starts.append(now_ms())
            await asyncio.sleep(0.5)
            return "never"

        with pytest.raises(TimeoutError):
            await sched.submit("batch", slow)
        return sched, starts, now_ms()

    sched, starts, end = virtual.run(main())
    assert starts == [0.0, 300.0] and end == 600.0  # two attempts of 300 ms, each stopped
    life = sched.lifecycle
    assert (life.timeouts, life.retries, life.wasted_ms) == (2, 1, 600.0)
    assert (sched.completed, sched.failed) == (0, 1)
    assert (sched.policy.running, sched.policy.queued()) == (0, (0, 0))


def test_a_retry_that_finishes_in_time_returns_its_result():
    async def main():
        sched = Scheduler(options_from_dict({"policy": "priority", "maxConcurrency": 1}), batch_timeout_ms=300,
                          batch_max_retries=2)
        durations = iter([0.5, 0.1])

        async def work():
            await asyncio.sleep(next(durations))
            return now_ms()

        return sched, await sched.submit("batch", work)

    sched, done_at = virtual.run(main())
    assert done_at == 400.0  # stopped at 300, the retry takes 100 ms
    assert (sched.lifecycle.timeouts, sched.lifecycle.retries, sched.completed) == (1, 1, 1)


def test_a_timed_out_slot_goes_to_the_waiting_interactive_request_first():
    async def main():
        sched = Scheduler(options_from_dict({"policy": "priority", "maxConcurrency": 1}), batch_timeout_ms=200,
                          batch_max_retries=1)
        order = []
        batch_ms = iter([1000, 150])

        async def work(name, ms=None):
            order.append((name, now_ms()))
            await asyncio.sleep((ms or next(batch_ms)) / 1000)
            return now_ms()

        async def interactive():
            await asyncio.sleep(0.05)
            return await sched.submit("interactive", work, "i", 100)

        return order, await asyncio.gather(sched.submit("batch", work, "b"), interactive())

    order, ends = virtual.run(main())
    # b times out at 200, i (waiting since 50) gets the slot, b's retry starts when i ends at 300
    assert [name for name, _ in order] == ["b", "i", "b"]
    assert [at for _, at in order] == pytest.approx([0.0, 200.0, 300.0])  # loop seconds: 0.2 + 0.1 rounds
    assert ends == pytest.approx([450.0, 300.0])


def test_a_caller_that_gives_up_while_its_stopped_request_waits_is_withdrawn():
    async def main():
        sched = Scheduler(options_from_dict({**EVICT, "maxConcurrency": 1, "batchMaxConcurrency": 1}))

        async def work(ms):
            await asyncio.sleep(ms / 1000)

        batch = asyncio.ensure_future(sched.submit("batch", work, 1000))
        await asyncio.sleep(0.01)
        inter = asyncio.ensure_future(sched.submit("interactive", work, 500))
        await asyncio.sleep(0.2)  # evicted at 110; the interactive one runs until 610
        assert sched.policy.queued() == (0, 1)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        await inter
        return sched

    sched = virtual.run(main())
    assert (sched.policy.running, sched.policy.batch_running, sched.policy.queued()) == (0, 0, (0, 0))
    assert (sched.completed, sched.cancelled, sched.lifecycle.evictions) == (1, 1, 1)


def test_observe_reaches_the_policy():
    seen = []

    def observe():
        seen.append(1)
        return Observation(busy=0, waiting=10, capacity=8, kv_used=None, kv_capacity_tokens=None)

    async def main():
        sched = Scheduler(options_from_dict({"policy": "holdback", "maxConcurrency": 4, "saturationSignal": "queue"}),
                          observe=observe)

        async def work():
            await asyncio.sleep(0.01)

        # 10 waiting at the server / queueDepthThreshold 5 = saturation 2 >= maxCeiling 1: nothing is dispatched
        job = asyncio.ensure_future(sched.submit("interactive", work))
        await asyncio.sleep(0.05)
        held = sched.policy.queued()
        job.cancel()
        return held

    assert virtual.run(main()) == (1, 0)
    assert seen


def test_without_observe_a_backend_signal_is_refused():
    from simlab.errors import InputError

    with pytest.raises(InputError, match="saturationSignal"):
        Scheduler(options_from_dict({"policy": "holdback", "maxConcurrency": 4}))
    Scheduler(options_from_dict({"policy": "holdback", "maxConcurrency": 4, "saturationSignal": "inflight"}))
