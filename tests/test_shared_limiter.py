"""simlab.runtime.shared: the Redis-backed global limit, against a real Redis (tests/redis_support.py).

Several schedulers in one event loop stand for gateway instances here (the 4-process test with kill -9 is
tests/test_shared_acceptance.py). Counts of work in flight are kept by the tests themselves, around the work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.policies import Task, adaptive, make_policy, options_from_dict
from simlab.runtime import Scheduler
from tests.redis_support import CuttableProxy, client, drop_keys, live_leases, redis_url, unique_prefix

redis = pytest.importorskip("redis")
from simlab.runtime.shared import FALLBACK, SHARED, RedisLimiter  # noqa: E402

ADAPTIVE = {"policy": "adaptive", "maxConcurrency": 4, "batchMaxConcurrency": 3, "batchMinConcurrency": 1,
            "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 2000, "windowMs": 5000}


@pytest.fixture()
def url():
    return redis_url()


@pytest.fixture()
def prefix(url):
    name = unique_prefix("unit")
    yield name
    drop_keys(client(url), name)


class Gauge:
    """Work in flight across all instances, counted inside the work itself."""

    def __init__(self):
        self.now = {"interactive": 0, "batch": 0}
        self.peak = {"interactive": 0, "batch": 0, "total": 0}
        self.starts = []

    async def work(self, kind, ms, name=None):
        self.now[kind] += 1
        self.peak[kind] = max(self.peak[kind], self.now[kind])
        self.peak["total"] = max(self.peak["total"], sum(self.now.values()))
        self.starts.append((name, time.monotonic()))
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            self.now[kind] -= 1


def instance(url, prefix, name, opts=ADAPTIVE, instances=2, **kw):
    limiter = RedisLimiter(url, key_prefix=prefix, instance_id=name, instances=instances, **kw)
    return Scheduler(options_from_dict(opts), limiter=limiter)


async def started(*schedulers):
    for s in schedulers:
        await s.limiter.start()
    return schedulers


def assert_clean(url, prefix):
    """Every lease given back and no waiter left registered: nothing leaked."""
    r = client(url)
    for key in ("leases:interactive", "leases:batch", "waiting", "waiting:expiry"):
        assert r.exists(f"{prefix}:{key}") == 0, f"{key} left behind: {r.type(f'{prefix}:{key}')}"


# --- start-up: bad configuration is a clear error ------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["localhost:6379", "http://127.0.0.1:6379/0", "redis://:hunter2@/0",
                                 "redis://u:hunter2@127.0.0.1:99999/0", "redis://127.0.0.1:6379/zero", "unix://",
                                 "redis://127.0.0.1:port/0", ""])
def test_malformed_urls_are_value_errors_with_the_password_hidden(bad):
    with pytest.raises(ValueError) as err:
        RedisLimiter(bad, instances=2)
    assert "hunter2" not in str(err.value)
    if "hunter2" in bad:
        assert "***" in str(err.value)


@pytest.mark.parametrize("kw", [{"instances": 0}, {"instances": 2, "window": "global"},
                                {"instances": 2, "lease_ms": 1000, "renew_ms": 900},
                                {"instances": 2, "key_prefix": "has space"}, {"instances": 2, "timeout_ms": 0}])
def test_bad_options_are_value_errors(kw):
    with pytest.raises(ValueError):
        RedisLimiter("redis://127.0.0.1:6379/0", **kw)


def test_a_policy_without_max_concurrency_cannot_share_a_limit():
    with pytest.raises(ValueError, match="maxConcurrency"):
        Scheduler(options_from_dict({"policy": "unscheduled"}), limiter=RedisLimiter("redis://h:1/0", instances=2))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_redis_is_a_connection_error_at_start_naming_the_url():
    url = f"redis://user:hunter2@127.0.0.1:{_free_port()}/0"

    async def main():
        sched = instance(url, "x", "a", connect_timeout_ms=500)
        t0 = time.monotonic()
        with pytest.raises(ConnectionError) as err:
            await sched.limiter.start()
        return err.value, time.monotonic() - t0

    err, took = asyncio.run(main())
    assert f"redis://user:***@127.0.0.1:" in str(err) and "hunter2" not in str(err)
    assert took < 2.0


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", None])
def test_a_server_that_is_not_redis_is_a_connection_error_in_bounded_time(reply):
    """A wrong URL: an HTTP server answers garbage, or something accepts and never answers."""

    async def main():
        async def serve(reader, writer):
            await reader.read(100)
            if reply is not None:
                writer.write(reply)
                await writer.drain()
                writer.close()
            else:
                await asyncio.sleep(5)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sched = instance(f"redis://127.0.0.1:{port}/0", "x", "a", timeout_ms=300, connect_timeout_ms=300)
        t0 = time.monotonic()
        try:
            with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
                await sched.limiter.start()
        finally:
            server.close()
        return time.monotonic() - t0

    assert asyncio.run(main()) < 2.0


def test_submit_before_start_is_an_error():
    async def main():
        sched = instance("redis://127.0.0.1:6379/0", "x", "a")
        with pytest.raises(RuntimeError, match="start"):
            await sched.submit("batch", asyncio.sleep, 0)
        assert sched.policy.running == 0

    asyncio.run(main())


# --- the global limit -------------------------------------------------------------------------------------------------
@pytest.mark.redis
def test_two_instances_share_one_cap_with_random_cancellations(url, prefix):
    """Two instances whose local caps would allow 8 together: 4 in flight at most, reached, nothing leaked."""
    rng = random.Random(3)
    gauge = Gauge()

    async def main():
        a, b = await started(instance(url, prefix, "a"), instance(url, prefix, "b"))
        outcomes = []

        async def caller(sched, kind, ms, how, after):
            coro = sched.submit(kind, gauge.work, kind, ms)
            try:
                if how == "timeout":
                    await asyncio.wait_for(coro, after)
                else:
                    await coro
                outcomes.append("ok")
            except asyncio.TimeoutError:
                outcomes.append("timeout")
            except asyncio.CancelledError:
                outcomes.append("cancelled")

        jobs = []
        for _ in range(240):
            how = rng.choice(["ok", "ok", "timeout", "cancel"])
            job = asyncio.ensure_future(caller(rng.choice((a, b)), rng.choice(("interactive", "batch")),
                                               rng.uniform(2, 40), how, rng.uniform(0.001, 0.2)))
            if how == "cancel":
                asyncio.get_running_loop().call_later(rng.uniform(0, 0.2), job.cancel)
            jobs.append(job)
            await asyncio.sleep(rng.expovariate(1 / 0.004))
        await asyncio.gather(*jobs, return_exceptions=True)
        snaps = [s.snapshot() for s in (a, b)]
        for s in (a, b):
            await s.limiter.close()
        return snaps, len(outcomes)

    snaps, answered = asyncio.run(main())
    assert answered == 240
    assert gauge.peak["total"] == 4  # the shared cap, reached (each instance alone would allow 4)
    assert gauge.peak["batch"] <= 3
    for s in snaps:
        assert (s.in_flight_interactive, s.in_flight_batch, s.queued_interactive, s.queued_batch) == (0, 0, 0, 0)
    assert sum(s.completed + s.failed + s.cancelled for s in snaps) == 240
    assert_clean(url, prefix)


@pytest.mark.redis
def test_the_batch_cap_is_global(url, prefix):
    static = {"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2}
    gauge = Gauge()

    async def main():
        a, b = await started(instance(url, prefix, "a", static), instance(url, prefix, "b", static))
        await asyncio.gather(*(s.submit("batch", gauge.work, "batch", 30) for s in (a, b) for _ in range(12)))
        for s in (a, b):
            await s.limiter.close()

    asyncio.run(main())
    assert gauge.peak["batch"] == 2  # not 2 per instance
    assert_clean(url, prefix)


@pytest.mark.redis
def test_a_batch_task_elsewhere_does_not_take_the_slot_an_interactive_one_waits_for(url, prefix):
    """maxConcurrency 2, full: A's interactive task waits, then B's batch task. B's own slot frees first: it goes
    to A's interactive task, not to B's batch one."""
    prio = {"policy": "priority", "maxConcurrency": 2}
    gauge = Gauge()

    async def main():
        a, b = await started(instance(url, prefix, "a", prio), instance(url, prefix, "b", prio))
        t0 = time.monotonic()
        first = [asyncio.ensure_future(b.submit("batch", gauge.work, "batch", 300, "b1")),
                 asyncio.ensure_future(a.submit("interactive", gauge.work, "interactive", 900, "i1"))]
        await asyncio.sleep(0.1)
        i2 = asyncio.ensure_future(a.submit("interactive", gauge.work, "interactive", 50, "i2"))
        await asyncio.sleep(0.05)
        b2 = asyncio.ensure_future(b.submit("batch", gauge.work, "batch", 50, "b2"))
        await asyncio.gather(*first, i2, b2)
        for s in (a, b):
            await s.limiter.close()
        return t0

    t0 = asyncio.run(main())
    at = {name: t - t0 for name, t in gauge.starts}
    assert at["i2"] < at["b2"]
    assert at["i2"] < 0.8  # when b1 ended (0.3 s), not when i1 did (0.9 s)
    assert gauge.peak["total"] == 2
    assert_clean(url, prefix)


# --- leases ---------------------------------------------------------------------------------------------------------------
@pytest.mark.redis
def test_a_lease_is_renewed_while_its_task_runs(url, prefix):
    """A 2 s task under a 600 ms lease: its lease is live at every sample, its expiry moves on, nothing is lost."""
    r = client(url)

    async def main():
        (a,) = await started(instance(url, prefix, "a", lease_ms=600, renew_ms=150, timeout_ms=200))
        job = asyncio.ensure_future(a.submit("batch", asyncio.sleep, 2.0))
        await asyncio.sleep(0.05)
        seen, expiries = [], set()
        while not job.done():
            seen.append(len(live_leases(r, prefix)["batch"]))
            expiries.update(score for _, score in r.zrange(f"{prefix}:leases:batch", 0, -1, withscores=True))
            await asyncio.sleep(0.03)
        state = a.limiter.state()
        await a.limiter.close()
        return seen, expiries, state

    seen, expiries, state = asyncio.run(main())
    assert len(seen) > 30 and set(seen[:-1]) == {1}  # (the last sample may follow the release)
    assert max(expiries) - min(expiries) > 1200  # renewed, again and again
    assert state.leases_lost == 0
    assert_clean(url, prefix)


@pytest.mark.redis
def test_a_lease_gone_from_redis_is_added_back_and_counted(url, prefix):
    r = client(url)

    async def main():
        (a,) = await started(instance(url, prefix, "a", lease_ms=600, renew_ms=150, timeout_ms=200))
        job = asyncio.ensure_future(a.submit("interactive", asyncio.sleep, 0.8))
        await asyncio.sleep(0.05)
        (member,) = live_leases(r, prefix)["interactive"]
        r.zrem(f"{prefix}:leases:interactive", member)  # as if it had expired and been cleaned
        await asyncio.sleep(0.3)
        back = live_leases(r, prefix)["interactive"]
        await job
        state = a.limiter.state()
        await a.limiter.close()
        return member, back, state

    member, back, state = asyncio.run(main())
    assert back == [member]
    assert state.leases_lost == 1
    assert_clean(url, prefix)


# --- the window: shared or local ----------------------------------------------------------------------------------------
@pytest.mark.redis
@pytest.mark.parametrize("window", ["shared", "local"])
def test_the_window_is_shared_between_instances_or_not(url, prefix, window):
    """30 interactive completions on A in a 5 s window are 6/s, over the 5/s threshold: B's batch cap falls to its
    floor when B counts them (shared), and stays at its ceiling when it does not (local)."""

    async def main():
        a, b = await started(instance(url, prefix, "a", window=window), instance(url, prefix, "b", window=window))
        await asyncio.gather(*(a.submit("interactive", asyncio.sleep, 0.001) for _ in range(30)))
        await asyncio.sleep(0.3)
        caps = (a.snapshot().batch_cap, b.snapshot().batch_cap)
        for s in (a, b):
            await s.limiter.close()
        return caps

    assert asyncio.run(main()) == ((1, 1) if window == "shared" else (1, 3))
    assert_clean(url, prefix)


_events = st.lists(st.tuples(st.sampled_from(["submit-i", "submit-b", "finish", "remote", "remote"]),
                             st.floats(0, 50), st.floats(0, 400)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(events=_events)
def test_a_remote_completion_decides_as_the_policy_does_without_its_memo(events):
    """Adaptive.note_completion with the lazy memo on decides exactly as with every cap evaluated afresh."""

    def run(memo):
        adaptive.MEMO = memo
        try:
            now = [0.0]
            policy = make_policy(options_from_dict(ADAPTIVE | {"windowMs": 300, "interactiveP95LatencyMs": 100}),
                                 lambda: now[0])
            running, log, ids = [], [], iter(range(10**6))
            for what, gap, value in events:
                now[0] += gap
                if what.startswith("submit"):
                    started_ = policy.submit(Task(next(ids), "interactive" if what == "submit-i" else "batch", now[0]))
                elif what == "finish" and running:
                    started_ = policy.finish(running.pop(0))
                else:
                    started_ = policy.note_completion(value)
                running.extend(started_)
                # decisions only: looking at the cap would evaluate a pending value and hide the lazy path
                log.append([(t.id, t.cap_at_dispatch) for t in started_])
            return log, policy.batch_cap(), policy.window_stats()
        finally:
            adaptive.MEMO = True

    assert run(True) == run(False)


# --- losing Redis, and getting it back ----------------------------------------------------------------------------------
def _proxied(url, prefix, proxy, name, **kw):
    return instance(proxy.url, prefix, name, {"policy": "priority", "maxConcurrency": 4}, lease_ms=1500,
                    renew_ms=300, timeout_ms=200, probe_ms=200, **kw)


@pytest.mark.redis
def test_losing_redis_falls_back_to_split_caps_then_returns_to_shared(url, prefix, caplog):
    proxy = CuttableProxy(url)
    r = client(url)
    gauge = Gauge()
    caplog.set_level(logging.INFO, logger="simlab.runtime.shared")
    from prometheus_client import CollectorRegistry

    from simlab.runtime.prometheus import instrument

    async def main():
        a, b = await started(_proxied(url, prefix, proxy, "a"), _proxied(url, prefix, proxy, "b"))
        registry = CollectorRegistry()
        instrument(a, registry)
        shared_gauge = lambda: registry.get_sample_value("simlab_scheduler_limiter_shared")  # noqa: E731
        assert shared_gauge() == 1.0
        long = [asyncio.ensure_future(a.submit("batch", gauge.work, "batch", 600)) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert len(live_leases(r, prefix)["batch"]) == 2
        proxy.cut()
        t_cut = time.monotonic()
        # during the outage: 8 more on A; at most maxConcurrency // instances = 2 run at once here
        burst = [asyncio.ensure_future(a.submit("interactive", gauge.work, "interactive", 100)) for _ in range(8)]
        while a.limiter.mode != FALLBACK:
            await asyncio.sleep(0.01)
        detected = time.monotonic() - t_cut
        assert shared_gauge() == 0.0
        await asyncio.gather(*long, *burst)
        peak_in_fallback = gauge.peak["total"]
        # still cut: a task holds its slot (granted locally) when Redis comes back
        holder = asyncio.ensure_future(a.submit("batch", gauge.work, "batch", 1500))
        await asyncio.sleep(0.6)  # several failed probes: still one warning
        proxy.restore()
        t_back = time.monotonic()
        while a.limiter.mode != SHARED:
            await asyncio.sleep(0.01)
        recovered = time.monotonic() - t_back
        adopted = live_leases(r, prefix)["batch"]
        await asyncio.sleep(0.5)  # b notices at its next renewal, and is back too
        modes = (a.limiter.mode, b.limiter.mode, shared_gauge())
        # shared again: together no more than 4 (the holder among them)
        gauge.peak["total"] = 0
        await asyncio.gather(*(s.submit("interactive", gauge.work, "interactive", 50) for s in (a, b)
                               for _ in range(10)))
        peak_after = gauge.peak["total"]
        await holder
        states = [s.limiter.state() for s in (a, b)]
        for s in (a, b):
            await s.limiter.close()
        return detected, peak_in_fallback, recovered, adopted, modes, peak_after, states

    try:
        detected, peak_in_fallback, recovered, adopted, modes, peak_after, states = asyncio.run(main())
    finally:
        proxy.close()
    print(f"fallback after {detected * 1000:.0f} ms, shared again {recovered * 1000:.0f} ms after Redis came back")
    assert detected < 0.5  # the first failed call (timeout_ms 200)
    assert peak_in_fallback == 2
    assert recovered < 0.2 + 0.2 + 0.3  # the next probe (probe_ms) and its call (timeout_ms), with slack
    assert adopted == ["a/10"]  # the task granted in fallback, re-registered as a lease
    assert modes == (SHARED, SHARED, 1.0)
    assert peak_after == 4
    assert [(s.fallbacks, s.recoveries) for s in states] == [(1, 1), (1, 1)]
    # logged once per instance and outage, however many calls failed; and once on the way back
    said = [rec.getMessage() for rec in caplog.records]
    assert sorted(m.split(":")[0] for m in said if "falling back" in m) == ["a", "b"]
    assert sorted(m.split(":")[0] for m in said if "shared limit restored" in m) == ["a", "b"]
    assert_clean(url, prefix)


@pytest.mark.redis
def test_a_silent_network_is_bounded_by_the_timeout(url, prefix):
    """Connections that stay open but carry nothing: the call times out, the task gets a local slot."""
    proxy = CuttableProxy(url)

    async def main():
        (a,) = await started(_proxied(url, prefix, proxy, "a"))
        proxy.stall()
        t0 = time.monotonic()
        await a.submit("interactive", asyncio.sleep, 0)
        waited = time.monotonic() - t0
        mode = a.limiter.mode
        proxy.restore()
        while a.limiter.mode != SHARED:
            await asyncio.sleep(0.01)
        await a.limiter.close()
        return waited, mode

    try:
        waited, mode = asyncio.run(main())
    finally:
        proxy.close()
    assert mode == FALLBACK
    assert 0.15 < waited < 0.6  # timeout_ms 200, then granted locally
    assert_clean(url, prefix)


class OwnRedis:
    """A redis-server of this test's own on a free loopback port, no persistence, that it can kill and restart."""

    def __init__(self, tmp_path):
        import shutil
        import subprocess

        self.binary = shutil.which("redis-server")
        if self.binary is None:
            if os.environ.get("CI"):
                pytest.fail("redis-server is not installed (scripts/ensure-redis.sh installs it)")
            pytest.skip("no redis-server binary (scripts/ensure-redis.sh installs it)")
        self.port, self.dir, self.proc, self._popen = _free_port(), tmp_path, None, subprocess.Popen
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        import subprocess

        self.proc = self._popen([self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                 "--appendonly", "no", "--dir", str(self.dir)], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                client(self.url).ping()
                return
            except redis.RedisError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self):
        self.proc.kill()
        self.proc.wait(5)


def test_a_restarted_empty_redis_gets_back_the_leases_of_the_work_still_running(tmp_path):
    """The server dies (kill -9) and comes back empty: the slots held all along are leases again after recovery."""
    server = OwnRedis(tmp_path)
    server.start()
    prefix = unique_prefix("restart")

    async def main():
        (a,) = await started(instance(server.url, prefix, "a", {"policy": "priority", "maxConcurrency": 4},
                                      lease_ms=1500, renew_ms=200, timeout_ms=200, probe_ms=100))
        long = [asyncio.ensure_future(a.submit("batch", asyncio.sleep, 2.0)) for _ in range(2)]
        await asyncio.sleep(0.1)
        before = live_leases(client(server.url), prefix)["batch"]
        server.kill()
        while a.limiter.mode != FALLBACK:  # noticed at the next renewal (renew_ms 200)
            await asyncio.sleep(0.01)
        server.start()
        while a.limiter.mode != SHARED:
            await asyncio.sleep(0.01)
        after = live_leases(client(server.url), prefix)["batch"]
        await asyncio.gather(*long)
        await a.limiter.close()
        return before, after

    try:
        before, after = asyncio.run(main())
        assert len(before) == 2 and sorted(after) == sorted(before)
        assert_clean(server.url, prefix)
    finally:
        server.kill()
