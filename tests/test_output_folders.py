"""Where commands write: a default folder made from the scenario's name stays under results/ whatever the name says,
and an --out that is a file or cannot be written is an input error (exit 2, naming --out) for every command, before
any work and without writing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.outputs import RESULTS, default_folder, output_file, output_folder, safe_name
from simlab.errors import InputError
from tests.bad_input import assert_bad_input, simlab_in, tree
from tests.helpers import ROOT, simlab

UNSAFE_NAMES = {
    "../../x": "x",
    "/tmp/evil": "tmp-evil",
    "..": "scenario",
    ".": "scenario",
    "": "scenario",
    "a/b\\c": "a-b-c",
    "line\nbreak\x00nul\x1bescape": "line-break-nul-escape",
    "  spaced name  ": "spaced-name",
    ".hidden": "hidden",
    "C:\\Windows": "C-Windows",
    "seed-article": "seed-article",
    "données_2024.v2+test": "données_2024.v2+test",
}


@pytest.mark.parametrize("name", sorted(UNSAFE_NAMES))
def test_a_scenario_name_becomes_one_folder_name(name):
    assert safe_name(name) == UNSAFE_NAMES[name]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=20))
def test_a_default_folder_is_always_under_results(name, leaf):
    folder = default_folder(name, leaf)
    assert folder.parts[0] == str(RESULTS) and len(folder.parts) == 3
    for part in folder.parts[1:]:
        assert part not in ("", ".", "..") and "/" not in part and "\\" not in part
        assert all(ch.isprintable() and not ch.isspace() for ch in part)
        assert len(part) <= 100
    base = Path("/srv/work")
    assert (base / folder).resolve().is_relative_to(base / RESULTS)


def test_out_checks(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InputError, match="a-file exists and is not a folder"):
        output_folder(tmp_path / "a-file")
    with pytest.raises(InputError, match="a-file is not a folder"):
        output_folder(tmp_path / "a-file" / "sub")
    with pytest.raises(InputError, match=r"cannot write in /proc/simlab-out \("):
        output_folder("/proc/simlab-out")
    with pytest.raises(InputError, match="is a folder; give a file name"):
        output_file(tmp_path)
    made = output_folder(tmp_path / "new" / "deeper")
    assert made.is_dir() and list(made.iterdir()) == []  # the write check leaves nothing behind
    with pytest.raises(InputError) as info:
        output_folder(tmp_path / "a-file", None)  # a default folder: the message points at --out
    assert info.value.where == "output folder" and "give --out a folder you can write in" in info.value.message


SCENARIO = """name = {name!r}
duration_ms = 2000
slo_p95_ms = 500
[backend]
kind = "slots"
slots = 2
[scheduler]
maxConcurrency = 2
batchMaxConcurrency = 1
batchMinConcurrency = 1
interactiveRpsThreshold = 5
interactiveP95LatencyMs = 500
[[workload]]
class = "interactive"
arrivals = {{ process = "poisson", rate_per_s = 5 }}
service = {{ dist = "constant", value = 5 }}
[[workload]]
class = "batch"
arrivals = {{ process = "burst", count = 4 }}
service = {{ dist = "constant", value = 50 }}
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../../x", "ABSOLUTE", ".."])
def test_run_with_a_hostile_name_writes_under_results_only(tmp_path, name):
    work = tmp_path / "work"
    work.mkdir()
    if name == "ABSOLUTE":
        name = str(tmp_path / "evil")
    folder = safe_name(name)
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(name=name))
    proc = simlab_in(work, "run", scenario, "--quiet", "--policy", "static")
    assert proc.returncode == 0, proc.stderr
    assert f"is not a plain folder name; the outputs go to results/{folder}/" in proc.stderr
    written = tree(work)
    assert written and all(p.startswith("results") for p in written), written
    assert (work / "results" / folder / "run-static" / "summary.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml", "work"]  # no tmp_path/evil
    assert not (work / name / "run-static").resolve().exists()  # where the name itself points (../../x)


def command_lines(tmp_path, out) -> dict[str, list]:
    """Every command that writes, with --out OUT, and otherwise valid arguments."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(name="ok"))
    log = tmp_path / "log.csv"
    log.write_text("arrival_ms,service_ms\n" + "".join(f"{i * 50},{20 + i % 7}\n" for i in range(40)))
    trace = tmp_path / "trace.csv"
    trace.write_text("id,kind,arrival_ms,service_ms\na,interactive,0,10\nb,batch,5,20\n")
    table = tmp_path / "loadtest.csv"
    table.write_text("concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms,latency_ms\n" + "".join(
        f"{c},{p},64,{30 + 0.05 * p + 2 * c},{10 + 0.5 * c},{30 + 0.05 * p + 2 * c + 64 * (10 + 0.5 * c)}\n"
        for p in (256, 1024) for c in (1, 2, 4, 8)))
    report_input = ROOT / "results" / "reference" / "seed-article"
    return {
        "run": ["run", scenario, "--out", out, "--quiet"],
        "ab": ["ab", scenario, "--out", out, "--quiet", "--no-figures"],
        "tune": ["tune", scenario, "--out", out, "--quiet", "--trials", "1"],
        "decide": ["decide", scenario, "--out", out, "--quiet", "--trials", "0"],
        "calibrate": ["calibrate", scenario, "--out", out, "--quiet", "--no-figures"],
        "fit": ["fit", log, "--out", out, "--no-figures", "--no-validate"],
        "calibrate-gpu": ["calibrate-gpu", table, "--out", out, "--no-figures"],
        "replay": ["replay", trace, "--out", out],
        "report": ["report", report_input, "--out", out],
        "loadtest": ["loadtest", "http://127.0.0.1:9", "--out", out],
        "validate-real": ["validate-real", ROOT / "scenarios" / "real-engine.toml", "--url", "http://127.0.0.1:9",
                          "--out", out],
    }


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["a file", "inside a file", "not writable"])
def test_a_bad_out_is_an_input_error_for_every_command(tmp_path, problem):
    work = tmp_path / "work"
    work.mkdir()
    (work / "a-file").write_text("keep me")
    out = {"a file": work / "a-file", "inside a file": work / "a-file" / "sub", "not writable": "/proc/simlab-out/x"}[problem]
    words = {"a file": ["--out", "a-file", "is not a folder"], "inside a file": ["--out", "a-file", "is not a folder"],
             "not writable": ["--out", "cannot write in /proc/simlab-out"]}[problem]
    for command, argv in command_lines(tmp_path, out).items():
        if command == "replay" and problem == "a file":
            continue  # replay writes a file: --out an existing file is its normal use
        try:
            assert_bad_input(work, *argv, words=words)
        except AssertionError as exc:
            raise AssertionError(f"{command}: {exc}") from None
    assert (work / "a-file").read_text() == "keep me"


@pytest.mark.slow
def test_replay_and_report_refuse_a_folder_where_their_file_goes(tmp_path):
    work = tmp_path / "work"
    (work / "x.html").mkdir(parents=True)
    lines = command_lines(tmp_path, work / "x.html")
    assert_bad_input(work, *lines["replay"], words=["--out", "x.html is a folder; give a file name"])
    assert_bad_input(work, *lines["report"], words=["--out", "x.html is a folder; give a file name"])


# --- ab --options writes beside the baseline A/B -----------------------------------------------------------
def test_ab_with_options_has_its_own_default_folder(tmp_path):
    opts = tmp_path / "tuned.json"
    opts.write_text(json.dumps({"maxConcurrency": 8, "batchMaxConcurrency": 4, "batchMinConcurrency": 1,
                                "interactiveRpsThreshold": 20, "interactiveP95LatencyMs": 500}))
    scenario = ROOT / "scenarios" / "seed-article.toml"
    args = ("--replications", "1", "--quiet", "--no-figures", "--policies", "static")
    simlab("ab", scenario, *args, cwd=tmp_path)
    baseline = (tmp_path / "results" / "seed-article" / "ab" / "summary.csv").read_bytes()
    proc = simlab("ab", scenario, "--options", opts, *args, cwd=tmp_path)
    assert (tmp_path / "results" / "seed-article" / "ab-tuned" / "summary.csv").exists()
    assert "results/seed-article/ab-tuned" in proc.stdout
    assert (tmp_path / "results" / "seed-article" / "ab" / "summary.csv").read_bytes() == baseline
