"""scripts/shared-limit-vs-redis.py end to end on a short 2-instance scenario against the test Redis: the same drawn
tasks run in the simulation and in two runtime processes sharing one RedisLimiter; every task completes, the peak
in flight (swept from the processes' own start/end times) never exceeds the cap, and interactive P95 lands in the
same range as the simulation's (a loose bound: a broken replay or time scale misses it by far more)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.redis_support import redis_url

SCRIPT = ROOT / "scripts" / "shared-limit-vs-redis.py"
SCENARIO = ROOT / "docs" / "many-instances" / "shared-vs-redis.toml"


@pytest.mark.redis
@pytest.mark.slow
def test_two_instances_on_redis_match_the_simulation_and_hold_the_cap(tmp_path):
    url = redis_url()
    short = tmp_path / "short.toml"
    short.write_text(SCENARIO.read_text().replace("duration_ms = 20_000", "duration_ms = 6_000"))
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(short), "--redis", url, "--seeds", "1",
                           "--time-scale", "0.5", "--grace-s", "30", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    (seed,) = json.loads(out.read_text())
    sim, run = seed["sim"], seed["redis"]
    assert run["tasks"] == sim["tasks"] > 50
    assert run["completed"] == run["tasks"]
    assert sim["peak_in_flight"] <= 4
    assert run["peak_in_flight"] <= 4
    assert run["fallbacks"] == 0
    assert 0.5 < run["interactive_p95_ms"] / sim["interactive_p95_ms"] < 2


@pytest.mark.parametrize("args, says", [
    (["--redis", "redis://10.0.0.1:6379/0"], "load goes to loopback only"),
    (["--redis", "redis://127.0.0.1:6379/0", "--time-scale", "0"], "--time-scale must be within"),
    ([str(ROOT / "scenarios" / "many-gateways.toml"), "--redis", "redis://127.0.0.1:6379/0"], 'limiter = "shared"'),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
