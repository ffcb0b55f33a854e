"""Predicted vs measured: one record per (policy, class, metric), and the policy rankings on both sides.

Measured values are the mean over repeat runs; the spread is (max - min) / mean across them; the relative error
is (predicted - measured mean) / measured mean; with two runs or more, the 95% confidence interval of the measured
mean (Student's t over runs) says whether an error is larger than these runs can resolve. Ranking: policies ordered by interactive P95 (lower is better)
and by batch throughput (higher is better); the verdicts agree when both orders are the same.
"""

from __future__ import annotations

import math

from simlab.runtime.validate import CLASS_METRICS, METRIC_LABELS

ROW_COLUMNS = ("policy", "class", "metric", "predicted", "measured", "measured_min", "measured_max", "spread",
               "relative_error", "runs", "measured_ci_low", "measured_ci_high")
WATCHED = (("interactive", "p95_ms"), ("batch", "throughput_tok_s"))


def compare(predicted: dict, measured: dict) -> list[dict]:
    """predicted[policy] = metrics(); measured[policy] = [metrics() per run] -> rows."""
    rows = []
    for policy, pred in predicted.items():
        runs = measured.get(policy, [])
        for kind in ("interactive", "batch"):
            names = CLASS_METRICS if kind == "interactive" else CLASS_METRICS + ("throughput_tok_s",)
            for name in names:
                vals = [r[kind][name] for r in runs if not math.isnan(r[kind][name])]
                mean = sum(vals) / len(vals) if vals else math.nan
                p = pred[kind][name]
                rows.append({
                    "policy": policy, "class": kind, "metric": name, "predicted": p, "measured": mean,
                    "measured_min": min(vals) if vals else math.nan, "measured_max": max(vals) if vals else math.nan,
                    "spread": (max(vals) - min(vals)) / mean if len(vals) > 1 and mean else math.nan,
                    "relative_error": (p - mean) / mean if vals and mean else math.nan, "runs": len(vals),
                    **dict(zip(("measured_ci_low", "measured_ci_high"), _mean_ci(vals))),
                })
    return rows


def _mean_ci(vals: list[float], level: float = 0.95) -> tuple[float, float]:
    if len(vals) < 2:
        return math.nan, math.nan
    from scipy import stats

    mean = sum(vals) / len(vals)
    half = float(stats.t.ppf(0.5 + level / 2, len(vals) - 1) * stats.sem(vals))  # zero for identical runs
    return mean - half, mean + half


def ranking(rows: list[dict], side: str) -> dict[str, list[str]]:
    """Policies best first, per watched metric, from 'predicted' or 'measured'. Extra drivers of a policy
    ('POLICY (article JS)') share its prediction, so they are compared with it, not ranked."""
    out = {}
    for kind, name in WATCHED:
        vals = {r["policy"]: r[side] for r in rows if r["class"] == kind and r["metric"] == name and " (" not in r["policy"]}
        out[f"{kind} {name}"] = sorted(vals, key=lambda p: vals[p], reverse=(name == "throughput_tok_s"))
    return out


def verdict(rows: list[dict], tolerance: float = 0.10) -> dict:
    pred, meas = ranking(rows, "predicted"), ranking(rows, "measured")
    within = {f"{r['policy']} {r['class']} {r['metric']}": abs(r["relative_error"]) <= tolerance
              for r in rows if (r["class"], r["metric"]) in WATCHED}
    # Adjacent policies whose measured run-to-run ranges overlap: their measured order is not settled.
    ties = {}
    for kind, name in WATCHED:
        key = f"{kind} {name}"
        rng = {r["policy"]: (r["measured_min"], r["measured_max"]) for r in rows
               if r["class"] == kind and r["metric"] == name}
        order = meas[key]
        ties[key] = [f"{a} ~ {b}" for a, b in zip(order, order[1:])
                     if rng[a][0] <= rng[b][1] and rng[b][0] <= rng[a][1]]
    # outside the tolerance, yet inside the measured mean's 95% CI: these runs cannot tell the error from noise
    unresolved = [f"{r['policy']} {r['class']} {r['metric']}" for r in rows if (r["class"], r["metric"]) in WATCHED
                  and abs(r["relative_error"]) > tolerance
                  and r["measured_ci_low"] <= r["predicted"] <= r["measured_ci_high"]]
    return {"ranking_predicted": pred, "ranking_measured": meas, "rankings_agree": pred == meas,
            "measured_ties": ties, "outside_but_within_noise": unresolved,
            "tolerance": tolerance, "within_tolerance": within, "all_within": all(within.values())}


def markdown(rows: list[dict], v: dict, header: list[str]) -> str:
    lines = ["# Sim-to-real validation", "", *header, "",
             "| policy | class | metric | predicted | measured (mean of runs) | run-to-run (min-max) | spread | "
             "95% CI of the measured mean | error |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['class']} | {METRIC_LABELS[r['metric']]} | {_f(r['predicted'])} | "
                     f"{_f(r['measured'])} | {_f(r['measured_min'])}-{_f(r['measured_max'])} | {_pct(r['spread'])} | "
                     f"{_f(r['measured_ci_low'])}-{_f(r['measured_ci_high'])} | "
                     f"{_pct(r['relative_error'], sign=True)} |")
    lines += ["", "## Verdicts", ""]
    for key in v["ranking_predicted"]:
        lines.append(f"- {key}, best first: predicted {' > '.join(v['ranking_predicted'][key])}; "
                     f"measured {' > '.join(v['ranking_measured'][key])}")
        if v["measured_ties"].get(key):
            lines.append(f"  - measured run-to-run ranges overlap (order not settled by these runs): "
                         f"{', '.join(v['measured_ties'][key])}")
    lines.append(f"- rankings agree: **{'yes' if v['rankings_agree'] else 'no'}**")
    lines.append(f"- interactive P95 and batch throughput within {v['tolerance']:.0%} for every policy: "
                 f"**{'yes' if v['all_within'] else 'no'}**" +
                 ("" if v["all_within"] else " (outside: " + ", ".join(k for k, ok in v["within_tolerance"].items() if not ok) + ")"))
    if v.get("outside_but_within_noise"):
        lines.append("  - of those, the prediction lies inside the 95% CI of the measured mean (these runs cannot "
                     "tell the error from run-to-run noise): " + ", ".join(v["outside_but_within_noise"]))
    return "\n".join(lines) + "\n"


def _f(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _pct(x, sign=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1%}" if sign else f"{x:.1%}"


def figure(rows: list[dict], out_dir, name: str = "validate-real"):
    """Predicted vs measured for the watched metrics and TTFT P95: bars with run-to-run ranges."""
    from simlab.plots import style

    panels = [("interactive", "p95_ms"), ("interactive", "ttft_p95_ms"), ("batch", "throughput_tok_s")]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    colors = style.policy_colors(policies)
    with style.context():
        fig = style.new_figure()
        axes = fig.subplots(1, len(panels))
        for ax, (kind, metric) in zip(axes, panels):
            sel = {r["policy"]: r for r in rows if r["class"] == kind and r["metric"] == metric}
            for i, p in enumerate(policies):
                r = sel[p]
                ax.bar(i - 0.2, r["predicted"], 0.38, color=style.tint(colors[p]), edgecolor=colors[p],
                       label="simulated" if i == 0 else None)
                lo, hi = r["measured"] - r["measured_min"], r["measured_max"] - r["measured"]
                ax.bar(i + 0.2, r["measured"], 0.38, color=colors[p], yerr=[[lo], [hi]], capsize=6,
                       label="measured" if i == 0 else None)
            ax.set_xticks(range(len(policies)), [p.replace(" (", "\n(") for p in policies], rotation=30, ha="right",
                          fontsize=12)
            if metric.endswith("_ms"):
                ax.set_yscale("log")  # unscheduled is tens of times the others
            ax.set_title(METRIC_LABELS[metric] if kind == "batch" else f"{kind} {METRIC_LABELS[metric]}", fontsize=14)
        axes[0].legend(loc="upper right", fontsize=12)
        style.title(fig, "Simulated (light) vs measured on the real engine (dark; bars: run-to-run range)")
        return style.save(fig, out_dir, name)
