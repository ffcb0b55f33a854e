"""Bad command-line values and scenario settings that once gave a traceback or were silently accepted (issue 20):
each is now exit 2 with one message naming the flag or the key, no traceback, and nothing written in the folder the
command runs from. The CLI starts in about a second, so the invocations run two at a time."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.bad_input import assert_bad_input, simlab_in
from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # ~40 CLI starts

BASE = """name = "small"
duration_ms = 3000
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
{workload}
{extra}
"""
INTERACTIVE = """[[workload]]
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 5 }
service = { dist = "constant", value = 5 }
"""
BATCH = """[[workload]]
class = "batch"
arrivals = { process = "burst", count = 5 }
service = { dist = "constant", value = 50 }
"""
TABLE = "concurrency,prompt_tokens,output_tokens,ttft_ms,tpot_ms,latency_ms\n" + "".join(
    f"{c},{p},64,{30 + 0.05 * p + 2 * c},{10 + 0.5 * c},{30 + 0.05 * p + 2 * c + 64 * (10 + 0.5 * c)}\n"
    for p in (256, 1024) for c in (1, 2, 4, 8))


def _with_top(folder, name: str, line: str) -> str:
    """The good scenario with one more top-level line."""
    path = folder / f"{name}.toml"
    path.write_text(BASE.format(workload=INTERACTIVE + BATCH, extra="").replace('name = "small"\n',
                                                                               f'name = "small"\n{line}\n'))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")

    def scenario(name, workload=INTERACTIVE + BATCH, extra=""):
        path = folder / f"{name}.toml"
        path.write_text(BASE.format(workload=workload, extra=extra))
        return str(path)

    arrivals = folder / "arrivals.csv"
    arrivals.write_text("arrival_ms\n" + "".join(f"{i * 97 % 3000}\n" for i in range(50)))
    log = folder / "log.csv"
    log.write_text("arrival_ms,service_ms\n" + "".join(f"{i * 37 % 5000},{20 + i % 7}\n" for i in range(60)))
    (folder / "loadtest.csv").write_text(TABLE)
    (folder / "min0.json").write_text('{"maxConcurrency": 16, "batchMaxConcurrency": 12, "batchMinConcurrency": 0, '
                                      '"interactiveRpsThreshold": 2, "interactiveP95LatencyMs": 1500}')
    return {
        "good": scenario("good"),
        "batch-only": scenario("batch-only", BATCH),
        "interactive-only": scenario("interactive-only", INTERACTIVE),
        "search-3": scenario("search-3", extra="[conditions]\nload = [0.5]\nsearch = 3"),
        "search-2-of-1": scenario("search-2-of-1", extra="[conditions]\nsearch = 2"),
        "load-twice": scenario("load-twice", extra="[conditions]\nload = [0.5, 0.5]"),
        "max-trials-low": scenario("max-trials-low", extra="[decision]\ntrials = 10\nmax_trials = 5"),
        "shifts-no-trace": scenario("shifts-no-trace", extra="[conditions]\ntime_shifts_ms = [1000]"),
        "policies-twice": scenario("policies-twice", extra='[experiment]\npolicies = ["static", "static"]'),
        "policies-empty": scenario("policies-empty", extra="[experiment]\npolicies = []"),
        "users-huge": scenario("users-huge", BATCH + INTERACTIVE.replace(
            'process = "poisson", rate_per_s = 5', 'process = "closed-loop", users = 100_000_000, think = '
            '{ dist = "constant", value = 1e9 }')),
        "step-tiny": scenario("step-tiny", BATCH + INTERACTIVE.replace(
            'process = "poisson", rate_per_s = 5', 'process = "piecewise", rates_per_s = [0], step_ms = 1e-6')),
        "sample-tiny": _with_top(folder, "sample-tiny", "sample_ms = 1e-5"),
        "block-tiny": scenario("block-tiny", BATCH + INTERACTIVE.replace(
            'process = "poisson", rate_per_s = 5', f'process = "resampled", file = "{arrivals}", block_ms = 1e-7')),
        "log": str(log),
        "table": str(folder / "loadtest.csv"),
        "real": str(ROOT / "scenarios" / "real-engine.toml"),
        "min0": str(folder / "min0.json"),
    }


# name -> (argv with {file} placeholders, words the error line must contain)
CASES = {
    "ab-seed-negative": (["ab", "{good}", "--seed", "-5"], ["--seed", "must be 0 or more", "-5"]),
    "run-seed-negative": (["run", "{good}", "--seed", "-1"], ["--seed", "must be 0 or more"]),
    "calibrate-seed-negative": (["calibrate", "{good}", "--seed", "-2"], ["--seed", "must be 0 or more"]),
    "validate-real-seed-negative": (["validate-real", "{real}", "--url", "http://127.0.0.1:9", "--seed", "-4"],
                                    ["--seed", "must be 0 or more"]),
    "policies-empty": (["ab", "{good}", "--policies", ""], ["--policies", "no policy given", "known: unscheduled"]),
    "policies-twice": (["ab", "{good}", "--policies", "static,static"], ["--policies", "static is given twice"]),
    "policies-empty-name": (["ab", "{good}", "--policies", "static,,adaptive"], ["--policies", "an empty name"]),
    "validate-real-policies-twice": (["validate-real", "{real}", "--url", "http://127.0.0.1:9", "--policies",
                                      "static,static"], ["--policies", "static is given twice"]),
    "validate-real-options-wait-forever": (["validate-real", "{real}", "--url", "http://127.0.0.1:9", "--options",
                                            "{min0}"], ["min0.json", "policy adaptive: batchMinConcurrency = 0 without "
                                                        "recheckOnExpiry", "forever"]),
    "baseline-unknown": (["ab", "{good}", "--baseline", "bogus"],
                         ["--baseline", "unknown policy 'bogus'", "known: unscheduled, fifo, priority, static, adaptive"]),
    "baseline-not-compared": (["ab", "{good}", "--policies", "static,adaptive", "--baseline", "priority"],
                              ["--baseline", "priority is not among the policies compared (static, adaptive)"]),
    "decide-trials-negative": (["decide", "{good}", "--trials", "-3"], ["--trials", "must be 0 or more (0 skips tuning)"]),
    "decide-max-trials-below-trials": (["decide", "{good}", "--trials", "8", "--max-trials", "4"],
                                       ["--max-trials", "at least the trials the searches start with (8, --trials)",
                                        "found 4"]),
    "decide-max-trials-below-scenario-trials": (["decide", "{good}", "--max-trials", "4"],
                                                ["--max-trials", "(20, [decision] trials)"]),
    "decision-max-trials-below-trials": (["decide", "{max-trials-low}"],
                                         ["max-trials-low.toml", "decision", "max_trials (5) is below trials (10)"]),
    "decide-one-replication": (["decide", "{good}", "--replications", "1"], ["--replications", "at least 2"]),
    "search-beyond-conditions": (["decide", "{search-3}", "--trials", "0"],
                                 ["conditions.search", "is 3, but there are 2 conditions (base, load-x0.5)",
                                  "search must be 1"]),
    "search-with-one-condition": (["tune", "{search-2-of-1}"], ["conditions.search", "there is 1 condition"]),
    "conditions-repeated": (["decide", "{load-twice}", "--trials", "0"], ["conditions.load", "0.5 is given twice"]),
    "conditions-without-effect": (["tune", "{shifts-no-trace}"],
                                  ["conditions.time_shifts_ms", "no workload replays a trace"]),
    "decide-batch-only": (["decide", "{batch-only}", "--trials", "0"],
                          ["workload", "every workload is batch", "no interactive P95 to weigh"]),
    "decide-interactive-only": (["decide", "{interactive-only}", "--trials", "0"],
                                ["workload", "every workload is interactive", "no batch throughput to weigh"]),
    "tune-batch-only": (["tune", "{batch-only}"], ["workload", "every workload is batch"]),
    "experiment-policies-twice": (["ab", "{policies-twice}"], ["experiment", "static is given twice"]),
    "experiment-policies-empty": (["ab", "{policies-empty}"], ["experiment.policies", "at least 1"]),
    "closed-loop-users-beyond-the-budget": (["run", "{users-huge}"],
                                            ["workload[1].arrivals.users", "100,000,000 closed-loop users",
                                             "max_tasks = 2,000,000"]),
    "piecewise-step-tiny": (["run", "{step-tiny}"], ["workload[1].arrivals.step_ms", "more than 1,000,000"]),
    "sample-ms-tiny": (["run", "{sample-tiny}"], ["sample_ms", "time-series rows", "more than 1,000,000"]),
    "resampled-block-tiny": (["run", "{block-tiny}"], ["workload[1].arrivals.block_ms", "bootstrap blocks"]),
    "calibrate-rates-nan": (["calibrate", "{good}", "--rates", "nan"], ["--rates", "finite positive rates"]),
    "calibrate-rates-inf": (["calibrate", "{good}", "--rates", "2,inf"], ["--rates", "finite positive rates"]),
    "calibrate-slo-inf": (["calibrate", "{good}", "--slo-ms", "inf"], ["--slo-ms", "finite number above 0"]),
    "calibrate-refine-huge": (["calibrate", "{good}", "--refine", "1000000"], ["--refine", "at most 30"]),
    "fit-slo-inf": (["fit", "{log}", "--slo-ms", "inf"], ["--slo-ms", "finite number above 0"]),
    "fit-step-tiny": (["fit", "{log}", "--step", "1e-300ms"], ["--step", "more than 100,000 bins"]),
    "fit-validate-seeds-huge": (["fit", "{log}", "--validate-seeds", "1000000000"], ["--validate-seeds", "at most"]),
    "run-replications-huge": (["run", "{good}", "--replications", "1000000000"], ["--replications", "at most 100,000"]),
    "gpu-prompt-tokens-inf": (["calibrate-gpu", "{table}", "--prompt-tokens", "inf"], ["--prompt-tokens", "finite"]),
    "tune-storage-unwritable": (["tune", "{good}", "--storage", "sqlite:////proc/simlab/db"],
                                ["--storage", "cannot make the folder"]),
    "ab-scheduler-address-bogus": (["ab", "{good}", "--scheduler-address", "bogus"],
                                   ["--scheduler-address", "cannot reach a Dask scheduler at 'bogus'"]),
}


@pytest.fixture(scope="module")
def results(files, tmp_path_factory):
    """name -> (message, None) or (None, the assertion that failed), every case run from its own empty folder."""
    root = tmp_path_factory.mktemp("work")

    def one(name):
        argv, words = CASES[name]
        argv = [a.format(**files) if "{" in a else a for a in argv]
        work = root / name
        work.mkdir()
        try:
            return name, (assert_bad_input(work, *argv, "--out", work / "out", words=words, allowed=("out",)), None)
        except AssertionError as exc:
            return name, (None, f"simlab {' '.join(map(str, argv))}\n{exc}")

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_message_and_exit_2(results, name):
    message, failure = results[name]
    assert failure is None, failure


def test_a_template_with_a_bom_is_read(files, tmp_path):
    """`fit --template` read the file a second time without the BOM allowance: a traceback. Now the template's world
    (a slots backend here) goes into the fitted scenario."""
    template = tmp_path / "bom.toml"
    template.write_bytes(b"\xef\xbb\xbf" + open(files["good"], "rb").read())
    proc = simlab_in(tmp_path, "fit", files["log"], "--template", template, "--out", tmp_path / "fit", "--no-figures",
                     "--no-validate")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert 'kind = "slots"' in (tmp_path / "fit" / "scenario.toml").read_text()


def test_a_template_that_does_not_suit_the_log_is_named(files, tmp_path):
    """A token-only log with a slots template that has no token_time: the fitted scenario would not load (once a
    RuntimeError); now an input error naming the template, and no half-written scenario left behind."""
    log = tmp_path / "tokens.csv"
    log.write_text("arrival_ms,prompt_tokens,output_tokens\n" + "".join(f"{i * 91},{10 + i % 9},{5 + i % 4}\n"
                                                                        for i in range(60)))
    message = assert_bad_input(tmp_path, "fit", log, "--template", files["good"], "--out", tmp_path / "fit",
                               "--no-figures", "--no-validate", words=[files["good"], "does not fit this log",
                                                                       "token_time"], allowed=("fit",))
    assert not (tmp_path / "fit" / "scenario.toml").exists(), message


def test_an_interactive_workload_resampled_from_a_log_runs(files, tmp_path):
    """The capacity check knew no rate for resampled arrivals (what `simlab fit` writes for a bursty log): every
    command on such a scenario ended in a TypeError traceback."""
    scenario = tmp_path / "resampled.toml"
    scenario.write_text(open(files["block-tiny"]).read().replace("block_ms = 1e-7", "block_ms = 500"))
    proc = simlab_in(tmp_path, "run", scenario, "--out", tmp_path / "out", "--quiet", "--policy", "static")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_decide_with_zero_trials_still_skips_tuning(files, tmp_path):
    proc = simlab_in(tmp_path, "decide", files["good"], "--trials", "0", "--replications", "2", "--out",
                     tmp_path / "d", "--quiet")
    assert "Traceback" not in proc.stderr, proc.stderr
    record = json.loads((tmp_path / "d" / "result.json").read_text())["record"]
    assert proc.returncode == record["exit_code"] and record["tuning"] is None
    assert not (tmp_path / "d" / "tune").exists()  # no study was started
    assert "Tuning: not tuned (--trials 0)" in (tmp_path / "d" / "report.md").read_text()
    assert not any(tmp_path.joinpath("d").glob("tune-*"))  # no family was searched either
    assert not (tmp_path / "d" / "tune").exists()


def test_tune_on_one_search_unit_is_refused_before_any_folder(tmp_path):
    text = (ROOT / "tests" / "fixtures" / "overload.toml").read_text().replace("seeds = 3\n", "seeds = 1\n")
    scenario = tmp_path / "one.toml"
    scenario.write_text(text)
    proc = simlab_in(tmp_path, "tune", scenario, "--out", tmp_path / "t", "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "tune.seeds" in proc.stderr and "at least 2 units" in proc.stderr
    assert not (tmp_path / "t").exists()
