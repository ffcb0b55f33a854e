"""Property tests of gateway instances (simlab/world/gateway.py): random small worlds, random [gateway] tables with
crashes, invariants checked by a monitor on the backend's seams (dispatch, cancel, done) in event order.

- No task is lost or run twice except as counted: every task ends ok or failed; the failed are exactly the
  abandoned ones and the lost ones no client sent again; the dispatches beyond each task's first are exactly the
  redelivered ones.
- `split`: the backend never holds more than maxConcurrency (each instance has maxConcurrency // N, N <= cap).
- `shared`: with no delay never more than maxConcurrency; with a delay d, at each dispatch at most the cap plus
  the dispatches of the last d ms (the grants the instance could not see yet).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.experiments.metrics import summarize
from simlab.scenario import scenario_from_dict
from simlab.world import engine as engine_module
from simlab.world.engine import Engine
from simlab.world.gateway import Gateway

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def worlds(draw):
    n = draw(st.integers(1, 4))
    cap = draw(st.integers(n, 8))
    policy = draw(st.sampled_from(["fifo", "priority", "static", "adaptive"]))
    scheduler = {"policy": policy, "maxConcurrency": cap}
    if policy in ("static", "adaptive"):
        scheduler["batchMaxConcurrency"] = draw(st.integers(1, cap))
    if policy == "adaptive":
        scheduler.update(batchMinConcurrency=1, interactiveRpsThreshold=draw(st.floats(1, 30)),
                         interactiveP95LatencyMs=draw(st.floats(20, 500)), windowMs=1000.0)
    queue = draw(st.sampled_from(["memory", "persistent"]))
    delivery = "at-most-once" if queue == "memory" else draw(st.sampled_from(["at-most-once", "at-least-once"]))
    gateway = {
        "instances": n,
        "limiter": draw(st.sampled_from(["local", "split", "shared"])),
        "balancer": draw(st.sampled_from(["round-robin", "random", "least-loaded"])),
        "shared_delay_ms": draw(st.sampled_from([0.0, 0.5, 5.0, 50.0])),
        "lease_ms": draw(st.sampled_from([1.0, 100.0, 1000.0])),
        "crash_at_ms": sorted(draw(st.lists(st.floats(0, 2500), max_size=4))),
        "restart_ms": draw(st.sampled_from([0.0, 10.0, 300.0])),
        "queue": queue,
        "delivery": delivery,
    }
    if queue == "memory" and draw(st.booleans()):
        gateway["client_retry_ms"] = draw(st.sampled_from([0.0, 20.0, 400.0]))
    if delivery == "at-least-once":
        gateway["idempotent"] = draw(st.booleans())
    batch_times = sorted(draw(st.lists(st.floats(0, 1800), min_size=1, max_size=3)))
    world = {
        "name": "gw-prop", "duration_ms": 2000.0,
        "backend": {"kind": "slots", "slots": draw(st.integers(1, 10))},
        "scheduler": scheduler,
        "workload": [
            {"name": "chat", "class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": draw(st.floats(2, 40))},
             "service": {"dist": "exponential", "mean": draw(st.floats(5, 200))}},
            {"name": "jobs", "class": "batch",
             "arrivals": {"process": "burst", "count": draw(st.integers(1, 12)), "at_ms": batch_times},
             "service": {"dist": "exponential", "mean": draw(st.floats(20, 400))}},
        ],
        "gateway": gateway,
    }
    return world, draw(st.integers(0, 1000))


def _monitored(world, seed):
    s = scenario_from_dict(world)
    e = Engine(s, s.options(), seed)
    b = e.backend
    state = {"in_flight": 0}
    dispatches, grants = Counter(), []  # grants: (time, in flight after)
    dispatch, cancel = b.dispatch, b.cancel

    def on_dispatch(task):
        dispatches[task.index] += 1
        state["in_flight"] += 1
        grants.append((e.env.now, state["in_flight"]))
        dispatch(task)

    def on_cancel(task):
        state["in_flight"] -= 1
        cancel(task)

    def on_done(task):
        state["in_flight"] -= 1
        e._done(task)

    b.dispatch, b.cancel, b.done = on_dispatch, on_cancel, on_done
    result = e.run()
    return s, result, dispatches, grants


@SETTINGS
@given(worlds())
def test_no_task_is_lost_or_run_twice_except_as_counted(case):
    world, seed = case
    s, result, dispatches, grants = _monitored(world, seed)
    row = summarize(result, s.slo_p95_ms)
    g = result.gateway
    if not g:  # one instance and no crash: the plain engine (test_gateway.py shows it is the same)
        assert world["gateway"]["instances"] == 1 and not world["gateway"]["crash_at_ms"]
        return
    outcome = result.table["outcome"]
    n = len(outcome)
    ok, failed = int((outcome == 1).sum()), int((outcome == 2).sum())
    assert ok + failed == n  # nothing stranded, nothing unfinished
    never_sent_again = g["lost"] - g["resubmitted"]
    assert failed == g["abandoned"] + never_sent_again
    assert "client_retry_ms" not in world["gateway"] or never_sent_again == 0
    assert sum(k - 1 for k in dispatches.values()) == g["redelivered"]
    assert g["duplicated"] == (0 if world["gateway"].get("idempotent") else g["redelivered"])
    assert row["interactive_completed"] + row["batch_completed"] == ok

    cap, limiter, delay = world["scheduler"]["maxConcurrency"], world["gateway"]["limiter"], world["gateway"]["shared_delay_ms"]
    assert g["backend_peak_in_flight"] == max((k for _, k in grants), default=0)
    if limiter == "split":
        assert g["backend_peak_in_flight"] <= cap
    if limiter == "shared":
        times = [t for t, _ in grants]
        for i, (t, in_flight) in enumerate(grants):
            unseen = sum(1 for j in range(i - 1, -1, -1) if times[j] + delay > t) if delay > 0 else 0
            if delay > 0:  # grants at the same instant are unseen too (listed after this one)
                unseen += sum(1 for j in range(i + 1, len(times)) if times[j] == t)
            assert in_flight <= cap + unseen, (t, in_flight, unseen)
    if g["time_above_cap_ms"] > 0:
        assert g["backend_peak_in_flight"] > cap


class _OneByOne(Gateway):
    """The shared limit as the limiter's script states it, task by task: each held task tried in turn (interactive,
    then batch, each class stopping at its first refusal), and after a finish the instance tried again with every
    other. `Gateway` counts instead and skips the retries that cannot change anything: the runs must be the same."""

    def finish(self, task):
        inst = self.owner.pop(task.index)
        del inst.owned[task.index]
        del inst.sent[task.index]
        self._ended(task, inst.number)
        out = self._admit(inst, inst.policy.finish(task))
        if self.shared:
            out += self._grant(inst)
            if self.delay == 0:
                for other in self.instances:
                    if other.up and other.held:
                        out += self._grant(other)
            elif any(other.held for other in self.instances if other is not inst):
                self._retry_at(self.clock() + self.delay)
        return out

    def _grant(self, inst):
        held = inst.held
        if not held:
            return []
        self._forget_old()
        others_total = self.recent_sum[0] - self.recent_total[inst.number]
        others_batch = self.recent_sum[1] - self.recent_batch[inst.number]
        cap, granted = self.limit, []
        for task in held:
            if task.interactive:
                if self.leased - others_total >= cap:
                    break
                self.waiting_interactive -= 1
                granted.append(task)
                self._lease_one(inst, task)
        batch_cap = inst.policy.batch_cap()
        waiting_elsewhere = self.waiting_interactive - sum(1 for t in held if t.interactive and t not in granted)
        for task in held:
            if not task.interactive:
                seen = self.leased - others_total
                if seen >= cap or self.leased_batch - others_batch >= batch_cap or seen + waiting_elsewhere >= cap:
                    break
                granted.append(task)
                self._lease_one(inst, task)
        if len(granted) < len(held):
            self._retry_when_visible(inst.number)
        inst.held = [t for t in held if t not in granted]
        return [t for t in held if t in granted]

    def _lease_one(self, inst, task):
        batch = not task.interactive
        self.leased += 1
        self.leased_batch += batch
        self._note(inst.number, 1, batch)
        inst.sent[task.index] = task
        self._count(1)
        self.batch_running += batch


@SETTINGS
@given(worlds())
def test_counted_grants_are_the_grants_tried_one_by_one(case):
    world, seed = case
    world["gateway"]["limiter"] = "shared"
    s = scenario_from_dict(world)
    counted = Engine(s, s.options(), seed).run()
    engine_module.Gateway = _OneByOne
    try:
        one_by_one = Engine(s, s.options(), seed).run()
    finally:
        engine_module.Gateway = Gateway
    assert counted.gateway == one_by_one.gateway and counted.end_ms == one_by_one.end_ms
    for name, column in counted.table.columns.items():
        other = one_by_one.table.columns[name]
        assert (column is None and other is None) or np.array_equal(column, other, equal_nan=True), name
