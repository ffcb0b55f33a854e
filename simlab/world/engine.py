"""The SimPy engine: drives any policy against a backend and a workload, and records what happened.

The policy decides (it knows nothing of SimPy); the engine only turns its answers into backend work and
feeds task events back. No SimPy processes on the hot path: arrivals are pre-scheduled events and service
completions are timeouts with a callback. Open-loop tasks come in as columns; a Task object exists only
from a task's arrival to its end, when its times go into the run's column arrays (`tasktable`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from heapq import heappush

import numpy as np
import simpy
from simpy.events import Event

from simlab.errors import InputError
from simlab.policies import SchedulerOptions, Task, make_policy
from simlab.policies.base import BATCH, INTERACTIVE
from simlab.scenario import ClosedLoop, Scenario
from simlab.world.backends import make_backend
from simlab.world.gateway import Gateway
from simlab.world.events import NORMAL, URGENT, Fire, run_until
from simlab.world.lifecycle import Lifecycle, workload_limits
from simlab.world.tasktable import Arrivals, LifecycleRecorder, Recorder, TaskTable
from simlab.world.workloads import ClosedLoopUser, open_loop_columns, stream, workload_keys

BACKEND_STREAM = 1_000_000
SERIES_COLUMNS = (
    "t_ms",
    "batch_cap",
    "in_flight_interactive",
    "in_flight_batch",
    "queued_interactive",
    "queued_batch",
    "backend_busy",
    "backend_waiting",
    "pressure",
    "window_rps",
    "window_p95_ms",
)


def _nothing(_event) -> None:
    pass


class _Endless(Exception):
    """Raised in a closed-loop user's process (SimPy re-creates it from its args) past the event budget."""


@dataclass
class SimResult:
    scenario: str
    policy: str
    seed: int
    table: TaskTable  # one row per task, numpy columns
    series: dict[str, np.ndarray]
    end_ms: float
    options: dict = field(default_factory=dict)
    backend_stats: dict = field(default_factory=dict)
    # batch lifecycle (simlab/world/lifecycle.py): timeouts, evictions, timeout_retries; empty when the run had
    # no timeout, no eviction and no deadline
    counters: dict = field(default_factory=dict)
    # gateway instances and crashes (simlab/world/gateway.py): empty without a [gateway] beyond one plain instance
    gateway: dict = field(default_factory=dict)

    @property
    def tasks(self) -> list[Task]:
        """Task objects rebuilt from the table (for tests and small runs; big ones should read `table`)."""
        return self.table.to_tasks()


class Engine:
    def __init__(self, scenario: Scenario, options: SchedulerOptions, seed: int, tasks: list[Task] | None = None,
                 workload: Arrivals | None = None, summary: bool = False, series: bool = True):
        """`summary=True`: the result's table keeps only what `metrics.summarize` reads (no per-task file can
        be written from it), and a workload drawn here is dropped column by column once used.
        `series=False`: no time series (the result's is empty); the run is otherwise the same, to the bit."""
        self.scenario = scenario
        self.options = options
        self.seed = seed
        self.env = env = simpy.Environment()
        self.backend = make_backend(scenario.backend, env, self._done, stream(seed, BACKEND_STREAM), scenario)
        gateway = scenario.gateway
        clock = partial(getattr, env, "_now")  # the policies' clock: a C call, no Python frame (twice per task)
        if gateway is None or gateway.plain:  # one gateway that never fails: the plain policy, nothing between
            self.policy = make_policy(options, clock, self.backend.observe)
            self._gateway = None
        else:
            self.policy = self._gateway = Gateway(gateway, options, clock, self.backend.observe, seed, self, stream)
        limits, deadlines = workload_limits(scenario)
        self._lifecycle = Lifecycle(self, limits) if limits or self.policy.may_stop() else None
        self._owned = workload is None  # drawn here: columns may be dropped when no longer needed
        if workload is None:
            workload = Arrivals.from_tasks(tasks) if tasks is not None else open_loop_columns(scenario, seed)
            if summary:
                workload.number = workload.ids = None  # names and ids: never read
                if self._lifecycle is None and not deadlines:
                    workload.source = None  # nor which workload a task came from
        self.workload = workload
        self.summary = summary
        self.keep_series = series
        self._deadlines = deadlines
        recorder = Recorder if self._lifecycle is None else LifecycleRecorder
        self.recorder = recorder(workload, summary, deadlines)
        self._in_flight: dict[int, Task] = {}  # dispatched, not ended: recorded as unfinished if the run stops
        self._wake_at = None
        self._created = 0  # closed-loop tasks: with the open-loop ones, the event budget (max_tasks)
        self._closed_budget = scenario.max_tasks  # closed-loop tasks allowed beside the open-loop ones (set in run)
        self._rows: list[tuple] = []
        self.sample_ms = scenario.sample_ms or max(100.0, scenario.duration_ms / 1500.0)

    # --- the hot path --------------------------------------------------------------------------------
    # Per task: an arrival callback, a completion callback (through the backend), and the policy's two
    # calls. The dispatch loop is written out in both callbacks rather than shared, and bound methods are
    # looked up once per run (`run()`), not per event.
    def _arrive(self, event) -> None:
        # One pending arrival at a time keeps SimPy's heap small; URGENT puts arrivals ahead of
        # completions at the same instant, as all-arrivals-scheduled-first does in the reference replay.
        i = event._value
        env = self.env
        j = i + 1
        if j < self._n_arrivals:
            event._value = j  # the same event again: `run_until` is done with it
            heappush(env._queue, (self._arrival_ms[j], URGENT, next(env._eid), event))
        if self._plain:
            task = Task(None, self._kinds[self._interactive[i]], self._arrival_ms[i], self._service_ms[i], None, i)
        else:
            task = self._task(i)
        started = self._submit(task)
        if started:
            now = env._now
            in_flight, dispatch = self._in_flight, self._dispatch
            for task in started:
                task.dispatch_ms = now
                in_flight[task.index] = task
                dispatch(task)
        if self._may_wake:
            self._schedule_wake()

    def _plain_arrivals(self):
        """`_arrive` for the common case (every task timed), as a closure: its state in local cells rather
        than a dozen attribute loads per arrival. Same steps in the same order."""
        env = self.env
        queue, eid, n = env._queue, env._eid, self._n_arrivals
        arrival_ms, service_ms, interactive, kinds = self._arrival_ms, self._service_ms, self._interactive, self._kinds
        submit, in_flight, dispatch = self._submit, self._in_flight, self._dispatch
        may_wake, schedule_wake = self._may_wake, self._schedule_wake

        def arrive(event) -> None:
            i = event._value
            j = i + 1
            if j < n:
                event._value = j  # the same event again: `run_until` is done with it
                heappush(queue, (arrival_ms[j], URGENT, next(eid), event))
            # env._now is arrival_ms[i], the same float (the heap key it was pushed with): no second read
            started = submit(Task(None, kinds[interactive[i]], env._now, service_ms[i], None, i))
            if started:
                now = env._now
                for task in started:
                    task.dispatch_ms = now
                    in_flight[task.index] = task
                    dispatch(task)
            if may_wake:
                schedule_wake()

        return arrive

    def _completions(self):
        """`_done` as a closure, for the run (as `_plain_arrivals`): the same steps in the same order."""
        env, in_flight, record, finish, dispatch = self.env, self._in_flight, self._record, self._finish, self._dispatch
        may_wake, schedule_wake, answered = self._may_wake, self._schedule_wake, self._answered

        def done(task: Task) -> None:
            task.end_ms = now = env._now
            del in_flight[task.index]
            record(task)
            waiter = task.payload
            started = finish(task)
            if started:
                for t in started:
                    t.dispatch_ms = now
                    in_flight[t.index] = t
                    dispatch(t)
            if may_wake:
                schedule_wake()
            if waiter is not None:
                if waiter.__class__ is ClosedLoopUser:
                    answered(task)
                elif isinstance(waiter, Event):
                    waiter.succeed(task)

        return done

    def _task(self, i: int) -> Task:
        service = self._service_ms[i] if self._service_ms is not None else None
        if service != service:
            service = None  # NaN: a token-model task beside timed ones
        task = Task(None, self._kinds[self._interactive[i]], self._arrival_ms[i], service, None, i)
        if self._tokens is not None:
            prompt = self._tokens[0][i]
            if prompt == prompt:  # not NaN
                task.prompt_tokens, task.output_tokens = int(prompt), int(self._tokens[1][i])
        return task

    def _done(self, task: Task) -> None:
        task.end_ms = now = self.env._now
        in_flight = self._in_flight
        del in_flight[task.index]
        self._record(task)
        waiter = task.payload
        started = self._finish(task)
        if started:
            dispatch = self._dispatch
            for t in started:
                t.dispatch_ms = now
                in_flight[t.index] = t
                dispatch(t)
        if self._may_wake:
            self._schedule_wake()
        if waiter is not None:
            if waiter.__class__ is ClosedLoopUser:
                self._answered(task)
            elif isinstance(waiter, Event):
                waiter.succeed(task)

    def _end_here(self, task: Task) -> None:
        """A task that ends outside the backend and the policy (its gateway instance crashed): recorded, its caller
        told. Not dispatched again, so not in flight."""
        self._in_flight.pop(task.index, None)
        self._record(task)
        waiter = task.payload
        if waiter is not None:
            if waiter.__class__ is ClosedLoopUser:
                self._answered(task)
            elif isinstance(waiter, Event):
                waiter.succeed(task)

    def _wake(self, event) -> None:
        if event._value != self._wake_at:
            return  # superseded
        self._wake_at = None
        self._start(self._wake_policy())

    def _start(self, started: list[Task]) -> None:
        if started:
            now = self.env._now
            dispatch = self._dispatch
            in_flight = self._in_flight
            for task in started:
                task.dispatch_ms = now
                in_flight[task.index] = task
                dispatch(task)
        if self._may_wake:
            self._schedule_wake()

    def _schedule_wake(self) -> None:
        check = self.policy.next_check_ms()
        if check != self._wake_at:
            self._wake_at = check
            if check is not None:
                env = self.env
                heappush(env._queue, (check, NORMAL, next(env._eid), Fire(self._wake, check)))

    # --- closed-loop users ---------------------------------------------------------------------------
    # A user is a loop: think, send one request, wait for its end, think again. It runs on `Fire` events that
    # take the same places in SimPy's queue (time, priority, event id) as the SimPy process it replaces did
    # (its start, its timeouts, its request's end, its own end): the same order, to the bit, at a fraction of
    # the cost of resuming a generator.
    def _start_user(self, user: ClosedLoopUser) -> None:
        env = self.env
        heappush(env._queue, (env._now, URGENT, next(env._eid), Fire(self._user_begins, user)))  # Initialize

    def _user_begins(self, event) -> None:
        user, env = event._value, self.env
        start = user.workload.arrivals.start_ms
        if start:
            heappush(env._queue, (env._now + start, NORMAL, next(env._eid), Fire(self._user_thinks, user)))
        else:
            self._user_thinks(event)

    def _user_thinks(self, event) -> None:
        """The user's previous request ended (or it just started): think, then send the next one."""
        user, env = event._value, self.env
        heappush(env._queue, (env._now + user.think(user.rng), NORMAL, next(env._eid), Fire(self._user_sends, user)))

    def _user_sends(self, event) -> None:
        user, env = event._value, self.env
        if not user.more(env._now):
            heappush(env._queue, (env._now, NORMAL, next(env._eid), Fire(_nothing, None)))  # the process's end
            return
        self._created += 1
        if self._created & 0x3FFF == 0 or self._created > self._closed_budget:
            self._check_budget(user.workload)
        task = user.make_task(env._now)
        task.payload = user
        task.index = self.recorder.add(task)
        self._start(self._submit(task))

    def _answered(self, task: Task) -> None:
        """A closed-loop user's request ended: the user goes on next (as a SimPy event succeeding now would)."""
        env = self.env
        heappush(env._queue, (env._now, NORMAL, next(env._eid), Fire(self._user_thinks, task.payload)))

    def _check_budget(self, workload) -> None:
        # Past the budget, or on pace to pass it tenfold before the arrivals end: stop now, not in minutes.
        budget, now = self.scenario.max_tasks, self.env._now
        pace = self._n_arrivals + self._created * self.scenario.duration_ms / max(now, 1e-9)
        if self._created > self._closed_budget or pace > 10 * budget:
            raise _Endless(workload)

    def _endless(self, workload) -> InputError:
        wi = next(i for i, w in enumerate(self.scenario.workload) if w is workload)
        where = f"workload[{wi}].arrivals"
        beside = f" (beside {self._n_arrivals:,} open-loop tasks)" if self._n_arrivals else ""
        return InputError(
            self.scenario.path, where,
            f"closed-loop users sent {self._created:,} requests{beside} by {self.env.now:.3g} ms of simulated time, on pace "
            f"to exceed max_tasks = {self.scenario.max_tasks:,} (the event budget): think and service times near "
            "zero would keep the run going for hours. Give think or service a longer time, set requests_per_user, "
            "or raise max_tasks.",
        )

    # --- observation -----------------------------------------------------------------------------------
    def _sampler(self):
        env, policy, backend, rows = self.env, self.policy, self.backend, self._rows
        end = self.scenario.end_ms
        while True:
            queued_i, queued_b = policy.queued()
            rps, p95 = policy.window_stats()
            rows.append(
                (
                    env._now,
                    policy.batch_cap(),
                    policy.running - policy.batch_running,
                    policy.batch_running,
                    queued_i,
                    queued_b,
                    backend.busy(),
                    backend.waiting(),
                    policy.pressure(),
                    rps,
                    p95,
                )
            )
            if not env._queue or env._now >= end:
                return  # nothing left that could ever happen, or the hard stop
            yield env.timeout(self.sample_ms)

    def _end_checks(self) -> Event:
        """The sampler's clock without its samples: the event that ends the run at the instant the sampler would
        (its process's end), reached through events with the same places in SimPy's queue (time, priority, id):
        its start, then one check per sample. Observing changes no policy's decisions, so nothing else moves."""
        env, end, every = self.env, self.scenario.end_ms, self.sample_ms
        stop = env.event()

        def check(event) -> None:
            if not env._queue or env._now >= end:
                stop.succeed()  # scheduled now, as a finished process is
            else:
                heappush(env._queue, (env._now + every, NORMAL, next(env._eid), event))  # as env.timeout(every)

        heappush(env._queue, (env._now, URGENT, next(env._eid), Fire(check, None)))  # as the process's Initialize
        return stop

    def run(self) -> SimResult:
        env, w = self.env, self.workload
        # memoryviews: indexing returns a Python float as fast as a list does, with no copy of the column
        # (a list of 4 million floats costs 130 MB more), and numpy scalars are slow on the hot path.
        self._arrival_ms = _doubles(w.arrival_ms)
        self._service_ms = _doubles(w.service_ms) if w.service_ms is not None else None
        self._interactive = np.ascontiguousarray(w.interactive, dtype=bool).tobytes()
        self._tokens = (_doubles(w.prompt_tokens), _doubles(w.output_tokens)) if w.prompt_tokens is not None else None
        self._n_arrivals = len(w)
        if self._n_arrivals > self.scenario.max_tasks:  # tasks given by the caller (drawn ones are checked as drawn)
            raise InputError(self.scenario.path, "max_tasks", f"{self._n_arrivals:,} open-loop tasks, more than "
                             f"max_tasks = {self.scenario.max_tasks:,} (the event budget, which counts every task)")
        self._closed_budget = self.scenario.max_tasks - self._n_arrivals
        self._kinds = (BATCH, INTERACTIVE)
        # Every task timed, none by tokens: the common case, with no per-arrival checks.
        self._plain = self._tokens is None and self._service_ms is not None and not np.isnan(w.service_ms).any()
        self._may_wake = self.policy.may_wake()
        self._submit, self._finish, self._wake_policy = self.policy.submit, self.policy.finish, self.policy.wake
        self._dispatch = self.backend.dispatch
        self._record = self.recorder.record
        if self._lifecycle is not None:
            self._lifecycle.install()  # rebinds _submit, _finish, _wake_policy, _dispatch before the closures
        arrive = self._arrive if not self._plain else self._plain_arrivals()
        own_done = self.backend.done == self._done  # not wrapped by a caller (tests hook it)
        if own_done:
            self.backend.done = self._completions()
        if self._n_arrivals:
            heappush(env._queue, (self._arrival_ms[0], URGENT, next(env._eid), Fire(arrive, 0)))
        keys = workload_keys(self.scenario)
        for wi in sorted(range(len(keys)), key=keys.__getitem__):  # key order: file order changes nothing
            w = self.scenario.workload[wi]
            if isinstance(w.arrivals, ClosedLoop):
                for u in range(w.arrivals.users):
                    self._start_user(ClosedLoopUser(self.scenario, self.seed, wi, u))
        sampler = env.process(self._sampler()) if self.keep_series else self._end_checks()
        try:
            run_until(env, sampler)
        except _Endless as exc:
            raise self._endless(exc.args[0]) from None
        if own_done:
            self.backend.done = self._done
        if arrive.__closure__:
            for cell in arrive.__closure__:  # it refers to itself: drop what it holds now, not at the next gc
                cell.cell_contents = None
        for task in self._in_flight.values():
            self._record(task)  # cut off by the end of the run: unfinished
        self._arrival_ms = self._service_ms = self._interactive = self._tokens = None
        if self.summary and self._owned:
            w = self.workload
            w.service_ms = w.prompt_tokens = w.output_tokens = None  # service draws: consumed
        self._submit = self._finish = self._dispatch = self._record = None  # no cycles through bound methods
        self._wake_policy = None
        counters = {}
        if self._lifecycle is not None:
            counters = self._lifecycle.counters()
            self._lifecycle = None
        elif self._deadlines:
            counters = {"timeouts": 0, "evictions": 0, "timeout_retries": 0}
        series = np.array(self._rows, dtype=float).reshape(-1, len(SERIES_COLUMNS))
        stats = self.backend.stats() if hasattr(self.backend, "stats") else {}
        table = self.recorder.table()
        if self.summary:
            self.recorder = self.workload = None  # the table holds what is left: a summary may free it
        return SimResult(
            scenario=self.scenario.name,
            policy=self.options.policy,
            seed=self.seed,
            table=table,
            series={name: series[:, i] for i, name in enumerate(SERIES_COLUMNS)},
            end_ms=env.now,
            options=self.options.to_json_dict(),
            backend_stats=stats,
            counters=counters,
            gateway=self._gateway.stats(env.now) if self._gateway is not None else {},
        )


def _doubles(values: np.ndarray) -> memoryview:
    # A view of the float64 column, no copy (a day at 50 RPS: 35 MB a column); indexing gives a Python float.
    return memoryview(np.ascontiguousarray(values, dtype=np.float64))


def simulate(scenario: Scenario, options: SchedulerOptions, seed: int) -> SimResult:
    return Engine(scenario, options, seed).run()
