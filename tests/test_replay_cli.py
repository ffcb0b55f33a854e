"""`simlab replay` end to end, as a user types it: a subprocess, real files, exit codes, stderr."""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from simlab.policies import Task, options_from_dict
from simlab.replay import replay

HERE = Path(__file__).parent
MALFORMED = HERE / "malformed"
ROOT = HERE.parent

GOOD_OPTIONS = {
    "maxConcurrency": 8,
    "batchMaxConcurrency": 6,
    "batchMinConcurrency": 1,
    "interactiveRpsThreshold": 20,
    "interactiveP95LatencyMs": 500,
}
GOOD_TRACE = "id,kind,arrival_ms,service_ms\nq1,interactive,0,100\nq2,batch,5,100\n"


def simlab(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "simlab", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def ms(cell: str):
    return None if cell == "" else float(cell)


# --- success ------------------------------------------------------------------------------------


def test_replay_writes_csv_with_full_precision(tmp_path):
    trace = write(
        tmp_path / "trace.csv",
        "id,kind,arrival_ms,service_ms,note\n"
        "a,interactive,0.1,0.2,x\n"
        "b,batch,0.1,1e-07,y\n"
        "c,interactive,1/3,5,z\n".replace("1/3", repr(1 / 3)),
    )
    options = write(tmp_path / "options.json", json.dumps(GOOD_OPTIONS))
    out = tmp_path / "out" / "replay.csv"
    out.parent.mkdir()
    r = simlab("replay", trace, "--options", options, "--backend", "delay", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "replayed 3 tasks" in r.stderr
    header = out.read_text().splitlines()[0].split(",")
    assert {"id", "kind", "arrival_ms", "start_ms", "end_ms"} <= set(header)
    rows = {row["id"]: row for row in read_rows(out)}
    assert list(rows) == ["a", "b", "c"]
    # 0.1 + 0.2 is 0.30000000000000004 in binary floating point: printed in full, not rounded to 0.3
    assert rows["a"]["end_ms"] == "0.30000000000000004"
    assert ms(rows["b"]["end_ms"]) == 0.1 + 1e-07
    assert ms(rows["c"]["arrival_ms"]) == 1 / 3 and ms(rows["c"]["end_ms"]) == 1 / 3 + 5
    # identical to the in-process replay, bit for bit
    tasks = [Task("a", "interactive", 0.1, 0.2), Task("b", "batch", 0.1, 1e-07), Task("c", "interactive", 1 / 3, 5.0)]
    replay(tasks, options_from_dict(GOOD_OPTIONS))
    for t in tasks:
        assert (ms(rows[t.id]["start_ms"]), ms(rows[t.id]["end_ms"])) == (t.start_ms, t.end_ms)
        assert rows[t.id]["kind"] == t.kind


def test_replay_without_options_uses_article_defaults(tmp_path):
    trace = write(tmp_path / "t.csv", GOOD_TRACE)
    r = simlab("replay", trace, "--out", tmp_path / "o.csv")
    assert r.returncode == 0, r.stderr
    assert "policy 'adaptive'" in r.stderr
    assert len(read_rows(tmp_path / "o.csv")) == 2


def test_policy_flag_overrides_options(tmp_path):
    # max 1: under fifo b waits for a; unscheduled starts every task on arrival
    trace = write(tmp_path / "t.csv", "id,kind,arrival_ms,service_ms\na,batch,0,10\nb,interactive,1,10\n")
    options = write(tmp_path / "o.json", json.dumps({"policy": "fifo", "maxConcurrency": 1}))
    r = simlab("replay", trace, "--options", options, "--out", tmp_path / "fifo.csv")
    assert r.returncode == 0, r.stderr
    assert [ms(x["start_ms"]) for x in read_rows(tmp_path / "fifo.csv")] == [0.0, 10.0]
    r = simlab("replay", trace, "--options", options, "--policy", "unscheduled", "--out", tmp_path / "u.csv")
    assert r.returncode == 0, r.stderr
    assert [ms(x["start_ms"]) for x in read_rows(tmp_path / "u.csv")] == [0.0, 1.0]


def test_ids_with_commas_and_quotes_round_trip(tmp_path):
    trace = write(tmp_path / "t.csv", 'id,kind,arrival_ms,service_ms\n"a,1",batch,0,1\n"say ""hi""",interactive,0,1\n')
    r = simlab("replay", trace, "--out", tmp_path / "o.csv")
    assert r.returncode == 0, r.stderr
    assert [x["id"] for x in read_rows(tmp_path / "o.csv")] == ["a,1", 'say "hi"']


STRANDED_OPTIONS = {
    "maxConcurrency": 4,
    "batchMaxConcurrency": 2,
    "batchMinConcurrency": 0,
    "interactiveRpsThreshold": 20,
    "interactiveP95LatencyMs": 100,
    "windowMs": 1000,
}
STRANDED_TRACE = (
    "id,kind,arrival_ms,service_ms\n"
    "i1,interactive,0,200\n"  # latency 200 > 100: full pressure, cap 0 at its finish
    "b1,batch,300,10\n"  # arrives after it: queued, and nothing ever wakes the batch queue
    "b2,batch,301,5\n"
)


def test_stranded_tasks_are_reported(tmp_path):
    trace = write(tmp_path / "t.csv", STRANDED_TRACE)
    options = write(tmp_path / "o.json", json.dumps(STRANDED_OPTIONS))
    out = tmp_path / "o.csv"
    r = simlab("replay", trace, "--options", options, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "2 of 3 tasks never started" in r.stderr
    assert "batchMinConcurrency" in r.stderr and "recheckOnExpiry" in r.stderr  # why, and the fix
    rows = {x["id"]: x for x in read_rows(out)}
    assert (rows["i1"]["start_ms"], rows["i1"]["end_ms"]) == ("0.0", "200.0")
    for k in ("b1", "b2"):
        assert rows[k]["start_ms"] == "" and rows[k]["end_ms"] == ""


def test_recheck_on_expiry_starts_them(tmp_path):
    trace = write(tmp_path / "t.csv", STRANDED_TRACE)
    options = write(tmp_path / "o.json", json.dumps({**STRANDED_OPTIONS, "recheckOnExpiry": True}))
    out = tmp_path / "o.csv"
    r = simlab("replay", trace, "--options", options, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "never started" not in r.stderr
    rows = {x["id"]: x for x in read_rows(out)}
    t = math.nextafter(1200.0, math.inf)  # the instant i1's sample (ts 200) leaves the 1000 ms window
    assert ms(rows["b1"]["start_ms"]) == t and ms(rows["b2"]["start_ms"]) == t
    assert ms(rows["b1"]["end_ms"]) == t + 10


def test_warning_batch_max_at_least_max_concurrency(tmp_path):
    trace = write(tmp_path / "t.csv", GOOD_TRACE)
    options = write(tmp_path / "o.json", json.dumps({**GOOD_OPTIONS, "batchMaxConcurrency": 8}))
    r = simlab("replay", trace, "--options", options, "--out", tmp_path / "o.csv")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert str(options) in warnings[0] and "batchMaxConcurrency (8) >= maxConcurrency (8)" in warnings[0]
    assert (tmp_path / "o.csv").exists()


# --- bad input ----------------------------------------------------------------------------------

# file -> what the one-line message must name besides the file itself (the line, the key, the problem)
MALFORMED_TRACES = {
    "trace-missing-column.csv": ["header", "service_ms"],
    "trace-unknown-kind.csv": ["line 3", "interactve", "did you mean 'interactive'"],
    "trace-negative-time.csv": ["line 2", "arrival_ms", "negative"],
    "trace-non-numeric-time.csv": ["line 4", "service_ms", "'fast'", "not a number"],
    "trace-duplicate-id.csv": ["line 3", "duplicate id 'q1'", "line 2"],
    "trace-nan-time.csv": ["line 2", "arrival_ms", "finite"],
    "trace-inf-service.csv": ["line 3", "service_ms", "finite"],
    "trace-empty.csv": ["empty file", "id,kind,arrival_ms,service_ms"],
    "trace-header-only.csv": ["no rows"],
    "trace-ragged-row.csv": ["line 3", "3 fields", "header has 4"],
    "trace-semicolons.csv": ["header", "missing column", "id;kind;arrival_ms;service_ms"],
    "trace-binary.csv": ["line 1", "UTF-8"],
    "trace-latin1.csv": ["line 3", "UTF-8"],
    "trace-empty-id.csv": ["line 2", "id is empty"],
    "trace-unterminated-quote.csv": ["line 3", "fields"],
    "trace-azure-header.csv": ["header", "missing column", 'format = "azure"', "simlab fit"],
}
MALFORMED_OPTIONS = {
    "options-not-json.json": ["line 4 column 1", "not valid JSON"],
    "options-empty.json": ["line 1 column 1", "not valid JSON"],
    "options-adaptive-missing-key.json": ["adaptive", "interactiveP95LatencyMs"],
    "options-wrong-type.json": ["maxConcurrency", '"eight"', "integer"],
    "options-bool-as-int.json": ["maxConcurrency", "true", "integer"],
    "options-batchmin-gt-batchmax.json": ["batchMinConcurrency (5)", "batchMaxConcurrency (3)"],
    "options-unknown-key-typo.json": ["batchMaxConcurency", "did you mean 'batchMaxConcurrency'"],
    "options-alpha-out-of-range.json": ["smoothingAlpha", "1.5"],
    "options-not-an-object.json": ["JSON object", "list"],
    "options-both-smoothing.json": ["smoothingAlpha", "smoothingTauMs"],
    "options-unknown-policy.json": ["policy", "adaptve"],
    "options-negative-cap.json": ["batchMaxConcurrency", "-1"],
}


def test_every_malformed_file_is_covered():
    on_disk = {p.name for p in MALFORMED.iterdir() if p.is_file()}
    assert on_disk == set(MALFORMED_TRACES) | set(MALFORMED_OPTIONS)
    assert len(on_disk) >= 15


def check_input_error(r, path: Path, needles, out: Path):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 3, r.stderr
    assert lines[-1].startswith("error: ")
    assert f"tests/malformed/{path.name}" in r.stderr  # the path as the user typed it
    for needle in needles:
        assert needle in r.stderr, f"{needle!r} not in {r.stderr!r}"
    assert not out.exists(), "no output file on bad input"


@pytest.mark.parametrize("name", sorted(MALFORMED_TRACES))
def test_malformed_trace(name, tmp_path):
    options = write(tmp_path / "o.json", json.dumps(GOOD_OPTIONS))
    out = tmp_path / "o.csv"
    r = simlab("replay", f"tests/malformed/{name}", "--options", options, "--out", out)
    check_input_error(r, MALFORMED / name, MALFORMED_TRACES[name], out)


@pytest.mark.parametrize("name", sorted(MALFORMED_OPTIONS))
def test_malformed_options(name, tmp_path):
    trace = write(tmp_path / "t.csv", GOOD_TRACE)
    out = tmp_path / "o.csv"
    r = simlab("replay", trace, "--options", f"tests/malformed/{name}", "--out", out)
    check_input_error(r, MALFORMED / name, MALFORMED_OPTIONS[name], out)


def test_missing_files_and_bad_backend(tmp_path):
    trace = write(tmp_path / "t.csv", GOOD_TRACE)
    out = tmp_path / "o.csv"
    for args, needle in [
        ((tmp_path / "nope.csv", "--out", out), "trace file not found"),
        ((trace, "--options", tmp_path / "nope.json", "--out", out), "options file not found"),
        ((trace, "--backend", "slots", "--out", out), "--backend"),
    ]:
        r = simlab("replay", *args)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) <= 3
    assert not out.exists()


def test_debug_flag_shows_the_traceback(tmp_path):
    r = simlab("--debug", "replay", "tests/malformed/trace-empty.csv", "--out", tmp_path / "o.csv")
    assert r.returncode != 0 and "Traceback" in r.stderr


# --- scale --------------------------------------------------------------------------------------


def test_replay_100k_tasks(tmp_path):
    """Correctness at scale through the CLI (speed is measured by the benchmarks, not here)."""
    rng = random.Random(20240601)
    n = 100_000
    lines = ["id,kind,arrival_ms,service_ms"]
    t = 0.0
    for k in range(n):
        t += rng.expovariate(1 / 12.0) if rng.random() < 0.9 else 0.0  # Poisson arrivals with ties
        kind = "interactive" if rng.random() < 0.6 else "batch"
        service = rng.choice([0.0, 1.0, 50.0, rng.uniform(5, 200), rng.uniform(100, 2000)])
        lines.append(f"t{k},{kind},{t!r},{service!r}")
    trace = write(tmp_path / "big.csv", "\n".join(lines) + "\n")
    options = write(tmp_path / "o.json", json.dumps({**GOOD_OPTIONS, "windowMs": 2000, "smoothingAlpha": 0.3}))
    out = tmp_path / "out.csv"
    r = simlab("replay", trace, "--options", options, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "never started" not in r.stderr

    rows = read_rows(out)
    assert len(rows) == n
    assert [x["id"] for x in rows] == [f"t{k}" for k in range(n)]
    events = []
    for x in rows:
        a, s, e, svc = ms(x["arrival_ms"]), ms(x["start_ms"]), ms(x["end_ms"]), ms(x["service_ms"])
        assert s is not None and s >= a
        assert e == s + svc
        if e > s:
            events.append((s, 1, x["kind"]))
            events.append((e, 0, x["kind"]))
    # in flight at the end of each instant (ends before starts at one instant): never above the caps
    events.sort(key=lambda ev: (ev[0], ev[1]))
    running = batch = peak = peak_batch = 0
    for i, (time, is_start, kind) in enumerate(events):
        delta = 1 if is_start else -1
        running += delta
        batch += delta if kind == "batch" else 0
        if i + 1 == len(events) or events[i + 1][0] != time:
            peak, peak_batch = max(peak, running), max(peak_batch, batch)
    assert running == 0 and batch == 0
    assert peak <= 8 and peak_batch <= 6
    assert peak == 8  # the trace is heavy enough to fill every slot
