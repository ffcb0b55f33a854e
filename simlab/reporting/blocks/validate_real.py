"""What a validate-real record says, as document blocks: report.md and the terminal render the same blocks, and
verdict.json's sentences come from the same functions. Every number is formatted here, from the record."""

from __future__ import annotations

import math
from pathlib import Path

from simlab.records import RUNTIME, RankingPair, RealMetricRow, RealVerdict, ValidateRealRecord
from simlab.reporting.document import Bullets, Cell, Document, Figure, Heading, Paragraph, Table

METRIC_LABELS = {"p50_ms": "P50 (ms)", "p95_ms": "P95 (ms)", "p99_ms": "P99 (ms)", "ttft_p95_ms": "TTFT P95 (ms)",
                 "throughput_tok_s": "batch throughput (tokens/s)"}
FIGURE_CAPTION = ("Simulated (light) vs measured on the real engine (dark; bars: the run-to-run range), per policy: "
                  "interactive P95 and TTFT P95 (log scale) and batch throughput.")


def label(policy: str, driver: str) -> str:
    return policy if driver == RUNTIME else f"{policy} (article JS)"


def _f(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _pct(x, sign=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1%}" if sign else f"{x:.1%}"


def _error(model: float, measured: float) -> str:
    """model / measured - 1; n/a where nothing was measured (a server that sends every token at once: step 0)."""
    return _pct((model - measured) / measured if measured > 0 else math.nan, sign=True)


# --- sentences --------------------------------------------------------------------------------------------------

def step_text(r: ValidateRealRecord) -> str:
    st = r.backend
    text = (f"{st.max_num_seqs} sequences, step {st.base_ms:g} ms + {st.per_seq_ms:g} ms/sequence + "
            f"{st.per_token_ms:g} ms/prefill token"
            + (f" + {st.admit_ms:g} ms/admitted request" if st.admit_ms else "")
            + f", front end {st.request_ms:g} ms/request")
    text += f", decode step from profile {st.profile}" if st.profile else ""
    if r.engine_priority:
        text += ("; engine priority scheduling (interactive requests sent with priority 0, batch 1), KV cache "
                 + (f"{r.kv_cache_tokens:,} tokens" if r.kv_cache_tokens else "unlimited"))
    return text


def header_items(r: ValidateRealRecord) -> list[str]:
    return [
        f"scenario `{r.scenario}` ({r.scenario_file}), seed {r.seed}: {r.tasks} requests ({r.interactive} "
        f"interactive, {r.batch} batch), arrivals over {r.last_arrival_ms / 1000:.0f} s",
        f"time scale: arrivals x {r.time_scale:g}" + (f", tasks arriving before {r.until_ms:g} ms" if r.until_ms
                                                       else "") + " (the same for both sides)",
        f"server: {r.server} (model {r.model}); {r.repeats} measured run(s) per policy; simulated with "
        + (f"the calibration {r.calibration}" if r.calibration else "the scenario's backend") + f" ({step_text(r)})",
    ]


def _relation(q: RankingPair, side: str) -> str:
    return {">": f"{q.a} better", "<": f"{q.b} better", "~": "a tie"}[getattr(q, side)]


def pair_text(q: RankingPair) -> str:
    p = "" if math.isnan(q.p_value) else f", Welch p = {q.p_value:.2g}"
    return f"{q.metric}: {q.a} {q.predicted} {q.b} predicted, {q.a} {q.measured} {q.b} measured{p}"


def row_key(row: RealMetricRow) -> str:
    return f"{label(row.policy, row.driver)} {row.kind} {row.metric}"


def opposite(v: RealVerdict) -> list[RankingPair]:
    """Pairs ordered one way predicted and the other way measured."""
    return [q for q in v.pairs if {q.predicted, q.measured} == {">", "<"}]


def tied_on_one_side(v: RealVerdict) -> list[RankingPair]:
    """Pairs that differ only by a tie on one side."""
    return [q for q in v.pairs if q.predicted != q.measured and {q.predicted, q.measured} != {">", "<"}]


def outside_but_within_noise(rows: list[RealMetricRow]) -> list[str]:
    return [row_key(x) for x in rows if x.within_tolerance is False and x.within_noise]


def verdict_items(rows: list[RealMetricRow], v: RealVerdict) -> list[str]:
    items = []
    for key in v.ranking_predicted:
        lines = [f"{key}, best first: predicted {' > '.join(v.ranking_predicted[key])}; "
                 f"measured {' > '.join(v.ranking_measured[key])}"]
        for q in (q for q in v.pairs if q.metric == key):
            p = "" if math.isnan(q.p_value) else f" (Welch p = {q.p_value:.2g})"
            lines.append(f"  - {q.a} vs {q.b}: predicted {_relation(q, 'predicted')}, measured "
                         f"{_relation(q, 'measured')}{p}")
        items.append("\n".join(lines))
    if v.rankings_same:
        agree = "rankings agree: **yes**: every pair has the same relation on both sides"
    elif v.rankings_agree:
        agree = ("rankings agree: **yes**"
                 + (": the same order on both sides" if v.same_order else
                    ", where both sides separate the pair: no pair is ordered oppositely")
                 + "; closer than the tolerance predicted or not separated measured: "
                 + "; ".join(pair_text(q) for q in tied_on_one_side(v)))
    else:
        agree = "rankings agree: **no**: ordered oppositely: " + "; ".join(pair_text(q) for q in opposite(v))
    items.append(agree + f"\n  (a tie predicted: closer than {v.tolerance:.0%}; a tie measured: Welch's t-test over "
                 "the runs does not separate the pair at p < 0.05)")
    outside = [row_key(x) for x in rows if x.within_tolerance is False]
    within = (f"interactive P95 and batch throughput within {v.tolerance:.0%} for every policy: "
              f"**{'yes' if v.all_within else 'no'}**" + ("" if v.all_within else f" (outside: {', '.join(outside)})"))
    noise = outside_but_within_noise(rows)
    if noise:
        within += ("\n  - of those, the prediction lies inside the 95% CI of the measured mean (these runs cannot "
                   "tell the error from run-to-run noise): " + ", ".join(noise))
    items.append(within)
    return items


# --- tables -----------------------------------------------------------------------------------------------------

def comparison_table(metric_rows: list[RealMetricRow]) -> Table:
    rows = [[Cell(label(x.policy, x.driver)), Cell(x.kind), Cell(METRIC_LABELS[x.metric]), Cell(_f(x.predicted)),
             Cell(_f(x.measured)), Cell(f"{_f(x.measured_min)}-{_f(x.measured_max)}"), Cell(_pct(x.spread)),
             Cell(f"{_f(x.measured_ci_low)}-{_f(x.measured_ci_high)}"), Cell(_pct(x.relative_error, sign=True))]
            for x in metric_rows]
    return Table(["policy", "class", "metric", "predicted", "measured (mean of runs)", "run-to-run (min-max)",
                  "spread", "95% CI of the measured mean", "error"], rows, align="lll")


DECODE_TEXT = ("Median over requests of (end - first token) / (output tokens - 1), in ms: the engine's step time as "
               "the step model predicts it, without queueing or prefill. 'simulated' is the simulation's own run (its "
               "scheduling, its sequences in flight); 'model at the measured load' evaluates the step model at the "
               "sequences actually in flight and the prefill tokens actually admitted during each measured request's "
               "decode, so it checks the step model alone, run by run.")


def decode_table(r: ValidateRealRecord) -> Table:
    rows = []
    for d in r.decode:
        seen = [x for x in d.measured_ms if math.isfinite(x)]  # NaN: a run in which no decode was observed
        mean = sum(seen) / len(seen) if seen else math.nan
        rows.append([Cell(label(d.policy, d.driver)), Cell(d.kind), Cell(f"{d.simulated_ms:.1f}"),
                     Cell(", ".join(f"{x:.1f}" if math.isfinite(x) else "n/a" for x in d.measured_ms)),
                     Cell(_error(d.simulated_ms, mean)), Cell(", ".join(f"{n:.1f}" for n in d.in_flight)),
                     Cell(", ".join(f"{m:.1f}" for m in d.at_load_model_ms)),
                     Cell(", ".join(_error(m, x) for x, m in zip(d.at_load_measured_ms, d.at_load_model_ms)))])
    return Table(["policy", "class", "simulated", "measured (per run)", "error", "sequences in flight (per run)",
                  "model at the measured load (per run)", "error of the model at the measured load (per run)"],
                 rows, align="ll")


def _runs_by_arm(r: ValidateRealRecord):
    for policy, driver in r.arms():
        yield policy, driver, sorted((x for x in r.runs if (x.policy, x.driver) == (policy, driver)),
                                     key=lambda x: x.run)


WINDOW_TEXT = ("Batch requests grouped by the 10-second window in which their decode began (windows with at least 5); "
               "per window, the median over its requests of (model at the measured load / measured decode step - 1). "
               "The model already accounts for the sequences in flight and the prefill admitted in each window, so a "
               "change from one window to the next, at the same policy and load, is a change of the engine's own "
               "speed, which the step model has no variable for.")


def window_table(r: ValidateRealRecord) -> Table | None:
    """The model-at-load error of batch requests by 10-s window of each run: the engine's speed through time."""
    windows = sorted({k for x in r.runs for k in x.batch_error_by_window})
    if not windows:
        return None
    rows = []
    for policy, driver, runs in _runs_by_arm(r):
        for x in runs:
            w = x.batch_error_by_window
            span = f"{max(w.values()) - min(w.values()):.1%}" if len(w) > 1 else ""
            rows.append([Cell(label(policy, driver)), Cell(str(x.run))]
                        + [Cell(f"{w[k]:+.1%}" if k in w else "") for k in windows] + [Cell(span)])
    return Table(["policy", "run"] + [f"{10 * k}-{10 * (k + 1)} s" for k in windows] + ["range within the run"],
                 rows, align="lr")


CPU_TEXT = ("Cores' worth of CPU time per wall second (simlab.realcheck.hostcpu, from Linux schedstat): each server "
            "process running, and waiting on a run queue (runnable, no core free); this client (the load generator "
            "and the scheduler); the whole machine. An engine's processes may poll while they wait for each other, so "
            "'running' includes polling. The step model has no term for run-queue wait: where the server waited more "
            "than during the load test that calibrated it (loadtest.csv's server_waiting_cores), the decode step is "
            "slower than the model at the measured load.")


def cpu_table(r: ValidateRealRecord) -> Table | None:
    """Per measured run: how busy the machine's two kinds of work were, beside the decode-step error."""
    uses = [x.cpu for x in r.runs if x.cpu]
    if not uses:
        return None
    names = sorted({s.name for u in uses for s in u.server if s.cores + s.waiting >= 0.01})  # idle helpers left out
    batch = {(d.policy, d.driver): d for d in r.decode if d.kind == "batch"}
    rows = []
    for policy, driver, runs in _runs_by_arm(r):
        d = batch[(policy, driver)]
        for i, x in enumerate(runs):
            if x.cpu is None:
                continue
            server = {s.name: s for s in x.cpu.server}
            step, model = d.at_load_measured_ms[i], d.at_load_model_ms[i]
            rows.append([Cell(label(policy, driver)), Cell(str(x.run))]
                        + [Cell(f"{server[n].cores:.2f} + {server[n].waiting:.2f}" if n in server else "")
                           for n in names]
                        + [Cell(f"{x.cpu.client_cores:.2f}"), Cell(f"{x.cpu.machine_cores:.2f}"),
                           Cell(_error(model, step))])
    return Table(["policy", "run"] + [f"{n} running + waiting" for n in names]
                 + ["client", "machine", "model at the measured load: error (batch)"], rows, align="lr")


# --- the document -----------------------------------------------------------------------------------------------

def document(r: ValidateRealRecord, out: Path) -> Document:
    doc = Document("Sim-to-real validation")
    doc.add(Bullets(header_items(r)), comparison_table(r.rows),
            Heading(2, "Verdicts"), Bullets(verdict_items(r.rows, r.verdict)),
            Heading(2, "Where the difference comes from: the decode step each request saw"),
            Paragraph(DECODE_TEXT), decode_table(r))
    windows = window_table(r)
    if windows is not None:
        doc.add(Heading(2, "The engine's speed through each run"), Paragraph(WINDOW_TEXT), windows)
    cpu = cpu_table(r)
    if cpu is not None:
        doc.add(Heading(2, "CPU on this machine during each run"), Paragraph(CPU_TEXT), cpu)
    else:
        doc.add(Paragraph("(The server's processes were not visible: no CPU measurement.)"))
    for f in r.figures:
        doc.add(Figure(Path(out) / f, FIGURE_CAPTION))
    return doc.finish()


def verdict_json(r: ValidateRealRecord) -> dict:
    """verdict.json: the header lines, the rankings and pairs, and the tolerance checks, as earlier simlab wrote it."""
    v = r.verdict
    pairs = {key: [{"a": q.a, "b": q.b, "predicted": q.predicted, "measured": q.measured, "p_value": q.p_value}
                   for q in v.pairs if q.metric == key] for key in v.ranking_predicted}
    return {"header": [f"- {item}" for item in header_items(r)], "ranking_predicted": v.ranking_predicted,
            "ranking_measured": v.ranking_measured, "pairs": pairs, "rankings_agree": v.rankings_agree,
            "same_order": v.same_order, "rankings_same": v.rankings_same,
            "pairs_opposite": [pair_text(q) for q in opposite(v)],
            "pairs_tied_on_one_side": [pair_text(q) for q in tied_on_one_side(v)],
            "outside_but_within_noise": outside_but_within_noise(r.rows), "tolerance": v.tolerance,
            "within_tolerance": {row_key(x): x.within_tolerance for x in r.rows if x.within_tolerance is not None},
            "all_within": v.all_within}


SUMMARY_COLUMNS = ("policy", "class", "metric", "predicted", "measured", "measured_min", "measured_max", "spread",
                   "relative_error", "runs", "measured_ci_low", "measured_ci_high")


def summary_rows(r: ValidateRealRecord) -> list[dict]:
    """summary.csv: one row per policy (and driver), class and metric."""
    return [{"policy": label(x.policy, x.driver), "class": x.kind, "metric": x.metric, "predicted": x.predicted,
             "measured": x.measured, "measured_min": x.measured_min, "measured_max": x.measured_max,
             "spread": x.spread, "relative_error": x.relative_error, "runs": x.runs,
             "measured_ci_low": x.measured_ci_low, "measured_ci_high": x.measured_ci_high} for x in r.rows]

