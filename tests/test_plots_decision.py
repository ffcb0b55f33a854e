"""The decision's frontier figure: the rule's constraint is drawn where it is judged, and arm labels never print
over each other, however many arms measure alike."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simlab.decision.compare import Arm
from simlab.decision.rule import judge
from simlab.decision.run import arm_results
from simlab.reporting.figures import style
from simlab.reporting.figures.decision import draw_frontier, frontier_data
from simlab.scenario import Decision

from tests.test_render_agreement import decide_record

DEFAULTS = {"batchMaxConcurrency": 3, "batchMinConcurrency": 1}


def crowded_record(rule: str = "constrained", bound: float | None = None, slo: float = 400.0):
    """Twelve arms within a few ms and jobs/min of each other (gates that behave as a cap), and a few apart."""
    rng = np.random.default_rng(11)
    noise = rng.normal(0, 1, 8)
    arms = [Arm(f"static-{c}", {"batchMaxConcurrency": c, "batchMinConcurrency": c}, 100 + 30 * c + 3 * noise,
                200 + 60 * c + 2 * noise, "static", c) for c in (1, 2, 3, 4, 5)]
    for i, family in enumerate(["adaptive", "holdback", "aimd", "gradient2"] * 3):
        arms.append(Arm(f"{family}-tuned-{i}", {"batchMaxConcurrency": 3}, 190 + 0.8 * i + 3 * noise,
                        380 + 0.5 * i + 2 * noise, family))
    decision = Decision(rule=rule)
    out = judge(arms, decision, arms[2], DEFAULTS, [bound] * 8 if bound else None, slo)
    sel = arm_results(arms, out, decision, arms[2], {})
    return replace(decide_record(), rule=rule, slo_p95_ms=slo, choice=out.choice, pick=out.pick, leader=out.leader,
                   second_leader=out.second_leader, limit_ms=out.limit_ms, limit_kind=out.limit_kind, selection=sel)


def _extents(fig):
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in fig.axes[0].texts]


def test_arm_labels_do_not_overlap_when_many_arms_measure_alike():
    with style.context():
        fig = draw_frontier(frontier_data(crowded_record()))
        boxes = _extents(fig)
    assert 2 <= len(boxes) < 17  # the twelve alike arms share labels
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    text = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert "more" in text  # a cluster of twelve lists the first names and counts the rest


def test_the_constrained_rule_draws_the_required_throughput_and_the_slo_rule_its_p95_limit():
    with style.context():
        fig = draw_frontier(frontier_data(crowded_record()))
        labels = [h.get_label() for h in fig.axes[0].get_legend().legend_handles]
    assert any(x.startswith("required:") for x in labels)
    assert not any(x.startswith("P95 limit") for x in labels)
    # nothing meets a 100 ms SLO; judged against the batch-absent bound 150 x 1.05
    rec = crowded_record("slo", bound=150.0, slo=100.0)
    assert rec.limit_kind == "bound"
    with style.context():
        fig = draw_frontier(frontier_data(rec))
        labels = [h.get_label() for h in fig.axes[0].get_legend().legend_handles]
        vertical = sorted(round(line.get_xdata()[0], 1) for line in fig.axes[0].lines
                          if line.get_linestyle() in ("--", ":") and len(set(line.get_xdata())) == 1)
    assert "P95 limit: 158 ms (batch-absent bound)" in labels, labels
    assert "SLO: 100 ms (no arm meets it)" in labels
    assert vertical == [100.0, 157.5]
    assert not any(x.startswith("required:") for x in labels)
    assert "adaptive" in labels and "baselines (not deployable)" not in labels  # no baseline arm here
