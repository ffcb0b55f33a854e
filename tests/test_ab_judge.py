"""`ab.compare` and `ab.judge` on small hand-made rows, with expectations computed by hand; the records they fill
survive a JSON round trip; a bug in a command is reported as one (exit 1), not as bad input."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from simlab.experiments.ab import AGGREGATED, COMPARED, aggregate_rows, compare, judge
from simlab.records import AbRecord, Comparison, load, save, to_json

T_975_2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (three seeds)
CRIT = SimpleNamespace(p95_stay_ms=30_000.0, batch_stall_ms=60_000.0)


def row(policy, seed, **values):
    base = dict.fromkeys(AGGREGATED, 0.0)
    base.update(policy=policy, seed=seed, stranded=0, max_in_flight=4, p95_over_slo_longest_ms=0.0,
                longest_batch_stall_ms=0.0)
    base.update(values)
    return base


def three_seeds():
    """unscheduled and adaptive on seeds 1..3; P95 differs by -10, -50, -60; throughput by exactly -5 each seed."""
    p95 = {"unscheduled": [100.0, 200.0, 300.0], "adaptive": [90.0, 150.0, 240.0]}
    thr = {"unscheduled": [50.0, 60.0, 70.0], "adaptive": [45.0, 55.0, 65.0]}
    return [row(p, s, interactive_p95_ms=p95[p][i], batch_throughput_per_min=thr[p][i])
            for p in ("unscheduled", "adaptive") for i, s in enumerate((1, 2, 3))]


def agg(rows, policies):
    return {a.policy: {m: i.tuple() for m, i in a.metrics.items()} for a in aggregate_rows(rows, policies)}


# --- compare -----------------------------------------------------------------------------------------------------

def test_compare_paired_difference_ratio_and_significance_by_hand():
    rows = three_seeds()
    out = compare(rows, ["unscheduled", "adaptive"], "unscheduled", agg(rows, ["unscheduled", "adaptive"]))
    assert all(isinstance(c, Comparison) for c in out)
    assert [(c.candidate, c.baseline) for c in out] == [("adaptive", "unscheduled")] * len(COMPARED)
    p95 = next(c for c in out if c.metric == "interactive_p95_ms")
    # differences -10, -50, -60: mean -40, sample sd sqrt(1400 / 2), half-width t * sd / sqrt(3)
    half = T_975_2 * math.sqrt(700) / math.sqrt(3)
    assert p95.n == 3
    assert p95.diff == pytest.approx(-40.0)
    assert (p95.diff_ci_low, p95.diff_ci_high) == pytest.approx((-40.0 - half, -40.0 + half))
    assert p95.ratio == pytest.approx((0.9 + 0.75 + 0.8) / 3)
    assert p95.significant is False  # the interval [-105.7, 25.7] holds 0
    assert p95.better == "lower"
    assert (p95.candidate_mean, p95.baseline_mean) == pytest.approx((160.0, 200.0))
    assert p95.cis_overlap is True  # 160 [+-] vs 200 [+-]: wide intervals
    thr = next(c for c in out if c.metric == "batch_throughput_per_min")
    # the same -5 on every seed: no spread, a zero-width interval that excludes 0
    assert (thr.diff, thr.diff_ci_low, thr.diff_ci_high) == pytest.approx((-5.0, -5.0, -5.0))
    assert thr.significant is True and thr.better == "higher"
    assert thr.ratio == pytest.approx((45 / 50 + 55 / 60 + 65 / 70) / 3)


def test_compare_pairs_each_policy_with_the_baseline_and_adaptive_with_every_other():
    rows = [row(p, s) for p in ("unscheduled", "priority", "static", "adaptive") for s in (1, 2)]
    pols = ["unscheduled", "priority", "static", "adaptive"]
    pairs = list(dict.fromkeys((c.candidate, c.baseline) for c in compare(rows, pols, "unscheduled", agg(rows, pols))))
    assert pairs == [("priority", "unscheduled"), ("static", "unscheduled"), ("adaptive", "unscheduled"),
                     ("adaptive", "priority"), ("adaptive", "static")]


def test_compare_pairs_by_seed_not_by_row_order():
    rows = three_seeds()
    shuffled = rows[3:][::-1] + rows[:3]
    pols = ["unscheduled", "adaptive"]
    a = compare(rows, pols, "unscheduled", agg(rows, pols))
    b = compare(shuffled, pols, "unscheduled", agg(shuffled, pols))
    assert [c.diff for c in a] == pytest.approx([c.diff for c in b])


# --- judge -------------------------------------------------------------------------------------------------------

def test_judge_takes_the_worst_seed_not_the_mean():
    # mean stretch over the SLO 20 s (< 30 s), worst 40 s: fails; mean stall 30 s, worst 61 s: fails
    rows = [row("priority", 1, p95_over_slo_longest_ms=0.0, longest_batch_stall_ms=0.0),
            row("priority", 2, p95_over_slo_longest_ms=40_000.0, longest_batch_stall_ms=61_000.0)]
    (v,) = judge(CRIT, 8, rows, ["priority"])
    assert v.p95_verdict == "fail" and not v.p95_not_stuck_above_slo
    assert v.longest_p95_over_slo_ms == 40_000.0 and v.bound_longest_p95_over_slo_ms is None
    assert v.batch_keeps_moving is False and v.longest_batch_stall_ms == 61_000.0


def test_judge_thresholds_are_strict_and_stranded_work_fails_criterion_2():
    rows = [row("a", 1, p95_over_slo_longest_ms=29_999.0, longest_batch_stall_ms=59_999.0, max_in_flight=8),
            row("b", 1, p95_over_slo_longest_ms=30_000.0, longest_batch_stall_ms=60_000.0, max_in_flight=9),
            row("c", 1, stranded=1), row("c", 2, stranded=2)]
    a, b, c = judge(CRIT, 8, rows, ["a", "b", "c"])
    assert (a.p95_verdict, a.batch_keeps_moving, a.concurrency_within_cap) == ("pass", True, True)
    assert (b.p95_verdict, b.batch_keeps_moving, b.concurrency_within_cap) == ("fail", False, False)
    assert (c.stranded, c.batch_keeps_moving) == (3, False)
    assert all(v.max_concurrency == 8 for v in (a, b, c))
    (free,) = judge(CRIT, None, rows[1:2], ["b"])
    assert free.concurrency_within_cap is True and free.max_concurrency is None


def test_judge_capacity_when_the_batch_absent_bound_fails_criterion_1_too():
    rows = [row("priority", 1, p95_over_slo_longest_ms=50_000.0), row("priority", 2, p95_over_slo_longest_ms=0.0),
            row("adaptive", 1, p95_over_slo_longest_ms=10_000.0), row("adaptive", 2, p95_over_slo_longest_ms=0.0)]
    failing_bound = [row("bound-no-batch", 1, p95_over_slo_longest_ms=35_000.0),
                     row("bound-no-batch", 2, p95_over_slo_longest_ms=0.0),
                     row("bound-batch-alone", 1, p95_over_slo_longest_ms=90_000.0)]  # not the bound judged
    prio, adap = judge(CRIT, 8, rows, ["priority", "adaptive"], failing_bound)
    assert prio.p95_verdict == "capacity" and prio.bound_longest_p95_over_slo_ms == 35_000.0
    assert adap.p95_verdict == "pass"  # a policy that meets the SLO keeps its pass
    passing_bound = [row("bound-no-batch", 1, p95_over_slo_longest_ms=29_000.0)]
    prio, _ = judge(CRIT, 8, rows, ["priority", "adaptive"], passing_bound)
    assert prio.p95_verdict == "fail" and prio.bound_longest_p95_over_slo_ms == 29_000.0


def test_one_bad_seed_of_four_fails_though_the_mean_passes():
    """Criterion 1 and 2 on the max over seeds: one bad seed of four fails the policy though the mean passes."""
    rows = [row("adaptive", s, p95_over_slo_longest_ms=31_000.0 if s == 4 else 0.0,
                longest_batch_stall_ms=61_000.0 if s == 4 else 0.0) for s in (1, 2, 3, 4)]
    assert sum(r["p95_over_slo_longest_ms"] for r in rows) / 4 < CRIT.p95_stay_ms  # the mean would pass
    (v,) = judge(CRIT, 8, rows, ["adaptive"])
    assert (v.p95_verdict, v.longest_p95_over_slo_ms) == ("fail", 31_000.0)
    assert (v.batch_keeps_moving, v.longest_batch_stall_ms) == (False, 61_000.0)


# --- the record ----------------------------------------------------------------------------------------------------

def synthetic_record(capacity: bool) -> AbRecord:
    from simlab.experiments.ab import build_record
    from simlab.scenario import scenario_from_dict

    scenario = scenario_from_dict({
        "name": "synthetic", "duration_ms": 60_000, "slo_p95_ms": 500, "backend": {"kind": "slots", "slots": 8},
        "scheduler": {"maxConcurrency": 8, "batchMaxConcurrency": 6, "batchMinConcurrency": 1,
                      "interactiveRpsThreshold": 20, "interactiveP95LatencyMs": 500},
        "workload": [{"class": "interactive", "arrivals": {"process": "poisson", "rate_per_s": 5},
                      "service": {"dist": "exponential", "mean": 100}},
                     {"class": "batch", "arrivals": {"process": "burst", "count": 10, "at_ms": [0]},
                      "service": {"dist": "exponential", "mean": 1000}}]})
    rows = three_seeds() + [row("priority", s, interactive_p95_ms=150.0 + s, batch_throughput_per_min=61.0 + s,
                                p95_over_slo_longest_ms=40_000.0 * s) for s in (1, 2, 3)]
    stay = 31_000.0 if capacity else 1_000.0
    bounds = [row("bound-no-batch", s, interactive_p95_ms=80.0 + s, p95_over_slo_longest_ms=stay) for s in (1, 2, 3)]
    bounds += [row("bound-batch-alone", s, batch_throughput_per_min=90.0 + s, batch_makespan_ms=6e5 + s)
               for s in (1, 2, 3)]
    return build_record(scenario, scenario.options(), ["unscheduled", "priority", "adaptive"], [1, 2, 3], rows, bounds)


def test_record_round_trips_through_result_json(tmp_path):
    rec = synthetic_record(capacity=True)
    assert [v.p95_verdict for v in rec.verdicts] == ["pass", "capacity", "pass"]
    save(rec, tmp_path)
    back = load(tmp_path / "result.json", "ab")
    assert to_json(back) == to_json(rec)  # (== would fail on NaN ratios, which are not equal to themselves)
    assert back.verdicts == rec.verdicts and back.runs == rec.runs
    assert isinstance(back.runs[0].values["stranded"], int)  # an int stays an int (summary.csv writes "0", not "0.0")
    data = json.loads((tmp_path / "result.json").read_text())
    assert (data["simlab_result"], data["schema_version"]) == ("ab", AbRecord.VERSION)


def test_capacity_verdict_reaches_every_table(tmp_path):
    from simlab.experiments.ab import store
    from simlab.reporting.blocks.ab import capacity_text, terminal_table, write_report

    rec = store(synthetic_record(capacity=True), tmp_path)
    write_report(rec, tmp_path)
    text = capacity_text(rec.criteria)
    assert "bins stays above the SLO" in text  # says what was judged, not only that it failed
    assert text in terminal_table(rec)
    assert f"⚠️ {text}" in (tmp_path / "report.md").read_text()
    verdicts = (tmp_path / "verdicts.csv").read_text().splitlines()
    assert verdicts[2].startswith("priority,False,capacity,120000.0,31000.0,")


def test_an_internal_error_is_not_reported_as_bad_input(tmp_path, monkeypatch, capsys):
    """A KeyError in the report's own code: traceback, 'internal error', exit 1 (not exit 2, not 'another version')."""
    from simlab import cli
    from simlab.experiments.ab import store
    from simlab.reporting import page as content

    store(synthetic_record(capacity=False), tmp_path / "ab")

    def broken(*args, **kwargs):
        raise KeyError("p95")

    monkeypatch.setattr(content, "build_document", broken)
    assert cli.main(["report", str(tmp_path / "ab"), "--out", str(tmp_path / "page")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error: KeyError" in err and "bug in simlab" in err
    assert "another simlab version" not in err
    with pytest.raises(KeyError):
        cli.main(["--debug", "report", str(tmp_path / "ab"), "--out", str(tmp_path / "page")])
