"""Decision figures, each a small data tuple built from the DecideRecord (never from report text), then drawn in
the simlab style and saved through `style.save` (PNG and SVG, atomically):

frontier    every arm on the selection units: interactive P95 (x) against batch throughput (y), the same axes as
            ab's trade-off plot (up and to the left is better); the static caps joined, the tie set ringed
conditions  the choice and its main contenders on each held-out condition (confirmation units when measured)
load        P95 and throughput against the interactive load multiplier, when two load levels or more are held out
burst       the batch cap in force and the interactive work waiting over the busiest stretch of the first
            confirmation unit: the best adaptive arm against the choice (or the best static cap)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from simlab.reporting.figures import style

CAPTIONS = {
    "frontier": "Every arm on the selection units: interactive P95 against batch throughput, means with 95% CIs (up "
                "and to the left is better, as in the A/B's trade-off plot), coloured and marked by family. Static "
                "caps are joined in cap order; "
                "ringed: the tie set; star: the choice; faded: shown infeasible; dashed: the rule's constraint (the "
                "required throughput, or the slo rule's P95 limit).",
    "conditions": "The choice and its main contenders on each held-out condition, means with 95% CIs over that "
                  "condition's units (confirmation units when the arm was confirmed).",
    "load": "Interactive P95 and batch throughput against the interactive load multiplier of the held-out "
            "conditions, one line per arm, 95% CIs.",
    "burst": "The batch cap in force (steps) and batch tasks in flight (thin) over the busiest stretch of one "
             "confirmation run, above the interactive requests in flight or queued: the best adaptive arm against "
             "the choice or the best static cap on the same traffic.",
}
FAMILY_COLORS = style.FAMILY_COLORS


# --- data -------------------------------------------------------------------------------------------------------

class Point(NamedTuple):
    label: str
    family: str
    cap: int | None
    p95: tuple[float, float, float]
    throughput: tuple[float, float, float]
    feasible: bool
    tie: bool
    chosen: bool


class FrontierData(NamedTuple):
    scenario: str
    points: list[Point]
    required: float | None  # the constrained rule's throughput floor (jobs/min)
    slo_ms: float
    limit_ms: float | None = None  # the slo rule's P95 limit: the SLO, or the batch-absent bound x (1 + tolerance)
    bound: bool = False  # the limit is the batch-absent bound (no arm can meet the SLO)


def frontier_data(r) -> FrontierData:
    points = [Point(a.label, a.family, a.cap, (a.p95.mean, a.p95.ci_low, a.p95.ci_high),
                    (a.throughput.mean, a.throughput.ci_low, a.throughput.ci_high), a.feasible != "no",
                    a.label in r.tie_set, a.label == r.choice) for a in r.selection]
    ref = r.arm(r.reference)
    required = r.throughput_fraction * ref.throughput.mean if (r.rule == "constrained" and ref is not None) else None
    limit = r.limit_ms if r.rule == "slo" and r.limit_ms is not None and math.isfinite(r.limit_ms) else None
    return FrontierData(r.scenario, points, required, r.slo_p95_ms, limit, r.limit_kind == "bound")


class ConditionLine(NamedTuple):
    label: str
    family: str
    p95: list[tuple[float, float, float]]  # per condition
    throughput: list[tuple[float, float, float]]


class ConditionsData(NamedTuple):
    scenario: str
    conditions: list[str]
    lines: list[ConditionLine]


def contenders(r) -> list[str]:
    labels = [r.choice, r.best_static, r.best_adaptive, "adaptive-defaults", "priority"]
    return [x for x in dict.fromkeys(labels) if x and r.arm(x) is not None]


def conditions_data(r) -> ConditionsData:
    from simlab.experiments.stats import mean_ci

    lines = []
    for label in contenders(r):
        conf = r.arm(label, confirmation=True) is not None
        a = r.arm(label, confirmation=conf)
        units = r.confirmation_units if conf else r.selection_units
        per_p, per_t = [], []
        for c in r.conditions:
            mask = [u.condition == c for u in units]
            per_p.append(mean_ci([v for v, m in zip(a.p95_ms, mask) if m]))
            per_t.append(mean_ci([v for v, m in zip(a.throughput_per_min, mask) if m]))
        lines.append(ConditionLine(label, a.family, per_p, per_t))
    return ConditionsData(r.scenario, list(r.conditions), lines)


def load_level(condition: str) -> float | None:
    if condition == "base":
        return 1.0
    if condition.startswith("load-x"):
        try:
            return float(condition[len("load-x"):])
        except ValueError:
            return None
    return None


# --- drawing ----------------------------------------------------------------------------------------------------

def _err(t) -> list[list[float]]:
    m, lo, hi = t
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [[0.0], [0.0]]
    return [[m - lo], [hi - m]]


def draw_frontier(d: FrontierData):
    fig = style.new_figure()
    ax = fig.add_subplot()
    statics = sorted((p for p in d.points if p.family == "static"), key=lambda p: p.cap or 0)
    finite = sorted(p.p95[0] for p in statics if math.isfinite(p.p95[0])) or \
        sorted(p.p95[0] for p in d.points if math.isfinite(p.p95[0]))
    limit = 3 * finite[len(finite) // 2] if finite else math.inf
    shown = [p for p in d.points if math.isfinite(p.p95[0]) and p.p95[0] <= limit]
    off = [p for p in d.points if p not in shown]
    line = [p for p in statics if p in shown]
    if line:
        ax.plot([p.p95[0] for p in line], [p.throughput[0] for p in line], "-", color=FAMILY_COLORS["static"],
                alpha=0.5, lw=2, label="static caps, in cap order")
    for p in shown:
        color = FAMILY_COLORS.get(p.family, style.INK)
        marker = "*" if p.chosen else style.FAMILY_MARKERS.get(p.family, "o")
        ax.errorbar([p.p95[0]], [p.throughput[0]], xerr=_err(p.p95), yerr=_err(p.throughput), fmt=marker,
                    color=color, markersize=22 if p.chosen else 9, alpha=1 if p.feasible else 0.35, capsize=3,
                    zorder=4 if p.chosen else 3)
        if p.tie:
            ax.plot([p.p95[0]], [p.throughput[0]], "o", mfc="none", mec=style.INK, ms=20, mew=1.6, zorder=5)
    # the axes follow the deployable arms' CIs and every mean: a baseline's wide CI (unscheduled) runs off the edge
    # rather than squeezing the arms in contention into a corner
    xs = [v for p in shown for v in ((p.p95[0],) if p.family == "baseline" else p.p95)]
    ys = [v for p in shown for v in ((p.throughput[0],) if p.family == "baseline" else p.throughput)]
    if d.limit_ms is not None:
        xs.append(d.limit_ms)
    if d.required is not None:
        ys.append(d.required)
    span = _span(xs), _span(ys)
    if d.required is not None:
        ax.axhline(d.required, color=style.INK, ls="--", lw=1.8, label=f"required: {d.required:,.0f} jobs/min")
    if d.limit_ms is not None:
        ax.axvline(d.limit_ms, color=style.INK, ls="--", lw=1.8,
                   label=f"P95 limit: {d.limit_ms:,.0f} ms" + (" (batch-absent bound)" if d.bound else " (the SLO)"))
        if d.bound and math.isfinite(d.slo_ms):
            ax.axvline(d.slo_ms, color=style.INK, ls=":", lw=1.8, label=f"SLO: {d.slo_ms:,.0f} ms (no arm meets it)")
            xs.append(d.slo_ms)
            span = _span(xs), span[1]
    for lim, setter in zip(span, (ax.set_xlim, ax.set_ylim)):
        if lim is not None:
            setter(*lim)
    fig.draw_without_rendering()  # settle the layout: the labels are placed in pixels
    for (x, y), names in _labels(_labelled(shown, statics), ax).items():
        ax.annotate("\n".join(names), (x, y), textcoords="offset points", xytext=(8, 8), fontsize=LABEL_PT,
                    va="bottom", zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                                                 "alpha": 0.75})  # above the markers, readable over the CIs
    ax.set_xlabel("interactive P95 (ms), mean with 95% CI")
    ax.set_ylabel("batch throughput (jobs/min)")
    for family in dict.fromkeys(p.family for p in d.points if p.family != "static"):  # by marker and colour
        ax.plot([], [], style.FAMILY_MARKERS.get(family, "o"), color=FAMILY_COLORS.get(family, style.INK), ms=11,
                ls="", label="baselines (not deployable)" if family == "baseline" else family)
    handles = [("*", "the choice", 18), ("o", "ringed: tie set", 14)]
    for marker, text, size in handles:
        ax.plot([], [], marker, color=style.INK, mfc="none" if "ringed" in text else style.INK, ms=size, ls="",
                label=text)
    for p in off:
        ax.plot([], [], " ", label=f"off the chart: {p.label} (P95 {p.p95[0]:,.0f} ms)")
    ax.legend(loc="best", fontsize=12)
    style.title(fig, f"{d.scenario}: the static frontier and every arm (selection units)")
    return fig


def _span(values: list[float], pad: float = 0.06) -> tuple[float, float] | None:
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return None
    lo, hi = min(v), max(v)
    width = hi - lo or abs(hi) or 1.0
    return lo - pad * width, hi + pad * width


LABEL_PT = 13
MOST_NAMES = 6  # one label lists at most this many arms, then "+N more"


def _labels(points: list[Point], ax) -> dict[tuple[float, float], list[str]]:
    """One annotation per cluster, one name a line: labels that would print over each other (arms that measured
    the same or nearly, e.g. gates that behave as a static cap) are merged into one, at the place of the first,
    until no two overlap. Measured in pixels with the text's approximate extent; the chosen arm and the tie set
    come first."""
    line = LABEL_PT * style.DPI / 72 * 1.25
    char = LABEL_PT * style.DPI / 72 * 0.6
    pad = LABEL_PT * style.DPI / 72 * 8 / 13  # the 8-point offset
    clusters = []  # [anchor (x, y) in data, left px, bottom px, names]
    for p in sorted(points, key=lambda p: (not p.chosen, not p.tie)):
        px, py = ax.transData.transform((p.p95[0], p.throughput[0]))
        clusters.append([(p.p95[0], p.throughput[0]), px + pad, py + pad,
                         [f"cap {p.cap}" if p.family == "static" else p.label]])

    def shown(names):
        more = len(names) - MOST_NAMES
        return names if more <= 0 else names[:MOST_NAMES - 1] + [f"+{more + 1} more"]

    def box(c):
        names = shown(c[3])
        return c[1], c[2], c[1] + char * max(len(n) for n in names), c[2] + line * len(names)

    def overlap(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    merged = True
    while merged:
        merged = False
        for i, j in ((i, j) for i in range(len(clusters)) for j in range(i + 1, len(clusters))):
            if overlap(box(clusters[i]), box(clusters[j])):
                clusters[i][3] += clusters.pop(j)[3]
                merged = True
                break
    return {c[0]: shown(c[3]) for c in clusters}


def _labelled(shown: list[Point], statics: list[Point]) -> list[Point]:
    """Name the chosen arm, the tie set, the non-static arms and the ends of the static line; not every cap."""
    ends = {statics[0].label, statics[-1].label} if statics else set()
    return [p for p in shown if p.chosen or p.tie or p.family != "static" or p.label in ends]


def draw_conditions(d: ConditionsData):
    fig = style.new_figure()
    axes = fig.subplots(1, 2)
    colors = style.policy_colors([ln.label for ln in d.lines])
    xs = np.arange(len(d.conditions))
    for i, ln in enumerate(d.lines):
        nudge = (i - (len(d.lines) - 1) / 2) * 0.08
        for ax, values in zip(axes, (ln.p95, ln.throughput)):
            m = [v[0] for v in values]
            err = [[v[0] - v[1] if math.isfinite(v[1]) else 0 for v in values],
                   [v[2] - v[0] if math.isfinite(v[2]) else 0 for v in values]]
            ax.errorbar(xs + nudge, m, yerr=err, marker="D" if ln.family == "static" else "o", capsize=4,
                        color=colors[ln.label], label=ln.label, lw=2)
    for ax, label in zip(axes, ("interactive P95 (ms)", "batch throughput (jobs/min)")):
        ax.set_xticks(xs, d.conditions, rotation=25, ha="right")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=12)
    style.title(fig, f"{d.scenario}: the choice and its contenders on each held-out condition")
    return fig


def draw_load(d: ConditionsData):
    levels = [(load_level(c), i) for i, c in enumerate(d.conditions)]
    levels = sorted((x, i) for x, i in levels if x is not None)
    if len(levels) < 2:
        return None
    fig = style.new_figure()
    axes = fig.subplots(1, 2)
    colors = style.policy_colors([ln.label for ln in d.lines])
    for ln in d.lines:
        for ax, values in zip(axes, (ln.p95, ln.throughput)):
            xs = [x for x, _ in levels]
            m = [values[i][0] for _, i in levels]
            ax.plot(xs, m, marker="D" if ln.family == "static" else "o", color=colors[ln.label], label=ln.label)
    for ax, label in zip(axes, ("interactive P95 (ms)", "batch throughput (jobs/min)")):
        ax.set_xscale("log")
        ax.set_xticks([x for x, _ in levels], [f"x{x:g}" for x, _ in levels])
        ax.minorticks_off()
        ax.set_xlabel("interactive load multiplier")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=12)
    style.title(fig, f"{d.scenario}: P95 and throughput across the held-out load levels")
    return fig


class BurstData(NamedTuple):
    scenario: str
    condition: str
    seed: int
    series: dict  # arm label -> (t_ms, batch_cap, in_flight_batch, interactive waiting) arrays


def burst_data(r, out: Path) -> BurstData | None:
    from simlab.experiments.runfiles import load_series

    if not r.confirmation_units or not r.choice:
        return None
    other = r.best_static if r.arm(r.choice).family == "adaptive" else r.best_adaptive
    if not other or other == r.choice:
        return None
    unit = r.confirmation_units[0]
    series = {}
    for label in (other, r.choice):
        f = Path(out) / "confirmation" / unit.condition / "runs" / label / f"seed-{unit.seed}" / "series.csv"
        if not f.is_file():
            return None
        s = load_series(f)
        series[label] = (s["t_ms"].to_numpy(), s["batch_cap"].to_numpy(), s["in_flight_batch"].to_numpy(),
                         (s["in_flight_interactive"] + s["queued_interactive"]).to_numpy())
    return BurstData(r.scenario, unit.condition, unit.seed, series)


def draw_burst(d: BurstData):
    from matplotlib.ticker import MaxNLocator

    first = next(iter(d.series.values()))
    t, load = first[0], first[3]
    if len(t) < 10:
        return None
    span = max(30_000.0, (t[-1] - t[0]) / 10)
    step = float(np.median(np.diff(t))) or 1.0
    width = max(1, int(span / step))
    k = int(np.argmax(np.convolve(load, np.ones(width), mode="valid"))) if len(load) > width else 0
    lo, hi = max(t[0], t[k] - span / 2), min(t[-1], t[k] + 1.5 * span)
    fig = style.new_figure()
    axes = fig.subplots(2, 1, sharex=True)
    colors = style.policy_colors(list(d.series))
    for label, (ts, cap, batch, waiting) in d.series.items():
        w = (ts >= lo) & (ts <= hi)
        x = ts[w] / 1000
        axes[0].step(x, cap[w], where="post", color=colors[label], label=f"{label}: batch cap")
        axes[0].plot(x, batch[w], color=colors[label], alpha=0.45, lw=1.2, label=f"{label}: batch in flight")
        axes[1].plot(x, waiting[w], color=colors[label], label=label, lw=2)
    for ax in axes:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of tasks: whole numbers only
        ax.legend(fontsize=12, loc="upper left", bbox_to_anchor=(1.01, 1))
    axes[0].set_ylabel("batch slots")
    axes[1].set_ylabel("interactive in flight\n+ queued")
    axes[1].set_xlabel(f"simulated time (s), condition {d.condition}, seed {d.seed}")
    style.title(fig, f"{d.scenario}: the batch cap under the busiest burst")
    return fig


def decision_figures(r, out: Path) -> list[str]:
    """Draw every figure the record supports into OUT/figures/; their paths relative to OUT, in display order."""
    target = Path(out) / "figures"
    made = []
    with style.context():
        cond = conditions_data(r)
        burst = burst_data(r, out)
        for name, fig in (("frontier", draw_frontier(frontier_data(r))),
                          ("conditions", draw_conditions(cond) if cond.lines and len(cond.conditions) > 1 else None),
                          ("load", draw_load(cond) if cond.lines else None),
                          ("burst", draw_burst(burst) if burst is not None else None)):
            if fig is None:
                for ext in ("png", "svg"):
                    (target / f"{name}.{ext}").unlink(missing_ok=True)
                continue
            style.save(fig, target, name)
            made.append(f"figures/{name}.png")
    return made
