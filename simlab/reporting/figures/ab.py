"""Figures for an A/B output directory (what `simlab ab` writes), for slides and for `report.md`.

`ab_figures(out, record)` draws from the A/B record (simlab/records.py: aggregates, bounds, options) and the first
seed's per-run files runs/POLICY/seed-N/{tasks,series}.csv that the runner keeps; without a record it loads
out/result.json, so it can be rerun on an old result. Each figure is written as PNG and SVG under out/figures/; a
figure whose input is missing is skipped (and any stale copy removed).

1. latency_cdf         interactive end-to-end latency CDF per policy, SLO and 0.95 marked
2. rolling_p95         interactive P95 over the scheduler's sliding window (windowMs), per policy, SLO marked
3. batch_cap_inflight  per policy: batch cap in force, batch and interactive tasks in flight, maxConcurrency
4. queues              per policy and queue: tasks waiting at the scheduler (per class) and at the backend
5. tradeoff            batch throughput against interactive P95, means with 95% CIs over all seeds
"""

from __future__ import annotations

import logging
import math
import textwrap
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import Bbox, blended_transform_factory

from simlab.reporting.figures import style

log = logging.getLogger(__name__)

FIGURES = ("latency_cdf", "rolling_p95", "batch_cap_inflight", "queues", "tradeoff")
CAPTIONS = {
    "latency_cdf": "Interactive end-to-end latency, cumulative distribution per policy (first seed). Where a curve "
                   "crosses 0.95 is that policy's P95; the SLO is marked.",
    "rolling_p95": "Interactive P95 over the scheduler's sliding window as the run goes on, per policy, against the "
                   "SLO: the time spent above it is what success criterion 1 judges.",
    "batch_cap_inflight": "Per policy: batch tasks in flight (light), interactive tasks in flight (dark, on top), the "
                          "batch cap in force (solid line) and maxConcurrency (dashed).",
    "queues": "Per policy: tasks waiting at the scheduler, per class, and in the backend's own queue.",
    "tradeoff": "Batch throughput against interactive P95, means over all seeds with 95% CIs: up and to the left is "
                "better. Dotted lines: the bounds (P95 with batch absent, throughput of batch alone).",
}
MAX_POINTS = 4000  # per line; more is invisible at 150 dpi and only slows rendering


class MissingInput(Exception):
    """The figure's input is not in the directory (or holds nothing to draw): skip the figure."""


# --- reading the directory -------------------------------------------------------------------------------
class AbDir:
    def __init__(self, out: Path, record=None):
        from simlab.errors import InputError
        from simlab.records import load

        self.out = Path(out)
        if record is None:
            try:
                record = load(self.out / "result.json", "ab")
            except InputError as exc:
                raise MissingInput(str(exc)) from None
        self.record = record
        self.scenario = record.scenario
        self.slo = _float(record.slo_p95_ms)
        self.options = record.options
        self.window_ms = _float(self.options.get("windowMs")) or 10_000.0
        self.max_concurrency = _float(self.options.get("maxConcurrency"))
        self.policies = list(record.policies)
        self.seeds = list(record.seeds)
        self.colors = style.policy_colors(self.policies)
        self.markers = style.policy_markers(self.policies)
        self._tasks: dict[str, pd.DataFrame | None] = {}
        self._series: dict[str, pd.DataFrame | None] = {}

    def _run_file(self, policy: str, name: str) -> Path | None:
        """The first seed's file; failing that, the lowest seed that has one."""
        base = self.out / "runs" / policy
        if self.seeds and (base / f"seed-{self.seeds[0]}" / name).is_file():
            return base / f"seed-{self.seeds[0]}" / name
        found = []
        for p in base.glob(f"seed-*/{name}"):
            try:
                found.append((int(p.parent.name.removeprefix("seed-")), p))
            except ValueError:
                continue
        return min(found)[1] if found else None

    def seed_of(self, path: Path) -> str:
        return path.parent.name.removeprefix("seed-")

    def _read(self, path: Path | None, columns: dict) -> pd.DataFrame | None:
        if path is None:
            return None
        try:
            df = pd.read_csv(path, usecols=list(columns), dtype=columns)
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None
        return df

    def _read_tasks(self, path: Path | None, columns: list[str]) -> pd.DataFrame | None:
        if path is None:
            return None
        from simlab.experiments.runfiles import load_tasks

        try:
            return load_tasks(path, columns)
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None

    def tasks(self, policy: str) -> pd.DataFrame | None:
        if policy not in self._tasks:
            path = self._run_file(policy, "tasks.parquet") or self._run_file(policy, "tasks.csv")
            df = self._read_tasks(path, ["kind", "arrival_ms", "end_ms", "outcome"])
            if df is not None:
                df.attrs["seed"] = self.seed_of(path)
            self._tasks[policy] = df
        return self._tasks[policy]

    def series(self, policy: str) -> pd.DataFrame | None:
        if policy not in self._series:
            path = self._run_file(policy, "series.csv")
            cols = dict.fromkeys(
                ["t_ms", "batch_cap", "in_flight_interactive", "in_flight_batch", "queued_interactive",
                 "queued_batch", "backend_waiting"], "float64")
            df = self._read(path, cols)
            if df is not None:
                df = df.sort_values("t_ms", kind="stable").reset_index(drop=True)
                df.attrs["seed"] = self.seed_of(path)
            self._series[policy] = df
        return self._series[policy]

    def interactive_latencies(self, policy: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(end_ms, latency_ms) of the interactive tasks that completed, sorted by end_ms."""
        df = self.tasks(policy)
        if df is None:
            return None
        done = (df["kind"] == "interactive") & (df["outcome"] == "ok") & df["end_ms"].notna() & df["arrival_ms"].notna()
        done = done.fillna(False).to_numpy(dtype=bool)
        end = df["end_ms"].to_numpy(dtype=float)[done]
        lat = end - df["arrival_ms"].to_numpy(dtype=float)[done]
        if len(lat) == 0:
            return None
        order = np.argsort(end, kind="stable")
        return end[order], lat[order]

    def seed_label(self, frames) -> str:
        seeds = sorted({f.attrs.get("seed") for f in frames if f is not None} - {None}, key=str)
        return f"seed {seeds[0]}" if len(seeds) == 1 else "seeds " + ", ".join(seeds)


def _float(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _fmt_ms(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _thin(n: int, keep_tail: int = 0) -> np.ndarray:
    """Indices of at most ~MAX_POINTS of n points, evenly spread, plus the last `keep_tail` (a CDF's tail)."""
    if n <= MAX_POINTS:
        return np.arange(n)
    idx = np.linspace(0, n - 1, MAX_POINTS - keep_tail).astype(np.int64)
    if keep_tail:
        idx = np.concatenate([idx, np.arange(max(0, n - keep_tail), n)])
    return np.unique(idx)


# --- 1. latency CDF -----------------------------------------------------------------------------------
class LatencyCdf(NamedTuple):
    scenario: str
    seeds: str  # "seed 1"
    slo: float | None
    colors: dict[str, str]
    latencies: dict[str, np.ndarray]  # policy -> its completed interactive latencies, sorted


def latency_cdf_data(d: AbDir) -> LatencyCdf:
    lats = {p: d.interactive_latencies(p) for p in d.policies}
    lats = {p: np.sort(v[1]) for p, v in lats.items() if v is not None}
    if not lats:
        raise MissingInput("no completed interactive tasks")
    return LatencyCdf(d.scenario, d.seed_label([d.tasks(p) for p in lats]), d.slo, d.colors, lats)


def latency_cdf(c: LatencyCdf):
    fig = style.new_figure()
    ax = fig.subplots()
    lats = c.latencies
    lo = min(float(v[0]) for v in lats.values())
    hi = max(float(v[-1]) for v in lats.values())
    if c.slo:
        hi = max(hi, c.slo)
    log_x = lo > 0 and hi / lo > 100
    for p, x in lats.items():
        n = len(x)
        y = np.arange(1, n + 1) / n
        idx = _thin(n, keep_tail=min(n, 1000))
        p95 = float(np.percentile(x, 95))
        ax.plot(x[idx], y[idx], drawstyle="steps-post", color=c.colors[p], label=f"{p}: P95 {_fmt_ms(p95)} ms")
    if log_x:
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.3, hi * 1.6)
        style.plain_log_ticks(ax.xaxis)
    else:
        ax.set_xlim(0, hi * 1.08)
    ax.set_ylim(0, 1.02)
    ax.axhline(0.95, color=style.REF_GREY, lw=2, ls=":", zorder=1)
    ax.text(0.01, 0.95, "0.95 (P95)", transform=blended_transform_factory(ax.transAxes, ax.transData),
            ha="left", va="bottom", color=style.REF_GREY, fontsize=15)
    if c.slo:
        ax.axvline(c.slo, color=style.INK, lw=2.5, ls="--", zorder=1)
        ax.text(c.slo, 0.5, f"SLO {_fmt_ms(c.slo)} ms ", transform=blended_transform_factory(ax.transData, ax.transAxes),
                rotation=90, ha="right", va="center", color=style.INK, fontsize=15)
    ax.set_xlabel("interactive end-to-end latency (ms" + (", log scale)" if log_x else ")"))
    ax.set_ylabel("fraction of requests ≤ latency")
    style.title(fig, f"{c.scenario}: interactive latency CDF ({c.seeds})")
    ax.legend(loc="best")
    return fig


# --- 2. rolling P95 -----------------------------------------------------------------------------------
def rolling_p95(end: np.ndarray, lat: np.ndarray, window_ms: float, min_periods: int = 5, points: int = 2000):
    """P95 of the latencies completed in (t - window_ms, t], on a regular grid of t over the run (NaN where
    fewer than `min_periods` completed). One pass of pandas' time-based rolling quantile over the completions
    with the grid instants mixed in as empty (NaN) observations, so a window also empties between completions."""
    end = np.asarray(end, dtype=float)
    lat = np.asarray(lat, dtype=float)
    if len(end) == 0:
        return np.array([]), np.array([])
    span = float(end.max())
    step = max(span / points, 1.0)
    grid = np.arange(0.0, span + step, step)
    times = np.concatenate([end, grid])
    values = np.concatenate([lat, np.full(len(grid), np.nan)])
    order = np.argsort(times, kind="stable")  # a completion at a grid instant counts in that instant's window
    s = pd.Series(values[order], index=pd.to_timedelta(times[order], unit="ms"))
    p95 = s.rolling(pd.Timedelta(milliseconds=window_ms), min_periods=min_periods).quantile(0.95).to_numpy()
    is_grid = np.zeros(len(times), dtype=bool)
    is_grid[len(end):] = True
    return grid, p95[is_grid[order]]


class RollingP95(NamedTuple):
    scenario: str
    seeds: str
    slo: float | None
    window_ms: float
    colors: dict[str, str]
    lines: dict[str, tuple[np.ndarray, np.ndarray]]  # policy -> (t_ms, window P95 ms)


def rolling_p95_data(d: AbDir) -> RollingP95:
    lines = {}
    for p in d.policies:
        v = d.interactive_latencies(p)
        if v is not None:
            t, p95 = rolling_p95(v[0], v[1], d.window_ms)
            if np.isfinite(p95).any():
                lines[p] = (t, p95)
    if not lines:
        raise MissingInput("no completed interactive tasks")
    return RollingP95(d.scenario, d.seed_label([d.tasks(p) for p in lines]), d.slo, d.window_ms, d.colors, lines)


def rolling_p95_figure(r: RollingP95):
    lines = r.lines
    fig = style.new_figure()
    ax = fig.subplots()
    for p, (t, p95) in lines.items():
        ax.plot(t / 1000.0, p95, color=r.colors[p], label=p)
    vals = np.concatenate([v[1][np.isfinite(v[1])] for v in lines.values()])
    lo, hi = float(vals.min()), float(vals.max())
    if r.slo:
        ax.axhline(r.slo, color=style.INK, lw=2.5, ls="--", zorder=1)
        ax.text(0.995, r.slo, f"SLO {_fmt_ms(r.slo)} ms", transform=blended_transform_factory(ax.transAxes, ax.transData),
                ha="right", va="bottom", color=style.INK, fontsize=15)
        hi = max(hi, r.slo)
    if lo > 0 and hi / lo > 10:  # e.g. P95 around 60 ms against an SLO of 500 ms: spread the lines out
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.3, hi * 1.5)
        style.plain_log_ticks(ax.yaxis)
        scale = ", log scale"
    else:
        ax.set_ylim(0, hi * 1.12)
        scale = ""
    ax.set_xlim(left=0)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(f"interactive P95 (ms{scale})")
    style.title(fig, f"{r.scenario}: interactive P95 over a sliding {r.window_ms / 1000:g} s window ({r.seeds})")
    # above the axes, not over the lines (an axes legend, so constrained layout keeps it clear of the title)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=min(len(lines), 5), frameon=False)
    return fig


# --- small multiples ---------------------------------------------------------------------------------------
def _grid(n: int) -> tuple[int, int]:
    if n <= 3:
        return n, 1
    return math.ceil(n / 2), 2


def _time_panels(colors: dict[str, str], policies: list[str], height_per_row: float, sharey: bool = True):
    rows, cols = _grid(len(policies))
    fig = style.new_figure(size=(style.WIDE[0] + (1.5 if cols == 2 else 0), 1.6 + height_per_row * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=sharey, squeeze=False)).ravel()
    for ax in axes[len(policies):]:
        ax.set_visible(False)
    for ax, p in zip(axes, policies):
        ax.set_title(p, color=colors[p], loc="left")
    # a hidden last panel leaves the panel above it as the bottom of its column: give it tick labels back
    for i, ax in enumerate(axes[: len(policies)]):
        if i + cols >= len(policies):
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("simulated time (s)")
    return fig, axes[: len(policies)]


class RunSeries(NamedTuple):
    """The time series of one run per policy (the first seed's), for the figures over simulated time."""
    scenario: str
    seeds: str
    max_concurrency: float | None
    colors: dict[str, str]
    series: dict[str, pd.DataFrame]  # policy -> series.csv's columns, by time


def run_series_data(d: AbDir) -> RunSeries:
    series = {p: d.series(p) for p in d.policies}
    series = {p: s for p, s in series.items() if s is not None and len(s)}
    if not series:
        raise MissingInput("no series.csv")
    return RunSeries(d.scenario, d.seed_label(series.values()), d.max_concurrency, d.colors, series)


def batch_cap_inflight(r: RunSeries):
    series = r.series
    # One policy with thousands in flight (unscheduled) would flatten the others on a shared scale.
    peaks = [max(1.0, float((s["in_flight_interactive"] + s["in_flight_batch"]).max())) for s in series.values()]
    fig, axes = _time_panels(r.colors, list(series), 3.3, sharey=max(peaks) / min(peaks) <= 3)
    top = 1.0
    for ax, (p, s) in zip(axes, series.items()):
        t = s["t_ms"].to_numpy() / 1000.0
        b = s["in_flight_batch"].fillna(0).to_numpy()
        i = s["in_flight_interactive"].fillna(0).to_numpy()
        cap = s["batch_cap"].to_numpy(dtype=float)
        cap = np.where(np.isfinite(cap), cap, np.nan)
        color = r.colors[p]
        ax.fill_between(t, 0, b, step="post", color=style.tint(color, 0.6), lw=0)
        ax.fill_between(t, b, b + i, step="post", color=color, lw=0)
        if np.isfinite(cap).any():
            ax.plot(t, cap, drawstyle="steps-post", color=style.INK, lw=3)
        else:
            ax.set_title("no batch cap", loc="right", fontsize=15, fontweight="normal", color=style.REF_GREY)
        if r.max_concurrency:
            ax.axhline(r.max_concurrency, color=style.INK, ls="--", lw=2.2, dashes=(5, 3), zorder=3)
        top = max(top, float(np.nanmax(b + i)), float(np.nanmax(cap)) if np.isfinite(cap).any() else 0.0)
        ax.set_xlim(0, t[-1] if len(t) and t[-1] > 0 else None)
    if r.max_concurrency:
        top = max(top, r.max_concurrency)
    axes[0].set_ylim(0, top * 1.1)
    fig.supylabel("tasks in flight")
    handles = [
        Patch(color=style.tint("#555555", 0.6), label="batch in flight (light)"),
        Patch(color="#555555", label="interactive in flight (dark), on top"),
        Line2D([], [], color=style.INK, lw=3, label="batch cap in force"),
    ]
    if r.max_concurrency:
        handles.append(Line2D([], [], color=style.INK, lw=2.2, ls="--", dashes=(5, 3),
                              label=f"maxConcurrency = {r.max_concurrency:g}"))
    # below the panels: matplotlib puts an "outside upper" figure legend over the title
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles) if len(handles) <= 2 else 2, frameon=False)
    style.title(fig, f"{r.scenario}: batch cap and tasks in flight ({r.seeds})")
    return fig


QUEUES = [
    ("queued_interactive", "interactive queue (scheduler)"),
    ("queued_batch", "batch queue (scheduler)"),
    ("backend_waiting", "backend queue (both classes)"),
]


def queues(r: RunSeries):
    series = r.series
    # a queue that stayed empty under every policy gets no column (e.g. a backend without a queue)
    cols = [(c, title) for c, title in QUEUES if any(s[c].fillna(0).to_numpy().any() for s in series.values())]
    never = [title for c, title in QUEUES if (c, title) not in cols]
    if not cols:
        raise MissingInput("no task ever waited in a queue")
    n = len(series)
    fig = style.new_figure(size=(max(4.6 * len(cols) + 2.2, 11.0), 1.9 + 2.0 * n + (0.5 if len(cols) < len(QUEUES) else 0)))
    axes = fig.subplots(n, len(cols), sharex=True, sharey="col", squeeze=False)
    t_end = max(float(s["t_ms"].iloc[-1]) for s in series.values()) / 1000.0
    for row, (p, s) in enumerate(series.items()):
        t = s["t_ms"].to_numpy() / 1000.0
        color = r.colors[p]
        for c, (col, title) in enumerate(cols):
            ax = axes[row, c]
            y = s[col].fillna(0).to_numpy()
            ax.fill_between(t, 0, y, step="post", color=style.tint(color, 0.6), lw=0)
            ax.plot(t, y, drawstyle="steps-post", color=color, lw=2.2)
            if not y.any():
                ax.text(0.5, 0.5, "always empty", transform=ax.transAxes, ha="center", va="center",
                        color=style.REF_GREY, fontsize=15, style="italic",
                        bbox=dict(boxstyle="round,pad=0.25", fc="white", ec="none"))
            if row == 0:
                ax.set_title(title, fontsize=17)
            if c == 0:
                ax.set_ylabel(p, color=color, fontweight="bold", fontsize=17)
            ax.set_xlim(0, t_end or None)
            ax.yaxis.get_major_locator().set_params(integer=True)
    for c in range(len(cols)):
        axes[0, c].set_ylim(bottom=0)
        if axes[0, c].get_ylim()[1] < 1:
            axes[0, c].set_ylim(0, 1)
    label = "simulated time (s)"
    if never:  # wrapped: a figure label is never shrunk to fit
        label += "\n" + "\n".join(textwrap.wrap(f"always empty under every policy: {', '.join(never)}",
                                                width=int(fig.get_figwidth() * 72 / (18 * 0.58))))
    fig.supxlabel(label)
    fig.supylabel("tasks waiting")
    style.title(fig, f"{r.scenario}: queue lengths ({r.seeds})")
    return fig


# --- 5. trade-off -------------------------------------------------------------------------------------
X_METRIC, Y_METRIC = "interactive_p95_ms", "batch_throughput_per_min"


def _bound(d: AbDir, name: str, metric: str) -> float | None:
    i = d.record.bound(name, metric)
    return None if i is None else i.mean


class Tradeoff(NamedTuple):
    scenario: str
    n_seeds: int | None
    colors: dict[str, str]
    markers: dict[str, str]
    points: dict[str, dict[str, float | None]]  # policy -> {metric_mean, metric_ci_low, metric_ci_high}
    no_batch: float | None  # the bound: interactive P95 with batch absent
    alone: float | None  # the bound: batch throughput alone


def tradeoff_data(d: AbDir) -> Tradeoff:
    """From the record alone (means and CIs over every seed): no run file is read."""
    pts = {}
    for p in d.policies:
        row = {f"{m}_{s}": _float(getattr(d.record.interval(p, m), s))
               for m in (X_METRIC, Y_METRIC) for s in ("mean", "ci_low", "ci_high")}
        if row[f"{X_METRIC}_mean"] is not None and row[f"{Y_METRIC}_mean"] is not None:
            pts[p] = row
    if not pts:
        raise MissingInput("no policy with both an interactive P95 and a batch throughput (no batch work?)")
    return Tradeoff(d.scenario, len(d.seeds) or None, d.colors, d.markers, pts,
                    _bound(d, "bound-no-batch", X_METRIC), _bound(d, "bound-batch-alone", Y_METRIC))


def tradeoff(t: Tradeoff):
    pts, n_seeds, no_batch, alone = t.points, t.n_seeds, t.no_batch, t.alone
    fig = style.new_figure()
    ax = fig.subplots()

    def val(row, m, s):
        return row[f"{m}_{s}"] if row[f"{m}_{s}"] is not None else row[f"{m}_mean"]

    xs = [v for r in pts.values() for v in (val(r, X_METRIC, "ci_low"), val(r, X_METRIC, "ci_high"))]
    ys = [v for r in pts.values() for v in (val(r, Y_METRIC, "ci_low"), val(r, Y_METRIC, "ci_high"))]
    for v, into in ((no_batch, xs), (alone, ys)):
        if v is not None:
            into.append(v)
    log_x = min(xs) > 0 and max(xs) / min(xs) > 20
    fx = np.log10 if log_x else (lambda v: np.asarray(v, dtype=float))
    gx = (lambda v: 10.0 ** np.asarray(v)) if log_x else (lambda v: v)
    x0, x1 = float(fx(min(xs))), float(fx(max(xs)))
    y0, y1 = min(ys), max(ys)
    xspan = (x1 - x0) or max(abs(x1) * 0.2, 1.0)
    yspan = (y1 - y0) or max(abs(y1) * 0.2, 1.0)
    # the better corner (low P95, high throughput: top left) gets room of its own for the arrow
    xlim = (float(gx(x0 - 0.42 * xspan)), float(gx(x1 + 0.22 * xspan)))
    ylim = (y0 - 0.18 * yspan, y1 + 0.45 * yspan)
    if log_x:
        ax.set_xscale("log")
    elif xlim[0] < 0 <= x0:
        xlim = (0.0, xlim[1])
    if ylim[0] < 0 <= y0:
        ylim = (0.0, ylim[1])
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)

    for p, r in pts.items():
        x, y = r[f"{X_METRIC}_mean"], r[f"{Y_METRIC}_mean"]
        xerr = [[x - val(r, X_METRIC, "ci_low")], [val(r, X_METRIC, "ci_high") - x]]
        yerr = [[y - val(r, Y_METRIC, "ci_low")], [val(r, Y_METRIC, "ci_high") - y]]
        ax.errorbar([x], [y], xerr=np.clip(xerr, 0, None), yerr=np.clip(yerr, 0, None), color=t.colors[p],
                    marker=t.markers[p], markersize=15, markeredgecolor="white", markeredgewidth=1.5,
                    elinewidth=3, capthick=3, ls="none", zorder=4)

    # the bounds: dotted lines, named on the top and right edges where they can cover no point
    if no_batch is not None:
        ax.axvline(no_batch, color=style.REF_GREY, ls=":", lw=2.2, zorder=1)
        top = ax.secondary_xaxis("top")
        top.set_xticks([no_batch], [f"P95 with no batch\n{_fmt_ms(no_batch)} ms"])
        top.tick_params(colors=style.REF_GREY, labelsize=14, length=0)
        top.grid(False)
    if alone is not None:
        ax.axhline(alone, color=style.REF_GREY, ls=":", lw=2.2, zorder=1)
        right = ax.secondary_yaxis("right")
        right.set_yticks([alone], [f"batch alone\n{alone:,.0f}/min"])
        right.tick_params(colors=style.REF_GREY, labelsize=14, length=0)
        right.grid(False)
    better = ax.annotate(
        "better:\nlower P95,\nmore batch", xy=(0.015, 0.975), xycoords="axes fraction",
        xytext=(0.14, 0.80), textcoords="axes fraction", ha="center", va="center", fontsize=16,
        color=style.INK, fontweight="bold",
        arrowprops=dict(arrowstyle="-|>", lw=3, color=style.INK, mutation_scale=28, shrinkA=4, shrinkB=0),
    )
    ax.set_xlabel("interactive P95 latency (ms" + (", log scale" if log_x else "") + ")   ← lower is better")
    ax.set_ylabel("batch throughput (jobs/min)\nhigher is better →")
    if log_x:
        style.plain_log_ticks(ax.xaxis)
    style.title(fig, f"{t.scenario}: batch throughput vs interactive P95")
    note = {None: "bars: 95% CI", 1: "one seed: no confidence interval"}.get(n_seeds, f"means over {n_seeds} seeds, bars: 95% CI")
    ax.set_title(note, fontsize=16, fontweight="normal", color=style.REF_GREY, loc="right")

    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # settle the layout before measuring where labels fit
    fig.set_layout_engine("none")
    avoid = [better.get_window_extent(renderer)]
    to_px = ax.transData.transform
    for r in pts.values():  # the error bars: a label on one would hide where a CI ends
        x, y = r[f"{X_METRIC}_mean"], r[f"{Y_METRIC}_mean"]
        (ax0, ay0), (ax1, _) = to_px((val(r, X_METRIC, "ci_low"), y)), to_px((val(r, X_METRIC, "ci_high"), y))
        avoid.append(Bbox([[min(ax0, ax1), ay0 - 4], [max(ax0, ax1), ay0 + 4]]))
        (bx0, by0), (_, by1) = to_px((x, val(r, Y_METRIC, "ci_low"))), to_px((x, val(r, Y_METRIC, "ci_high")))
        avoid.append(Bbox([[bx0 - 4, min(by0, by1)], [bx0 + 4, max(by0, by1)]]))
    _label_points(ax, renderer, [(p, r[f"{X_METRIC}_mean"], r[f"{Y_METRIC}_mean"]) for p, r in pts.items()],
                  t.colors, avoid)
    return fig


def _label_points(ax, renderer, points, colors, avoid):
    """Name each point, in its colour, at the first nearby spot that covers no other label, point or note."""
    to_px = ax.transData.transform
    frame = ax.get_window_extent(renderer)
    dots = [Bbox.from_bounds(*(to_px((x, y)) - 16), 32, 32) for _, x, y in points]
    placed = list(avoid)
    for k, (name, x, y) in enumerate(points):
        best = None
        for radius in (20, 34, 52, 75, 100):
            for angle in (0, 35, -35, 180, 145, -145, 90, -90):
                dx, dy = radius * math.cos(math.radians(angle)), radius * math.sin(math.radians(angle))
                ha = "left" if dx > 5 else "right" if dx < -5 else "center"
                va = "bottom" if dy > 5 else "top" if dy < -5 else "center"
                ann = ax.annotate(
                    name, (x, y), xytext=(dx, dy), textcoords="offset pixels", ha=ha, va=va, fontsize=17,
                    fontweight="bold", color=colors[name], zorder=6,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85),
                    arrowprops=None if radius <= 20 else dict(arrowstyle="-", color=colors[name], lw=1.8, shrinkA=0, shrinkB=9),
                )
                ann.set_in_layout(False)
                box = ann.get_window_extent(renderer)
                others = placed + [b for j, b in enumerate(dots) if j != k]
                overlap = sum(_overlap(box, o) for o in others)
                outside = box.width * box.height - _overlap(box, frame)
                cost = overlap + 4 * outside + radius * 0.01
                if best is None or cost < best[0]:
                    if best is not None:
                        best[1].remove()
                    best = (cost, ann, box)
                else:
                    ann.remove()
                if cost < 1:
                    break
            if best[0] < 1:
                break
        placed.append(best[2].padded(4))


def _overlap(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


# --- entry point ------------------------------------------------------------------------------------------
# name -> (its data, built once from the record and the run files; the drawing of that data)
BUILDERS = {
    "latency_cdf": (latency_cdf_data, latency_cdf),
    "rolling_p95": (rolling_p95_data, rolling_p95_figure),
    "batch_cap_inflight": (run_series_data, batch_cap_inflight),
    "queues": (run_series_data, queues),
    "tradeoff": (tradeoff_data, tradeoff),
}


def ab_figures(out_dir, record=None, strict: bool = False) -> list[str]:
    """Write out_dir/figures/NAME.{png,svg} for every figure whose input exists; return the PNG paths relative
    to out_dir, in FIGURES order. `record`: the AbRecord (default: out_dir/result.json). A figure that fails for
    another reason is logged and skipped unless `strict` (so a plotting bug never costs the user the report of a
    finished experiment)."""
    out = Path(out_dir)
    target = out / "figures"
    try:
        d = AbDir(out, record)
    except MissingInput as exc:
        log.warning("no figures: %s", exc)
        for name in FIGURES:
            _remove_stale(target, name)
        return []
    written, data = [], {}
    with style.context():
        for name in FIGURES:
            build, draw = BUILDERS[name]
            try:
                if build not in data:
                    data[build] = build(d)
                fig = draw(data[build])
                target.mkdir(parents=True, exist_ok=True)
                style.save(fig, target, name)
            except MissingInput as exc:
                log.info("figure %s skipped: %s", name, exc)
                _remove_stale(target, name)
                continue
            except Exception as exc:  # noqa: BLE001
                if strict:
                    raise
                log.warning("figure %s failed, skipped: %s: %s", name, type(exc).__name__, exc)
                _remove_stale(target, name)
                continue
            written.append(f"figures/{name}.png")
    return written


def _remove_stale(target: Path, name: str) -> None:
    for ext in ("png", "svg"):
        (target / f"{name}.{ext}").unlink(missing_ok=True)
