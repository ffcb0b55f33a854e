"""The sim-to-real comparison: metrics from records, relative error and spread, rankings."""

import math
from pathlib import Path

import pytest

from types import SimpleNamespace

from simlab.realcheck import compare as cmp
from simlab.realcheck.measures import metrics
from simlab.records import DecodeCheck
from simlab.reporting.blocks.validate_real import (comparison_table, decode_table, outside_but_within_noise,
                                                   tied_on_one_side, verdict_items)
from simlab.reporting.document import Bullets, Document
from simlab.reporting.markdown import render_markdown
from simlab.realcheck.stepcheck import decode_ms_per_token, step_at_measured_load, step_error_by_window


def rec(kind, arrival, end, ttft, out=10, ok=True):
    return {"id": f"{kind}{arrival}", "kind": kind, "prompt_tokens": 5, "output_tokens": out, "arrival_ms": arrival,
            "start_ms": arrival, "ttft_ms": ttft, "end_ms": end, "outcome": "ok" if ok else "cancelled"}


def test_metrics_from_records():
    rs = [rec("interactive", i * 10.0, i * 10.0 + 100 + i, 20.0) for i in range(100)]
    rs += [rec("batch", 0.0, 1000.0 * (i + 1), 50.0, out=100) for i in range(4)]
    rs.append(rec("interactive", 0.0, 1e9, None, ok=False))  # not completed: left out of the percentiles
    m = metrics(rs)
    assert m["interactive"]["completed"] == 100 and m["interactive"]["sent"] == 101
    assert m["interactive"]["p50_ms"] == pytest.approx(149.5)
    assert m["interactive"]["p95_ms"] == pytest.approx(194.05)
    assert m["batch"]["throughput_tok_s"] == pytest.approx(400 / 4.0)
    assert decode_ms_per_token(rs, "batch") == pytest.approx((2500 - 50) / 99)


def test_step_model_at_the_measured_load_and_by_window():
    """One batch request at a time (one sequence in flight, no other prefill during its decode): the model's
    step is base + per_seq + per_token (its one decoding token, priced as the backend prices it); an engine 25% slower from t = 10 s shows as -20% in the second window only."""
    backend = SimpleNamespace(max_num_seqs=16, step=SimpleNamespace(base_ms=1.5, per_seq_ms=3.0, per_token_ms=0.5,
                                                                    admit_ms=1.0, profile=None))
    rs = []
    for i in range(20):
        step = 5.0 if i < 10 else 6.25
        rs.append(rec("batch", i * 1000.0, i * 1000.0 + 10 + 10 * step, 10.0, out=11))
    n, measured, model = step_at_measured_load(rs, backend, "batch")
    assert n == pytest.approx(1.0) and model == pytest.approx(5.0) and measured == pytest.approx((5.0 + 6.25) / 2)
    w = step_error_by_window(rs, backend, "batch")
    assert w == pytest.approx({0: 0.0, 1: 5.0 / 6.25 - 1})
    assert step_error_by_window(rs, backend, "batch", min_requests=11) == {}


def test_requests_whose_tokens_came_all_at_once_are_left_out_of_the_step_check():
    """A request whose decode was not observed (every token in one event: a measured step of 0, or a sliver of
    the others') says nothing of the engine's step and, as model / measured, would be infinite."""
    backend = SimpleNamespace(max_num_seqs=16, step=SimpleNamespace(base_ms=1.5, per_seq_ms=3.0, per_token_ms=0.5,
                                                                    admit_ms=1.0, profile=None))
    rs = [rec("batch", i * 1000.0, i * 1000.0 + 10 + 10 * (5.0 if i < 5 else 6.25), 10.0, out=11) for i in range(10)]
    unstreamed = [rec("batch", 500.0 + i * 1000.0, 500.0 + i * 1000.0 + 10 + (0.0 if i % 2 else 0.01), 10.0, out=11)
                  for i in range(4)]
    alone = step_at_measured_load(rs, backend, "batch")
    with_them = step_at_measured_load(rs + unstreamed, backend, "batch")
    assert alone[1:] == pytest.approx(((5.0 + 6.25) / 2, 5.0))
    assert with_them[1:] == pytest.approx(alone[1:])
    assert step_error_by_window(rs + unstreamed, backend, "batch") == pytest.approx({0: (1 + 5.0 / 6.25) / 2 - 1})
    # a server that sent every token at once, timed on a 1 ms clock: nothing observed, nothing to report (not an
    # infinite error)
    at_once = unstreamed[1::2] * 3
    assert step_error_by_window(at_once, backend, "batch", min_requests=1) == {}
    assert all(math.isnan(x) for x in step_at_measured_load(at_once, backend, "batch"))


def fake(p95, thr):
    return {"interactive": {"p50_ms": 1, "p95_ms": p95, "p99_ms": 1, "ttft_p95_ms": 1},
            "batch": {"p50_ms": 1, "p95_ms": 1, "p99_ms": 1, "ttft_p95_ms": 1, "throughput_tok_s": thr}}


def compare(predicted, measured):
    """Every policy through the runtime driver."""
    return cmp.compare({(p, "runtime"): m for p, m in predicted.items()},
                       {(p, "runtime"): m for p, m in measured.items()})


def verdict(rows):
    return cmp.verdict(rows)


def markdown(rows, v) -> str:
    """The comparison table and the verdicts, as report.md has them."""
    doc = Document("t")
    doc.add(comparison_table(rows), Bullets(verdict_items(rows, v)))
    return render_markdown(doc.finish(), Path("."))


def pair(v, metric):
    return next(q for q in v.pairs if q.metric == metric)


def test_error_spread_and_rankings():
    predicted = {"a": fake(100, 50), "b": fake(200, 80)}
    measured = {"a": [fake(90, 50), fake(110, 60)], "b": [fake(250, 70), fake(250, 90)]}
    rows = compare(predicted, measured)
    r = next(r for r in rows if r.policy == "a" and r.metric == "p95_ms" and r.kind == "interactive")
    assert (r.measured, r.spread, r.relative_error, r.runs) == (100, 0.2, 0.0, 2)
    r = next(r for r in rows if r.policy == "b" and r.metric == "throughput_tok_s")
    assert r.relative_error == pytest.approx(0.0) and r.spread == pytest.approx(0.25)
    v = verdict(rows)
    assert v.ranking_measured["interactive p95_ms"] == ["a", "b"]
    assert v.ranking_measured["batch throughput_tok_s"] == ["b", "a"]
    assert v.rankings_agree and not v.all_within  # b's P95: -20%
    b95 = next(r for r in rows if r.policy == "b" and r.kind == "interactive" and r.metric == "p95_ms")
    assert b95.within_tolerance is False
    # throughput: b is 60% better predicted; measured 55 vs 80 over two runs each is not separated (Welch p 0.2)
    q = pair(v, "batch throughput_tok_s")
    assert (q.predicted, q.measured) == ("<", "~") and q.p_value == pytest.approx(0.199, abs=0.005)
    assert not v.rankings_same and v.same_order and len(tied_on_one_side(v)) == 1
    text = markdown(rows, v)
    assert "rankings agree: **yes**: the same order on both sides" in text and "-20.0%" in text
    # measured throughput order flipped, but not separated: still no contradiction, yet not the same order
    rows = compare(predicted, {"a": measured["a"], "b": [fake(250, 40), fake(250, 60)]})
    v = verdict(rows)
    assert v.rankings_agree and not v.same_order
    assert "rankings agree: **yes**, where both sides separate the pair" in markdown(rows, v)


def test_ranking_disagreement():
    """One run each: no noise estimate, so the means order the measured side."""
    rows = compare({"a": fake(100, 50), "b": fake(200, 40)}, {"a": [fake(300, 50)], "b": [fake(200, 40)]})
    v = verdict(rows)
    assert not v.rankings_agree and math.isnan(rows[0].spread)
    assert "rankings agree: **no**: ordered oppositely: interactive p95_ms: a > b predicted, a < b measured" \
        in markdown(rows, v)


def test_rankings_with_ties_on_both_sides_and_a_settled_contradiction():
    """Throughput 2% apart predicted is a tie (the model is held to 10%), and runs that overlap are a tie
    measured: the same ranking. P95: a clearly better predicted, clearly worse over three runs each: opposite."""
    predicted = {"a": fake(100, 285), "b": fake(200, 279)}
    measured = {"a": [fake(300, 222), fake(310, 274), fake(305, 257)],
                "b": [fake(200, 240), fake(210, 263), fake(205, 256)]}
    v = verdict(compare(predicted, measured))
    thr = pair(v, "batch throughput_tok_s")
    assert (thr.predicted, thr.measured) == ("~", "~")
    p95 = pair(v, "interactive p95_ms")
    assert (p95.predicted, p95.measured) == (">", "<") and p95.p_value < 0.001
    assert not v.rankings_agree and not v.rankings_same
    measured["a"] = [fake(90, 222), fake(110, 274), fake(100, 257)]
    rows = compare(predicted, measured)
    v = verdict(rows)
    assert v.rankings_agree and v.rankings_same
    assert "rankings agree: **yes**: every pair" in markdown(rows, v)


def test_confidence_interval_of_the_measured_mean():
    """Three runs 90, 100, 110: mean 100, sd 10, t(0.975, 2) = 4.303 -> 100 +- 24.8. A prediction of 120 is
    20% off, yet inside that interval: the verdict says these runs cannot tell; 130 is outside it."""
    measured = {"a": [fake(90, 50), fake(100, 50), fake(110, 50)]}
    rows = compare({"a": fake(120, 50)}, measured)
    r = next(r for r in rows if r.kind == "interactive" and r.metric == "p95_ms")
    assert (r.measured_ci_low, r.measured_ci_high) == (pytest.approx(75.16, abs=0.01), pytest.approx(124.84, abs=0.01))
    v = verdict(rows)
    assert not v.all_within and outside_but_within_noise(rows) == ["a interactive p95_ms"]
    assert "cannot tell the error from run-to-run noise" in markdown(rows, v)
    rows = compare({"a": fake(130, 50)}, measured)
    v = verdict(rows)
    assert not v.all_within and outside_but_within_noise(rows) == []
    one = compare({"a": fake(120, 50)}, {"a": [fake(100, 50)]})  # one run: no interval
    verdict(one)
    assert math.isnan(one[0].measured_ci_low) and outside_but_within_noise(one) == []


def test_decode_errors_are_n_a_where_the_server_sent_every_token_at_once():
    """A measured step of 0 ms (every token in one event) has no relative error: n/a, not a division by zero."""
    r = SimpleNamespace(decode=[DecodeCheck("static", "article-js", "batch", 5.5, [0.0, 2.0], [1.7, 2.0],
                                            [0.0, 2.0], [4.5, 3.0])])
    cells = [c.text for c in decode_table(r).rows[0]]
    assert cells[4] == "+450.0%"  # against the mean of the runs, 1.0 ms
    assert cells[7] == "n/a, +50.0%"


def test_the_decode_step_per_run_leaves_out_requests_whose_tokens_came_all_at_once():
    """As the step check does: a request streamed in one event (a step of 0, or a sliver of the others') says
    nothing of the decode step; many of them (a 1 ms clock) would pull the median toward 0."""
    rs = [rec("batch", i * 1000.0, i * 1000.0 + 10 + 10 * (5.0 if i < 5 else 6.25), 10.0, out=11) for i in range(10)]
    at_once = [rec("batch", 500.0 + i * 1000.0, 500.0 + i * 1000.0 + 10 + (0.0 if i % 2 else 0.01), 10.0, out=11)
               for i in range(8)]
    assert decode_ms_per_token(rs, "batch") == pytest.approx((5.0 + 6.25) / 2)
    assert decode_ms_per_token(rs + at_once, "batch") == pytest.approx((5.0 + 6.25) / 2)
    assert math.isnan(decode_ms_per_token(at_once[1::2], "batch"))  # nothing observed: no step to report


def test_a_run_with_no_decode_observed_reads_n_a_and_the_error_is_over_the_others():
    r = SimpleNamespace(decode=[DecodeCheck("static", "article-js", "batch", 5.5, [math.nan, 2.0], [1.7, 2.0],
                                            [math.nan, 2.0], [4.5, 3.0])])
    cells = [c.text for c in decode_table(r).rows[0]]
    assert cells[3] == "n/a, 2.0"
    assert cells[4] == "+175.0%"  # against the one run that observed a decode
