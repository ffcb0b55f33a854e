"""Predicted vs measured: one record per (policy, class, metric), and the policy rankings on both sides.

Measured values are the mean over repeat runs; the spread is (max - min) / mean across them; the relative error
is (predicted - measured mean) / measured mean; with two runs or more, the 95% confidence interval of the measured
mean (Student's t over runs) says whether an error is larger than these runs can resolve.

Rankings, by interactive P95 (lower is better) and batch throughput (higher is better), are compared pair by
pair. On the simulated side two policies closer than the tolerance (10%) are a tie: a model held to 10% makes
no claim about a smaller difference. On the measured side a pair is ordered when Welch's t-test over the runs
separates them (p < 0.05); with a single run on either side, by the means (there is no noise estimate). The
rankings agree when no pair is ordered one way predicted and the other way measured; the report also says
whether the two orders (by the values alone) are the same, and whether every pair has the same relation
(better, worse or tie) on both sides.
"""

from __future__ import annotations

import math
import warnings

from simlab.realcheck.drive import CLASS_METRICS, METRIC_LABELS

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
                    "run_values": vals,  # for the ranking's test; not a summary.csv column
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
        vals = {r["policy"]: r[side] for r in _watched(rows, kind, name)}
        out[f"{kind} {name}"] = sorted(vals, key=lambda p: vals[p], reverse=(name == "throughput_tok_s"))
    return out


def _watched(rows, kind, name):
    return [r for r in rows if r["class"] == kind and r["metric"] == name and " (" not in r["policy"]]


def pairs(rows: list[dict], tolerance: float = 0.10, alpha: float = 0.05) -> dict[str, list[dict]]:
    """Per watched metric, every pair of policies: {'a', 'b', 'predicted', 'measured', 'p_value'}, each relation
    '>' (a better), '<' (b better) or '~' (a tie: closer than the tolerance predicted, not separated measured)."""
    from scipy import stats

    out = {}
    for kind, name in WATCHED:
        higher = name == "throughput_tok_s"
        mine = _watched(rows, kind, name)
        found = []
        for i, ra in enumerate(mine):
            for rb in mine[i + 1:]:
                pa, pb = ra["predicted"], rb["predicted"]
                pred = "~" if abs(pa - pb) <= tolerance * max(abs(pa), abs(pb)) else _better(pa, pb, higher)
                va, vb = ra.get("run_values", []), rb.get("run_values", [])
                p_value = math.nan
                meas = _better(ra["measured"], rb["measured"], higher)
                if len(va) >= 2 and len(vb) >= 2 and (len(set(va)) > 1 or len(set(vb)) > 1):
                    with warnings.catch_warnings():  # one side's runs identical: scipy warns, Welch still holds
                        warnings.simplefilter("ignore", RuntimeWarning)
                        p_value = float(stats.ttest_ind(va, vb, equal_var=False).pvalue)
                    meas = meas if p_value < alpha else "~"
                found.append({"a": ra["policy"], "b": rb["policy"], "predicted": pred, "measured": meas,
                              "p_value": p_value})
        out[f"{kind} {name}"] = found
    return out


def _better(a: float, b: float, higher: bool) -> str:
    if a == b:
        return "~"
    return ">" if (a > b) == higher else "<"


def verdict(rows: list[dict], tolerance: float = 0.10) -> dict:
    pred, meas = ranking(rows, "predicted"), ranking(rows, "measured")
    within = {f"{r['policy']} {r['class']} {r['metric']}": abs(r["relative_error"]) <= tolerance
              for r in rows if (r["class"], r["metric"]) in WATCHED}
    by_pair = pairs(rows, tolerance)
    flat = [dict(q, metric=key) for key, qs in by_pair.items() for q in qs]
    opposite = [q for q in flat if {q["predicted"], q["measured"]} == {">", "<"}]
    differ = [q for q in flat if q["predicted"] != q["measured"]]
    # outside the tolerance, yet inside the measured mean's 95% CI: these runs cannot tell the error from noise
    unresolved = [f"{r['policy']} {r['class']} {r['metric']}" for r in rows if (r["class"], r["metric"]) in WATCHED
                  and abs(r["relative_error"]) > tolerance
                  and r["measured_ci_low"] <= r["predicted"] <= r["measured_ci_high"]]
    return {"ranking_predicted": pred, "ranking_measured": meas, "pairs": by_pair,
            "rankings_agree": not opposite, "same_order": pred == meas, "rankings_same": not differ,
            "pairs_opposite": [_pair_text(q) for q in opposite],
            "pairs_tied_on_one_side": [_pair_text(q) for q in differ if q not in opposite],
            "outside_but_within_noise": unresolved,
            "tolerance": tolerance, "within_tolerance": within, "all_within": all(within.values())}


def _pair_text(q: dict) -> str:
    p = "" if math.isnan(q["p_value"]) else f", Welch p = {q['p_value']:.2g}"
    return f"{q['metric']}: {q['a']} {q['predicted']} {q['b']} predicted, {q['a']} {q['measured']} {q['b']} measured{p}"


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
        for q in v["pairs"].get(key, []):
            p = "" if math.isnan(q["p_value"]) else f" (Welch p = {q['p_value']:.2g})"
            lines.append(f"  - {q['a']} vs {q['b']}: predicted {_relation(q, 'predicted')}, measured "
                         f"{_relation(q, 'measured')}{p}")
    if v["rankings_same"]:
        lines.append("- rankings agree: **yes**: every pair has the same relation on both sides")
    elif v["rankings_agree"]:
        lines.append("- rankings agree: **yes**"
                     + (": the same order on both sides" if v["same_order"] else
                        ", where both sides separate the pair: no pair is ordered oppositely")
                     + "; closer than the tolerance predicted or not separated measured: "
                     + "; ".join(v["pairs_tied_on_one_side"]))
    else:
        lines.append("- rankings agree: **no**: ordered oppositely: " + "; ".join(v["pairs_opposite"]))
    lines.append(f"  (a tie predicted: closer than {v['tolerance']:.0%}; a tie measured: Welch's t-test over "
                 "the runs does not separate the pair at p < 0.05)")
    lines.append(f"- interactive P95 and batch throughput within {v['tolerance']:.0%} for every policy: "
                 f"**{'yes' if v['all_within'] else 'no'}**" +
                 ("" if v["all_within"] else " (outside: " + ", ".join(k for k, ok in v["within_tolerance"].items() if not ok) + ")"))
    if v.get("outside_but_within_noise"):
        lines.append("  - of those, the prediction lies inside the 95% CI of the measured mean (these runs cannot "
                     "tell the error from run-to-run noise): " + ", ".join(v["outside_but_within_noise"]))
    return "\n".join(lines) + "\n"


def _relation(q: dict, side: str) -> str:
    return {">": f"{q['a']} better", "<": f"{q['b']} better", "~": "a tie"}[q[side]]


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
