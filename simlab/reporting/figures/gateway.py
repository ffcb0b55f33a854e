"""Gateway instances (simlab/experiments/gateways.py): the two hazards of deploying the article's scheduler N times.

- gateway-instances  interactive P95 (95% CI over seeds) and the backend's peak in flight against N, one line per
                     limiter, the single instance's maxConcurrency drawn across
- gateway-restarts   per restart policy, the tasks a run loses, resubmits, abandons and runs twice (mean per run)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.reporting.figures import style

CAPTIONS = {
    "gateway-instances": "Interactive P95 (95% CI over seeds) and the backend's peak in flight against the number of "
                         "gateway instances: each instance with its own counts (local), the caps divided by N (split), "
                         "or one limit in Redis (shared). The line across is one instance's maxConcurrency.",
    "gateway-restarts": "Work a crash loses or duplicates under each restart policy (mean per run): queued tasks lost "
                        "and sent again by their clients, running tasks abandoned, and running tasks delivered again, "
                        "counted as run twice unless idempotent.",
}
LIMITER_COLORS = {"local": "#D55E00", "split": "#0072B2", "shared": "#009E73"}
LIMITER_MARKERS = {"local": "X", "split": "s", "shared": "o"}
RESTART_BARS = (("lost", "lost (queued)", "#D55E00"), ("resubmitted", "sent again by clients", "#E69F00"),
                ("abandoned", "abandoned (running)", "#CC79A7"), ("redelivered", "delivered again", "#56B4E9"),
                ("duplicated", "run twice (not idempotent)", "#0072B2"))


def instances_figure(points, directory: Path, scenario: str, policy: str) -> list[Path]:
    with style.context():
        fig = style.new_figure()
        p95_ax, peak_ax = fig.subplots(1, 2)
        limiters = list(dict.fromkeys(p.limiter for p in points))
        for limiter in limiters:
            pts = sorted((p for p in points if p.limiter == limiter), key=lambda p: p.instances)
            n = [p.instances for p in pts]
            color, marker = LIMITER_COLORS.get(limiter), LIMITER_MARKERS.get(limiter, "o")
            mean = np.array([p.interactive_p95_ms for p in pts])
            low = np.array([p.interactive_p95_low for p in pts])
            high = np.array([p.interactive_p95_high for p in pts])
            err = np.vstack([np.nan_to_num(mean - low), np.nan_to_num(high - mean)])
            p95_ax.errorbar(n, mean, yerr=err, color=color, marker=marker, label=limiter, linewidth=2.5)
            peak_ax.plot(n, [p.backend_peak_in_flight for p in pts], color=color, marker=marker, label=limiter,
                         linewidth=2.5)
        cap = points[0].global_cap
        peak_ax.axhline(cap, color=style.INK, linestyle="--", linewidth=1.8, label=f"maxConcurrency {cap}")
        ticks = sorted({p.instances for p in points})
        for ax in (p95_ax, peak_ax):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.set_xlabel("gateway instances N")
            ax.grid(True, alpha=0.3)
        p95_ax.set_ylabel("interactive P95 (ms)")
        peak_ax.set_ylabel("backend peak in flight (tasks)")
        p95_ax.legend(title="limiter")
        peak_ax.legend()
        style.title(fig, f"{scenario}, {policy}: N gateway instances ({points[0].seeds} seeds)")
        return style.save(fig, directory, "gateway-instances")


def restarts_figure(points, directory: Path, scenario: str, policy: str) -> list[Path]:
    with style.context():
        fig = style.new_figure()
        ax = fig.subplots()
        x = np.arange(len(points))
        width = 0.8 / len(RESTART_BARS)
        for k, (key, label, color) in enumerate(RESTART_BARS):
            ax.bar(x + (k - (len(RESTART_BARS) - 1) / 2) * width, [getattr(p, key) for p in points], width,
                   label=label, color=color)
        ax.set_xticks(x, [p.restart_policy.replace(", ", ",\n") for p in points])
        ax.set_ylabel("tasks per run (mean)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
        crashes = np.mean([p.crashes for p in points])
        style.title(fig, f"{scenario}, {policy}: {crashes:.1f} crashes a run ({points[0].seeds} seeds)")
        return style.save(fig, directory, "gateway-restarts")
