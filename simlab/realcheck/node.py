"""The article's own scheduler in front of the server: tests/conformance/real_server.js under Node.js.

Node is handed the checked target's canonical URL (a loopback address literal and port), never the text the user
typed, and checks it again itself. It runs the tasks of tasks.csv with the options file simlab exported and writes
the same request records as simlab's own driver. Bounded: Node stops its run after `max_seconds`; the process is
killed `GRACE_S` later if it has not exited.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from simlab.errors import InputError
from simlab.realcheck.http import ServerError
from simlab.realcheck.urls import Target

GRACE_S = 20.0  # Node's start, its own 2 s after the limit, writing the records
SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "conformance" / "real_server.js"
EXIT_REFUSED, EXIT_SERVER = 2, 3  # real_server.js: the URL refused; the server's answer broke the protocol


def run_node(target: Target, options_path: Path, tasks_path: Path, out_path: Path, max_seconds: float) -> None:
    node = shutil.which("node")
    if node is None:
        raise InputError(None, "--node-policies", "needs Node.js 20+ (node) on PATH")
    if not SCRIPT.exists():
        raise InputError(None, "--node-policies", f"the Node driver is not here: {SCRIPT} (run from a source checkout)")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([node, str(SCRIPT), target.url, str(options_path), str(tasks_path), str(out_path),
                               repr(float(max_seconds))], capture_output=True, text=True,
                              timeout=max_seconds + GRACE_S)
    except subprocess.TimeoutExpired:
        raise InputError(None, "--node-policies", f"the Node driver did not finish within --max-seconds "
                         f"{max_seconds:g} s + {GRACE_S:g} s; it was stopped") from None
    last = done.stderr.strip().splitlines()[-1:] or [""]
    if done.returncode == EXIT_REFUSED:
        raise InputError(None, "--url", f"the Node driver refused {target.url}: {last[0][-500:]}")
    if done.returncode == EXIT_SERVER:
        raise ServerError(f"server {target.url}", "response to the Node driver", last[0][-500:])
    if done.returncode != 0:
        raise InputError(None, "--node-policies", f"the Node driver failed (exit {done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
