"""Fuzzing the input loaders: whatever a user feeds them, they succeed or raise InputError, nothing else.

- `scenario_from_dict`: valid scenarios with random mutations (keys deleted, values replaced by anything
  TOML can hold or worse, unknown keys, nested garbage) and wholly random TOML-ish dicts;
- `load_scenario`: random bytes, random text, valid scenario text with random edits;
- `read_trace`: random bytes, and random CSV text built from cells that tend to break parsers;
- the files a scenario only reads when it runs (generic and Azure traces with token columns, empirical
  CSVs), through `open_loop_tasks`.
An InputError must also be printable as the CLI prints it (source, place, message).
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import os
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simlab.errors import InputError
from simlab.policies.options import KNOWN_KEYS
from simlab.scenario import FIELD_NAMES, Scenario, load_scenario, scenario_from_dict
from simlab.traces import read_trace
from simlab.world.workloads import open_loop_tasks

SETTINGS = settings(
    max_examples=int(os.environ.get("SIMLAB_FUZZ_EXAMPLES", "300")),  # raise it for a deeper hunt
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder with the files valid scenarios point at."""
    d = tmp_path_factory.mktemp("fuzz")
    (d / "trace.csv").write_text("id,kind,arrival_ms,service_ms,prompt_tokens,output_tokens\n"
                                 "a,interactive,0,10,5,7\nb,batch,1.5,20,8,9\n")  # fmt: skip
    (d / "lengths.csv").write_text("n\n1\n2\n3\n")
    (d / "profile.csv").write_text("batch_size,step_ms\n1,10\n8,20\n")
    return d


# --- values ---------------------------------------------------------------------------------------

NASTY_STRINGS = [
    "", " ", "poisson", "slots", "delay", "constant", "interactive", "batch", "closed-loop", "trace", "empirical",
    "adaptive", "seed-heap", "trace.csv", "lengths.csv", "n", "../trace.csv", "/", ".", "nope.csv", "\x00",
    "a\x00b", "x" * 5000, "é" * 300, "\ud7ff", "1e309", "nan", "-inf", "{}", "[[workload]]", "\n", "C:\\x",
]  # fmt: skip
KEYS = st.one_of(st.sampled_from(FIELD_NAMES + list(KNOWN_KEYS)), st.text(max_size=12))
SCALARS = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(-3, 3),
    st.floats(),  # nan, inf, -0.0, subnormals
    st.sampled_from([0, -1, 1, 0.5, -0.5, 1e-300, 1e300, 2**63, -(2**63), float("inf"), float("nan")]),
    st.text(max_size=20),
    st.sampled_from(NASTY_STRINGS),
    st.datetimes(),
    st.dates(),
    st.times(),
    st.datetimes(timezones=st.just(dt.timezone.utc)),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=12,
)


def dists():
    return st.sampled_from(
        [
            {"dist": "constant", "value": 3},
            {"dist": "exponential", "mean": 50},
            {"dist": "lognormal", "median": 20, "p95": 90},
            {"dist": "uniform", "low": 1, "high": 9},
            {"dist": "empirical", "file": "lengths.csv", "column": "n", "scale": 2.0},
        ]
    )


ARRIVALS = [
    {"process": "poisson", "rate_per_s": 5, "start_ms": 10, "end_ms": 900},
    {"process": "piecewise", "rates_per_s": [1, 0, 3], "step_ms": 100},
    {"process": "diurnal", "mean_rate_per_s": 4, "amplitude": 0.3, "period_ms": 1000, "phase_ms": 5},
    {"process": "burst", "count": 3, "at_ms": [0, 50]},
    {"process": "closed-loop", "users": 2, "think": {"dist": "constant", "value": 5}, "requests_per_user": 3},
    {"process": "trace", "file": "trace.csv", "offset_ms": 0, "limit_ms": 100, "time_scale": 2},
    {"process": "trace", "file": "trace.csv", "format": "azure"},
]
BACKENDS = [
    {"kind": "delay", "token_time": {"base_ms": 2}},
    {"kind": "slots", "slots": 4, "token_time": {"base_ms": 1, "per_prompt_token_ms": 0.1, "per_output_token_ms": 2}},
    {"kind": "continuous-batching", "max_num_seqs": 8, "max_batched_tokens": 512,
     "step": {"base_ms": 5, "per_token_ms": 0.1, "per_seq_ms": 0.2}},
    {"kind": "continuous-batching", "max_num_seqs": 8, "step": {"profile": "profile.csv"}},
    {"kind": "api", "concurrency": 3, "rpm": 60, "tpm": 10000, "token_time": {"base_ms": 100},
     "retry": {"max_retries": 2, "base_ms": 10, "cap_ms": 100, "jitter": 0.1}},
]  # fmt: skip


@st.composite
def valid_scenarios(draw) -> dict:
    workloads = []
    # names key the random streams, so they are unique within a scenario (duplicates are refused: tested apart)
    names = draw(st.lists(st.text(max_size=5), min_size=1, max_size=3, unique=True))
    for name in names:
        w = {"name": name, "class": draw(st.sampled_from(["interactive", "batch"])),
             "arrivals": copy.deepcopy(draw(st.sampled_from(ARRIVALS)))}  # fmt: skip
        w["prompt_tokens"] = draw(dists())  # every backend can use token counts
        w["output_tokens"] = draw(dists())
        if draw(st.booleans()):
            w["service"] = draw(dists())
        workloads.append(w)
    data = {
        "name": "fuzz",
        "description": "d",
        "duration_ms": 1000,
        "max_sim_ms": 5000,
        "slo_p95_ms": 300,
        "sample_ms": 10,
        "backend": copy.deepcopy(draw(st.sampled_from(BACKENDS))),
        "workload": workloads,
        "scheduler": {"maxConcurrency": 4, "batchMaxConcurrency": 2, "batchMinConcurrency": 1,
                      "interactiveRpsThreshold": 5, "interactiveP95LatencyMs": 200, "windowMs": 1000,
                      "smoothingAlpha": 0.5, "tieBreak": "seed-heap"},
        "experiment": {"seed": 3, "replications": 2, "policies": ["unscheduled", "adaptive"]},
        "criteria": {"slo_bin_ms": 100, "p95_stay_ms": 200, "batch_stall_ms": 300},
        "tune": {"trials": 3},
    }  # fmt: skip
    return data


def containers(data, path=()):
    """Every (path, dict-or-list) in a nested structure."""
    yield path, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)):
            yield from containers(v, path + (k,))


@st.composite
def mutated_scenarios(draw) -> dict:
    data = draw(valid_scenarios())
    for _ in range(draw(st.integers(1, 3))):
        spots = list(containers(data))
        _, box = draw(st.sampled_from(spots))
        keys = list(box.keys()) if isinstance(box, dict) else list(range(len(box)))
        action = draw(st.sampled_from(["delete", "replace", "replace", "add", "typo"]))
        if action == "add" or not keys:
            if isinstance(box, dict):
                box[draw(KEYS)] = draw(VALUES)
            else:
                box.append(draw(VALUES))
            continue
        key = draw(st.sampled_from(keys))
        if action == "delete":
            del box[key]
        elif action == "replace":
            box[key] = draw(VALUES)
        elif isinstance(box, dict) and isinstance(key, str) and key:  # a typo in a key
            i = draw(st.integers(0, len(key) - 1))
            box[key[:i] + key[i + 1 :]] = box.pop(key)
    return data


def expect_input_error_or_scenario(call):
    try:
        result = call()
    except InputError as exc:
        text = str(exc)  # what the CLI prints
        assert text and exc.message, "an InputError with no message"
        assert "Traceback" not in text
        return None
    assert isinstance(result, Scenario)
    return result


# --- scenario_from_dict -------------------------------------------------------------------------------


@SETTINGS
@given(data=valid_scenarios())
def test_valid_scenarios_load(work, data):
    """The base of the mutations is itself valid (else the fuzz below would only test one error)."""
    scenario = scenario_from_dict(data, work / "s.toml")
    assert scenario.name == "fuzz"


@SETTINGS
@given(data=mutated_scenarios())
def test_mutated_scenarios_raise_only_input_error(work, data):
    expect_input_error_or_scenario(lambda: scenario_from_dict(data, work / "s.toml"))


@SETTINGS
@given(data=st.dictionaries(KEYS, VALUES, max_size=8))
def test_random_dicts_raise_only_input_error(work, data):
    expect_input_error_or_scenario(lambda: scenario_from_dict(data, work / "s.toml"))


@SETTINGS
@given(data=st.one_of(VALUES, st.dictionaries(st.sampled_from(["scheduler", "backend", "workload", "experiment"]), VALUES)))
def test_non_dicts_and_garbage_sections_raise_only_input_error(work, data):
    expect_input_error_or_scenario(lambda: scenario_from_dict(data, work / "s.toml"))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize(
    "where",
    [("duration_ms",), ("max_sim_ms",), ("workload", 0, "arrivals", "rate_per_s"), ("workload", 0, "service", "mean")],
)
def test_non_finite_numbers_are_rejected(work, where, value):
    """TOML has inf and nan; a rate or a duration of inf must be an input error, not an endless or crashing run."""
    data = {"name": "x", "duration_ms": 1000, "backend": {"kind": "delay"},
            "workload": [{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                          "service": {"dist": "exponential", "mean": 10}}]}  # fmt: skip
    box = data
    for part in where[:-1]:
        box = box[part]
    box[where[-1]] = value
    with pytest.raises(InputError) as err:
        scenario_from_dict(data, work / "s.toml")
    assert ".".join(str(p) for p in where if not isinstance(p, int)).split(".")[-1] in str(err.value)


@pytest.mark.parametrize("name", ["x" * 5000, "a\x00b", "é" * 300])
@pytest.mark.parametrize("field", ["service", "trace", "profile"])
def test_unusable_file_names_are_input_errors(work, name, field):
    data = {"name": "x", "duration_ms": 1000, "backend": {"kind": "delay"},
            "workload": [{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                          "service": {"dist": "exponential", "mean": 10}}]}  # fmt: skip
    if field == "service":
        data["workload"][0]["service"] = {"dist": "empirical", "file": name, "column": "n"}
    elif field == "trace":
        data["workload"][0]["arrivals"] = {"process": "trace", "file": name}
    else:
        data["backend"] = {"kind": "continuous-batching", "max_num_seqs": 4, "step": {"profile": name}}
        data["workload"][0].update(prompt_tokens={"dist": "constant", "value": 5}, output_tokens={"dist": "constant", "value": 5})
    with pytest.raises(InputError):
        scenario_from_dict(data, work / "s.toml")


# --- load_scenario ----------------------------------------------------------------------------------------

VALID_TOML = """\
name = "fuzz"
duration_ms = 1_000
slo_p95_ms = 300

[backend]
kind = "slots"
slots = 4
token_time = { base_ms = 1, per_output_token_ms = 2 }

[scheduler]
maxConcurrency = 4
batchMaxConcurrency = 2
batchMinConcurrency = 0
interactiveRpsThreshold = 10
interactiveP95LatencyMs = 800
recheckOnExpiry = true

[[workload]]
name = "chat"
class = "interactive"
arrivals = { process = "poisson", rate_per_s = 20 }
service = { dist = "lognormal", median = 300, p95 = 1_500 }

[[workload]]
class = "batch"
arrivals = { process = "trace", file = "trace.csv", time_scale = 2.5 }

[experiment]
seed = 1
replications = 3
policies = ["unscheduled", "static"]
"""


def test_valid_toml_loads(work):
    (work / "valid.toml").write_text(VALID_TOML)
    assert load_scenario(work / "valid.toml").name == "fuzz"


@st.composite
def edited_toml(draw) -> str:
    lines = VALID_TOML.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "insert", "chars", "value"]))
        if action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "insert":
            lines.insert(i, draw(st.text(max_size=30)))
        elif action == "value" and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            lines[i] = key + "= " + draw(st.sampled_from(
                ['"x"', "-1", "0", "inf", "nan", "-inf", "1e999", "true", "[]", "{}", "[1, 2]", "{ a = 1 }",
                 "1979-05-27T07:32:00Z", "07:32:00", '"' + "y" * 3000 + '"', "0x10", "+3", "1_000", '"\\u0000"']))  # fmt: skip
        elif lines[i]:
            j = draw(st.integers(0, len(lines[i]) - 1))
            lines[i] = lines[i][:j] + draw(st.text(max_size=3)) + lines[i][j + 1 :]
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))


@SETTINGS
@given(text=edited_toml())
def test_edited_toml_raises_only_input_error(work, text):
    path = work / "edited.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    expect_input_error_or_scenario(lambda: load_scenario(path))


@SETTINGS
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass"))))
def test_random_bytes_raise_only_input_error(work, raw):
    path = work / "random.toml"
    path.write_bytes(raw)
    expect_input_error_or_scenario(lambda: load_scenario(path))


def test_unreadable_scenario_paths(work):
    # (a NUL byte cannot reach load_scenario from the command line: argv cannot hold one)
    for path in (work / "missing.toml", work, work / ("x" * 5000)):
        with pytest.raises(InputError):
            load_scenario(path)


# --- read_trace ---------------------------------------------------------------------------------------------

CELLS = st.one_of(
    st.sampled_from(["interactive", "batch", "interactve", "0", "1.5", "-1", "nan", "inf", "-inf", "1e309", "",
                     " ", '"', '""', '"a,b"', "a\nb", "\r", "\x00", "é", "1_000", "0x1f", "１２", "id", "kind"]),
    st.text(max_size=8),
    st.floats().map(repr),
    st.integers().map(str),
)  # fmt: skip


@st.composite
def csv_texts(draw) -> str:
    header = draw(st.one_of(
        st.just(["id", "kind", "arrival_ms", "service_ms"]),
        st.permutations(["id", "kind", "arrival_ms", "service_ms", "prompt_tokens"]),
        st.lists(st.one_of(st.sampled_from(["id", "kind", "arrival_ms", "service_ms", " id ", "ID"]), st.text(max_size=6)), max_size=6),
    ))  # fmt: skip
    width = len(header)
    rows = draw(st.lists(st.lists(CELLS, min_size=max(0, width - 1), max_size=width + 1), max_size=6))
    sep = draw(st.sampled_from([",", ";", "\t"]))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = [sep.join(header)] + [sep.join(r) for r in rows]
    bom = draw(st.sampled_from(["", "\ufeff"]))
    return bom + newline.join(lines) + draw(st.sampled_from(["", newline]))


def expect_trace_or_input_error(path):
    try:
        tasks, header = read_trace(path)
    except InputError as exc:
        assert str(exc).startswith(str(path)), "the message must name the trace file"
        return
    assert tasks and all(t.kind in ("interactive", "batch") for t in tasks)
    for t in tasks:
        assert math.isfinite(t.arrival_ms) and t.arrival_ms >= 0
        assert math.isfinite(t.service_ms) and t.service_ms >= 0
    assert len({t.id for t in tasks}) == len(tasks)


@SETTINGS
@given(text=csv_texts())
def test_random_csv_traces_raise_only_input_error(work, text):
    path = work / "fuzz-trace.csv"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    expect_trace_or_input_error(path)


@SETTINGS
@given(raw=st.binary(max_size=400))
def test_random_bytes_traces_raise_only_input_error(work, raw):
    path = work / "fuzz-trace.bin"
    path.write_bytes(raw)
    expect_trace_or_input_error(path)


@SETTINGS
@given(prefix=st.sampled_from([b"id,kind,arrival_ms,service_ms\n", b"id,kind,arrival_ms,service_ms\r\na,batch,0,1\r\n"]),
       raw=st.binary(max_size=200))  # fmt: skip
def test_valid_header_then_random_bytes(work, prefix, raw):
    path = work / "fuzz-trace-tail.csv"
    path.write_bytes(prefix + raw)
    expect_trace_or_input_error(path)


def test_unreadable_trace_paths(work):
    for path in (work / "missing.csv", work, work / ("x" * 5000)):
        with pytest.raises(InputError):
            read_trace(path)


# --- files read when a scenario runs -------------------------------------------------------------------------

AZURE_CELLS = st.one_of(
    CELLS,
    st.sampled_from(["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47.1", "2023-13-45 99:99:99.0", "12", "-3"]),
)


@st.composite
def azure_texts(draw) -> str:
    header = draw(st.sampled_from([["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
                                   ["TIMESTAMP", "ContextTokens"], ["GeneratedTokens", "TIMESTAMP", "ContextTokens", "x"]]))
    rows = draw(st.lists(st.lists(AZURE_CELLS, min_size=len(header) - 1, max_size=len(header) + 1), max_size=5))
    return "\n".join(",".join(r) for r in [header] + rows) + "\n"


def scenario_reading(work, trace_file, fmt, backend="delay", tokens=False):
    workload = {"class": "interactive", "arrivals": {"process": "trace", "file": trace_file, "format": fmt}}
    if fmt == "azure":
        workload["service"] = {"dist": "constant", "value": 5}
    if tokens:
        workload["prompt_tokens"] = {"dist": "empirical", "file": "fuzz-lengths.csv", "column": "n"}
        workload["output_tokens"] = {"dist": "constant", "value": 3}
    data = {"name": "x", "duration_ms": 1000, "backend": {"kind": backend, "token_time": {"base_ms": 1}},
            "workload": [workload]}  # fmt: skip
    return scenario_from_dict(data, work / "s.toml")


@SETTINGS
@given(text=csv_texts(), lengths=csv_texts())
def test_run_time_files_raise_only_input_error(work, text, lengths):
    from simlab.world.distributions import empirical_values

    (work / "fuzz-run-trace.csv").write_bytes(text.encode("utf-8", "surrogatepass"))
    (work / "fuzz-lengths.csv").write_bytes(("n\n" + lengths).encode("utf-8", "surrogatepass"))
    empirical_values.cache_clear()
    for tokens in (False, True):
        scenario = scenario_reading(work, "fuzz-run-trace.csv", "generic", tokens=tokens)
        try:
            open_loop_tasks(scenario, 1)
        except InputError:
            pass


@SETTINGS
@given(text=azure_texts())
def test_run_time_azure_traces_raise_only_input_error(work, text):
    (work / "fuzz-azure.csv").write_bytes(text.encode("utf-8", "surrogatepass"))
    scenario = scenario_reading(work, "fuzz-azure.csv", "azure")
    try:
        tasks = open_loop_tasks(scenario, 1)
    except InputError:
        return
    assert all(t.prompt_tokens >= 0 and t.output_tokens >= 0 for t in tasks)


def test_input_error_survives_pickling():
    """Errors raised in `--workers N` processes travel back pickled; they must arrive whole."""
    err = InputError("trace.csv", "line 7", "kind 'x' is not one of interactive, batch")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, InputError) and str(back) == str(err)
    assert (back.source, back.where, back.message) == (err.source, err.where, err.message)
