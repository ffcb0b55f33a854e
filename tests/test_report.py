"""`simlab report` end to end: real ab/tune/calibrate/fit outputs -> one self-contained HTML page (+ Markdown),
rendered in headless Chromium; bad folders exit 2 with a clear message.

How rendering is checked (Chromium 'file://' with the flags below, no network):
- the report exactly as written, with --dump-dom: Chromium's parsed DOM holds the tables (with their headers and
  pass/fail badges) and one <img> per figure, each a data:image/png URI;
- the same report with --screenshot at 1600x3000: the image is not blank (text covers a real share of it) and the
  pass and FAIL badge colours are on screen, i.e. the verdicts are visibly coloured;
- a probe copy of the report with a tiny script appended (the report itself has no JavaScript: the script is only
  in the test's copy) that, on load, writes each <img>'s complete / naturalWidth / naturalHeight and rendered width
  into the DOM, read back with --dump-dom: every embedded PNG decoded to the size its file header says, and is
  drawn at the page's full width. A screenshot alone cannot tell a decoded figure from a broken-image box below
  the fold; naturalWidth can.
In CI (CI set) a missing Chromium fails the test; locally it is skipped with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import ROOT, random_trace, simlab
from tests.test_tune import SMALL

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KINDS = ("ab", "tune", "calibrate", "fit")


@pytest.fixture(scope="module")
def outs(tmp_path_factory) -> Path:
    """Small real outputs of the four commands, made concurrently (about 15 s on two cores)."""
    root = tmp_path_factory.mktemp("report")
    outs = root / "outs"
    (root / "small.toml").write_text(SMALL)
    random_trace(root / "requests.csv", 3000, 7)
    commands = {
        "ab": ["ab", ROOT / "scenarios" / "seed-article.toml", "--replications", "2", "--quiet"],
        "tune": ["tune", root / "small.toml", "--trials", "6", "--quiet"],
        "calibrate": ["calibrate", root / "small.toml", "--rates", "4,8,16,32", "--refine", "0",
                      "--replications", "2", "--quiet"],
        "fit": ["fit", root / "requests.csv", "--validate-seeds", "2"],
    }
    procs = {k: subprocess.Popen([sys.executable, "-m", "simlab", *map(str, args), "--out", str(outs / k)], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, args in commands.items()}
    for k, p in procs.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"simlab {k} exited {p.returncode}\n{err}"
    return outs


@pytest.fixture(scope="module")
def report(outs) -> tuple[Path, Path]:
    """`simlab report ab tune calibrate fit`, typed in the folder that holds them."""
    proc = simlab("report", *KINDS, cwd=outs)
    assert "html:" in proc.stdout
    return outs / "report.html", outs / "report.md"


def figure_files(outs: Path) -> list[Path]:
    return sorted(p for k in KINDS for p in (outs / k / "figures").glob("*.png"))


class Dom(HTMLParser):
    """Tables (header and cell texts), images (src) and every src/href of a page."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tables, self.images, self.links, self.classes = [], [], [], []
        self._cell = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.classes.append(a.get("class") or "")
        for key in ("src", "href"):
            if key in a:
                self.links.append(a[key])
        if tag == "table":
            self.tables.append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# --- the page ---------------------------------------------------------------------------------------------------

def test_one_self_contained_page_with_every_table_and_figure(outs, report):
    html_path, md_path = report
    html = html_path.read_text(encoding="utf-8")
    dom = Dom(html)
    figures = figure_files(outs)
    assert len(figures) >= 10  # ab 5, tune 3+, calibrate 1, fit 4+

    # Every figure embedded once, byte for byte, as a PNG data URI; nothing fetched from anywhere.
    assert len(dom.images) == len(figures)
    embedded = sorted(hashlib.sha256(base64.b64decode(src.split(",", 1)[1])).hexdigest() for src in dom.images
                      if src.startswith("data:image/png;base64,"))
    assert embedded == sorted(hashlib.sha256(f.read_bytes()).hexdigest() for f in figures)
    assert all(link.startswith(("data:image/png;base64,", "#")) for link in dom.links), \
        [link[:80] for link in dom.links if not link.startswith(("data:", "#"))]
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    for forbidden in ("<script", "<link", "@import", "url(", "<iframe"):
        assert forbidden not in html.lower()

    # The sections, in the review's order.
    heads = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h2[^>]*>(.*?)</h2>", html)]
    order = ["The question", "The scenario", "A/B", "Tuned options", "Calibration", "Workload fit", "Figures"]
    positions = [next(i for i, h in enumerate(heads) if h.startswith(o)) for o in order]
    assert positions == sorted(positions), heads

    # The A/B table with CIs, the three verdicts as coloured pass/fail badges, the bounds.
    tables = dom.tables
    ab = next(t for t in tables if t[:2] == ["policy", "interactive P95 ms"])
    for policy in ("unscheduled", "priority", "static", "adaptive"):
        assert policy in ab
    assert any(re.fullmatch(r"[\d,.]+ \[[\d,.]+, [\d,.]+\]", c) for c in ab), ab  # a mean with its 95% CI
    verdicts = next(t for t in tables if "1. P95 not stuck above the SLO" in t)
    assert any(c.startswith("✔ pass") for c in verdicts) and any(c.startswith("✘ FAIL") for c in verdicts)
    assert "badge pass" in dom.classes and "badge fail" in dom.classes
    assert "Interactive P95 with batch absent" in html
    # The tuned options: held-out table, the tune report's verdict, the best-options JSON.
    assert any(t[:1] == ["config"] and any(h.startswith("held-out P95") for h in t) for t in tables)
    assert 'class="callout' in html
    best = (outs / "tune" / "best-options.json").read_text()
    assert '"maxConcurrency"' in best and all(k in html for k in re.findall(r'"(\w+)":', best))
    # The calibration knee, the workload fit.
    assert any(t[:3] == ["option", "recommended", "why"] for t in tables)
    assert any(t[:2] == ["curve", "interactive rate at the knee"] for t in tables)
    fit = next(t for t in tables if t[:3] == ["", "interactive", "batch"])
    assert "inter-arrival CV" in fit and "Poisson, constant rate" in fit
    assert any(t[:3] == ["class", "quantity", "median"] for t in tables)
    # the fixture's trace: Poisson interactive arrivals and a bursty batch class the fit resamples block by block;
    # simulated on 2 seeds, the fitted scenario reproduces the per-bin rates (what `simlab fit` is for)
    assert "arrival rates: reproduced" in html and "NOT reproduced" not in html
    assert html.count("<figcaption>") == len(figures)

    # The Markdown twin: the same sections, every figure linked by a path that resolves from the .md's folder.
    md = md_path.read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(links) == len(figures)
    assert sorted((md_path.parent / link).resolve() for link in links) == sorted(f.resolve() for f in figures)
    assert all(not Path(link).is_absolute() for link in links)
    for o in order:
        assert re.search(rf"^## {re.escape(o)}", md, re.M), o
    assert "✅" in md and "❌" in md and "| policy | interactive P95 ms |" in md


def test_same_inputs_give_identical_bytes(outs, report):
    html_path, md_path = report
    first = html_path.read_bytes(), md_path.read_bytes()
    simlab("report", *reversed(KINDS), cwd=outs)  # the order of the DIRs does not matter either
    assert (html_path.read_bytes(), md_path.read_bytes()) == first
    text = re.sub(r"data:image/png;base64,[^\"]+", "", first[0].decode()) + first[1].decode()
    assert str(outs) not in text and "/tmp/" not in text  # no absolute paths


def test_a_folder_of_outputs_and_out_file(outs, report, tmp_path):
    """DIR may be the folder that holds the outputs; --out FILE.html puts FILE.md beside it."""
    proc = simlab("report", outs, "--out", tmp_path / "review.html", "--title", "Nightly review")
    assert proc.returncode == 0
    html = (tmp_path / "review.html").read_text(encoding="utf-8")
    assert "<title>Nightly review</title>" in html
    assert html.count("data:image/png;base64,") == len(figure_files(outs))
    assert (tmp_path / "review.md").read_text(encoding="utf-8").startswith("# Nightly review\n")


# --- rendering in Chromium ----------------------------------------------------------------------------------------

def chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: CI must install it first (scripts/ensure-chromium.sh, called by .ci/run)")
    pytest.skip("chromium is not installed: run scripts/ensure-chromium.sh (as root) to test the rendering")


def run_chromium(binary: str, profile: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


PROBE = """<script>
window.addEventListener("load", function () {
  var rows = Array.prototype.map.call(document.images, function (i) {
    return [i.complete, i.naturalWidth, i.naturalHeight, Math.round(i.getBoundingClientRect().width)].join(",");
  });
  var pre = document.createElement("pre");
  pre.id = "simlab-probe";
  pre.textContent = window.innerWidth + "|" + rows.join(";");
  document.body.appendChild(pre);
});
</script>
"""


def test_renders_in_headless_chromium(outs, report, tmp_path):
    binary = chromium()
    html_path, _ = report
    html = html_path.read_text(encoding="utf-8")
    figures = figure_files(outs)

    # 1. The report as written: Chromium's DOM has the tables and one decoded-source <img> per figure.
    dom = Dom(run_chromium(binary, tmp_path / "profile", html_path.as_uri(), "--window-size=1600,3000",
                           "--dump-dom").stdout)
    assert len(dom.tables) == html.count("<table")
    assert len(dom.tables) >= 8
    assert any(t[:2] == ["policy", "interactive P95 ms"] for t in dom.tables)
    assert any("1. P95 not stuck above the SLO" in t for t in dom.tables)
    assert len(dom.images) == len(figures) and all(s.startswith("data:image/png;base64,") for s in dom.images)

    # 2. A screenshot of the first 3000 px: not blank, and the pass and FAIL badge colours are on screen.
    from PIL import Image
    import numpy as np

    shot = tmp_path / "report.png"
    run_chromium(binary, tmp_path / "profile", html_path.as_uri(), "--window-size=1600,3000", f"--screenshot={shot}")
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape[:2] == (3000, 1600)
    assert (pixels.sum(axis=2) < 600).mean() > 0.02, "the screenshot is (nearly) blank"
    dark_rows = (pixels.sum(axis=2) < 300).any(axis=1)
    assert dark_rows[2000:].mean() > 0.1, "no content in the lower part of the screenshot"

    def near(rgb, tol=40):
        return int((np.abs(pixels - np.array(rgb)).sum(axis=2) < tol).sum())

    assert near((0x1A, 0x7F, 0x37)) > 300, "no green pass badge visible"
    assert near((0xC6, 0x28, 0x28)) > 300, "no red FAIL badge visible"

    # 3. A probe copy (script appended, report untouched): every figure decoded at its PNG size, full width.
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    out = run_chromium(binary, tmp_path / "profile", probe.as_uri(), "--window-size=1600,3000", "--dump-dom").stdout
    found = re.search(r'<pre id="simlab-probe">(\d+)\|([^<]*)</pre>', out)
    assert found, "the probe did not run"
    width, rows = int(found.group(1)), [r.split(",") for r in found.group(2).split(";")]
    expected = [png_size(base64.b64decode(src.split(",", 1)[1])) for src in Dom(html).images]
    assert len(rows) == len(expected)
    for (complete, nw, nh, shown), (w, h) in zip(rows, expected):
        assert complete == "true" and (int(nw), int(nh)) == (w, h), (complete, nw, nh, w, h)
        assert int(shown) >= 0.85 * width, f"figure drawn {shown} px wide in a {width} px window"


# --- bad input ----------------------------------------------------------------------------------------------------

def assert_input_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ")
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_a_folder_that_does_not_exist(tmp_path):
    proc = simlab("report", tmp_path / "nope", check=False)
    assert_input_error(proc, "nope", "no such folder", "simlab decide, ab, tune", "result.json")
    assert not (tmp_path / "report.html").exists()


def test_a_folder_of_unrelated_files(tmp_path):
    d = tmp_path / "stuff"
    d.mkdir()
    (d / "notes.txt").write_text("hello\n")
    (d / "data.csv").write_text("a,b\n1,2\n")
    proc = simlab("report", d, check=False)
    assert_input_error(proc, "stuff", "not a simlab output folder", "data.csv, notes.txt", "result.json")
    assert not (tmp_path / "report.html").exists()


def test_a_file_an_interrupted_run_and_broken_json(tmp_path):
    f = tmp_path / "summary.csv"
    f.write_text("x\n")
    assert_input_error(simlab("report", f, check=False), "is a file, not a folder")
    half = tmp_path / "half"
    (half / "runs").mkdir(parents=True)
    (half / "summary.csv").write_text("policy,seed\n")
    assert_input_error(simlab("report", half, check=False), "simlab ab", "summary.csv, runs/", "result.json is missing",
                       "run simlab ab again")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "result.json").write_text('{"simlab_result": "fit",\n  nope}')
    assert_input_error(simlab("report", broken, check=False), "result.json", "line 2", "not valid JSON")


def test_an_old_schema_or_a_damaged_record(outs, tmp_path):
    """A result.json from another schema version, or with a field of the wrong type: exit 2 naming file and field."""
    import json
    import shutil

    old = tmp_path / "old"
    shutil.copytree(outs / "ab", old, ignore=shutil.ignore_patterns("runs"))
    data = json.loads((old / "result.json").read_text())
    data["schema_version"] = 0
    (old / "result.json").write_text(json.dumps(data))
    assert_input_error(simlab("report", old, check=False), "result.json", "schema_version", "is 0",
                       "run simlab ab again")
    from simlab.records import AbRecord

    data["schema_version"] = AbRecord.VERSION
    data["record"]["verdicts"][0]["p95_verdict"] = "maybe"
    (old / "result.json").write_text(json.dumps(data))
    assert_input_error(simlab("report", old, check=False), "result.json", "record.verdicts.0.p95_verdict")
    del data["record"]["runs"]
    (old / "result.json").write_text(json.dumps(data))
    assert_input_error(simlab("report", old, check=False), "result.json", "record.runs", "Field required")


def test_never_overwrites_a_commands_own_report(outs, report):
    before = (outs / "ab" / "report.md").read_bytes()
    proc = simlab("report", outs / "ab", "--out", outs / "ab", check=False)
    assert_input_error(proc, "--out", "choose another --out")
    assert (outs / "ab" / "report.md").read_bytes() == before
