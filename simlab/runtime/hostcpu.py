"""Who used this machine's cores during a measurement: the server's processes, this client, everything else.

On a CPU build the engine's decode step is mostly host work (scheduling, input preparation, sampling, output
handling) split over several processes, so a step slows whenever one of them is runnable but waiting for a core.
Linux keeps, per thread, the time spent running and the time spent waiting on a run queue
(`/proc/PID/task/TID/schedstat`); read before and after a run, they show how much of the run each server process
spent queued for a core. That contention is not in the step-time model, so it is measured beside every run.
Linux only: elsewhere (or when the server's processes are not visible) the probe reports nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

PROC = "/proc"


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{PROC}/net/{name}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add(cols[9])
        except OSError:
            pass
    return inodes


def _pids() -> list[int]:
    return [int(d) for d in os.listdir(PROC) if d.isdigit()]


def _parent(pid: int) -> int | None:
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            s = f.read()
        return int(s[s.rindex(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def server_root(port: int) -> int | None:
    """The oldest process holding the listening socket of `port` (the server's own, not a worker's copy)."""
    wanted = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not wanted:
        return None
    owners = []
    for pid in _pids():
        try:
            fds = os.listdir(f"{PROC}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{PROC}/{pid}/fd/{fd}") in wanted:
                    owners.append(pid)
                    break
            except OSError:
                continue
    if not owners:
        return None
    owner_set = set(owners)
    roots = [p for p in owners if _parent(p) not in owner_set]
    return min(roots or owners)


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _parent(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


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


def _machine_busy_ns() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far, in ns (from /proc/stat's jiffies)."""
    try:
        with open(f"{PROC}/stat") as f:
            cols = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = 1e9 / os.sysconf("SC_CLK_TCK")
    idle = cols[3] + (cols[4] if len(cols) > 4 else 0)  # idle + iowait
    total = sum(cols[:8])
    return int((total - idle) * tick), int(total * tick)


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
        return time.monotonic(), server, _own_cpu_s(), _machine_busy_ns()

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
        machine = (machine1[0] - machine0[0]) / 1e9 / wall if machine0 and machine1 else float("nan")
        return CpuUse(wall, dict(sorted(server.items())), (client1 - client0) / wall, machine)
