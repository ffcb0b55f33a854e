"""`simlab fit`, `calibrate` and `calibrate-gpu`: what the command prints, its report.md and the `simlab report` page
(Markdown and HTML) render one record. Every table they share holds the same numbers in all four, and those are the
record's (within the digits the tables print); each command prints exactly the blocks of the record it stored."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from simlab import records
from simlab.reporting import build_report
from simlab.reporting.terminal import render_terminal
from tests.helpers import ROOT, simlab
from tests.test_render_agreement import Tables, numbers

REF = ROOT / "results" / "reference" / "real-engine"


# --- reading a table back from each rendering ----------------------------------------------------------------------

def md_table(md: str, header: list[str]) -> list[list[str]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if [c.strip() for c in line.strip().strip("|").split(" | ")][:len(header)] == header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def html_table(html: str, header: list[str]) -> list[list[str]]:
    table = next(t for t in Tables(html).tables if t[0][:len(header)] == header)
    return table[1:]


def terminal_table(text: str, header: list[str], after: str = "") -> list[list[str]]:
    """A table of render_terminal: cells are separated by two spaces or more; the table ends at the first line with
    fewer cells than its header (a blank line, a heading, a paragraph). `after`: search after this text."""
    lines = text[text.index(after):].splitlines() if after else text.splitlines()
    split = lambda line: [c for c in re.split(r"\s{2,}", line.strip()) if c]  # noqa: E731
    named = [h for h in header if h]  # an empty header cell is blank space
    start = next(i for i, line in enumerate(lines) if split(line)[:len(named)] == named)
    rows = []
    for line in lines[start + 2:]:
        cells = split(line)
        if len(cells) < len(header):
            break
        rows.append(cells)
    return rows


def keyed(rows: list[list[str]], key: int = 1, columns: slice | None = None) -> dict[str, list[float]]:
    """Rows by their first `key` cells; the numbers of the other cells (or of `columns`)."""
    return {" / ".join(r[:key]): numbers(" ".join(r[columns] if columns else r[key:])) for r in rows}


def agree(renderings: dict[str, dict[str, list[float]]], expected: dict[str, list[tuple[float, float]]]) -> None:
    """Every rendering has the expected rows, each number within its tolerance."""
    for where, rows in renderings.items():
        assert list(rows) == list(expected), (where, list(rows), list(expected))
        for key, want in expected.items():
            found = rows[key]
            assert len(found) == len(want), (where, key, found, want)
            for f, (v, tol) in zip(found, want):
                assert math.isclose(f, v, abs_tol=tol, rel_tol=0), (where, key, found, want)


def sig(v: float, digits: int = 4) -> tuple[float, float]:
    """A number printed to `digits` significant digits."""
    if v == 0:
        return (v, 1e-12)
    return (v, 10 ** (math.floor(math.log10(abs(v))) - digits + 1) / 2 + 1e-9)


def shown(v: float) -> tuple[float, float]:
    """A measured value as the fit and step-time tables print it: 4 significant digits, to the unit from 1,000 up."""
    return (v, 0.5 + 1e-9) if abs(v) >= 1000 else sig(v)


def ms(v: float) -> tuple[float, float]:
    """A latency as fmt_num prints it: to the unit from 100 up, else one decimal."""
    return (v, 0.5 + 1e-9) if abs(v) >= 100 else dec(v, 1)


def dec(v: float, places: int) -> tuple[float, float]:
    return (v, 0.5 * 10 ** -places + 1e-9)


def pct(v: float, places: int = 1) -> tuple[float, float]:
    return (100 * v, 0.5 * 10 ** -places + 1e-9)


def rendered(folder: Path, terminal: str, name: str) -> dict[str, str]:
    """The four renderings of the record in `folder`: the terminal text given, report.md, and the review page (and
    check.md when there is one)."""
    html, md = build_report([str(folder)], str(folder.parent / f"{name}-page"))[:2]
    out = {"terminal": terminal, "report.md": (folder / "report.md").read_text(encoding="utf-8"),
           "page.md": md.read_text(encoding="utf-8"), "page.html": html.read_text(encoding="utf-8")}
    if (folder / "check.md").exists():
        out["check.md"] = (folder / "check.md").read_text(encoding="utf-8")
    return out


def tables(texts: dict[str, str], header: list[str], key: int = 1, columns: slice | None = None,
           where=("terminal", "report.md", "page.md", "page.html"), after: str = "") -> dict[str, dict]:
    readers = {"terminal": lambda t: terminal_table(t, header, after), "report.md": lambda t: md_table(t, header),
               "page.md": lambda t: md_table(t, header), "page.html": lambda t: html_table(t, header)}
    return {w: keyed(readers[w](texts[w]), key, columns) for w in where}


# --- fit ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fit_folder(tmp_path_factory) -> tuple[records.FitRecord, dict[str, str]]:
    """Two classes with tokens and latency: Poisson interactive arrivals, a bursty batch class (resampled)."""
    from simlab.calibration.files import store_fit
    from simlab.calibration.run import read_fit_inputs, run_fit
    from simlab.reporting.blocks.fit import terminal_blocks, write_report
    from tests.test_fit import hyperexponential_times, poisson_times, write_log

    root = tmp_path_factory.mktemp("agree-fit")
    ti = poisson_times(3.0, 600_000, seed=1)
    tb = hyperexponential_times(1200, seed=2)
    tb = tb[tb < 600_000]
    times = np.concatenate([ti, tb])
    kinds = ["interactive"] * len(ti) + ["batch"] * len(tb)
    order = np.argsort(times)
    log = write_log(root / "two.csv", times[order], [kinds[i] for i in order], service=True)
    out = root / "fit"
    run = run_fit(read_fit_inputs(log), out, validate_seeds=2)
    rec = store_fit(run.record, run.fit, out)  # as the command does: the stored record is what is rendered
    write_report(rec, out)
    return rec, rendered(out, render_terminal(terminal_blocks(rec)), "fit")


def test_fit_arrivals_agree_everywhere(fit_folder):
    r, texts = fit_folder
    assert [c.kind for c in r.classes] == ["interactive", "batch"]
    assert [c.arrivals.process for c in r.classes] == ["poisson", "resampled"]
    for c in r.classes:
        a = c.arrivals
        expected = {"requests": [(a.requests, 0), dec(a.span_ms / 60_000, 1)], "mean rate": [dec(a.rate_per_s, 3)],
                    "inter-arrival CV": [dec(a.cv, 3), (1, 0)]}
        column = 1 + [x.kind for x in r.classes].index(c.kind)  # the page and report.md: a column per class
        found = {"terminal": keyed(terminal_table(texts["terminal"], ["", c.kind], f"{c.kind} arrivals:"))}
        for where in ("report.md", "page.md", "page.html"):
            read = md_table if where.endswith("md") else html_table
            found[where] = keyed([[row[0], row[column]] for row in read(texts[where], ["", "interactive", "batch"])])
        found = {w: {k: v for k, v in rows.items() if k in expected} for w, rows in found.items()}
        agree(found, expected)
    # why each class got its process: the same sentence in report.md and on the page
    for c in r.classes:
        line = next(x for x in texts["report.md"].splitlines() if x.startswith(f"**{c.kind}**: the scenario's"))
        assert line in texts["page.md"]


def test_fit_lengths_agree_everywhere(fit_folder):
    r, texts = fit_folder
    header = ["class", "quantity", "median"]
    expected = {}
    for c in r.classes:
        for ln in c.lengths:
            label = {"prompt_tokens": "prompt tokens", "output_tokens": "output tokens"}.get(ln.column, "latency (ms)")
            want = [shown(x) for x in (ln.p50, ln.p90, ln.p95, ln.p99, ln.mean, ln.lognormal_median)]
            expected[f"{c.kind} / {label}"] = want + [dec(ln.lognormal_sigma, 3)]
    agree(tables(texts, header, key=2, columns=slice(2, 9)), expected)
    assert {"service_ms", "prompt_tokens", "output_tokens"} <= {ln.column for c in r.classes for ln in c.lengths}


def test_fit_validation_agrees_everywhere(fit_folder):
    r, texts = fit_folder
    v = r.validation
    badges = [f"{name}: {'reproduced' if ok else 'NOT reproduced'}"
              for name, ok in zip(("arrival rates", "inter-arrival CV", "quantiles"), (v.rates, v.cv, v.quantiles))]
    for where, text in texts.items():
        found = re.findall(r"(arrival rates|inter-arrival CV|quantiles): (reproduced|NOT reproduced)",
                           re.sub(r"<[^>]+>", "", text))
        assert [f"{a}: {b}" for a, b in found][:3] == badges, where
    from simlab.reporting.words import check_quantity

    expected = {}
    for c in v.checks:
        want = [shown(x) for x in (c.observed, c.observed_lo, c.observed_hi) if math.isfinite(x)]
        want += [shown(x) for x in (c.simulated, c.simulated_lo, c.simulated_hi) if math.isfinite(x)]
        expected[f"{c.kind} / {check_quantity(c, r.bin_ms)}"] = want
    assert {c.quantity for c in v.checks} == {"bin_rate", "total_rate", "cv", "quantile"}
    found = tables(texts, ["class", "quantity", "log", "simulated"], key=2, columns=slice(2, 4),
                   where=("report.md", "page.md", "page.html"))
    agree(found, expected)


# --- calibrate ---------------------------------------------------------------------------------------------------

def calibration_records(tmp_path) -> dict[str, records.CalibrationRecord]:
    """A small real calibration, and a made-up one whose knees never cross and start over the SLO."""
    from simlab.calibration.run import run_calibrate
    from simlab.scenario import load_scenario
    from tests.test_calibrate import TINY

    (tmp_path / "tiny.toml").write_text(TINY)
    scenario = load_scenario(tmp_path / "tiny.toml")
    real = run_calibrate(scenario, None, [1, 2], tmp_path / "tiny-runs", rates=[1, 4, 12, 24], refine=0)
    made = records.CalibrationRecord(
        scenario="made-up", slo_p95_ms=1500.0, seeds=[7, 8, 9], base_rps=3.25,
        knees=[records.Knee("alone", math.nan, 23.4, math.nan, "above"),
               records.Knee("batch", math.nan, math.nan, 1.13, "below")],
        recommendation=records.Recommendation(1.1, 1500.0, "batch", "lowest-rate", 1.13),
        options={"policy": "adaptive", "maxConcurrency": 8, "interactiveRpsThreshold": 1.1},
        notes=["trace-arrivals", "over-at-lowest"],
        points=[records.KneePoint("alone", f, 2.5 * f, 400.0 * f, 350.0 * f, 450.0 * f, 3, math.nan)
                for f in (1.0, 4.0, 9.38)]
        + [records.KneePoint("batch", f, 2.5 * f, 1600.0 * f, 1550.0 * f, 1650.0 * f, 3, 12.5) for f in (0.45, 1.0)])
    return {"tiny": real, "made-up": made}


@pytest.fixture(scope="module")
def calibrate_folders(tmp_path_factory):
    from simlab.calibration.files import store_calibration
    from simlab.reporting.blocks.calibrate import terminal_blocks, write_report

    root = tmp_path_factory.mktemp("agree-calibrate")
    out = {}
    for name, rec in calibration_records(root).items():
        folder = root / name
        rec = store_calibration(rec, folder)
        write_report(rec, folder)
        out[name] = (rec, rendered(folder, render_terminal(terminal_blocks(rec)), name))
    return out


@pytest.mark.parametrize("name", ["tiny", "made-up"])
def test_calibration_knees_and_thresholds_agree_everywhere(calibrate_folders, name):
    from simlab.reporting.words import CURVE_LABELS

    r, texts = calibrate_folders[name]
    expected = {}
    for k in r.knees:
        value = {"found": [k.rps, k.ci_low, k.ci_high], "above": [k.ci_low], "below": [k.ci_high]}[k.status]
        want = [sig(x, 3) for x in value if math.isfinite(x)]
        expected[CURVE_LABELS[k.curve]] = want[:1] + [(95, 0)] + want[1:] if len(want) == 3 else want  # "95% CI"
    agree(tables(texts, ["curve", "interactive rate at the knee"]), expected)
    rec = r.recommendation
    expected = {"interactiveRpsThreshold": [(rec.interactive_rps_threshold, 1e-9)],
                "interactiveP95LatencyMs": [(rec.interactive_p95_latency_ms, 1e-9)]}
    agree(tables(texts, ["option", "recommended"], columns=slice(1, 2)), expected)
    notes = [n for n in texts["report.md"].splitlines() if n.startswith("- the ")]
    flat = {w: re.sub(r"\s+", "", t) for w, t in texts.items()}  # the terminal wraps its paragraphs
    assert len(notes) == len(r.notes) and all(re.sub(r"\s+", "", n[2:]) in flat[w] for n in notes
                                              for w in ("terminal", "page.md"))
    if name == "made-up":
        assert "below 1.13 req/s" in texts["terminal"] and "above 23.4 req/s" in texts["terminal"]
        assert "the lowest rate tried" in texts["page.md"]


def test_calibration_points_are_the_records(calibrate_folders):
    r, texts = calibrate_folders["tiny"]
    rows = md_table(texts["report.md"], ["curve", "offered req/s"])
    assert len(rows) == len(r.points)
    for row, p in zip(rows, r.points):
        found = numbers(" ".join(row[1:]))
        want = [sig(p.offered_rps)] + [ms(x) for x in (p.p95_mean_ms, p.p95_ci_low_ms, p.p95_ci_high_ms)
                                       if math.isfinite(x)]
        want += [sig(p.batch_throughput_per_min)] if math.isfinite(p.batch_throughput_per_min) else []
        assert len(found) == len(want) and all(math.isclose(f, v, abs_tol=t) for f, (v, t) in zip(found, want)), \
            (row, p)


# --- calibrate-gpu -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_folders(tmp_path_factory):
    """The committed real-engine measurements: both load tests refitted on the open-loop runs; load test A alone,
    checked on B."""
    from simlab.calibration.files import store_gpu
    from simlab.calibration.run import run_calibrate_gpu
    from simlab.reporting.blocks.gpu import terminal_blocks, write_report

    root = tmp_path_factory.mktemp("agree-gpu")
    tables_ab = [REF / "loadtest-a" / "loadtest.csv", REF / "loadtest-b" / "loadtest.csv"]
    made = {"refit": run_calibrate_gpu(tables_ab, open_loop=sorted(REF.glob("open-loop-*/measured/*-run1.csv"))),
            "check": run_calibrate_gpu(tables_ab[:1], check=tables_ab[1])}
    out = {}
    for name, rec in made.items():
        folder = root / name
        rec = store_gpu(rec, folder)
        write_report(rec, folder)
        out[name] = (rec, rendered(folder, render_terminal(terminal_blocks(rec)), name))
    return out


@pytest.mark.parametrize("name", ["refit", "check"])
def test_gpu_parameters_agree_everywhere(gpu_folders, name):
    from simlab.calibration.gpu import MEASURE_LABELS

    r, texts = gpu_folders[name]
    p = r.parameters
    expected = {k: [sig(getattr(p, k))] for k in ("base_ms", "per_token_ms", "per_seq_ms", "request_ms", "admit_ms")
                if k != "admit_ms" or p.admit_ms}
    expected |= {"mean relative error": [pct(r.mean_rel_error, 2)], "largest relative error": [pct(r.max_rel_error, 2)]}
    expected |= {f"R\u00b2, {MEASURE_LABELS[m.measure]}": [dec(m.r2, 4)] for m in r.r2}
    agree(tables(texts, ["parameter", "value"]), expected)


def test_gpu_open_loop_refit_agrees_everywhere(gpu_folders):
    r, texts = gpu_folders["refit"]
    ol, before, after = r.open_loop, r.open_loop.load_test, r.parameters
    expected = {k: [sig(getattr(before, k)), sig(getattr(after, k))]
                for k in ("base_ms", "per_seq_ms", "admit_ms", "per_token_ms", "request_ms")}
    expected["mean abs error, open-loop requests"] = [pct(ol.mean_abs_error_before), pct(ol.mean_abs_error_after)]
    expected["mean abs relative error, load-test rows"] = [pct(ol.load_test_mean_rel_error), pct(r.mean_rel_error)]
    agree(tables(texts, ["parameter", "load test(s) alone"]), expected)
    expected = {x.run: [(x.requests, 0), dec(x.mean_sequences, 1), pct(x.error_load_test_fit), pct(x.error_refitted)]
                for x in ol.runs}
    agree({w: {k: v[-4:] for k, v in rows.items()} for w, rows in tables(texts, ["run", "requests"]).items()}, expected)
    assert len(ol.runs) == 6 and ol.requests == sum(x.requests for x in ol.runs)


def test_gpu_held_out_check_agrees_everywhere(gpu_folders):
    from simlab.calibration.gpu import MEASURE_LABELS

    r, texts = gpu_folders["check"]
    c = r.check
    assert c.profile and c.retest_mean_abs_difference is not None
    expected = {f"{MEASURE_LABELS[g.measure]} / {g.batch_size:g}":
                [pct(g.mean_abs_error), pct(g.max_abs_error), pct(g.mean_abs_error_profile), pct(g.max_abs_error_profile)]
                for g in c.by_concurrency}
    agree(tables(texts, ["measure", "sequences", "straight line: mean abs error"], key=2), expected)
    words = {f"{MEASURE_LABELS[g.measure]} / {g.batch_size:g}": ("yes" if g.within else "NO",
                                                                "yes" if g.within_profile else "NO")
             for g in c.by_concurrency}
    rows = terminal_table(texts["terminal"], ["measure", "sequences", "straight line: mean abs error"])
    assert {f"{row[0]} / {row[1]}": (row[4], row[7]) for row in rows} == words
    summary = f"mean |error| {c.mean_abs_error:.1%} with the straight line, {c.mean_abs_error_profile:.1%} with the"
    flat = re.sub(r"\s+", "", summary)
    for where in ("terminal", "report.md", "check.md", "page.md"):
        assert flat in re.sub(r"\s+", "", texts[where]), where
    agree({"check.md": keyed(md_table(texts["check.md"], ["measure", "sequences"]), 2, slice(2, 3))},
          {k: v[:1] for k, v in expected.items()})


# --- each command prints the blocks of the record it stored --------------------------------------------------------

def test_each_command_prints_its_records_blocks(tmp_path):
    from simlab.reporting.blocks import calibrate, fit, gpu
    from tests.test_calibrate import TINY
    from tests.test_fit import poisson_times, write_log

    log = write_log(tmp_path / "log.csv", poisson_times(3.0, 300_000, seed=4))
    (tmp_path / "tiny.toml").write_text(TINY)
    runs = {
        "fit": (fit, ["fit", log, "--validate-seeds", "2", "--no-figures"]),
        "calibrate": (calibrate, ["calibrate", tmp_path / "tiny.toml", "--rates", "2,8,16", "--refine", "0",
                                  "--replications", "2", "--no-figures", "--quiet"]),
        "calibrate-gpu": (gpu, ["calibrate-gpu", REF / "loadtest-a" / "loadtest.csv", "--check",
                                REF / "loadtest-b" / "loadtest.csv", "--no-figures"]),
    }
    for kind, (blocks, args) in runs.items():
        out = tmp_path / kind
        proc = simlab(*args, "--out", out)
        record = records.load(out / "result.json", kind)
        assert proc.stdout.startswith(render_terminal(blocks.terminal_blocks(record)) + "\n"), kind
        assert record.figures == []  # none asked for, none listed
