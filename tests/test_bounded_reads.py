"""Every user file is read through one gate (simlab.errors): a regular file within a stated size, or exit 2 naming
the file at once. /dev/zero must not be read until memory runs out, a FIFO must not hang the command, a folder or an
oversized file must be refused before anything is read (limits in docs/limits.md)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from simlab.errors import (CONFIG_MAX_BYTES, DATA_MAX_BYTES, RECORD_MAX_BYTES, InputError, check_file, open_bytes,
                           read_text, size_text)
from tests.bad_input import assert_input_error, simlab_in, tree

BAD_KINDS = ("dev-zero", "fifo", "folder", "oversized")
NOT_REGULAR = {"dev-zero": "character device", "fifo": "FIFO", "folder": "folder"}


@pytest.fixture
def bad(tmp_path):
    """kind -> a path of that kind; oversized files are sparse (no disk used), one per limit."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a-folder").mkdir()
    made = {"dev-zero": "/dev/zero", "fifo": str(tmp_path / "pipe"), "folder": str(tmp_path / "a-folder")}
    for name, limit in (("config", CONFIG_MAX_BYTES), ("data", DATA_MAX_BYTES), ("record", RECORD_MAX_BYTES)):
        path = tmp_path / f"big-{name}.csv"
        with open(path, "wb") as f:
            f.truncate(limit + 1)
        made[f"oversized-{name}"] = str(path)
    return made


# --- the gate itself ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
def test_what_is_not_a_regular_file_is_refused_at_once(bad, kind):
    started = time.monotonic()
    for read in (lambda p: read_text(p, "log file", "a CSV"), lambda p: check_file(p, "log file"),
                 lambda p: open_bytes(p, "log file").__enter__()):
        with pytest.raises(InputError) as info:
            read(bad[kind])
        assert info.value.source == bad[kind]
        assert f"cannot read log file: it is a {NOT_REGULAR[kind]}" in info.value.message
        assert "not a regular file" in info.value.message
    assert time.monotonic() - started < 5


def test_oversized_files_are_refused_before_reading(bad):
    with pytest.raises(InputError) as info:
        read_text(bad["oversized-config"], "scenario file", "a TOML scenario", CONFIG_MAX_BYTES)
    assert info.value.message == (f"too large ({CONFIG_MAX_BYTES + 1:,} bytes): the limit for a scenario file is "
                                  f"16 MiB ({CONFIG_MAX_BYTES:,} bytes)")
    with pytest.raises(InputError, match="the limit for a trace file is 1 GiB"):
        with open_bytes(bad["oversized-data"], "trace file", DATA_MAX_BYTES):
            pass


def test_a_file_whose_size_the_system_does_not_know_is_read_through_the_limit():
    # /proc files say size 0 and are regular: the limit holds while reading (as for a file that grows)
    with pytest.raises(InputError, match=r"too large \(more than 64 bytes\): the limit for a status file is 64 bytes"):
        read_text("/proc/self/status", "status file", "text", 64)
    import pandas as pd

    with pytest.raises(InputError, match="more than 64 bytes"):
        with open_bytes("/proc/self/status", "status file", 64) as handle:
            pd.read_csv(handle, sep="\t", header=None)
    assert "Name:" in read_text("/proc/self/status", "status file", "text")


def test_a_file_within_the_limit_reads_whole_bom_and_all(tmp_path):
    path = tmp_path / "s.toml"
    path.write_bytes(b"\xef\xbb\xbfname = 'x'\n" + b"#" * 5000 + b"\n")
    assert read_text(path, "scenario file", "TOML", 5015) == "name = 'x'\n" + "#" * 5000 + "\n"  # 5,015 bytes
    with pytest.raises(InputError, match=r"too large \(5,015 bytes\): the limit for a scenario file is 4.9 KiB"):
        read_text(path, "scenario file", "TOML", 5014)
    with pytest.raises(InputError, match=r"too large \(4.9 KiB\): the limit for a scenario file is 1 KiB"):
        read_text(path, "scenario file", "TOML", 1024)


def test_sizes_read_as_people_say_them():
    assert [size_text(n) for n in (0, 1023, 1024, 1536, CONFIG_MAX_BYTES, DATA_MAX_BYTES)] == \
        ["0 bytes", "1023 bytes", "1 KiB", "1.5 KiB", "16 MiB", "1 GiB"]


# --- every reader, through the CLI as a user types it -----------------------------------------------------------
LOADTEST = ["concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms,latency_ms"] + [
    f"{c},{p},{o},{30 + 0.05 * p + 2 * c},{10 + 0.5 * c},{30 + 0.05 * p + 2 * c + o * (10 + 0.5 * c)}"
    for p, o in ((256, 64), (1024, 64), (512, 256)) for c in (1, 2, 4, 8, 16)]


def scenario_pointing_at(folder, field: str, target: str) -> str:
    """A small valid scenario but for one file it reads, which is `target`."""
    workload = {
        "trace": f'arrivals = {{ process = "trace", file = "{target}" }}',
        "azure": f'arrivals = {{ process = "trace", file = "{target}", format = "azure" }}\n'
                 'service = { dist = "constant", value = 5 }',
        "empirical": 'arrivals = { process = "poisson", rate_per_s = 5 }\n'
                     f'service = {{ dist = "empirical", file = "{target}", column = "ms" }}',
        "resampled": f'arrivals = {{ process = "resampled", file = "{target}" }}\n'
                     'service = { dist = "constant", value = 5 }',
        "profile": 'arrivals = { process = "poisson", rate_per_s = 5 }\n'
                   'prompt_tokens = { dist = "constant", value = 10 }\noutput_tokens = { dist = "constant", value = 4 }',
    }[field]
    backend = ('kind = "continuous-batching"\nmax_num_seqs = 4\n'
               f'step = {{ profile = "{target}" }}') if field == "profile" else 'kind = "slots"\nslots = 2'
    path = folder / f"points-at-{field}-{abs(hash(target))}.toml"
    path.write_text(f'name = "points"\nduration_ms = 2000\n[backend]\n{backend}\n[[workload]]\nclass = "interactive"\n'
                    f"{workload}\n")
    return str(path)


TINY = """name = "tiny"
duration_ms = 2000
[backend]
kind = "slots"
slots = 2
[[workload]]
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 5 }
service = { dist = "constant", value = 5 }
[[workload]]
class = "batch"
arrivals = { process = "burst", count = 3 }
service = { dist = "constant", value = 50 }
"""


def reader_cases(folder, bad) -> list[tuple[str, str, str, list[str]]]:
    """(reader, kind, path named in the message, argv) for every reader and every kind of bad file."""
    (folder / "tiny.toml").write_text(TINY)
    (folder / "loadtest.csv").write_text("\n".join(LOADTEST) + "\n")
    (folder / "log.csv").write_text("arrival_ms,prompt_tokens,output_tokens\n"
                                    + "".join(f"{i * 100},{10 + i},{5 + i}\n" for i in range(40)))
    tiny, table, log = (str(folder / n) for n in ("tiny.toml", "loadtest.csv", "log.csv"))
    limit = {"scenario": "config", "options": "config", "template": "config", "tune-bounds": "config",
             "snippet": "config", "profile": "config", "loadtest": "config", "check": "config", "report": "record"}
    readers = {
        "scenario": lambda p: ["run", p, "--quiet"],
        "options": lambda p: ["run", tiny, "--options", p, "--quiet"],
        "log": lambda p: ["fit", p, "--no-validate", "--no-figures"],
        "replay-trace": lambda p: ["replay", p, "--out", "replayed.csv"],
        "trace": lambda p: ["run", scenario_pointing_at(folder, "trace", p), "--quiet"],
        "azure": lambda p: ["run", scenario_pointing_at(folder, "azure", p), "--quiet"],
        "empirical": lambda p: ["run", scenario_pointing_at(folder, "empirical", p), "--quiet"],
        "resampled": lambda p: ["run", scenario_pointing_at(folder, "resampled", p), "--quiet"],
        "profile": lambda p: ["run", scenario_pointing_at(folder, "profile", p), "--quiet"],
        "template": lambda p: ["fit", log, "--template", p, "--no-validate", "--no-figures"],
        "loadtest": lambda p: ["calibrate-gpu", p, "--no-figures"],
        "check": lambda p: ["calibrate-gpu", table, "--check", p, "--no-figures"],
        "request-records": lambda p: ["calibrate-gpu", table, "--open-loop", p, "--no-figures"],
        "tune-bounds": lambda p: ["tune", tiny, "--calibration", p, "--quiet"],
        "snippet": lambda p: ["validate-real", tiny, "--url", "http://127.0.0.1:9", "--calibration", p],
        "report": None,  # below: result.json itself is the bad file
    }
    cases = []
    for reader, argv in readers.items():
        for kind in BAD_KINDS:
            path = bad[f"oversized-{limit.get(reader, 'data')}"] if kind == "oversized" else bad[kind]
            if reader == "report":
                out = folder / f"report-{kind}"
                out.mkdir()
                target = out / "result.json"
                if kind == "fifo":
                    os.mkfifo(target)
                elif kind == "folder":
                    target.mkdir()
                elif kind == "dev-zero":
                    target.symlink_to("/dev/zero")
                else:
                    with open(target, "wb") as f:
                        f.truncate(RECORD_MAX_BYTES + 1)
                cases.append((reader, kind, str(target), ["report", str(out)]))
            elif reader == "tune-bounds" and kind == "folder":  # a folder is a calibrate output: its file is read
                inside = folder / "a-calibrate-output" / "tune-bounds.json"
                inside.mkdir(parents=True)
                cases.append((reader, kind, str(inside), argv(str(inside.parent))))
            else:
                cases.append((reader, kind, path, argv(path)))
    return cases


@pytest.mark.slow
def test_every_reader_refuses_bad_files_at_once(tmp_path, bad):
    work = tmp_path / "work"
    work.mkdir()
    cases = reader_cases(tmp_path, bad)
    before = tree(work)

    def one(case):
        started = time.monotonic()
        proc = simlab_in(work, *case[3], timeout=60)  # a FIFO read would hang: the timeout fails the test
        return case, proc, time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, cases))
    assert len(results) == 16 * len(BAD_KINDS)
    for (reader, kind, path, argv), proc, seconds in results:
        words = [path, "not a regular file"] if kind != "oversized" else [path, "too large", "the limit for"]
        try:
            assert_input_error(proc, *words)
        except AssertionError as exc:
            raise AssertionError(f"{reader} / {kind}: simlab {' '.join(argv)}\n{exc}") from None
        assert seconds < 30, f"{reader} / {kind} took {seconds:.0f} s"
    assert tree(work) == before, "a refused input wrote files"
