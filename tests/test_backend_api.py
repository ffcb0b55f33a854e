"""The api backend: a provider's concurrency / RPM / TPM quotas, 429s, and the gateway's retries."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.policies import Task
from simlab.scenario import Backend as BackendConfig
from simlab.scenario import Retry, TokenTime, scenario_from_dict
from simlab.world.backends import BACKENDS
from simlab.world.backends.api import WINDOW_MS, ApiBackend
from simlab.world.engine import Engine


def config(concurrency=100, rpm=None, tpm=None, token_time=None, **retry):
    return BackendConfig(
        kind="api",
        concurrency=concurrency,
        rpm=rpm,
        tpm=tpm,
        token_time=token_time or TokenTime(base_ms=100),
        retry=Retry(**retry),
    )


def task(i, at, prompt=10, output=10, service=None, kind="interactive"):
    t = Task(i, kind, float(at), service)
    t.prompt_tokens, t.output_tokens = prompt, output
    return t


class Harness:
    def __init__(self, cfg, seed=0):
        self.env = simpy.Environment()
        self.ended: list = []
        self.backend = ApiBackend(self.env, self._done, cfg, np.random.default_rng(seed))

    def _done(self, t):
        assert t.end_ms is None, f"{t} finished twice"
        assert t.outcome in ("ok", "failed")
        t.end_ms = self.env.now
        self.ended.append(t)

    def at(self, tasks):
        for t in tasks:
            self.env.timeout(t.arrival_ms, t).callbacks.append(lambda e: self.backend.dispatch(e.value))
        return self

    def run(self, until=None):
        self.env.run(until=until)
        return self


def backoffs(retry: Retry, n: int, seed: int) -> list[float]:
    """The gateway's first n backoff delays for one request, drawing u from a generator seeded like the backend's."""
    rng = np.random.default_rng(seed)
    return [min(retry.cap_ms, retry.base_ms * 2.0**k) * (1 - retry.jitter * rng.random()) for k in range(n)]


def test_registered():
    assert BACKENDS["api"] is ApiBackend


def test_accepted_request_takes_its_token_time():
    cfg = config(token_time=TokenTime(base_ms=200, per_prompt_token_ms=0.5, per_output_token_ms=20))
    a = task("a", 5, prompt=100, output=30)
    b = task("b", 7, service=42.0)  # a task's own service time wins
    h = Harness(cfg).at([a, b])
    h.run(until=10)
    assert h.backend.busy() == 2 and h.backend.waiting() == 0
    h.run()
    assert (a.start_ms, a.end_ms, a.outcome, a.retries) == (5, 5 + 200 + 50 + 600, "ok", 0)
    assert (b.start_ms, b.end_ms) == (7, 49)
    assert h.backend.stats() == {"rejections_429": 0, "retries": 0, "failures": 0, "accepted": 2}


def test_concurrency_limit_gives_429_and_backoff_without_jitter():
    cfg = config(concurrency=2, base_ms=50, jitter=0)
    a, b, c = task("a", 0), task("b", 0), task("c", 0)
    h = Harness(cfg).at([a, b, c])
    h.run(until=1)
    assert h.backend.busy() == 2 and h.backend.waiting() == 1
    h.run()
    # c: 429 at 0, retry at 50 (both busy until 100): 429, retry at 50 + 100 = 150: accepted
    assert (c.start_ms, c.end_ms, c.retries) == (150, 250, 2)
    assert h.backend.stats() == {"rejections_429": 2, "retries": 2, "failures": 0, "accepted": 3}


@pytest.mark.parametrize("seed", [0, 7])
def test_rpm_limit_retries_with_seeded_jitter(seed):
    retry = Retry(max_retries=20, base_ms=1000, cap_ms=30_000, jitter=0.5)
    cfg = config(rpm=2, token_time=TokenTime(base_ms=10), max_retries=20, base_ms=1000, cap_ms=30_000, jitter=0.5)
    a, b, c = task("a", 0), task("b", 0), task("c", 0)
    h = Harness(cfg, seed).at([a, b, c]).run()
    assert a.start_ms == b.start_ms == 0  # the first two fit the minute
    # c retries until the window of 0-ms acceptances has slid past (at 60 000 ms)
    t, n = 0.0, 0
    for delay in backoffs(retry, 20, seed):
        if t >= WINDOW_MS:
            break
        t += delay
        n += 1
    assert c.retries == n and c.start_ms == pytest.approx(t, abs=1e-9) and c.end_ms == pytest.approx(t + 10)
    assert h.backend.stats() == {"rejections_429": n, "retries": n, "failures": 0, "accepted": 3}


def test_sliding_window_expires_exactly_after_a_minute():
    cfg = config(rpm=1, max_retries=0)
    a, b, c = task("a", 0), task("b", 59_999.5), task("c", 60_000)
    Harness(cfg).at([a, b, c]).run()
    assert a.outcome == "ok" and b.outcome == "failed" and c.outcome == "ok"
    assert (b.end_ms, b.start_ms) == (59_999.5, None)
    assert c.start_ms == 60_000


def test_rpm_is_fractional_per_minute():
    cfg = config(rpm=2.5, max_retries=0)
    tasks = [task(i, 1000 * i) for i in range(4)]
    Harness(cfg).at(tasks).run()
    assert [t.outcome for t in tasks] == ["ok", "ok", "failed", "failed"]


def test_tpm_limit_counts_prompt_and_output_tokens():
    cfg = config(tpm=1000, max_retries=0)
    a = task("a", 0, prompt=500, output=100)  # 600
    b = task("b", 1, prompt=300, output=100)  # 1000 in all: fits
    c = task("c", 2, prompt=1, output=0)  # 1001: 429
    d = task("d", 60_000, prompt=600, output=0)  # a has left the window
    e = task("e", 60_001, prompt=500, output=0)  # b (400) + d (600) + 500 > 1000
    Harness(cfg).at([a, b, c, d, e]).run()
    assert [t.outcome for t in (a, b, c, d, e)] == ["ok", "ok", "failed", "ok", "failed"]


def test_request_larger_than_tpm_fails_after_max_retries():
    retry = Retry(max_retries=4, base_ms=100, cap_ms=500, jitter=0.25)
    cfg = config(tpm=1000, max_retries=4, base_ms=100, cap_ms=500, jitter=0.25)
    big = task("big", 10, prompt=900, output=200)
    h = Harness(cfg, seed=3).at([big]).run()
    delays = backoffs(retry, 4, seed=3)
    assert delays[3] < 500  # capped: 800 -> 500, then jitter
    assert big.outcome == "failed" and big.retries == 4 and big.start_ms is None
    assert big.end_ms == pytest.approx(10 + sum(delays))
    assert h.backend.stats() == {"rejections_429": 5, "retries": 4, "failures": 1, "accepted": 0}
    assert h.backend.busy() == 0 and h.backend.waiting() == 0


def test_failure_after_max_retries_deterministic_timing():
    cfg = config(concurrency=1, max_retries=3, base_ms=500, jitter=0)
    hog = task("hog", 0, service=1e6)
    late = task("late", 0)
    Harness(cfg).at([hog, late]).run()
    assert late.outcome == "failed" and late.retries == 3
    assert late.end_ms == 500 + 1000 + 2000  # 429s at 0, 500, 1500, 3500: fails at the fourth
    assert hog.outcome == "ok" and hog.end_ms == 1e6


def test_no_retries_fails_at_once():
    cfg = config(concurrency=1, max_retries=0)
    a, b = task("a", 0), task("b", 50)
    h = Harness(cfg).at([a, b]).run()
    assert (b.outcome, b.end_ms, b.retries) == ("failed", 50, 0)
    assert h.backend.stats()["failures"] == 1


# --- random workloads: every task ends once, and no quota is ever exceeded --------------------------
@st.composite
def workloads(draw):
    n = draw(st.integers(1, 40))
    times = draw(st.lists(st.one_of(st.floats(0, 120_000), st.sampled_from([0.0, 60_000.0])), min_size=n, max_size=n))
    tokens = draw(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 400)), min_size=n, max_size=n))
    cfg = config(
        concurrency=draw(st.integers(1, 6)),
        rpm=draw(st.one_of(st.none(), st.integers(1, 20))),
        tpm=draw(st.one_of(st.none(), st.integers(200, 5000))),
        token_time=TokenTime(base_ms=draw(st.floats(1, 5000)), per_output_token_ms=draw(st.floats(0, 20))),
        max_retries=draw(st.integers(0, 6)),
        base_ms=draw(st.floats(1, 5000)),
        cap_ms=draw(st.floats(1, 60_000)),
        jitter=draw(st.floats(0, 1)),
    )
    return cfg, [task(i, t, p, o) for i, (t, (p, o)) in enumerate(zip(times, tokens))], draw(st.integers(0, 2**32))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_task_ends_once_within_quota(case):
    cfg, tasks, seed = case
    h = Harness(cfg, seed).at(tasks).run()
    assert sorted(t.id for t in h.ended) == sorted(t.id for t in tasks)
    ok = [t for t in tasks if t.outcome == "ok"]
    failed = [t for t in tasks if t.outcome == "failed"]
    assert len(ok) + len(failed) == len(tasks)
    service = ApiBackend.service_ms
    for t in ok:
        assert t.start_ms >= t.arrival_ms and t.end_ms == pytest.approx(t.start_ms + service(h.backend, t))
        assert t.retries <= cfg.retry.max_retries
    for t in failed:
        assert t.start_ms is None and t.retries == cfg.retry.max_retries and t.end_ms >= t.arrival_ms
    # quotas, recomputed from the accepted requests
    events = sorted([(t.start_ms, 1) for t in ok] + [(t.end_ms, -1) for t in ok])  # ends before starts at a tie
    level = 0
    for _, step in events:
        level += step
        assert level <= cfg.concurrency
    starts = sorted((t.start_ms, (t.prompt_tokens + t.output_tokens)) for t in ok)
    for k, (s, _) in enumerate(starts):
        window = [(s0, tok) for s0, tok in starts[: k + 1] if s0 + WINDOW_MS > s]  # as the backend rounds it
        if cfg.rpm is not None:
            assert len(window) <= cfg.rpm
        if cfg.tpm is not None:
            assert sum(tok for _, tok in window) <= cfg.tpm
    stats = h.backend.stats()
    assert stats["retries"] == sum(t.retries for t in tasks)
    assert stats["rejections_429"] == stats["retries"] + stats["failures"]
    assert stats["failures"] == len(failed) and stats["accepted"] == len(ok)
    assert h.backend.busy() == 0 and h.backend.waiting() == 0


# --- through the engine ----------------------------------------------------------------------------
def api_scenario(**backend):
    return {
        "name": "api",
        "duration_ms": 120_000,
        "backend": {"kind": "api", "concurrency": 4, "rpm": 30, "tpm": 40_000,
                    "token_time": {"base_ms": 300, "per_prompt_token_ms": 0.05, "per_output_token_ms": 15},
                    "retry": {"max_retries": 3, "base_ms": 500, "cap_ms": 8000, "jitter": 0.5}, **backend},
        "scheduler": {"maxConcurrency": 6, "batchMaxConcurrency": 4, "batchMinConcurrency": 1,
                      "interactiveRpsThreshold": 1, "interactiveP95LatencyMs": 3000},
        "workload": [
            {"class": "batch", "arrivals": {"process": "burst", "count": 20, "at_ms": [0, 60_000]},
             "prompt_tokens": {"dist": "uniform", "low": 500, "high": 3000},
             "output_tokens": {"dist": "uniform", "low": 50, "high": 300}},
            {"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 0.3},
             "prompt_tokens": {"dist": "constant", "value": 200},
             "output_tokens": {"dist": "uniform", "low": 10, "high": 80}},
        ],
    }  # fmt: skip


@pytest.mark.parametrize("policy", ["unscheduled", "priority", "adaptive"])
def test_engine_api_every_task_finishes_once(policy):
    s = scenario_from_dict(api_scenario())
    engine = Engine(s, s.options(policy), seed=5)
    done = engine.backend.done
    ends = []
    engine.backend.done = lambda t: (ends.append(t), done(t))
    result = engine.run()
    tasks = result.tasks
    assert len(ends) == len(tasks) == len({id(t) for t in ends})
    assert all(t.outcome in ("ok", "failed") and t.end_ms is not None for t in tasks)
    stats = result.backend_stats
    assert stats["rejections_429"] > 0 and stats["retries"] > 0  # the quotas bite in this scenario
    assert stats["retries"] == sum(t.retries for t in tasks)
    assert stats["failures"] == sum(t.outcome == "failed" for t in tasks)
    assert all(t.start_ms >= t.dispatch_ms for t in tasks if t.outcome == "ok")
    # same seed, same policy: the same numbers
    again = Engine(s, s.options(policy), seed=5).run()
    assert [(t.start_ms, t.end_ms, t.retries) for t in again.tasks] == [(t.start_ms, t.end_ms, t.retries) for t in tasks]


def test_api_needs_token_time():
    from simlab.errors import InputError

    data = api_scenario()
    del data["backend"]["token_time"]
    with pytest.raises(InputError, match="token_time"):
        scenario_from_dict(data)
