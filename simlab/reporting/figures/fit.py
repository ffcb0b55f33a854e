"""`simlab fit`'s figures (under figures/, one set per class), drawn from the fit and its validation.

- arrivals-CLASS      rate per bin with its 95% interval, the scenario's fitted rate; inter-arrival times
                      against the exponential of a Poisson process (survival function, log scale)
- lengths-CLASS       histograms of token counts (and latency) with the fitted lognormal
- validation-rates    arrival rate per bin: the log against the simulated fitted scenario (every seed)
- validation-lengths  the log's distribution against the simulation's, quantiles compared marked
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats

from simlab.calibration.fit import LogFit, format_duration
from simlab.calibration.validate import Validation
from simlab.reporting.figures import style
from simlab.reporting.words import p_is

CAPTIONS = {
    'arrivals': '{kind} arrivals in the log: the rate per bin with its 95% interval, the rate the fitted scenario uses, and the inter-arrival times against the exponential gaps of a Poisson process.',
    'lengths': '{kind} lengths in the log against the fitted lognormal, per quantity.',
    'validation-rates': "Validation: the log's arrival rate per bin against the fitted scenario's, simulated over seeds.",
    'validation-lengths': "Validation: the log's length distributions against the fitted scenario's; dots mark the quantiles compared.",
}

OBSERVED = "#222222"
FITTED = "#0072B2"
LOGNORMAL = "#D55E00"
SIMULATED = "#009E73"
LABELS = {"prompt_tokens": "prompt tokens", "output_tokens": "output tokens", "service_ms": "latency (ms)"}


def _time_axis(span_ms: float) -> tuple[float, str]:
    if span_ms >= 3 * 3_600_000:
        return 3_600_000.0, "hours since the first request"
    if span_ms >= 3 * 60_000:
        return 60_000.0, "minutes since the first request"
    return 1000.0, "seconds since the first request"


def _steps(edges: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return edges, np.append(values, values[-1])


# --- figures ------------------------------------------------------------------------------------------
def draw(fit: LogFit, val: Validation | None, directory: Path) -> list[str]:
    """Every figure of the fit (arrivals and lengths per class, the validation's): names relative to the output
    folder (`figures/NAME.png`), in the report's order."""
    names = []
    for kind in fit.arrivals:
        arrivals_figure(fit, kind, directory)
        lengths_figure(fit, kind, directory)
        names += [f"arrivals-{kind}", f"lengths-{kind}"]
    if val is not None:
        validation_rates_figure(fit, val, directory)
        names.append("validation-rates")
        if validation_lengths_figure(val, directory):
            names.append("validation-lengths")
    return [f"{Path(directory).name}/{n}.png" for n in names]


def arrivals_figure(fit: LogFit, kind: str, directory: Path) -> list[Path]:
    a = fit.arrivals[kind]
    unit, xlabel = _time_axis(a.span_ms)
    with style.context():
        fig = style.new_figure()
        left, right = fig.subplots(1, 2, width_ratios=[1.7, 1])
        x = a.edges / unit
        left.fill_between(x, *[_steps(a.edges, v)[1] for v in (a.rate_lo, a.rate_hi)], step="post",
                          color=style.tint(OBSERVED, 0.8), label="log: 95% interval")
        left.step(x, _steps(a.edges, a.rates_per_s)[1], where="post", color=OBSERVED, lw=2.6, zorder=2,
                  label=f"log: rate per {format_duration(a.bin_ms)}")
        if a.process == "piecewise" and len(a.step_rates_per_s) > 1500:  # a solid smear: say it, do not draw it
            left.plot([], [], color=FITTED, lw=1.0,
                      label=f"scenario: rate per {format_duration(a.step_ms)} ({len(a.step_rates_per_s):,} steps, not drawn)")
        elif a.process == "piecewise":
            se = np.append(np.arange(len(a.step_rates_per_s)) * a.step_ms, a.span_ms)
            se[-1] = max(se[-1], se[-2])
            if a.step_ms < a.bin_ms:
                left.step(se / unit, np.append(a.step_rates_per_s, a.step_rates_per_s[-1]), where="post", color=FITTED,
                          lw=1.0, alpha=0.75, zorder=1, label=f"scenario: rate per {format_duration(a.step_ms)}")
            else:
                left.step(se / unit, np.append(a.step_rates_per_s, a.step_rates_per_s[-1]), where="post", color=FITTED,
                          lw=2.0, ls="--", zorder=3, label="scenario: piecewise rate")
        elif a.process == "poisson":
            left.axhline(a.rate_per_s, color=FITTED, lw=2.6, ls="--", label=f"scenario: Poisson {a.rate_per_s:.3g}/s")
        left.set_xlabel(xlabel)
        left.set_ylabel("requests per second")
        left.set_ylim(bottom=0)
        left.set_xlim(0, a.span_ms / unit)
        left.set_title("Arrival rate over time")
        gaps = np.diff(np.sort(fit.log.of(kind)["arrival_ms"].to_numpy()))
        if len(gaps) > 1 and gaps.mean() > 0:
            g = np.sort(gaps / gaps.mean())
            surv = 1 - (np.arange(1, len(g) + 1) - 0.5) / len(g)
            keep = np.unique(np.linspace(0, len(g) - 1, min(len(g), 3000)).astype(int))
            right.plot(g[keep], surv[keep], color=OBSERVED, lw=2.8, ls="-.", label=f"log: gaps (CV {a.cv:.2f})")
            xs = np.linspace(0, max(g.max(), 1.0), 200)
            right.plot(xs, np.exp(-xs), color=LOGNORMAL, lw=2.4, ls="--", label="Poisson: exponential gaps")
            right.set_yscale("log")
            right.set_ylim(max(0.5 / len(g), 1e-5), 1.05)
            right.set_xlim(0, max(float(np.quantile(g, 0.9995)), 4.0))
            right.set_xlabel("gap / mean gap")
            right.set_ylabel("share of gaps longer")
            right.set_title("Inter-arrival times")
            verdict = "rejected" if a.poisson_constant.rejected else "not rejected"
            right.text(0.03, 0.04, f"Poisson {verdict}\nKS {p_is(a.poisson_constant.p_value)}",
                       transform=right.transAxes, fontsize=15, va="bottom")
        else:
            right.set_axis_off()
        handles, labels = [], []
        for ax in (left, right):
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
        fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=15)
        style.title(fig, f"{kind} arrivals in {fit.log.path.name}: {a.rate_per_s:.3g} req/s, CV {a.cv:.2f}")
        return style.save(fig, directory, f"arrivals-{kind}")


def lengths_figure(fit: LogFit, kind: str, directory: Path) -> list[Path]:
    fits = fit.lengths[kind]
    with style.context():
        fig = style.new_figure()
        axes = np.atleast_1d(fig.subplots(1, len(fits)))
        for ax, (col, lf) in zip(axes, fits.items()):
            x = lf.values[lf.values > 0]
            lo, hi = np.log10(x.min()), np.log10(x.max())
            if hi - lo < 0.5:
                lo, hi = lo - 0.25, hi + 0.25
            edges = np.logspace(lo, hi, 50)
            # density of log10(x): comparable with the lognormal's at every scale
            counts, _ = np.histogram(x, edges)
            widths = np.diff(np.log10(edges))
            dens = counts / (len(lf.values) * widths)
            ax.stairs(dens, edges, fill=True, color=style.tint(OBSERVED, 0.75), label="log")
            ax.stairs(dens, edges, color=OBSERVED, lw=1.4)
            grid = np.logspace(lo, hi, 300)
            pdf = stats.lognorm.pdf(grid, lf.sigma, 0, lf.median) * grid * math.log(10)
            ax.plot(grid, pdf, color=LOGNORMAL, lw=2.8, ls="--" if lf.choice == "empirical" else "-",
                    label=f"lognormal (KS D {lf.ks.statistic:.2f})")
            ax.axvline(lf.quantiles[0.5], color=FITTED, lw=2.0, ls=":", label=f"median {lf.quantiles[0.5]:,.0f}")
            ax.set_xscale("log")
            ax.set_xlim(edges[0], edges[-1])
            style.log_ticks(ax.xaxis, edges[0], edges[-1], max_ticks={1: 9, 2: 7}.get(len(fits), 4))
            ax.set_xlabel(LABELS.get(col, col) + ", log scale")
            ax.set_ylabel("density per decade")
            ax.set_title(f"{LABELS.get(col, col)}: {lf.choice} used")
            ax.legend(loc="upper left", fontsize=14)
            ax.set_ylim(0, max(dens.max(), pdf.max()) * 1.35)
        style.title(fig, f"{kind} lengths in {fit.log.path.name} and the fitted lognormal")
        return style.save(fig, directory, f"lengths-{kind}")


def validation_rates_figure(fit: LogFit, val: Validation, directory: Path) -> list[Path]:
    kinds = list(val.bins)
    unit, xlabel = _time_axis(fit.log.span_ms)
    with style.context():
        fig = style.new_figure()
        axes = np.atleast_1d(fig.subplots(len(kinds), 1, sharex=True, squeeze=False)[:, 0])
        for ax, kind in zip(axes, kinds):
            b = val.bins[kind]
            edges = b["edges"]
            widths = np.diff(edges) / 1000
            mids = (edges[:-1] + edges[1:]) / 2 / unit
            for i, sim in enumerate(b["simulated"]):
                ax.step(edges / unit, np.append(sim / widths, sim[-1] / widths[-1]), where="post", color=SIMULATED,
                        lw=1.2, alpha=0.45, label="simulated (one line per seed)" if i == 0 else None)
            mean = b["simulated"].mean(axis=0) / widths
            ax.step(edges / unit, np.append(mean, mean[-1]), where="post", color=SIMULATED, lw=3.0,
                    label=f"simulated mean of {len(val.seeds)} seeds")
            obs = b["observed"]
            lo, hi = stats.poisson.interval(0.95, np.maximum(obs, 1e-9))
            rate = obs / widths
            bad = b["p"] < 0.05
            ax.errorbar(mids[~bad], rate[~bad], yerr=[rate[~bad] - lo[~bad] / widths[~bad], hi[~bad] / widths[~bad] - rate[~bad]],
                        fmt="o", color=OBSERVED, ms=7, lw=1.8, capsize=4, label="log, 95% interval")
            if bad.any():
                ax.errorbar(mids[bad], rate[bad], yerr=[rate[bad] - lo[bad] / widths[bad], hi[bad] / widths[bad] - rate[bad]],
                            fmt="X", color=LOGNORMAL, ms=11, lw=1.8, capsize=4, label="log, outside sampling error")
            ax.set_ylabel("req/s")
            ax.set_ylim(bottom=0, top=max(float(rate.max()), float(mean.max()), float((hi / widths).max())) * 1.08)
            cv = next((c for c in val.checks if c.kind == kind and c.quantity == "cv"), None)
            head = f"{kind}"
            if cv is not None:
                head += (f": inter-arrival CV log {cv.observed:.3f}, simulated {cv.simulated:.3f} "
                         f"(95% prediction interval {cv.simulated_lo:.3f} to {cv.simulated_hi:.3f})")
            ax.set_title(head, fontsize=16, loc="left")
        axes[-1].set_xlabel(xlabel)
        axes[-1].set_xlim(0, fit.log.span_ms / unit)
        seen = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=4, fontsize=15)
        style.title(fig, f"Arrival rate per {format_duration(fit.bin_ms)}: the log against its fitted scenario")
        return style.save(fig, directory, "validation-rates")


def validation_lengths_figure(val: Validation, directory: Path) -> list[Path] | None:
    kinds = [k for k, cols in val.samples.items() if any(len(d["simulated"]) for d in cols.values())]
    if not kinds:
        return None
    ncols = max(len(val.samples[k]) for k in kinds)
    with style.context():
        fig = style.new_figure(size=(13.0, 7.3 if len(kinds) == 1 else 11.0))
        grid = fig.subplots(len(kinds), ncols, squeeze=False)
        for r, kind in enumerate(kinds):
            cols = list(val.samples[kind].items())
            for c in range(ncols):
                ax = grid[r, c]
                if c >= len(cols) or not len(cols[c][1]["simulated"]):
                    ax.set_axis_off()
                    continue
                col, d = cols[c]
                for data, color, lw, label in ((d["observed"], OBSERVED, 3.2, "log"),
                                               (d["simulated"], SIMULATED, 2.2, "simulated")):
                    x = data[data > 0]
                    keep = np.unique(np.linspace(0, len(x) - 1, min(len(x), 4000)).astype(int))
                    ax.step(x[keep], (keep + 1) / len(x), where="post", color=color, lw=lw, label=label,
                            ls="-" if label == "log" else "--")
                name = LABELS.get(col, col)
                for check in val.checks:
                    if check.kind == kind and check.quantity == "quantile" and check.column == col:
                        ax.plot([check.observed], [check.q], "o" if check.ok else "X", color=OBSERVED if check.ok else LOGNORMAL,
                                ms=9 if check.ok else 13, zorder=5)
                ax.set_xscale("log")
                positive = np.concatenate([d["observed"][d["observed"] > 0], d["simulated"][d["simulated"] > 0]])
                ax.set_xlim(positive.min() / 1.2, positive.max() * 1.2)
                style.log_ticks(ax.xaxis, positive.min() / 1.2, positive.max() * 1.2, max_ticks={1: 9, 2: 7}.get(ncols, 4))
                ax.set_ylim(0, 1.02)
                ax.set_xlabel(name + ", log scale")
                ax.set_title(f"{kind}: {name}", fontsize=17)
                ax.legend(loc="upper left", fontsize=14)
                if c == 0:
                    ax.set_ylabel("share at or below")
        style.title(fig, "Lengths: the log against its fitted scenario (dots: the quantiles compared)")
        return style.save(fig, directory, "validation-lengths")
