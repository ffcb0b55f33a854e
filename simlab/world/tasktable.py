"""Per-task data as columns: the open-loop arrivals drawn before a run, and everything recorded by it.

A run holds a Task object only while the task is alive (queued, in service); its times go into typed
arrays (`array.array`, 8 bytes a float, ~30 ns a store) the moment it ends, and the object is dropped.
After the run a `TaskTable` holds numpy columns, one row per task in run order (open-loop tasks by
arrival, then closed-loop tasks as they were made). Ids are made on demand: most are `LABEL-N`.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from simlab.policies.base import BATCH, INTERACTIVE, Task

# by code; 0 and 3 are told apart by dispatch_ms; 4: stopped by its workload's timeout with no retry left
OUTCOMES = ("stranded", "ok", "failed", "unfinished", "timeout")
NAN = math.nan


@dataclass
class Arrivals:
    """Open-loop tasks of all workloads, sorted by arrival; float columns are NaN where a value is absent."""

    arrival_ms: np.ndarray
    service_ms: np.ndarray | None  # None: no workload has service times (token models)
    prompt_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    interactive: np.ndarray
    source: np.ndarray  # int code into `labels`
    number: np.ndarray  # index of the task in its workload's draws: the N of LABEL-N
    labels: list[str]
    ids: np.ndarray | None = None  # explicit ids (object), None where generated

    def __len__(self) -> int:
        return len(self.arrival_ms)

    def task_id(self, i: int):
        if self.ids is not None and self.ids[i] is not None:
            return self.ids[i]
        return f"{self.labels[self.source[i]]}-{self.number[i]}"

    @classmethod
    def from_tasks(cls, tasks: list[Task]) -> "Arrivals":
        """Columns from Task objects (already sorted by arrival), keeping their ids and sources."""
        labels = list(dict.fromkeys(t.source or "" for t in tasks))
        code = {label: i for i, label in enumerate(labels)}

        def col(name):
            values = [getattr(t, name) for t in tasks]
            if all(v is None for v in values):
                return None
            return np.array([NAN if v is None else v for v in values], dtype=float)

        ids = np.empty(len(tasks), dtype=object)
        ids[:] = [t.id for t in tasks]
        return cls(
            arrival_ms=np.array([t.arrival_ms for t in tasks], dtype=float),
            service_ms=col("service_ms"),
            prompt_tokens=col("prompt_tokens"),
            output_tokens=col("output_tokens"),
            interactive=np.array([t.interactive for t in tasks], dtype=bool),
            source=np.array([code[t.source or ""] for t in tasks], dtype=np.int32),
            number=np.arange(len(tasks), dtype=np.int64),
            labels=labels,
            ids=ids,
        )


class Recorder:
    """Typed arrays filled as tasks end; closed-loop tasks append their static columns as they are made.

    `summary=True` keeps only what the run's summary reads (`metrics.summarize`): no cap at dispatch, and a
    column that no task set (time to first token, retries on most backends) stays None instead of n NaNs.
    """

    def __init__(self, arrivals: Arrivals, summary: bool = False, deadlines: dict[str, float] | None = None):
        """`deadlines`: workload label -> deadline_ms, for the workloads that have one (a `deadline_ms` column)."""
        n = len(arrivals)
        self.arrivals = arrivals
        self.n_open = n
        self.summary = summary
        self.deadlines = deadlines or None
        nans = array("d", [NAN])
        self.dispatch_ms = nans * n
        self.start_ms = nans * n
        self.end_ms = nans * n
        self.ttft_ms = None  # made on the first task that has one (most backends never do)
        self.cap = None if summary else nans * n
        self.outcome = array("b", bytes(n))
        self.retries = None  # as ttft_ms
        self.extra: list[Task] = []  # closed-loop tasks' static fields, read once at the end
        self.labels = list(arrivals.labels)

    def __len__(self) -> int:
        return len(self.outcome)

    def add(self, task: Task) -> int:
        """Register a task made during the run (closed loop); returns its row."""
        i = len(self.outcome)  # n_open + the closed-loop tasks so far
        self.extra.append(_Static(task))
        self.dispatch_ms.append(NAN)
        self.start_ms.append(NAN)
        self.end_ms.append(NAN)
        if self.cap is not None:  # None: a summary-only run
            self.cap.append(NAN)
        if self.ttft_ms is not None:  # None until a task has one
            self.ttft_ms.append(NAN)
        self.outcome.append(0)
        if self.retries is not None:
            self.retries.append(0)
        return i

    def record(self, task: Task) -> None:
        """Everything a run learns about a task; called when it ends, and at the end for those in flight."""
        i = task.index
        if task.dispatch_ms is not None:
            self.dispatch_ms[i] = task.dispatch_ms
        if task.start_ms is not None:
            self.start_ms[i] = task.start_ms
        if task.end_ms is not None:
            self.end_ms[i] = task.end_ms
        if task.ttft_ms is not None:
            self._ttft(i, task.ttft_ms)
        if task.cap_at_dispatch is not None and self.cap is not None:  # None: a summary-only run
            self.cap[i] = task.cap_at_dispatch
        outcome = task.outcome
        self.outcome[i] = (1 if outcome == "ok" else 2 if outcome == "failed" else 4 if outcome == "timeout"
                           else 3 if task.dispatch_ms is not None else 0)
        if task.retries:
            self._retry(i, task.retries)

    def _ttft(self, i: int, value: float) -> None:
        if self.ttft_ms is None:
            self.ttft_ms = array("d", [NAN]) * len(self)
        self.ttft_ms[i] = value

    def _retry(self, i: int, value: int) -> None:
        if self.retries is None:
            self.retries = array("i", bytes(4 * len(self)))
        self.retries[i] = value

    def table(self) -> "TaskTable":
        a, extra = self.arrivals, self.extra
        labels = list(self.labels)
        for s in extra:
            if s.source not in labels:
                labels.append(s.source)
        code = {label: i for i, label in enumerate(labels)}

        def static(column, name, dtype=float):
            if not extra:
                return column
            tail = [getattr(s, name) for s in extra]
            if column is None and all(v is None for v in tail):
                return None
            head = np.full(len(a), NAN) if column is None else column
            return np.concatenate([head, np.array([NAN if v is None else v for v in tail], dtype=dtype)])

        n = len(self)
        source = a.source  # None in a summary-only run that needs no sources (dropped by the engine)
        if extra and source is not None:
            source = np.concatenate([a.source, np.array([code[s.source] for s in extra], dtype=np.int32)])
        more = {"deadline_ms": self._deadline_column(source, labels), **self._lifecycle_columns()}

        def frombuf(buf, dtype, fill=None):
            if buf is None:  # a column no task set: None for a summary, else what it would have held
                return None if self.summary or fill is None else np.full(n, fill, dtype=dtype)
            return np.frombuffer(buf, dtype=dtype) if len(buf) else np.empty(0, dtype=dtype)

        if self.summary:  # what `summarize` reads, no more: no names, ids, service draws or token counts
            columns = {
                "arrival_ms": static(a.arrival_ms, "arrival_ms"),
                "interactive": static(a.interactive, "interactive", bool),
                "dispatch_ms": frombuf(self.dispatch_ms, np.float64),
                "start_ms": frombuf(self.start_ms, np.float64),
                "end_ms": frombuf(self.end_ms, np.float64),
                "ttft_ms": frombuf(self.ttft_ms, np.float64),
                "outcome": frombuf(self.outcome, np.int8),
                "retries": frombuf(self.retries, np.int32),
                **more,
            }
            return TaskTable(columns, labels, None, [])
        columns = {
            "arrival_ms": static(a.arrival_ms, "arrival_ms"),
            "service_ms": static(a.service_ms, "service_ms"),
            "prompt_tokens": static(a.prompt_tokens, "prompt_tokens"),
            "output_tokens": static(a.output_tokens, "output_tokens"),
            "interactive": static(a.interactive, "interactive", bool),
            "dispatch_ms": frombuf(self.dispatch_ms, np.float64),
            "start_ms": frombuf(self.start_ms, np.float64),
            "end_ms": frombuf(self.end_ms, np.float64),
            "ttft_ms": frombuf(self.ttft_ms, np.float64, NAN),
            "cap_at_dispatch": frombuf(self.cap, np.float64),
            "outcome": frombuf(self.outcome, np.int8),
            "retries": frombuf(self.retries, np.int32, 0),
            **more,
        }
        columns["source"] = source
        return TaskTable(columns, labels, a, [s.id for s in extra])

    def _deadline_column(self, source, labels) -> np.ndarray | None:
        """Each task's workload deadline_ms (NaN where it has none); None when no workload has one."""
        if self.deadlines is None:
            return None
        by_code = np.array([self.deadlines.get(label, NAN) for label in labels] or [NAN], dtype=float)
        return by_code[source] if len(source) else np.empty(0)

    def _lifecycle_columns(self) -> dict:
        return {"attempts": None, "wasted_tokens": None, "wasted_ms": None}


class LifecycleRecorder(Recorder):
    """A Recorder that also keeps each task's attempts and wasted work (runs with timeouts or eviction)."""

    def __init__(self, arrivals: Arrivals, summary: bool = False, deadlines: dict[str, float] | None = None):
        super().__init__(arrivals, summary, deadlines)
        n = len(arrivals)
        self.attempts = array("i", bytes(4 * n))
        self.wasted_tokens = array("d", [0.0]) * n
        self.wasted_ms = array("d", [0.0]) * n

    def add(self, task: Task) -> int:
        i = super().add(task)
        self.attempts.append(0)
        self.wasted_tokens.append(0.0)
        self.wasted_ms.append(0.0)
        return i

    def record(self, task: Task) -> None:
        super().record(task)
        i = task.index
        self.attempts[i] = task.attempts
        self.wasted_tokens[i] = task.wasted_tokens
        self.wasted_ms[i] = task.wasted_ms

    def _lifecycle_columns(self) -> dict:
        def col(buf, dtype):
            return np.frombuffer(buf, dtype=dtype) if len(buf) else np.empty(0, dtype=dtype)

        return {"attempts": col(self.attempts, np.int32), "wasted_tokens": col(self.wasted_tokens, np.float64),
                "wasted_ms": col(self.wasted_ms, np.float64)}


class _Static:
    __slots__ = ("id", "source", "arrival_ms", "service_ms", "prompt_tokens", "output_tokens", "interactive")

    def __init__(self, t: Task):
        self.id, self.source, self.arrival_ms, self.service_ms = t.id, t.source or "", t.arrival_ms, t.service_ms
        self.prompt_tokens, self.output_tokens, self.interactive = t.prompt_tokens, t.output_tokens, t.interactive


@dataclass
class TaskTable:
    """One row per task of a run, as numpy columns (see `COLUMNS`)."""

    columns: dict[str, np.ndarray]
    labels: list[str]  # source names by code
    arrivals: Arrivals | None  # the open-loop part, for ids (None in a summary-only table: no ids, no names)
    extra_ids: list = field(default_factory=list)  # ids of closed-loop tasks, rows after the open-loop ones

    def __len__(self) -> int:
        return len(self.columns["arrival_ms"])

    def __getitem__(self, name: str) -> np.ndarray | None:
        return self.columns[name]

    def ids(self) -> list:
        a = self.arrivals
        labels = [str(x) for x in a.labels]
        out = [f"{labels[s]}-{k}" for s, k in zip(a.source.tolist(), a.number.tolist())]
        if a.ids is not None:
            out = [x if x is not None else g for x, g in zip(a.ids.tolist(), out)]
        return out + list(self.extra_ids)

    def kinds(self) -> np.ndarray:
        return np.where(self.columns["interactive"], INTERACTIVE, BATCH).astype(object)

    def sources(self) -> np.ndarray:
        return np.asarray(self.labels, dtype=object)[self.columns["source"]] if len(self) else np.empty(0, dtype=object)

    def outcomes(self) -> np.ndarray:
        return np.asarray(OUTCOMES, dtype=object)[self.columns["outcome"]] if len(self) else np.empty(0, dtype=object)

    def to_tasks(self) -> list[Task]:
        """Task objects rebuilt from the columns: for tests and small runs, not for big ones."""
        c = self.columns
        ids, sources, outcomes = self.ids(), self.sources(), self.outcomes()
        out = []
        for i in range(len(self)):
            t = Task(ids[i], INTERACTIVE if c["interactive"][i] else BATCH, float(c["arrival_ms"][i]), _num(c["service_ms"], i))
            t.index = i
            t.source = sources[i]
            t.dispatch_ms, t.start_ms, t.end_ms = _num(c["dispatch_ms"], i), _num(c["start_ms"], i), _num(c["end_ms"], i)
            t.ttft_ms, t.cap_at_dispatch = _num(c["ttft_ms"], i), _num(c["cap_at_dispatch"], i)
            p, o = _num(c["prompt_tokens"], i), _num(c["output_tokens"], i)
            t.prompt_tokens = None if p is None else int(p)
            t.output_tokens = None if o is None else int(o)
            t.outcome = outcomes[i] if outcomes[i] in ("ok", "failed", "timeout") else None
            t.retries = int(c["retries"][i])
            if c.get("attempts") is not None:
                t.attempts = int(c["attempts"][i])
                t.wasted_tokens, t.wasted_ms = float(c["wasted_tokens"][i]), float(c["wasted_ms"][i])
            out.append(t)
        return out


def _num(column, i):
    if column is None:
        return None
    v = column[i]
    return None if v != v else float(v)
