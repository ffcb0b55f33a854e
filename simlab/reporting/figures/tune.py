"""Tuning figures, drawn from the TuneRecord's trial points and importances (no live study needed), in the simlab
style at the page's size so that they stay readable on the review page:

optimization_history  the objective of every completed trial in trial order, the best feasible so far
param_importances     which options matter for the objective (Optuna's default estimate, PED-ANOVA)
slices                the objective against each option, a grid of at most three panels per row
pareto_front          every trial at (interactive P95, batch throughput), as ab's trade-off plot (up and to the
                      left is better), the required throughput, the defaults, the front or the chosen trial
"""

from __future__ import annotations

import math
from pathlib import Path

from simlab.reporting.figures import style

CAPTIONS = {
    "optimization_history": "The objective of each completed trial, in trial order (grey: misses the throughput "
                            "constraint), and the best feasible trial so far.",
    "param_importances": "Which options matter for the objective: Optuna's PED-ANOVA importance, how differently "
                         "each option is distributed among the best trials than among all of them.",
    "slices": "The objective against each option, one panel per option; each dot is a trial (darker: later; grey: "
              "misses the throughput constraint).",
    "pareto_front": "Every trial at (interactive latency, batch throughput), as in the A/B's trade-off plot: up and "
                    "to the left is better. Dashed: the required throughput; star: the production defaults.",
}
GREY = "#BBBBBB"
FEASIBLE = style.PALETTE[0]


def _done(r) -> list:
    return [t for t in r.trial_points if t.state == "COMPLETE" and t.objective_ms is not None]


def _objective_label(r) -> str:
    return f"interactive {r.metric} (ms)"


def draw_history(r):
    done = _done(r)
    if r.mode == "multi" or not done:
        return None
    fig = style.new_figure()
    ax = fig.add_subplot()
    xs = list(range(len(done)))
    ok = [(x, t.objective_ms) for x, t in zip(xs, done) if t.feasible]
    bad = [(x, t.objective_ms) for x, t in zip(xs, done) if not t.feasible]
    ax.scatter([x for x, _ in bad], [y for _, y in bad], s=90, color=GREY, label="misses the constraint")
    ax.scatter([x for x, _ in ok], [y for _, y in ok], s=110, color=FEASIBLE, label="feasible")
    best, line = math.inf, []
    for x, t in zip(xs, done):
        if t.feasible:
            best = min(best, t.objective_ms)
        line.append(best if math.isfinite(best) else math.nan)
    ax.step(xs, line, where="post", color=style.INK, lw=2.4, label="best feasible so far")
    ax.set_xlabel("trial (in the study's order)")
    ax.set_ylabel(_objective_label(r))
    ax.legend(loc="best")
    style.title(fig, f"{r.scenario}: optimisation history")
    return fig


def draw_importances(r):
    if not r.importances:
        return None
    items = sorted(r.importances.items(), key=lambda kv: kv[1])
    fig = style.new_figure()
    ax = fig.add_subplot()
    ax.barh([k for k, _ in items], [v for _, v in items], color=FEASIBLE)
    for i, (_, v) in enumerate(items):
        ax.annotate(f"{v:.2f}", (v, i), xytext=(6, 0), textcoords="offset points", va="center", fontsize=15)
    ax.set_xlabel(f"importance for {r.metric} (Optuna's PED-ANOVA)")
    style.title(fig, f"{r.scenario}: which options matter for {r.metric}")
    return fig


def draw_slices(r):
    from simlab.tuning.space import LOG_SCALE

    done = _done(r)
    keys = list(r.space)
    if len(done) < 3 or not keys:
        return None
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig = style.new_figure((style.WIDE[0], 3.6 * rows + 1.2))
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    order = {id(t): i / max(1, len(done) - 1) for i, t in enumerate(done)}
    import matplotlib

    cmap = matplotlib.colormaps["Blues"]
    for ax, key in zip(axes.flat, keys):
        pts = [(t.params.get(key), t) for t in done if t.params.get(key) is not None]
        ax.scatter([v for v, t in pts if not t.feasible], [t.objective_ms for v, t in pts if not t.feasible],
                   s=60, color=GREY)
        ax.scatter([v for v, t in pts if t.feasible], [t.objective_ms for v, t in pts if t.feasible], s=70,
                   c=[cmap(0.35 + 0.65 * order[id(t)]) for v, t in pts if t.feasible], edgecolor="#333333",
                   linewidth=0.5)
        if key in LOG_SCALE:
            ax.set_xscale("log")
            style.plain_log_ticks(ax.xaxis)
        ax.set_xlabel(key)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel(_objective_label(r))
    style.title(fig, f"{r.scenario}: the objective against each option")
    return fig


def draw_tradeoff(r):
    done = _done(r)
    if not done:
        return None
    fig = style.new_figure()
    ax = fig.add_subplot()
    ok = [t for t in done if t.feasible and t.throughput_per_min is not None]
    bad = [t for t in done if not t.feasible and t.throughput_per_min is not None]
    ax.scatter([t.objective_ms for t in bad], [t.throughput_per_min for t in bad], s=80, color=GREY,
               edgecolor="#777777", label="misses the constraint")
    ax.scatter([t.objective_ms for t in ok], [t.throughput_per_min for t in ok], s=90, color=FEASIBLE,
               label="feasible")
    front = _front(ok) if r.mode == "multi" else ([min(ok, key=lambda t: t.objective_ms)] if ok else [])
    if front:
        pts = sorted((t.objective_ms, t.throughput_per_min) for t in front)
        ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", color=style.PALETTE[2], ms=14,
                label="Pareto front" if r.mode == "multi" else "lowest feasible")
    for t in done:
        if t.origin == "defaults" and t.throughput_per_min is not None:
            ax.scatter([t.objective_ms], [t.throughput_per_min], s=380, marker="*", color=style.PALETTE[5],
                       zorder=5, label="production defaults")
    ax.axhline(r.required_throughput_per_min, color=style.INK, ls="--", lw=2,
               label=f"required: {r.throughput_fraction:g} x {r.reference} = {r.required_throughput_per_min:,.0f}/min")
    values = [t.objective_ms for t in done if t.objective_ms]
    if values and max(values) / max(min(values), 1e-9) > 5:
        ax.set_xscale("log")
        style.plain_log_ticks(ax.xaxis)
    ax.set_xlabel(_objective_label(r) + ", mean over the search units")
    ax.set_ylabel("batch throughput (jobs/min)")
    ax.legend(loc="best")
    style.title(fig, f"{r.scenario}: interactive latency against batch throughput, every trial")
    return fig


def _front(points) -> list:
    return [t for t in points if not any(o.objective_ms <= t.objective_ms and o.throughput_per_min >= t.throughput_per_min
                                         and (o.objective_ms < t.objective_ms or o.throughput_per_min > t.throughput_per_min)
                                         for o in points)]


def tune_figures(r, out: Path) -> list[str]:
    """Every figure the record supports, into OUT/figures/; their paths relative to OUT, in display order."""
    target = Path(out) / "figures"
    made = []
    with style.context():
        for name, draw in (("optimization_history", draw_history), ("param_importances", draw_importances),
                           ("slices", draw_slices), ("pareto_front", draw_tradeoff)):
            fig = draw(r)
            if fig is None:
                for ext in ("png", "svg"):
                    (target / f"{name}.{ext}").unlink(missing_ok=True)
                continue
            style.save(fig, target, name)
            made.append(f"figures/{name}.png")
    return made
