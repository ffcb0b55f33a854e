"""`simlab report DIR...`: one self-contained HTML page (and a Markdown twin) for a design review, from the
folders `simlab ab`, `tune`, `calibrate` and `fit` wrote."""

from __future__ import annotations

import argparse
from textwrap import fill

EPILOG = """\
DIR: an output folder of simlab decide, ab, tune, calibrate, fit or calibrate-gpu (recognised by its result.json),
or a folder holding such folders (e.g. results/SCENARIO/ with ab/ and tune/ inside). Sections follow in this order
whatever the order of the DIRs: the question and the scenario, the decision, the A/B (95% CIs, the three success
criteria, the bounds), the tuned options and their held-out check, the calibration knee, the workload fit, the
step-time fit, then every other figure with a caption.

--out: FILE.html (the Markdown goes to FILE.md beside it), FILE.md (and FILE.html), or a folder (report.html and
report.md in it). Default: report.html and report.md in the first DIR's parent folder.
The HTML needs nothing else to be viewed (CSS inline, figures embedded as PNG data URIs, no JavaScript); the
Markdown links the figures where their commands wrote them. Same inputs, same bytes: no timestamps.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="one self-contained HTML page (+ Markdown) for a design review, from decide/ab/tune/calibrate/fit outputs",
        description=fill("Gather the outputs of simlab decide, ab, tune, calibrate, fit and calibrate-gpu into one "
                         "page for a design review projected on a screen: large type, high-contrast tables, pass/fail in "
                         "colour, figures at full width and embedded in the file."),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dirs", nargs="+", metavar="DIR",
                   help="output folders of simlab decide, ab, tune, calibrate, fit or calibrate-gpu")
    p.add_argument("--out", help="FILE.html, FILE.md or a folder (default: beside the first DIR)")
    p.add_argument("--title", help="the page's title (default: 'Design review: ' and the scenario names)")
    p.set_defaults(func=main)


def main(args) -> int:
    from simlab.reporting import build_report

    html, md, summary = build_report(args.dirs, args.out, args.title)
    kinds = ", ".join(f"{kind} ({path.name}/)" for kind, path in summary["sources"])
    print(f"report from {kinds}: {summary['tables']} tables, {summary['figures']} figures")
    for folder in summary.get("skipped", []):
        print(f"skipped: {folder}/ (not the output folder of a simlab command)")
    print(f"html: {html}\nmarkdown: {md}")
    return 0
