"""Decision figures, drawn from the decision record and the per-condition rows (never from report text):
the (P95, throughput) frontier with CIs and every other arm placed on it; each arm across the held-out
traffic conditions; P95 and batch throughput against the interactive load multiplier (where adaptive and a
static cap diverge); the batch cap over time under the busiest burst, adaptive against the best static cap
(read from the runs' series.csv)."""

from __future__ import annotations

from pathlib import Path

COLORS = {"static": "#4c72b0", "adaptive": "#dd8452", "baseline": "#8c8c8c"}


def frontier_figure(record, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6), layout="constrained")
    rows = record.ranking
    statics = sorted((r for r in rows if r["family"] == "static"), key=lambda r: int(r["arm"].split("-")[1]))
    ax.plot([r["throughput_mean"] for r in statics], [r["p95_mean"] for r in statics], "-", color=COLORS["static"],
            alpha=0.5, label="static caps 1..N (frontier)")
    # an arm far off the statics' range (unscheduled's minutes of P95) would flatten everything: name it instead
    ref = sorted(r["p95_mean"] for r in statics) or [r["p95_mean"] for r in rows]
    limit = 3 * ref[len(ref) // 2]
    off = [r for r in rows if r["p95_mean"] > limit]
    rows = [r for r in rows if r["p95_mean"] <= limit]
    labelled = 0
    for r in rows:
        x, y = r["throughput_mean"], r["p95_mean"]
        xerr = [[x - r["throughput_ci_low"]], [r["throughput_ci_high"] - x]]
        yerr = [[y - r["p95_ci_low"]], [r["p95_ci_high"] - y]]
        marker = "*" if r.get("chosen") else ("o" if r["family"] != "static" else ".")
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt=marker, color=COLORS.get(r["family"], "k"),
                    markersize=14 if r.get("chosen") else 7, capsize=2, alpha=1 if r.get("feasible") else 0.45)
        if r["family"] != "static" or r.get("chosen"):
            labelled += 1  # alternate above and below so that neighbours do not print over each other
            ax.annotate(r["arm"], (x, y), textcoords="offset points", xytext=(6, 8 if labelled % 2 else -14), fontsize=9)
        elif statics and r is statics[0] or r is statics[-1]:
            ax.annotate(r["arm"], (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8, color=COLORS["static"])
    ax.set_xlabel("batch throughput (jobs/min), mean with 95% CI")
    ax.set_ylabel("interactive P95 (ms), mean with 95% CI")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.plot([], [], "*", color="k", markersize=12, label="chosen")
    ax.plot([], [], "o", color="k", alpha=0.45, label="faded: misses the rule's constraint")
    for r in off:
        ax.plot([], [], " ", label=f"off the chart: {r['arm']} (P95 {r['p95_mean']:,.0f} ms, {r['throughput_mean']:,.0f}/min)")
    ax.legend(loc="best", fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def conditions_figure(spread: list[dict], arms: list[str], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = list(dict.fromkeys(r["condition"] for r in spread))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    for arm in arms:
        mine = {r["condition"]: r for r in spread if r["arm"] == arm}
        if not mine:
            continue
        xs = range(len(conds))
        for ax, key in zip(axes, ("p95", "throughput")):
            ys = [mine[c][f"{key}_mean"] for c in conds]
            lo = [mine[c][f"{key}_mean"] - mine[c][f"{key}_ci_low"] for c in conds]
            hi = [mine[c][f"{key}_ci_high"] - mine[c][f"{key}_mean"] for c in conds]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=arm)
    bounds = [next((r["bound_p95"] for r in spread if r["condition"] == c), None) for c in conds]
    if all(b is not None for b in bounds):
        axes[0].plot(range(len(conds)), bounds, "k--", label="batch-absent bound")
    for ax, label in zip(axes, ("interactive P95 (ms)", "batch throughput (jobs/min)")):
        ax.set_xticks(range(len(conds)), conds, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_figure(spread: list[dict], arms: list[str], path: Path, title: str) -> Path | None:
    """P95 and batch throughput (95% CIs over the held-out seeds) against the load multiplier, one line per arm;
    None when fewer than two load levels were held out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def mult(c: str) -> float | None:
        return 1.0 if c == "base" else (float(c[len("load-x"):]) if c.startswith("load-x") else None)

    levels = sorted({mult(r["condition"]) for r in spread if mult(r["condition"]) is not None})
    if len(levels) < 2:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    for i, arm in enumerate(arms):
        mine = sorted((mult(r["condition"]), r) for r in spread if r["arm"] == arm and mult(r["condition"]) is not None)
        if not mine:
            continue
        xs = [x * (1 + 0.012 * (i - len(arms) / 2)) for x, _ in mine]  # nudged apart so the CI bars stay readable
        for ax, key in zip(axes, ("p95", "throughput")):
            ys = [r[f"{key}_mean"] for _, r in mine]
            err = [[r[f"{key}_mean"] - r[f"{key}_ci_low"] for _, r in mine], [r[f"{key}_ci_high"] - r[f"{key}_mean"] for _, r in mine]]
            family = mine[0][1].get("family", "")
            ax.errorbar(xs, ys, yerr=err, marker="o" if family != "static" else "s", capsize=3, label=arm,
                        linestyle="-" if family != "baseline" else ":")
    bounds = sorted({(mult(r["condition"]), r["bound_p95"]) for r in spread
                     if mult(r["condition"]) is not None and r["bound_p95"] is not None})
    if bounds:
        axes[0].plot([b[0] for b in bounds], [b[1] for b in bounds], "k--", label="batch-absent bound")
    from simlab.reporting.figures import style

    p95s = [r["p95_mean"] for r in spread if r["arm"] in arms and mult(r["condition"]) is not None and r["p95_mean"] > 0]
    if p95s and max(p95s) > 10 * min(p95s):  # an overloaded level would flatten the others
        axes[0].set_yscale("log")
        style.plain_log_ticks(axes[0].yaxis)
    for ax, label in zip(axes, ("interactive P95 (ms)", "batch throughput (jobs/min)")):
        ax.set_xscale("log")
        ax.set_xticks(levels, [f"x{v:g}" for v in levels])
        ax.minorticks_off()
        ax.set_xlabel("interactive load multiplier (held-out conditions)")
        ax.set_ylabel(label + ", mean with 95% CI")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def burst_figure(runs: Path, condition: str, seed: int, adaptive: str, static: str, path: Path, title: str) -> Path | None:
    """The batch cap in force and the interactive work waiting, over the busiest stretch of one held-out run
    (condition, seed): the adaptive arm against the best static cap on the same traffic. None without series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from simlab.experiments.runfiles import load_series

    series = {}
    for arm in (adaptive, static):
        f = runs / "runs" / arm / f"seed-{seed}" / "series.csv"
        if not f.is_file():
            return None
        series[arm] = load_series(f)
    a = series[adaptive]
    t = a["t_ms"].to_numpy()
    if len(t) < 10:
        return None
    # the busiest stretch: the window (a tenth of the run, at least 30 s) with the most interactive work in the system
    load = (a["in_flight_interactive"] + a["queued_interactive"]).to_numpy(dtype=float)
    span = max(30_000.0, (t[-1] - t[0]) / 10)
    step = float(np.median(np.diff(t))) or 1.0
    width = max(1, int(span / step))
    k = int(np.argmax(np.convolve(load, np.ones(width), mode="valid"))) if len(load) > width else 0
    lo, hi = max(t[0], t[k] - span / 2), min(t[-1], t[k] + 1.5 * span)
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, layout="constrained")
    colors = {adaptive: COLORS["adaptive"], static: COLORS["static"]}
    for arm, s in series.items():
        w = s[(s["t_ms"] >= lo) & (s["t_ms"] <= hi)]
        x = w["t_ms"].to_numpy() / 1000
        axes[0].step(x, w["batch_cap"], where="post", color=colors[arm], label=f"{arm}: batch cap")
        axes[0].plot(x, w["in_flight_batch"], color=colors[arm], alpha=0.35, lw=1, label=f"{arm}: batch in flight")
        axes[1].plot(x, w["in_flight_interactive"] + w["queued_interactive"], color=colors[arm], label=arm)
    axes[0].set_ylabel("batch slots")
    axes[1].set_ylabel("interactive requests\nin flight + queued")
    axes[1].set_xlabel(f"simulated time (s), held-out condition {condition}, seed {seed}")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def burst_arms(record, spread) -> tuple[str | None, str | None]:
    """(adaptive arm, static arm) the burst figure compares: the tuned adaptive (else the chosen one, else the
    defaults) against the best static cap."""
    adaptive = next((a for a in ("adaptive-tuned", record.chosen, "adaptive-defaults")
                     if a and any(r["arm"] == a and r.get("family") == "adaptive" for r in spread)), None)
    return adaptive, record.best_static


def decision_figures(out: Path, record, spread, scenario, base, seeds: list[int] | None = None,
                     burst_runs: Path | None = None) -> list[Path]:
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    paths = [frontier_figure(record, figs / "frontier.png",
                             f"{scenario.name}: static-cap frontier and every arm (held-out traffic, pooled; bars: marginal 95% CIs, "
                             "the decision uses paired CIs)")]
    arms = [a for a in (record.chosen, record.best_static, "adaptive-tuned", "adaptive-defaults", "priority") if a]
    arms = [a for a in dict.fromkeys(arms) if any(r["arm"] == a for r in spread)]
    paths.append(conditions_figure(spread, arms, figs / "conditions.png",
                                   f"{scenario.name}: each arm across the held-out traffic conditions"))
    p = load_figure(spread, arms, figs / "load.png",
                    f"{scenario.name}: interactive P95 and batch throughput across load levels (held-out seeds)")
    if p is not None:
        paths.append(p)
    adaptive, _ = burst_arms(record, spread)
    conds = list(dict.fromkeys(r["condition"] for r in spread))
    if adaptive and record.best_static and conds and seeds and burst_runs is not None:
        p = burst_figure(burst_runs, conds[0], seeds[0], adaptive, record.best_static, figs / "burst.png",
                         f"{scenario.name}: the batch cap under the busiest burst, {adaptive} vs the best static cap "
                         f"({record.best_static})")
        if p is not None:
            paths.append(p)
    return paths
