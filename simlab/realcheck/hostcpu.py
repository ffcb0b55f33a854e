"""Who used this machine's cores during a measurement: the server's processes, this client, everything else.

On a CPU build the engine's decode step is mostly host work (scheduling, input preparation, sampling, output
handling) split over several processes, so a step slows whenever one of them is runnable but waiting for a core.
Linux keeps, per thread, the time spent running and the time spent waiting on a run queue
(`/proc/PID/task/TID/schedstat`); read before and after a run, they show how much of the run each server process
spent queued for a core. That contention is not in the step-time model, so it is measured beside every run.
The server's processes and the machine's busy time come from psutil; the run-queue wait, which psutil does not
give, from schedstat. Linux only: elsewhere (or when the server's processes are not visible) the probe reports nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

PROC = "/proc"


def server_root(port: int) -> int | None:
    """The oldest process listening on `port` (the server's own, not a worker's inherited copy of the socket)."""
    try:
        owners = {c.pid for c in psutil.net_connections(kind="tcp")
                  if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except psutil.Error:
        return None
    roots = [p for p in owners if _parent(p) not in owners]
    return min(roots or owners, default=None)


def _parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def process_tree(root: int) -> list[int]:
    try:
        proc = psutil.Process(root)
        return [root] + [c.pid for c in proc.children(recursive=True)]
    except psutil.Error:
        return []


def _schedstat(pid: int) -> tuple[str, int, int] | None:
    """(name, ns running, ns waiting on a run queue) summed over the process's threads."""
    run = wait = 0
    try:
        with open(f"{PROC}/{pid}/comm") as f:
            name = f.read().strip()
        for tid in os.listdir(f"{PROC}/{pid}/task"):
            try:
                with open(f"{PROC}/{pid}/task/{tid}/schedstat") as f:
                    a, b, _ = f.read().split()
            except (OSError, ValueError):
                continue  # a thread that ended meanwhile
            run += int(a)
            wait += int(b)
    except OSError:
        return None
    return name, run, wait


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy so far (idle and I/O wait left out)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


@dataclass
class CpuUse:
    """Cores used and cores' worth of run-queue wait during one run (seconds per wall second)."""

    wall_s: float
    server: dict[str, tuple[float, float]]  # process name -> (cores running, cores waiting)
    client_cores: float
    machine_cores: float  # every process on the machine, the client and the server included

    @property
    def server_cores(self) -> float:
        return sum(r for r, _ in self.server.values())

    @property
    def server_wait(self) -> float:
        return sum(w for _, w in self.server.values())

    def to_dict(self) -> dict:
        return {"wall_s": round(self.wall_s, 3), "client_cores": round(self.client_cores, 4),
                "machine_cores": round(self.machine_cores, 4),
                "server": {k: {"cores": round(r, 4), "waiting": round(w, 4)} for k, (r, w) in self.server.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> CpuUse:
        return cls(d["wall_s"], {k: (v["cores"], v["waiting"]) for k, v in d["server"].items()},
                   d["client_cores"], d["machine_cores"])


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (a Node driver run by subprocess)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuProbe:
    """`start()` before a run, `stop()` after it: the CpuUse of the server on `port` and of this client.
    `stop()` returns None where /proc is missing or the server's processes cannot be found."""

    def __init__(self, port: int):
        self.port = port
        self._before = None

    def _snap(self):
        root = server_root(self.port) if os.path.isdir(PROC) else None
        if root is None:
            return None
        server = {p: s for p in process_tree(root) if (s := _schedstat(p)) is not None}
        if root in server:  # the process that owns the port: the HTTP front end, whatever its program is called
            server[root] = ("front end",) + server[root][1:]
        return time.monotonic(), server, _own_cpu_s(), _machine_busy_s()

    def start(self) -> None:
        self._before = self._snap()

    def stop(self) -> CpuUse | None:
        after = self._snap()
        if self._before is None or after is None:
            return None
        (t0, server0, client0, machine0), (t1, server1, client1, machine1) = self._before, after
        wall = t1 - t0
        if wall <= 0:
            return None
        server: dict[str, tuple[float, float]] = {}
        for pid, (name, run, wait) in server1.items():
            base = server0.get(pid, (name, 0, 0))  # a process started during the run counts from zero
            r, w = server.get(name, (0.0, 0.0))
            server[name] = (r + (run - base[1]) / 1e9 / wall, w + (wait - base[2]) / 1e9 / wall)
        machine = (machine1 - machine0) / wall
        return CpuUse(wall, dict(sorted(server.items())), (client1 - client0) / wall, machine)
