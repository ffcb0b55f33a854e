"""Scheduler options: the production `SchedulerOptions` shape (camelCase JSON), defaults, and every error."""

from __future__ import annotations

import json

import pytest

from simlab.errors import InputError
from simlab.policies import ARTICLE_DEFAULTS, SchedulerOptions, load_options, options_from_dict
from simlab.policies.options import KNOWN_KEYS, REQUIRED_KEYS

ADAPTIVE = {
    "maxConcurrency": 8,
    "batchMaxConcurrency": 6,
    "batchMinConcurrency": 1,
    "interactiveRpsThreshold": 20,
    "interactiveP95LatencyMs": 500,
}


def err(data, source="opts.json") -> InputError:
    with pytest.raises(InputError) as info:
        options_from_dict(data, source)
    return info.value


def test_camel_case_keys_map_to_fields():
    o = options_from_dict({**ADAPTIVE, "windowMs": 2500, "smoothingAlpha": 0.2, "tieBreak": "seed-heap"})
    assert o.policy == "adaptive"
    assert (o.max_concurrency, o.batch_max_concurrency, o.batch_min_concurrency) == (8, 6, 1)
    assert o.interactive_rps_threshold == 20 and o.interactive_p95_latency_ms == 500
    assert o.window_ms == 2500 and o.smoothing_alpha == 0.2 and o.tie_break == "seed-heap"


def test_defaults():
    o = options_from_dict(dict(ADAPTIVE))
    assert o.policy == "adaptive"
    assert o.window_ms == 10000
    assert o.smoothing_alpha is None and o.smoothing_tau_ms is None
    assert o.tie_break == "fifo"
    assert o.recheck_on_expiry is False
    assert o.rps_source == "completions"


def test_article_defaults_are_valid_adaptive_options():
    o = options_from_dict(dict(ARTICLE_DEFAULTS))
    assert o.policy == "adaptive" and o.warnings() == []
    assert ARTICLE_DEFAULTS == {**ADAPTIVE, "windowMs": 10000}


def test_unscheduled_needs_nothing():
    o = options_from_dict({"policy": "unscheduled"})
    assert o.max_concurrency is None


@pytest.mark.parametrize("policy", sorted(REQUIRED_KEYS))
def test_each_policy_requires_its_keys(policy):
    full = {**ADAPTIVE, "policy": policy}
    options_from_dict(full)  # everything given: fine
    for key in REQUIRED_KEYS[policy]:
        e = err({k: v for k, v in full.items() if k != key})
        assert key in str(e) and policy in str(e)
        assert "opts.json" in str(e)


def test_adaptive_missing_keys_are_all_named():
    e = err({"maxConcurrency": 4})
    for key in ("batchMaxConcurrency", "batchMinConcurrency", "interactiveRpsThreshold", "interactiveP95LatencyMs"):
        assert key in e.message


def test_empty_object_is_adaptive_missing_everything():
    e = err({})
    assert "adaptive" in e.message and "maxConcurrency" in e.message


def test_unknown_key_did_you_mean():
    e = err({**ADAPTIVE, "maxConcurency": 4})
    assert e.where == "maxConcurency"
    assert "did you mean 'maxConcurrency'" in e.message
    assert str(e).startswith("opts.json: maxConcurency: unknown option")


def test_unknown_key_without_close_match_lists_known_keys():
    e = err({**ADAPTIVE, "zzz": 1})
    assert "did you mean" not in e.message
    assert "windowMs" in e.message


def test_unknown_key_nested_location():
    with pytest.raises(InputError) as info:
        options_from_dict({**ADAPTIVE, "windowMS": 5}, "scenario.toml", "scheduler")
    assert info.value.where == "scheduler.windowMS"
    assert "did you mean 'windowMs'" in info.value.message


@pytest.mark.parametrize(
    "key, value",
    [
        ("maxConcurrency", "four"),
        ("maxConcurrency", "4"),
        ("maxConcurrency", 2.5),
        ("maxConcurrency", True),
        ("maxConcurrency", [4]),
        ("batchMaxConcurrency", {"a": 1}),
        ("interactiveRpsThreshold", "fast"),
        ("windowMs", "100"),
        ("smoothingAlpha", True),
        ("recheckOnExpiry", "yes"),
        ("recheckOnExpiry", 1),
        ("tieBreak", "lifo"),
        ("rpsSource", "requests"),
        ("policy", "fifoo"),
    ],
)
def test_wrong_type_or_value_names_the_key(key, value):
    e = err({**ADAPTIVE, key: value})
    assert e.where == key, str(e)
    assert e.source == "opts.json"
    if not isinstance(value, dict):
        assert json.dumps(value) in e.message  # says what it found


@pytest.mark.parametrize(
    "key, value",
    [
        ("maxConcurrency", 0),
        ("batchMaxConcurrency", -1),
        ("batchMinConcurrency", -1),
        ("interactiveRpsThreshold", 0),
        ("interactiveP95LatencyMs", -5),
        ("windowMs", 0),
        ("smoothingAlpha", 0),
        ("smoothingAlpha", 1.5),
        ("smoothingTauMs", 0),
    ],
)
def test_out_of_range(key, value):
    e = err({**ADAPTIVE, key: value})
    assert e.where == key


def test_float_fields_accept_json_integers():
    o = options_from_dict({**ADAPTIVE, "windowMs": 100, "smoothingAlpha": 1, "interactiveRpsThreshold": 3})
    assert o.window_ms == 100.0 and isinstance(o.window_ms, float)
    assert o.smoothing_alpha == 1.0


def test_batch_min_greater_than_batch_max():
    e = err({**ADAPTIVE, "batchMinConcurrency": 5, "batchMaxConcurrency": 3})
    assert "batchMinConcurrency (5) must not exceed batchMaxConcurrency (3)" in e.message


def test_batch_min_equal_batch_max_is_fine():
    o = options_from_dict({**ADAPTIVE, "batchMinConcurrency": 3, "batchMaxConcurrency": 3})
    assert o.batch_min_concurrency == o.batch_max_concurrency == 3


def test_smoothing_alpha_and_tau_are_exclusive():
    e = err({**ADAPTIVE, "smoothingAlpha": 0.5, "smoothingTauMs": 1000})
    assert "smoothingAlpha" in e.message and "smoothingTauMs" in e.message
    options_from_dict({**ADAPTIVE, "smoothingAlpha": 0.5})
    options_from_dict({**ADAPTIVE, "smoothingTauMs": 1000})


def test_not_an_object():
    for data in ([1, 2], "adaptive", 3, None):
        e = err(data)
        assert "JSON object" in e.message


def test_warning_batch_max_at_least_max_concurrency():
    o = options_from_dict({**ADAPTIVE, "batchMaxConcurrency": 8})
    (w,) = o.warnings()
    assert "batchMaxConcurrency (8) >= maxConcurrency (8)" in w
    o = options_from_dict({"policy": "static", "maxConcurrency": 4, "batchMaxConcurrency": 9})
    assert any("batchMaxConcurrency (9) >= maxConcurrency (4)" in w for w in o.warnings())
    assert options_from_dict({**ADAPTIVE, "batchMaxConcurrency": 7}).warnings() == []
    # policies without a batch cap do not warn about it
    assert options_from_dict({**ADAPTIVE, "policy": "priority", "batchMaxConcurrency": 9}).warnings() == []


def test_warning_batch_min_zero_mentions_recheck():
    (w,) = options_from_dict({**ADAPTIVE, "batchMinConcurrency": 0}).warnings()
    assert "batchMinConcurrency is 0" in w and "recheckOnExpiry" in w


def test_to_json_dict_is_camel_case_and_round_trips():
    o = options_from_dict(
        {
            **ADAPTIVE,
            "windowMs": 1234.5,
            "smoothingTauMs": 700,
            "tieBreak": "seed-heap",
            "recheckOnExpiry": True,
            "rpsSource": "arrivals",
        }
    )
    d = o.to_json_dict()
    assert set(d) <= set(KNOWN_KEYS)
    assert "smoothingAlpha" not in d  # unset keys left out
    assert d["interactiveP95LatencyMs"] == 500 and d["smoothingTauMs"] == 700
    again = options_from_dict(json.loads(json.dumps(d)))
    assert again == o
    assert again.to_json_dict() == d


@pytest.mark.parametrize("policy", ["unscheduled", "fifo", "priority", "static", "adaptive"])
def test_round_trip_every_policy(policy):
    o = options_from_dict({**ADAPTIVE, "policy": policy})
    assert options_from_dict(json.loads(json.dumps(o.to_json_dict()))) == o


def test_known_keys_are_camel_case():
    assert "interactiveP95LatencyMs" in KNOWN_KEYS
    assert all("_" not in k for k in KNOWN_KEYS)


def test_with_changes_revalidates():
    o = options_from_dict(dict(ADAPTIVE))
    assert o.with_changes(policy="static").policy == "static"
    with pytest.raises(Exception):
        o.with_changes(batch_min_concurrency=7)


def test_options_are_frozen():
    o = options_from_dict(dict(ADAPTIVE))
    with pytest.raises(Exception):
        o.max_concurrency = 3
    assert isinstance(o, SchedulerOptions)


# --- files ----------------------------------------------------------------------------------------


def test_load_options_file(tmp_path):
    p = tmp_path / "best-options.json"
    p.write_text(json.dumps({**ADAPTIVE, "tieBreak": "seed-heap"}))
    o = load_options(p)
    assert o.tie_break == "seed-heap"
    assert load_options(p, policy="static").policy == "static"


def test_load_options_not_json_names_line_and_column(tmp_path):
    p = tmp_path / "o.json"
    p.write_text('{\n  "maxConcurrency": 4,\n  oops\n}\n')
    with pytest.raises(InputError) as info:
        load_options(p)
    assert info.value.where == "line 3 column 3"
    assert str(p) in str(info.value)


def test_load_options_missing_file(tmp_path):
    with pytest.raises(InputError) as info:
        load_options(tmp_path / "nope.json")
    assert "not found" in info.value.message


def test_load_options_policy_override_still_validates(tmp_path):
    p = tmp_path / "o.json"
    p.write_text(json.dumps({"policy": "fifo", "maxConcurrency": 2}))
    with pytest.raises(InputError) as info:
        load_options(p, policy="adaptive")
    assert "batchMaxConcurrency" in info.value.message
