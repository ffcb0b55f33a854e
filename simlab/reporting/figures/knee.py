"""`simlab calibrate`'s figure: interactive P95 against the offered rate, per curve, with the knees."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simlab.records import CalibrationRecord
from simlab.reporting.figures import style
from simlab.reporting.words import CURVE_LABELS

CAPTIONS = {
    'knee': 'Interactive P95 against the offered interactive rate, with 95% CIs over seeds: batch absent, batch present at its full cap, and adaptive with the recommended options. Each knee is where a curve crosses the SLO; the recommended interactiveRpsThreshold is marked.',
}

KNEE_COLORS = {"alone": "#0072B2", "batch": "#D55E00", "adaptive": "#009E73"}
KNEE_MARKERS = {"alone": "o", "batch": "s", "adaptive": "D"}


def knee_figure(cal: CalibrationRecord, directory: Path) -> list[str]:
    """knee.png (and .svg) from the record; its name relative to the output folder."""
    slo = cal.slo_p95_ms
    with style.context():
        fig = style.new_figure()
        ax = fig.subplots()
        finite = [v for p in cal.points for v in (p.p95_mean_ms, p.p95_ci_high_ms) if math.isfinite(v) and v > 0]
        top = max(finite + [slo]) * 1.6
        bottom = min(finite + [slo]) / 1.6
        for curve in ("alone", "batch", "adaptive"):
            pts = cal.curve(curve)
            if not pts:
                continue
            x = np.array([p.offered_rps for p in pts])
            m = np.array([p.p95_mean_ms if math.isfinite(p.p95_mean_ms) else top for p in pts])
            lo = np.array([p.p95_ci_low_ms if math.isfinite(p.p95_ci_low_ms) else v for p, v in zip(pts, m)])
            hi = np.array([p.p95_ci_high_ms if math.isfinite(p.p95_ci_high_ms) else v for p, v in zip(pts, m)])
            color = KNEE_COLORS[curve]
            ax.fill_between(x, np.maximum(lo, bottom), np.minimum(hi, top), color=style.tint(color, 0.7), alpha=0.6, lw=0)
            ax.plot(x, m, marker=KNEE_MARKERS[curve], color=color, lw=2.8, ms=9, label=CURVE_LABELS[curve],
                    zorder={"alone": 4, "batch": 3, "adaptive": 2}[curve])
            knee = cal.knee(curve)
            if knee is not None and knee.status == "found":
                ax.axvline(knee.rps, color=color, lw=1.8, ls=":")
                if math.isfinite(knee.ci_low) and math.isfinite(knee.ci_high):  # the knee's CI, on the SLO line
                    from matplotlib.transforms import offset_copy

                    shift = offset_copy(ax.transData, fig=fig, y=6 * (1 - ("alone", "batch", "adaptive").index(curve)),
                                        units="points")  # a few points apart, all on the SLO line
                    ax.errorbar([knee.rps], [slo], xerr=[[knee.rps - knee.ci_low], [knee.ci_high - knee.rps]], fmt="|",
                                color=color, ms=18, mew=3, lw=3, capsize=7, capthick=3, zorder=6, transform=shift)
                ax.text(knee.rps, 0.97 - 0.07 * ("alone", "batch", "adaptive").index(curve), f" knee {knee.rps:.3g}/s",
                        transform=ax.get_xaxis_transform(), color=color, fontsize=15, fontweight="bold", va="top",
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax.axhline(slo, color=style.INK, lw=2.2, ls="--")
        ax.text(0.005, slo, f" SLO {slo:,.0f} ms", transform=ax.get_yaxis_transform(), va="bottom",
                fontsize=15, color=style.INK)
        thr = cal.recommendation.interactive_rps_threshold
        if thr:
            ax.axvline(thr, color=style.INK, lw=2.6)
            ax.text(thr, 0.02, f" recommended\n interactiveRpsThreshold = {thr:g}", transform=ax.get_xaxis_transform(),
                    fontsize=14, va="bottom", ha="left", color=style.INK)
        ax.set_yscale("log")
        ax.set_ylim(bottom, top)
        style.log_ticks(ax.yaxis, bottom, top)
        ax.set_xlim(left=0)
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.8))
        ax.set_xlabel("offered interactive rate (requests per second)")
        ax.set_ylabel("interactive P95 latency (ms, log scale)")
        style.title(fig, f"{cal.scenario}: interactive P95 against rate ({len(cal.seeds)} seeds, 95% CI)")
        style.save(fig, directory, "knee")
    return [f"{Path(directory).name}/knee.png"]
