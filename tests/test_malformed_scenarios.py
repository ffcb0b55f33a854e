"""Malformed scenarios through the CLI, as a user types them: exit code 2, one short message, no traceback.

Each file in tests/malformed/scenarios/ is run with `simlab run FILE --quiet` and `simlab ab FILE --quiet`.
The message must name the file (the trace file, for a bad trace row) and the place: the key path or the
line. `--debug` shows the traceback instead. Bad command-line values get the same treatment.

The CLI starts in about a second (imports), so all the invocations run at once in a thread pool.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # ~65 CLI starts of ~1 s CPU each (pandas and scipy are imported before the scenario is read)

FOLDER = Path("tests/malformed/scenarios")  # relative to ROOT, as a user in the repository types it

# file -> (the file the message must name, the place it must name, other words it must contain)
CASES = {
    "unknown-key-typo.toml": (None, "duraton_ms", ["unknown key", "did you mean 'duration_ms'"]),
    "unknown-key-typo-nested.toml": (None, "workload[0].service.p59", ["did you mean 'p95'"]),
    "wrong-type.toml": (None, "duration_ms", ["valid number", "'one minute'"]),
    "wrong-type-slots.toml": (None, "backend.slots", ["integer", "2.5"]),
    "negative-rate.toml": (None, "workload[0].arrivals.rate_per_s", ["greater than 0", "-5"]),
    "infinite-rate.toml": (None, "workload[0].arrivals.rate_per_s", ["finite", "inf"]),
    "missing-required-key.toml": (None, "backend", ["required key is missing"]),
    "missing-workload-class.toml": (None, "workload[0].class", ["required key is missing"]),
    "p95-not-above-median.toml": (None, "workload[0].service", ["p95 (300.0) must be greater than median"]),
    "missing-trace-file.toml": (None, "workload[0].arrivals.file", ["not found", "no-such-trace.csv"]),
    "trace-bad-row.toml": ("trace-bad-row.csv", "line 4", ["interactve", "did you mean 'interactive'"]),
    "trace-bad-time.toml": ("trace-bad-time.csv", "line 3", ["arrival_ms", "negative"]),
    "invalid-toml.toml": (None, "line 3", ["not valid TOML"]),
    "unknown-backend.toml": (None, "backend.kind", ["'gpu'", "'slots'"]),
    "slots-without-slots.toml": (None, "backend", ["needs `slots`"]),
    "tokens-without-token-time.toml": (None, "workload[0]", ["token_time"]),
    "empty.toml": (None, "name", ["required key is missing"]),
    "binary-junk.toml": (None, "line 1", ["not UTF-8"]),
    "unknown-arrival-process.toml": (None, "workload[0].arrivals", ["'poison'", "'poisson'"]),
    "unknown-class.toml": (None, "workload[0].class", ["'interactve'", "'interactive'"]),
    "bad-scheduler-option.toml": (None, "scheduler.maxConcurency", ["did you mean 'maxConcurrency'"]),
    "bad-scheduler-value.toml": (None, "scheduler.batchMaxConcurrency", ["greater than or equal to 0", "-2"]),
    "closed-loop-zero-time.toml": (None, "workload[0].arrivals.think", ["never let the clock move"]),
    "no-workloads.toml": (None, "workload", ["at least 1"]),
    "uniform-high-below-low.toml": (None, "workload[0].service", ["high (100.0) must not be below low (500.0)"]),
}

GOOD = "scenarios/seed-article.toml"
BAD_FLAGS = {
    "workers-0": (["run", GOOD, "--workers", "0"], ["--workers", "at least 1", "found 0"]),
    "ab-workers-0": (["ab", GOOD, "--workers", "0"], ["--workers", "at least 1", "found 0"]),
    "replications-0": (["run", GOOD, "--replications", "0"], ["--replications", "at least 1", "found 0"]),
    "ab-replications-0": (["ab", GOOD, "--replications", "0"], ["--replications", "at least 1"]),
    "ab-replications-negative": (["ab", GOOD, "--replications", "-3"], ["--replications", "at least 1"]),
    "policies-bogus": (["ab", GOOD, "--policies", "bogus"], ["--policies", "unknown policy 'bogus'", "adaptive"]),
    "policies-typo": (["ab", GOOD, "--policies", "unscheduled,adaptve"], ["--policies", "did you mean 'adaptive'"]),
    "policy-bogus": (["run", GOOD, "--policy", "bogus"], ["policy", "bogus", "adaptive"]),
    "missing-scenario": (["run", "tests/malformed/scenarios/nope.toml"], ["nope.toml", "not found"]),
    "scenario-is-a-folder": (["ab", "tests/malformed/scenarios"], ["tests/malformed/scenarios", "cannot read"]),
}


def simlab(args, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "simlab", *args]
    if args[0] in ("run", "ab") and "--debug" not in args:
        command += ["--quiet", "--out", str(out)]
    elif args[0] == "--debug":
        command += ["--out", str(out)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every invocation of this file, run in parallel: {key: CompletedProcess}."""
    out = tmp_path_factory.mktemp("malformed-out")
    calls = {}
    for name in CASES:
        for command in ("run", "ab"):
            calls[(name, command)] = [command, str(FOLDER / name)]
    for name, (args, _) in BAD_FLAGS.items():
        calls[("flag", name)] = args
    calls[("argparse", "workers-two")] = ["run", GOOD, "--workers", "two"]
    calls[("debug", "run")] = ["--debug", "run", str(FOLDER / "unknown-key-typo.toml"), "--quiet"]
    calls[("debug", "trace")] = ["--debug", "run", str(FOLDER / "trace-bad-row.toml"), "--quiet"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = {key: pool.submit(simlab, args, out / f"{key[0]}-{key[1]}") for key, args in calls.items()}
        return {key: f.result() for key, f in futures.items()}


def test_enough_malformed_files():
    files = sorted(p.name for p in (ROOT / FOLDER).glob("*.toml"))
    assert len(files) >= 15
    assert set(files) == set(CASES), "every malformed file has its expectation here, and the other way round"


def check_message(proc, words):
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 3, f"stderr is {len(lines)} lines:\n{proc.stderr}"
    for word in words:
        assert word in proc.stderr, f"{word!r} not in:\n{proc.stderr}"


@pytest.mark.parametrize("command", ["run", "ab"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_scenario(results, name, command):
    proc = results[(name, command)]
    named_file, place, words = CASES[name]
    named = str(FOLDER / (named_file or name))
    check_message(proc, [named, place, *words])
    error = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, proc.stderr
    # the file, then the place, in that order: "error: FILE: PLACE: message" (TOML errors give the line at the end)
    assert error[0].startswith(f"error: {named}: ")
    assert proc.stdout.strip() == "", "nothing on stdout when the input is bad"


@pytest.mark.parametrize("name", sorted(BAD_FLAGS))
def test_bad_command_line_values(results, name):
    _, words = BAD_FLAGS[name]
    check_message(results[("flag", name)], words)


def test_argparse_errors_exit_2_with_usage(results):
    """A value argparse itself rejects: its usage block and one error line (argparse's own format)."""
    proc = results[("argparse", "workers-two")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: simlab run")
    assert proc.stderr.strip().splitlines()[-1] == "simlab run: error: argument --workers: invalid int value: 'two'"


@pytest.mark.parametrize("case", ["run", "trace"])
def test_debug_shows_the_traceback(results, case):
    proc = results[("debug", case)]
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "InputError" in proc.stderr
    assert ("duraton_ms" if case == "run" else "trace-bad-row.csv: line 4") in proc.stderr
