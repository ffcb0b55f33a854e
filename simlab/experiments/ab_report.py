"""The A/B `report.md` and the terminal table."""

from __future__ import annotations

from pathlib import Path

from simlab.atomic import atomic_write_text
from simlab.experiments.tables import fmt_ci, fmt_num, md_table, text_table

HEADLINE = [
    ("interactive_p95_ms", "interactive P95 ms"),
    ("interactive_p99_ms", "P99 ms"),
    ("batch_throughput_per_min", "batch/min"),
    ("batch_makespan_ms", "batch makespan ms"),
    ("max_in_flight", "max in flight"),
    ("stranded", "stranded"),
]


FAILURES = [("interactive_failed", "interactive failed"), ("batch_failed", "batch failed")]


def policy_rows(result) -> tuple[list[str], list[list[str]]]:
    # Failed requests (e.g. 429s past the retry budget) change what the other columns mean: show them if any.
    failed = any(r["interactive_failed"] or r["batch_failed"] for r in result.rows)
    columns = HEADLINE + (FAILURES if failed else [])
    header = ["policy"] + [label for _, label in columns]
    rows = [[p] + [fmt_ci(*result.aggregate[p][m]) for m, _ in columns] for p in result.policies]
    return header, rows


def terminal_table(result) -> str:
    header, rows = policy_rows(result)
    return text_table(header, rows)


def _describe(scenario) -> str:
    b = scenario.backend
    world = {
        "delay": "a backend with unlimited capacity (pure service times)",
        "slots": f"an inference server with {b.slots} GPU slots and its own FIFO queue",
        "continuous-batching": f"a continuous-batching GPU server (up to {b.max_num_seqs} sequences per step)",
        "api": f"a third-party API with a concurrency quota of {b.concurrency}"
        + (f", {b.rpm:g} requests/min" if b.rpm else "")
        + (f", {b.tpm:g} tokens/min" if b.tpm else ""),
    }[b.kind]
    parts = []
    for w in scenario.workload:
        a = w.arrivals
        how = {
            "poisson": lambda: f"Poisson arrivals at {a.rate_per_s:g}/s",
            "piecewise": lambda: f"a piecewise rate ({len(a.rates_per_s)} steps of {a.step_ms / 1000:g} s)",
            "diurnal": lambda: f"a diurnal rate around {a.mean_rate_per_s:g}/s",
            "burst": lambda: f"bursts of {a.count} jobs",
            "closed-loop": lambda: f"{a.users} closed-loop users",
            "trace": lambda: f"a replayed trace ({Path(a.file).name})",
        }[a.process]()
        parts.append(f"{w.kind} `{w.name or w.kind}` with {how}")
    return (
        f"{(scenario.description or scenario.name).rstrip('.')}. The model: {world}; "
        + "; ".join(parts)
        + f"; arrivals for {scenario.duration_ms / 1000:g} s, interactive SLO P95 {scenario.slo_p95_ms:g} ms."
    )


def write_report(result, scenario, options, out: Path, figures: list[str]) -> None:
    lines = [f"# A/B: {scenario.name}", "", _describe(scenario), ""]
    lines += [
        f"Policies {', '.join(result.policies)} on the same {len(result.seeds)} seeds "
        f"({result.seeds[0]}..{result.seeds[-1]}): every policy sees the same arrivals and service draws. "
        "Values are means over seeds with 95% confidence intervals (Student t).",
        "",
        "Scheduler options: `" + ", ".join(f"{k}={v}" for k, v in options.to_json_dict().items()) + "`",
        "",
        "## Results per policy",
        "",
    ]
    header, rows = policy_rows(result)
    lines += [md_table(header, rows), ""]
    lines += ["## What the scheduler buys (paired differences over common seeds)", ""]
    comp_rows = []
    for c in result.comparisons:
        if c["metric"] not in ("interactive_p95_ms", "batch_throughput_per_min", "batch_makespan_ms"):
            continue
        comp_rows.append(
            [
                f"{c['candidate']} vs {c['baseline']}",
                c["metric"],
                fmt_ci(c["diff"], c["diff_ci_low"], c["diff_ci_high"]),
                fmt_ci(c["ratio"], c["ratio_ci_low"], c["ratio_ci_high"], 3) if c["ratio"] == c["ratio"] else "–",
                "yes" if c["significant"] else "no",
                "no" if not c["cis_overlap"] else "yes",
            ]
        )
    lines += [
        md_table(["comparison", "metric", "difference [95% CI]", "ratio [95% CI]", "paired diff significant", "CIs overlap"], comp_rows),
        "",
        "## The article's three success criteria",
        "",
    ]
    crit = scenario.criteria
    v_rows = [
        [
            v["policy"],
            f"{'pass' if v['p95_not_stuck_above_slo'] else 'FAIL'} (longest {fmt_num(v['longest_p95_over_slo_ms'])} ms)",
            f"{'pass' if v['batch_keeps_moving'] else 'FAIL'} (longest stall {fmt_num(v['longest_batch_stall_ms'])} ms, stranded {v['stranded']})",
            f"{'pass' if v['concurrency_within_cap'] else 'FAIL'} (max {v['max_in_flight']} vs cap {v['max_concurrency']})",
        ]
        for v in result.verdicts
    ]
    lines += [
        md_table(["policy", "1. P95 not stuck above SLO", "2. batch keeps moving", "3. concurrency within cap"], v_rows),
        "",
        f"Criterion 1 fails when interactive P95, judged in {crit.slo_bin_ms / 1000:g} s bins, stays above "
        f"{scenario.slo_p95_ms:g} ms for {crit.p95_stay_ms / 1000:g} s or more in any seed; criterion 2 when batch "
        f"completions stop for {crit.batch_stall_ms / 1000:g} s or more while batch work is pending, or a batch task "
        "never starts; criterion 3 when more tasks than maxConcurrency are in flight at the scheduler at any instant.",
        "",
    ]
    if result.bounds:
        from simlab.experiments.stats import mean_ci

        nb = [r for r in result.bounds if r["policy"] == "bound-no-batch"]
        ba = [r for r in result.bounds if r["policy"] == "bound-batch-alone"]
        lines += ["## Bounds", ""]
        if nb:
            lines.append(
                f"- Interactive P95 with batch absent: {fmt_ci(*mean_ci([r['interactive_p95_ms'] for r in nb]))} ms. "
                "No scheduler can do better without preempting running work."
            )
        if ba:
            lines.append(
                f"- Batch makespan with the whole capacity and no interactive traffic: "
                f"{fmt_ci(*mean_ci([r['batch_makespan_ms'] for r in ba]))} ms "
                f"({fmt_ci(*mean_ci([r['batch_throughput_per_min'] for r in ba]))} jobs/min)."
            )
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    lines += [
        "## Files",
        "",
        "`summary.csv` (one row per policy and seed), `policies.csv` (means and CIs), `comparison.csv` (paired "
        "differences and ratios), `verdicts.csv`, `bounds.csv`, `runs/POLICY/seed-N/` (per-task `tasks.csv` and "
        "time-series `series.csv` for the first seed, `run.json` for every run).",
        "",
    ]
    atomic_write_text(out / "report.md", "\n".join(lines))
