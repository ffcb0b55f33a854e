"""The terminal, the command's report.md and the `simlab report` HTML page render one record: every number in their
tables agrees with the others and with the record (within the rounding the tables print)."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser

import pytest

from simlab.reporting.blocks.ab import FAILURES, HEADLINE, terminal_table
from simlab.records import save
from simlab.reporting import build_report
from tests.test_ab_judge import synthetic_record
from tests.test_plots_ab import small_scenario

NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list[float]:
    return [float(m.rstrip(",").replace(",", "")) for m in NUMBER.findall(text)]


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (header row first)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tables, self._cell = [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_rows(html: str, first_header: str, second_header: str) -> dict[str, list[float]]:
    table = next(t for t in Tables(html).tables if t[0][:2] == [first_header, second_header])
    return {r[0]: numbers(" ".join(r[1:])) for r in table[1:]}


def md_rows(md: str, first_header: str, second_header: str) -> dict[str, list[float]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} | {second_header} |"))
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = numbers(" ".join(cells[1:]))
    return out


def terminal_rows(text: str, labels) -> dict[str, list[float]]:
    """Rows of a text_table whose first cell is one of `labels`; the first table that has them."""
    out = {}
    for line in text.splitlines():
        label = next((x for x in labels if line.startswith(x + " ")), None)
        if label is not None and label not in out:
            out[label] = numbers(line[len(label):])
    return out


def close(found: list[float], expected: list[float]) -> bool:
    """Each number as printed: integers exactly, >= 100 to the unit, else to one decimal (or 3 significant digits
    for ratios, passed as negative tolerance markers below)."""
    if len(found) != len(expected):
        return False
    for f, (v, tol) in zip(found, expected):
        if not math.isclose(f, v, abs_tol=tol, rel_tol=0):
            return False
    return True


def tol(v: float) -> tuple[float, float]:
    return (v, 0.5 + 1e-9 if abs(v) >= 100 else 0.05 + 1e-9)


def ratio(v: float) -> tuple[float, float]:
    return (v, abs(v) * 0.005 + 1e-9)


def ci(i) -> list[tuple[float, float]]:
    out = [tol(i.mean)]
    if math.isfinite(i.ci_low) and math.isfinite(i.ci_high) and i.ci_low != i.ci_high:
        out += [tol(i.ci_low), tol(i.ci_high)]
    return out


# --- A/B -----------------------------------------------------------------------------------------------------------

def ab_records(tmp_path):
    from simlab.experiments.ab import run_ab

    scenario = small_scenario()
    real = run_ab(scenario, scenario.options(), ["unscheduled", "priority", "static", "adaptive"], [1, 2, 3],
                  tmp_path / "real-runs", progress=False)
    capacity = synthetic_record(capacity=True)
    # the frontier's one-line answer, as `simlab ab` adds it (no sweep here: only its rendering is checked)
    capacity.verdict = "**Keep static-6**: P95 1,234.5 ms [1,200, 1,270] vs 2,345 ms for adaptive, 61.5 jobs/min."
    return {"small-ab": real, "capacity": capacity}


@pytest.fixture(scope="module")
def ab_renderings(tmp_path_factory):
    from simlab.experiments.ab import store
    from simlab.reporting.blocks.ab import write_report

    root = tmp_path_factory.mktemp("agree-ab")
    out = {}
    for name, rec in ab_records(root).items():
        folder = root / name
        rec = store(rec, folder)  # as `simlab ab` does: the stored record is what everything renders
        write_report(rec, folder)
        html, md = build_report([str(folder)], str(root / f"{name}-page"))[:2]
        out[name] = (rec, terminal_table(rec), (folder / "report.md").read_text(encoding="utf-8"),
                     md.read_text(encoding="utf-8"), html.read_text(encoding="utf-8"))
    return out


@pytest.mark.parametrize("name", ["small-ab", "capacity"])
def test_ab_policy_table_agrees_everywhere(ab_renderings, name):
    rec, term, md, page_md, html = ab_renderings[name]
    failed = any(r.values["interactive_failed"] or r.values["batch_failed"] for r in rec.runs)
    cols = HEADLINE + (FAILURES if failed else [])
    expected = {p: [x for m, _ in cols for x in ci(rec.interval(p, m))] for p in rec.policies}
    renderings = {
        "terminal": terminal_rows(term, rec.policies),
        "report.md": md_rows(md, "policy", "interactive P95 ms"),
        "review page .md": md_rows(page_md, "policy", "interactive P95 ms"),
        "review page .html": html_rows(html, "policy", "interactive P95 ms"),
    }
    for where, rows in renderings.items():
        assert list(rows) == rec.policies, where
        for p in rec.policies:
            assert close(rows[p], expected[p]), (where, p, rows[p], expected[p])
    assert len({repr(r) for r in renderings.values()}) == 1


@pytest.mark.parametrize("name", ["small-ab", "capacity"])
def test_ab_verdicts_agree_everywhere(ab_renderings, name):
    rec, term, md, page_md, html = ab_renderings[name]
    header = "1. P95 not stuck above the SLO"
    renderings = {
        "terminal": terminal_rows(term.split("success criteria")[1], rec.policies),
        "report.md": md_rows(md, "policy", header),
        "review page .md": md_rows(page_md, "policy", header),
        "review page .html": html_rows(html, "policy", header),
    }
    for v in rec.verdicts:
        expected = [tol(v.longest_p95_over_slo_ms / 1000)]
        if v.bound_longest_p95_over_slo_ms is not None:
            expected.append(tol(v.bound_longest_p95_over_slo_ms / 1000))
        expected += [tol(v.longest_batch_stall_ms / 1000), (v.stranded, 0), (v.max_in_flight, 0)]
        if v.max_concurrency is not None:
            expected.append((v.max_concurrency, 0))
        # the capacity verdict says what was judged: P95 in SLO bins, for how long (not on the terminal's short cell)
        judged = [tol(rec.criteria.slo_bin_ms / 1000), tol(rec.criteria.p95_stay_ms / 1000)]
        for where, rows in renderings.items():
            want = judged + expected if v.p95_verdict == "capacity" and where != "terminal" else expected
            assert close(rows[v.policy], want), (where, v.policy, rows[v.policy], want)
    from simlab.reporting.blocks.ab import capacity_text

    words = {"pass": "pass", "fail": "FAIL", "capacity": capacity_text(rec.criteria)}
    for v in rec.verdicts:
        for text in (term, md, page_md, html):
            line = next(x for x in text.replace("<tr>", "\n").splitlines() if v.policy in x and "stretch" in x)
            word = "capacity (" if text is term and v.p95_verdict == "capacity" else words[v.p95_verdict]
            assert word in line, (v.policy, line)
    assert ("no scheduler can pass criterion 1 on this traffic" in term) == rec.capacity_limited
    assert (name == "capacity") == rec.capacity_limited


def test_ab_frontier_verdict_agrees_everywhere(ab_renderings):
    rec, term, md, page_md, html = ab_renderings["capacity"]
    want = numbers(rec.verdict)
    assert want == [6, 1234.5, 1200, 1270, 2345, 61.5]
    found = [numbers(next(x for x in text.splitlines() if "Keep static-6" in x))
             for text in (term, md, page_md, re.sub(r"<[^>]+>", "", html))]
    assert found == [want] * 4
    assert not ab_renderings["small-ab"][0].verdict


@pytest.mark.parametrize("name", ["small-ab", "capacity"])
def test_ab_comparisons_and_bounds_agree_everywhere(ab_renderings, name):
    from simlab.reporting.blocks.ab import COMPARED

    rec, term, md, page_md, html = ab_renderings[name]
    pairs = list(dict.fromkeys(f"{c.candidate} vs {c.baseline}" for c in rec.comparisons))
    expected = {}
    for pair in pairs:
        cand, base = pair.split(" vs ")
        row = []
        for m, _ in COMPARED:
            c = next(c for c in rec.comparisons if (c.candidate, c.baseline, c.metric) == (cand, base, m))
            row.append(tol(c.diff))
            if math.isfinite(c.diff_ci_low) and math.isfinite(c.diff_ci_high) and c.diff_ci_low != c.diff_ci_high:
                row += [tol(c.diff_ci_low), tol(c.diff_ci_high)]
            if math.isfinite(c.ratio):
                row.append(ratio(c.ratio))
        expected[pair] = row
    for where, text in (("report.md", md), ("review page .md", page_md)):
        rows = md_rows(text, "comparison", "interactive P95 ms")
        assert all(close(rows[p], expected[p]) for p in pairs), (where, rows, expected)
    rows = html_rows(html, "comparison", "interactive P95 ms")
    assert all(close(rows[p], expected[p]) for p in pairs), (rows, expected)

    # the bounds: the same sentences, the same numbers, from the record's bound aggregates
    nb = rec.bound("bound-no-batch", "interactive_p95_ms")
    thr = rec.bound("bound-batch-alone", "batch_throughput_per_min")
    mk = rec.bound("bound-batch-alone", "batch_makespan_ms")
    stay = rec.verdicts[0].bound_longest_p95_over_slo_ms / 1000
    want = ci(nb) + [tol(stay)] + ci(thr) + ci(mk)

    def bound_numbers(text):
        lines = [x for x in re.sub(r"<[^>]+>", "", text).splitlines()
                 if "with batch absent:" in x or "Batch alone, the whole capacity" in x]
        return numbers(" ".join(lines))

    term_bounds = numbers(" ".join(x for x in term.splitlines() if x.startswith("bound: ")))
    for found in (term_bounds, bound_numbers(md), bound_numbers(page_md), bound_numbers(html)):
        assert close(found, want), (found, want)


# --- tuning --------------------------------------------------------------------------------------------------------

def tune_record():
    from simlab.records import TuneConfig, TuneDecision, TuneRecord
    from simlab.tuning.report import _production, tune_status

    def config(name, obj, lo, hi, thr, tlo, thi, vs, search=None, trial=None):
        return dict(config=name, trial=trial, search_objective_ms=search, search_throughput_per_min=None,
                    holdout_objective_ms=obj, holdout_objective_ci_low=lo, holdout_objective_ci_high=hi,
                    holdout_throughput_per_min=thr, holdout_throughput_ci_low=tlo, holdout_throughput_ci_high=thi,
                    required_throughput_per_min=412.25, meets_constraint=thr >= 412.25,
                    vs_defaults_diff_ms=vs[0], vs_defaults_ci_low=vs[1], vs_defaults_ci_high=vs[2],
                    vs_reference_diff_ms=-vs[0] / 2, vs_reference_ci_low=-vs[0], vs_reference_ci_high=0.25,
                    beats_defaults_ci_disjoint=name == "best", cis_overlap_defaults=name != "best",
                    options={"policy": "adaptive", "maxConcurrency": 8, "windowMs": 7321.5})

    summary = [config("best", 612.34, 580.1, 644.57, 455.5, 440.25, 470.75, (-1234.5, -1500.25, -968.75), 598.76, 17),
               config("defaults", 1846.84, 1700.2, 1993.48, 520.1, 505.0, 535.2, (0.0, 0.0, 0.0), 1800.5, 0),
               config("reference", 1300.0, 1250.5, 1349.5, 458.06, 450.0, 466.12, (-546.84, -600.0, -493.68)),
               config("bound-no-batch", 401.23, 398.5, 403.96, math.nan, math.nan, math.nan, (-1445.61, -1600.0, -1291.22))]
    pick = summary[0]
    return TuneRecord(
        scenario="agree-tune", objective="p95", mode="single", trials=12, trials_complete=11, trials_feasible=7,
        seeds=[1, 2], throughput_fraction=0.9, reference="static", reference_throughput_per_min=458.06,
        required_throughput_per_min=412.25, study="agree-tune", storage="sqlite:///study.db",
        space={"windowMs": [2000.0, 30000.0], "smoothingAlpha": [0.05, 0.9]}, max_concurrency=8, note=None,
        holdout_seeds=[1001, 1002, 1003], validation=[TuneConfig(**s) for s in summary],
        decision=TuneDecision(tune_status(summary, pick)), best_options=_production(pick["options"]), pick="best")


def test_tune_tables_and_verdict_agree_everywhere(tmp_path):
    from simlab.reporting.blocks.tune import terminal, write_report
    from simlab.reporting.words import tune_verdict

    rec = tune_record()
    assert rec.decision.status == "beaten"
    save(rec, tmp_path / "tune")
    write_report(rec, tmp_path / "tune")
    term = terminal(rec, tmp_path / "tune", 1.0)
    html, page_md = build_report([str(tmp_path / "tune")], str(tmp_path / "page"))[:2]
    html, page_md = html.read_text(encoding="utf-8"), page_md.read_text(encoding="utf-8")
    md = (tmp_path / "tune" / "report.md").read_text(encoding="utf-8")
    configs = [c.config for c in rec.validation]
    expected = {}
    for c in rec.validation:
        row = [tol(c.search_objective_ms)] if c.search_objective_ms is not None else []
        row += ci(_i(c.holdout_objective_ms, c.holdout_objective_ci_low, c.holdout_objective_ci_high))
        row += ci(_i(c.holdout_throughput_per_min, c.holdout_throughput_ci_low, c.holdout_throughput_ci_high)) \
            if math.isfinite(c.holdout_throughput_per_min) else []
        if c.config != "defaults":
            row += ci(_i(c.vs_defaults_diff_ms, c.vs_defaults_ci_low, c.vs_defaults_ci_high))
        expected[c.config] = row
    renderings = {
        "terminal": terminal_rows(term, configs),
        "report.md": md_rows(md, "config", "search P95 ms"),
        "review page .md": md_rows(page_md, "config", "search P95 ms"),
        "review page .html": html_rows(html, "config", "search P95 ms"),
    }
    for where, rows in renderings.items():
        assert list(rows) == configs, where
        for c in configs:
            assert close(rows[c], expected[c]), (where, c, rows[c], expected[c])
    # the verdict: one headline, the same numbers in all four
    head = numbers(tune_verdict(rec)[0])
    assert head == numbers(next(x for x in term.splitlines() if x.startswith("verdict: ")))
    for text in (md, page_md, re.sub(r"<[^>]+>", "", html)):
        line = next(x for x in text.splitlines() if "beat the production defaults" in x)
        assert numbers(line) == head
    assert close(head, [tol(612.34), tol(1846.84), (95, 0), tol(455.5), tol(412.25)])  # 95: "95% CIs"


def _i(mean, lo, hi):
    from simlab.records import Interval

    return Interval(mean, lo, hi)


def test_terminal_table_is_what_the_command_prints(tmp_path):
    """`simlab ab` prints terminal_table(record) of the record it wrote: checked once end to end."""
    from simlab.records import load
    from tests.helpers import simlab

    proc = simlab("ab", "scenarios/seed-article.toml", "--replications", "2", "--quiet", "--no-figures",
                  "--policies", "priority,adaptive", "--out", tmp_path)
    rec = load(tmp_path / "result.json", "ab")
    assert terminal_table(rec) in proc.stdout


# --- decide --------------------------------------------------------------------------------------------------------

def decide_record():
    """A DecideRecord made by the rule from synthetic arms, with the same arms as its confirmation."""
    import numpy as np

    from simlab.decision.compare import Arm
    from simlab.decision.rule import judge
    from simlab.decision.run import arm_results
    from simlab.records import DecideRecord, Interval, Round, Unit
    from simlab.scenario import Decision

    rng = np.random.default_rng(5)
    noise = rng.normal(0, 1, 8)
    arms = [Arm(f"static-{c}", {"batchMaxConcurrency": c, "batchMinConcurrency": c}, 100 + 30 * c + 3 * noise
                + rng.normal(0, 0.5, 8), 200 + 61.5 * c + 2 * noise + rng.normal(0, 0.5, 8), "static", c) for c in (1, 2, 3)]
    arms.append(Arm("adaptive-defaults", {"batchMaxConcurrency": 3, "batchMinConcurrency": 1}, 150 + 3 * noise,
                    250 + 2 * noise, "adaptive"))
    rule = Decision()
    out = judge(arms, rule, arms[2], {"batchMaxConcurrency": 3, "batchMinConcurrency": 1})
    units = [Unit("base", 1000 + i) for i in range(8)]
    sel = arm_results(arms, out, rule, arms[2], {})
    conf = arm_results([a for a in arms if a.label in (out.choice, "static-3", "adaptive-defaults")], out, rule,
                       arms[2], {}, {"static-3": (False, 1.0), "adaptive-defaults": (False, 1.0)})
    return DecideRecord(
        scenario="agree-decide", command="decide", rule="constrained", level=0.95, p95_margin=0.02,
        throughput_margin=0.02, throughput_fraction=0.9, bound_tolerance=0.05, reference="static-3", slo_p95_ms=400.0,
        max_concurrency=4, backend_slots=4, conditions=["base"], search_conditions=["base"], selection_units=units,
        confirmation_units=units, selection=sel, confirmation=conf, choice=out.choice, pick=out.pick,
        leader=out.leader, second_leader=out.second_leader, no_choice="", limit_ms=None, limit_kind="",
        settled=out.settled, settled_by="decided", unsettling=[], seeds_needed=None, seeds_budget=8,
        rounds=[Round(8, 4, 32, out.choice, out.tie_set, out.settled)], best_static=out.choice,
        best_adaptive="adaptive-defaults", bound_p95=Interval(99.0, 98.0, 100.0), confirmed=True,
        constraint_missed=False, slo_met="yes", per_condition=[], exported=True, exit_code=0, runs=64,
        runs_exhaustive=64)


def test_decide_answer_and_tables_agree_everywhere(tmp_path):
    from simlab.decision import files
    from simlab.reporting.blocks.decide import terminal, write_report
    from simlab.reporting.words import decide_sentences

    rec = decide_record()
    assert rec.choice == "static-3" and rec.settled
    folder = tmp_path / "decide"
    files.write(rec, folder)
    write_report(rec, folder)
    term = terminal(rec)
    html, page_md = build_report([str(folder)], str(tmp_path / "page"))[:2]
    html, page_md = html.read_text(encoding="utf-8"), page_md.read_text(encoding="utf-8")
    md = (folder / "report.md").read_text(encoding="utf-8")
    labels = [a.label for a in rec.confirmation]
    expected = {}
    for a in rec.confirmation:
        row = [(a.units, 0)] + ci(a.p95) + ci(a.throughput)
        for d in (a.p95_vs_choice, a.throughput_vs_choice):
            row += ci(d) if d is not None else []
        expected[a.label] = row
    renderings = {
        "terminal": terminal_rows(term.split("fresh confirmation units (")[-1], labels),
        "report.md": md_rows(md, "arm", "units"),
        "review page .md": md_rows(page_md, "arm", "units"),
        "review page .html": html_rows(html, "arm", "units"),
    }
    for where, rows in renderings.items():
        rows = {k.replace("**", ""): v for k, v in rows.items()}  # the choice is in bold
        assert sorted(rows) == sorted(labels), where
        for label in labels:
            found = rows[label][:len(expected[label])]
            assert close(found, expected[label]), (where, label, rows[label], expected[label])
    # the answer: one paragraph, the same numbers everywhere, made from the record (not stored in it)
    sentences = decide_sentences(rec)
    assert sentences[0].startswith("Deploy a static cap of 3")
    for text in (term, md, page_md, re.sub(r"<[^>]+>", "", html)):
        assert sentences[0] in text.replace("**", "")
        assert numbers(" ".join(sentences[1:])) == numbers(next(x for x in text.replace("**", "").splitlines()
                                                                if x.startswith(sentences[1][:30])))
