"""Every wait for a server and every read from it is bounded: `simlab loadtest` and `simlab validate-real` against
servers that never answer, stall after their headers, stream forever or send an endless body finish within
--max-seconds plus a few seconds, with exit 2 naming the server's response, and their memory stays bounded; a
malformed answer is exit 2 naming it, never a traceback. The article's scheduler under Node (real_server.js) too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from misbehaving import serve
from simlab.cli import main
from tests.helpers import ROOT

MAX_SECONDS = 3
SLACK_S = 8  # start-up (imports, the simulation of a tiny scenario) and the limits' own rounding
RSS_LIMIT = 600 * 2**20  # the CLI with numpy, scipy and pandas loaded takes about 150-250 MiB

TINY = """
name = "tiny"
duration_ms = 1500
[backend]
kind = "continuous-batching"
max_num_seqs = 8
step = { base_ms = 4.0, per_token_ms = 0.005, per_seq_ms = 0.5 }
[scheduler]
maxConcurrency = 8
batchMaxConcurrency = 4
batchMinConcurrency = 1
interactiveRpsThreshold = 4
interactiveP95LatencyMs = 300
[[workload]]
name = "chat"
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 4 }
prompt_tokens = { dist = "constant", value = 20 }
output_tokens = { dist = "constant", value = 4 }
[[workload]]
name = "jobs"
class = "batch"
arrivals = { process = "burst", count = 3, at_ms = 0 }
prompt_tokens = { dist = "constant", value = 20 }
output_tokens = { dist = "constant", value = 8 }
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "tiny.toml"
    path.write_text(TINY)
    return path


def run_cli(args) -> tuple[subprocess.CompletedProcess, float, int]:
    """The CLI as a user types it: (process, seconds, peak RSS in bytes, polled every 20 ms)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "simlab", *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    watch = psutil.Process(proc.pid)
    while proc.poll() is None and time.monotonic() - t0 < 120:
        try:
            peak = max(peak, watch.memory_info().rss)
        except psutil.Error:
            break
        time.sleep(0.02)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - t0, peak


HANGING = {
    "silent": "no status line and headers within",
    "stall-headers": "no further body data within",
    "endless-body": "a body larger than 1,048,576 bytes",
    "stream-forever": None,  # loadtest: the warm-up's deadline; validate-real: no request completed
    "endless-line": "an event-stream line longer than 65,536 bytes",
}


@pytest.mark.parametrize("mode", sorted(HANGING))
def test_loadtest_is_bounded(mode, tmp_path):
    url, server, stop = serve(mode)
    try:
        proc, seconds, rss = run_cli(["loadtest", url, "--concurrency", "1", "--prompt-tokens", "8", "--output-tokens",
                                      "4", "--requests", "2", "--rounds", "1", "--max-seconds", MAX_SECONDS,
                                      "--out", tmp_path / "lt"])
    finally:
        stop()
    print(f"loadtest vs {mode}: {seconds:.1f} s, peak RSS {rss / 2**20:.0f} MiB, {proc.stderr.strip()}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: server {url}: response to " in proc.stderr
    assert (HANGING[mode] or "no further body data within") in proc.stderr
    assert seconds < MAX_SECONDS + SLACK_S and rss < RSS_LIMIT


@pytest.mark.parametrize("mode", sorted(HANGING))
def test_validate_real_is_bounded(mode, scenario, tmp_path):
    url, server, stop = serve(mode)
    try:
        proc, seconds, rss = run_cli(["validate-real", scenario, "--url", url, "--policies", "static", "--repeats", "1",
                                      "--max-seconds", MAX_SECONDS, "--no-figures", "--out", tmp_path / "vr"])
    finally:
        stop()
    print(f"validate-real vs {mode}: {seconds:.1f} s, peak RSS {rss / 2**20:.0f} MiB, {proc.stderr.strip()}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: server {url}: response to " in proc.stderr
    expected = HANGING[mode] or f"no request completed within --max-seconds {MAX_SECONDS}"
    assert expected in proc.stderr
    assert seconds < MAX_SECONDS + SLACK_S and rss < RSS_LIMIT
    assert not list((tmp_path / "vr" / "measured").glob("*.csv"))  # nothing kept from a broken run


MALFORMED = {
    "models-not-json": ("GET /v1/models", re.escape("not JSON: '<html>hello</html>'")),
    "models-empty": ("GET /v1/models", re.escape('expected {"data": [{"id": MODEL}, ...]} with at least one model')),
    "models-500": ("GET /v1/models", re.escape("HTTP 500 (expected 200)")),
    "bad-chunk": ("GET /v1/models", re.escape("malformed HTTP (illegal chunk header")),
    "bad-event-json": ("POST /v1/completions", "malformed event-stream JSON"),
    "too-many-tokens": ("POST /v1/completions", r"asked for (4|8) tokens, the server reports 9999"),
    "completion-500": ("POST /v1/completions", re.escape("HTTP 500 (expected 200)")),
}


@pytest.mark.parametrize("mode", sorted(MALFORMED))
def test_malformed_answers_are_input_errors(mode, scenario, tmp_path, capsys):
    request, message = MALFORMED[mode]
    url, server, stop = serve(mode)
    try:
        codes = [main(["loadtest", url, "--concurrency", "1", "--prompt-tokens", "8", "--output-tokens", "4",
                       "--requests", "2", "--rounds", "1", "--max-seconds", "5", "--out", str(tmp_path / "lt")]),
                 main(["validate-real", str(scenario), "--url", url, "--policies", "static", "--repeats", "1",
                       "--max-seconds", "5", "--no-figures", "--out", str(tmp_path / "vr")])]
    finally:
        stop()
    err = capsys.readouterr().err
    assert codes == [2, 2], err
    for line in err.strip().splitlines():
        assert re.match(re.escape(f"error: server {url}: response to {request}: ") + message, line), line


NODE = shutil.which("node")


def node_driver(url: str, tmp_path, options: dict, tasks: str) -> subprocess.CompletedProcess:
    """real_server.js on its own against `url`: the options file and the tasks (CSV rows after the header)."""
    (tmp_path / "options.json").write_text(json.dumps(options))
    (tmp_path / "tasks.csv").write_text("id,kind,arrival_ms,prompt_tokens,output_tokens\n" + tasks)
    return subprocess.run([NODE, ROOT / "tests" / "conformance" / "real_server.js", url, tmp_path / "options.json",
                           tmp_path / "tasks.csv", tmp_path / "out.csv", str(MAX_SECONDS)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
@pytest.mark.parametrize("mode", ["silent", "stall-headers", "endless-body", "stream-forever", "endless-line",
                                  "bad-event-json", "models-empty"])
def test_the_node_driver_is_bounded(mode, tmp_path):
    """real_server.js on its own: exit 3 (the server broke the protocol) within MAX_SECONDS plus a few seconds,
    with the response named."""
    url, server, stop = serve(mode)
    t0 = time.monotonic()
    try:
        proc = node_driver(url, tmp_path, {"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 2},
                           "1,interactive,0,8,4\n2,batch,10,8,4\n")
    finally:
        stop()
    seconds = time.monotonic() - t0
    print(f"node vs {mode}: {seconds:.1f} s, exit {proc.returncode}, {proc.stderr.strip()}")
    if mode == "stream-forever":  # every request cancelled at the limit: a run with no completion, written
        assert proc.returncode == 0 and "0/2 completed" in proc.stdout
    else:
        assert proc.returncode == 3 and proc.stderr.startswith(f"server {url}: response to ")
    assert seconds < MAX_SECONDS + SLACK_S


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
def test_the_node_driver_never_sends_on_an_idle_kept_alive_connection(tmp_path):
    """A server closes an idle kept-alive connection when its keep-alive timeout expires; a request the client
    writes on it at that moment meets a closed socket ("other side closed"). real_server.js asks for one
    connection per request (Connection: close), as simlab's own driver does, so requests one after another on a
    server that drops every reused connection all complete, each on its own connection."""
    url, server, stop = serve("drop-reused")
    try:
        proc = node_driver(url, tmp_path, {"policy": "static", "maxConcurrency": 1, "batchMaxConcurrency": 1},
                           "1,interactive,0,8,4\n2,batch,100,8,4\n3,interactive,200,8,4\n4,batch,300,8,4\n")
    finally:
        stop()
    assert proc.returncode == 0, proc.stderr
    assert "4/4 completed" in proc.stdout
    assert server.connections == 5  # GET /v1/models and each completion on a connection of its own


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
def test_validate_real_completes_on_a_server_that_drops_reused_connections(scenario, tmp_path):
    """Both drivers, as a user runs them, against the server above: every request of both runs completes."""
    url, server, stop = serve("drop-reused")
    try:
        proc, seconds, rss = run_cli(["validate-real", scenario, "--url", url, "--policies", "static",
                                      "--node-policies", "static", "--repeats", "1", "--max-seconds", MAX_SECONDS,
                                      "--no-figures", "--out", tmp_path / "vr"])
    finally:
        stop()
    assert proc.returncode == 0, proc.stderr
    for run in ("static-run1.csv", "static-node-run1.csv"):
        rows = (tmp_path / "vr" / "measured" / run).read_text().strip().splitlines()[1:]
        assert len(rows) > 3 and all(row.endswith(",ok") for row in rows), (run, rows)


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
def test_a_run_without_completions_from_node_is_refused(tmp_path):
    """validate-real hands Node's empty run to the same check as its own: a ServerError, nothing kept."""
    from simlab.realcheck import validate
    from simlab.realcheck.http import ServerError

    (tmp_path / "options").mkdir()
    (tmp_path / "options" / "static.json").write_text(json.dumps({"policy": "static", "maxConcurrency": 4,
                                                                   "batchMaxConcurrency": 2}))
    (tmp_path / "tasks.csv").write_text("id,kind,arrival_ms,prompt_tokens,output_tokens\n1,interactive,0,8,4\n")
    url, server, stop = serve("stream-forever")
    try:
        with pytest.raises(ServerError, match=f"no request completed within --max-seconds {MAX_SECONDS}"):
            validate._measure(validate.check_url(url), "mis", None, [], MAX_SECONDS, "article-js", tmp_path,
                              "static", tmp_path / "measured" / "static-node-run1.csv", print)
    finally:
        stop()
    assert not list((tmp_path / "measured").glob("*"))


def test_limits_come_from_max_seconds():
    from simlab.realcheck.http import Limits

    assert Limits.within(3) == Limits(connect_s=3, header_s=3, idle_s=3)
    assert Limits.within(900).connect_s == 10



def test_a_request_open_at_the_runs_end_is_cancelled_even_when_the_loop_wakes_past_its_own_bound(monkeypatch):
    """A busy machine can keep the driver's event loop from running from just before the run's end until after a
    request's own deadline, while the server keeps streaming. The request still reads as cancelled by the run's
    end, not as a server that stalled (which stops the run with exit 2)."""
    import asyncio

    from simlab.policies import SchedulerOptions, Task
    from simlab.realcheck import drive as driving
    from simlab.realcheck.fake_engine import start_in_thread
    from simlab.realcheck.urls import check_url

    run_s, stall_s = 1.0, 1.6  # the loop sleeps from 0.05 s before the end to past the end + the grace
    monkeypatch.setattr(driving, "STALL_GRACE_S", 0.3)
    url, engine, stop = start_in_thread(base_ms=20.0, max_seqs=4)
    tasks = []
    for i in range(4):
        t = Task(i, "batch", 0.0, 0.0)
        t.prompt_tokens, t.output_tokens = 8, 100_000  # still streaming at the run's end
        tasks.append(t)

    async def run():
        loop = asyncio.get_running_loop()
        loop.call_later(driving.LEAD_MS / 1000 + run_s - 0.05, time.sleep, stall_s)
        return await driving.drive(check_url(url), "fake", SchedulerOptions(policy="unscheduled"), tasks, run_s)

    try:
        records = asyncio.run(run())
    finally:
        stop()
    assert [r["outcome"] for r in records] == ["cancelled"] * 4
    assert all(r["end_ms"] >= run_s * 1000 for r in records)
