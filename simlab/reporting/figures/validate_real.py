"""validate-real's figure: simulated vs measured per policy, for interactive P95, interactive TTFT P95 and batch
throughput, the measured bars with their run-to-run range."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from simlab.records import ValidateRealRecord
from simlab.reporting.blocks.validate_real import FIGURE_CAPTION, METRIC_LABELS, label

NAME = "validate-real"
CAPTION = FIGURE_CAPTION
PANELS = (("interactive", "p95_ms"), ("interactive", "ttft_p95_ms"), ("batch", "throughput_tok_s"))


class Bar(NamedTuple):
    predicted: float
    measured: float
    low: float  # the slowest / fastest run
    high: float


class PredictedVsMeasured(NamedTuple):
    policies: list[str]  # labels, in report order
    panels: list[tuple[str, str, dict[str, Bar]]]  # (class, metric, label -> bar)


def data(r: ValidateRealRecord) -> PredictedVsMeasured:
    labels = [label(p, d) for p, d in r.arms()]
    panels = []
    for kind, metric in PANELS:
        bars = {label(x.policy, x.driver): Bar(x.predicted, x.measured, x.measured_min, x.measured_max)
                for x in r.rows if x.kind == kind and x.metric == metric}
        panels.append((kind, metric, bars))
    return PredictedVsMeasured(labels, panels)


def draw(d: PredictedVsMeasured):
    from simlab.reporting.figures import style

    colors = style.policy_colors(d.policies)
    fig = style.new_figure()
    axes = fig.subplots(1, len(d.panels))
    for ax, (kind, metric, bars) in zip(axes, d.panels):
        for i, p in enumerate(d.policies):
            b = bars[p]
            ax.bar(i - 0.2, b.predicted, 0.38, color=style.tint(colors[p]), edgecolor=colors[p],
                   label="simulated" if i == 0 else None)
            ax.bar(i + 0.2, b.measured, 0.38, color=colors[p], yerr=[[b.measured - b.low], [b.high - b.measured]],
                   capsize=6, label="measured" if i == 0 else None)
        ax.set_xticks(range(len(d.policies)), [p.replace(" (", "\n(") for p in d.policies], rotation=30, ha="right",
                      fontsize=12)
        if metric.endswith("_ms"):
            ax.set_yscale("log")  # unscheduled is tens of times the others
        ax.set_title(METRIC_LABELS[metric] if kind == "batch" else f"{kind} {METRIC_LABELS[metric]}", fontsize=14)
    axes[0].legend(loc="upper right", fontsize=12)
    style.title(fig, "Simulated (light) vs measured on the real engine (dark; bars: run-to-run range)")
    return fig


def save(r: ValidateRealRecord, folder: Path) -> list[str]:
    """Draw and save the figure into folder/figures; the PNG's path relative to `folder`, for the record."""
    from simlab.reporting.figures import style

    with style.context():
        style.save(draw(data(r)), Path(folder) / "figures", NAME)
    return [f"figures/{NAME}.png"]
