"""simlab.realcheck.hostcpu: finding a server's processes by its port and measuring their CPU and run-queue wait."""

import os
import socket
import subprocess
import sys
import time

import pytest

from simlab.realcheck.hostcpu import CpuProbe, CpuUse, process_tree, server_root

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc only")

SERVER = r"""
import socket, subprocess, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(s.getsockname()[1], child.pid, flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:  # a busy front end
    pass
"""


@pytest.fixture
def busy_server():
    p = subprocess.Popen([sys.executable, "-c", SERVER, "3"], stdout=subprocess.PIPE, text=True)
    port, child = (int(x) for x in p.stdout.readline().split())
    yield p, port, child
    p.kill()
    subprocess.run(["kill", str(child)], check=False)
    p.wait()


def test_finds_the_server_and_its_children_by_port(busy_server):
    p, port, child = busy_server
    assert server_root(port) == p.pid
    assert {p.pid, child} <= set(process_tree(p.pid))


def test_nothing_listens_nothing_measured():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound, closed: no listener on this port
    probe = CpuProbe(port)
    probe.start()
    assert probe.stop() is None


def test_measures_a_busy_server_and_an_idle_client(busy_server):
    p, port, child = busy_server
    probe = CpuProbe(port)
    probe.start()
    time.sleep(1.0)
    use = probe.stop()
    assert isinstance(use, CpuUse) and 0.9 < use.wall_s < 3
    running, waiting = use.server["front end"]
    # one busy loop is always either running or runnable and waiting for a core: about one core in all, however
    # busy the machine is (measured 0.49 + 0.52 and 0.23 + 0.78 with both cores shared by other work)
    assert 0.8 < running + waiting < 1.2 and running > 0.05, use
    assert waiting >= 0 and use.server["python"][0] < 0.2  # the sleeping child
    assert use.client_cores < 0.3  # this test only slept
    assert use.machine_cores >= running - 0.1
    assert CpuUse.from_dict(use.to_dict()).server.keys() == use.server.keys()
