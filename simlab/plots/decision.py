"""Decision figures, drawn from the decision record and the per-condition rows (never from report text):
the (P95, throughput) frontier with CIs and every other arm placed on it; each arm across the held-out
traffic conditions."""

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


def decision_figures(out: Path, record, spread, scenario, base) -> list[Path]:
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    paths = [frontier_figure(record, figs / "frontier.png",
                             f"{scenario.name}: static-cap frontier and every arm (held-out traffic, pooled; bars: marginal 95% CIs, "
                             "the decision uses paired CIs)")]
    arms = [a for a in (record.chosen, record.best_static, "adaptive-tuned", "adaptive-defaults", "priority") if a]
    paths.append(conditions_figure(spread, list(dict.fromkeys(arms)), figs / "conditions.png",
                                   f"{scenario.name}: each arm across the held-out traffic conditions"))
    return paths
