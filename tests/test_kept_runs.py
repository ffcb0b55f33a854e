"""validate-real keeps a measured run only when everything it depends on is unchanged (simlab.realcheck.kept).

One baseline measurement on the stand-in engine; then, from a copy of its kept runs, one change per input: the
run is measured again and the progress line names what differed. The same command unchanged keeps the run."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from simlab.cli import main
from simlab.realcheck import kept
from simlab.realcheck.fake_engine import start_in_thread
from simlab.realcheck.urls import check_url

SCENARIO = """
name = "kept"
duration_ms = 600
[backend]
kind = "continuous-batching"
max_num_seqs = 8
step = {{ base_ms = 2.0, per_token_ms = 0.005, per_seq_ms = 0.2 }}
[scheduler]
maxConcurrency = 8
batchMaxConcurrency = 4
batchMinConcurrency = 1
interactiveRpsThreshold = 4
interactiveP95LatencyMs = 300
[[workload]]
name = "chat"
class = "interactive"
arrivals = {{ process = "poisson", rate_per_s = {rate} }}
prompt_tokens = {{ dist = "constant", value = {prompt} }}
output_tokens = {{ dist = "constant", value = {output} }}
[[workload]]
name = "jobs"
class = "batch"
arrivals = {{ process = "burst", count = 3, at_ms = 0 }}
prompt_tokens = {{ dist = "constant", value = 20 }}
output_tokens = {{ dist = "constant", value = 6 }}
"""
BASE = {"rate": 10, "prompt": 16, "output": 4}


def scenario(folder: Path, **change) -> Path:
    path = folder / f"kept-{'-'.join(f'{k}{v}' for k, v in change.items()) or 'base'}.toml"
    path.write_text(SCENARIO.format(**(BASE | change)))
    return path


@pytest.fixture(scope="module")
def engine():
    url, eng, stop = start_in_thread(base_ms=2.0, per_seq_ms=0.2, per_token_ms=0.005, max_seqs=8)
    yield url, stop
    stop()


@pytest.fixture(scope="module")
def baseline(engine, tmp_path_factory):
    """The base scenario measured once: (folder with its kept runs, scenario, url)."""
    url, _ = engine
    folder = tmp_path_factory.mktemp("kept")
    path = scenario(folder)
    assert main(args(path, url, folder / "base")) == 0
    return folder, path, url


def args(path, url, out, *more) -> list[str]:
    return ["validate-real", str(path), "--url", url, "--policies", "static", "--repeats", "1", "--max-seconds", "20",
            "--no-figures", "--out", str(out), *more]


def rerun(baseline, tmp_path, capsys, *more, path=None, url=None) -> str:
    """The command again on a copy of the baseline's kept runs; its progress output."""
    folder, base_path, base_url = baseline
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    shutil.copytree(folder / "base" / "measured", tmp_path / "out" / "measured")
    capsys.readouterr()
    assert main(args(path or base_path, url or base_url, tmp_path / "out", *more)) == 0
    return capsys.readouterr().out


def remeasured(out: str) -> str:
    """The fields the progress line names as differing ('' when the run was kept)."""
    for line in out.splitlines():
        if "static run 1:" in line:
            if "kept from" in line:
                return ""
            return line.split("differs in ", 1)[1].rstrip(") .")
    raise AssertionError(out)


def test_unchanged_inputs_keep_the_run(baseline, tmp_path, capsys):
    assert remeasured(rerun(baseline, tmp_path, capsys)) == ""


def test_output_tokens_4_to_12_measure_again(baseline, tmp_path, capsys):
    out = rerun(baseline, tmp_path, capsys, path=scenario(tmp_path, output=12))
    assert remeasured(out) == "workload_sha256"
    rows = list(csv.DictReader(open(tmp_path / "out" / "measured" / "static-run1.csv")))
    assert {r["output_tokens"] for r in rows if r["kind"] == "interactive"} == {"12"}  # not the 4-token runs


@pytest.mark.parametrize("change", [{"prompt": 40}, {"rate": 14}])
def test_prompt_tokens_and_arrivals_measure_again(baseline, tmp_path, capsys, change):
    assert remeasured(rerun(baseline, tmp_path, capsys, path=scenario(tmp_path, **change))).startswith(
        "workload_sha256")


def test_the_seed_measures_again(baseline, tmp_path, capsys):
    assert remeasured(rerun(baseline, tmp_path, capsys, "--seed", "7")).startswith("workload_sha256")


def test_time_scale_and_until_measure_again(baseline, tmp_path, capsys):
    assert remeasured(rerun(baseline, tmp_path, capsys, "--time-scale", "1.5")) == "workload_sha256, time_scale"
    assert "until_ms" in remeasured(rerun(baseline, tmp_path, capsys, "--until-ms", "300"))


def test_options_measure_again(baseline, tmp_path, capsys):
    options = tmp_path / "options.json"
    options.write_text(json.dumps({"policy": "static", "maxConcurrency": 8, "batchMaxConcurrency": 2,
                                   "batchMinConcurrency": 1, "interactiveRpsThreshold": 4,
                                   "interactiveP95LatencyMs": 300}))
    assert remeasured(rerun(baseline, tmp_path, capsys, "--options", str(options))) == "options"


def test_max_seconds_measures_again(baseline, tmp_path, capsys):
    out = rerun(baseline, tmp_path, capsys, "--max-seconds", "25")
    assert remeasured(out) == "max_seconds"


def test_another_server_measures_again(baseline, tmp_path, capsys):
    url, eng, stop = start_in_thread(base_ms=2.0, per_seq_ms=0.2, per_token_ms=0.005, max_seqs=8)
    try:
        assert remeasured(rerun(baseline, tmp_path, capsys, url=url)) == "server"
    finally:
        stop()


def test_another_model_at_the_same_address_measures_again(baseline, tmp_path, capsys):
    """The run was measured when the server at this address reported another model than it does now."""
    folder, path, url = baseline
    shutil.copytree(folder / "base" / "measured", tmp_path / "out" / "measured")
    meta = tmp_path / "out" / "measured" / "static-run1.json"
    data = json.loads(meta.read_text())
    assert data["key"]["model"] == "fake"
    data["key"]["model"] = "another"
    meta.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(args(path, url, tmp_path / "out")) == 0
    assert remeasured(capsys.readouterr().out) == "model"


def test_kept_runs_only_never_contacts_the_server(baseline, tmp_path, capsys):
    """--kept-runs-only: the runs are re-simulated and the server is not asked anything (the runs' own model
    stands): a listener at the kept runs' address sees no connection. The address still has to match."""
    from misbehaving import serve

    folder, path, _ = baseline
    listener_url, listener, stop = serve("count")
    try:
        shutil.copytree(folder / "base" / "measured", tmp_path / "out" / "measured")
        meta = tmp_path / "out" / "measured" / "static-run1.json"
        data = json.loads(meta.read_text())
        data["key"]["server"] = listener_url.split("//", 1)[1]  # as if measured on the listener's address
        meta.write_text(json.dumps(data))
        capsys.readouterr()
        assert main(args(path, listener_url, tmp_path / "out", "--kept-runs-only")) == 0
        out = capsys.readouterr().out
        assert remeasured(out) == "" and "not contacted" in out and listener.connections == 0
        assert main(args(path, "http://127.0.0.1:9", tmp_path / "out", "--kept-runs-only")) == 2
        assert "it differs in server" in capsys.readouterr().err and listener.connections == 0
    finally:
        stop()


def test_kept_runs_only_refuses_a_mismatch(baseline, tmp_path, capsys):
    folder, path, url = baseline
    shutil.copytree(folder / "base" / "measured", tmp_path / "out" / "measured")
    assert main(args(path, url, tmp_path / "out", "--kept-runs-only", "--seed", "7")) == 2
    err = capsys.readouterr().err
    assert "static-run1.csv: no kept run to re-simulate from (--kept-runs-only): it differs in workload_sha256" in err


def test_the_key_of_each_input(baseline):
    """Every field of the key is compared: the policy, the driver and simlab's own request settings too."""
    target = check_url("http://127.0.0.1:8011")
    base = dict(workload="a" * 64, tasks=10, policy="static", driver="runtime", options={"policy": "static"},
                target=target, model="m", time_scale=1.0, until_ms=None, max_seconds=20.0)
    key = kept.run_key(**base)
    saved = json.loads(kept.key_json(key, None))["key"]
    assert kept.differences(saved, key) == []
    for field, value in (("policy", "adaptive"), ("driver", "article-js"), ("tasks", 11),
                         ("target", check_url("http://127.0.0.1:8012"))):
        assert kept.differences(saved, kept.run_key(**(base | {field: value}))) == [
            {"target": "server"}.get(field, field)]
    changed = dict(key, request=dict(key["request"], temperature=1.0), lead_ms=500.0)
    assert kept.differences(saved, changed) == ["lead_ms", "request"]
    assert kept.differences({"identity": {"scenario": "x"}}, key) == ["format"]  # an older simlab's metadata
    assert kept.differences(None, key) == ["format"]
