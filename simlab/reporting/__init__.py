"""`simlab report`: one design-review page from the folders that `simlab ab`, `tune`, `calibrate` and `fit` write.

collect.py   finds each folder's result.json and loads its record (bad, old or unknown folders: InputError, exit 2)
content.py   turns the records into one document: headings, paragraphs, tables with pass/fail cells, figures (the A/B
             and tuning sections are the same blocks as those commands' own report.md)
html.py      renders it as a single self-contained HTML page (CSS inline, figures as base64 PNG data URIs)
markdown.py  renders it as Markdown, figures referenced by their path relative to the Markdown file

Both outputs depend on the input files only (no timestamps, no absolute paths), so the same folders give
byte-identical pages."""

from __future__ import annotations

from pathlib import Path


def output_paths(dirs: list[str], out: str | None, first_source: Path | None = None) -> tuple[Path, Path]:
    """(report.html, report.md). --out FILE.html or FILE.md names both (same stem); any other --out is a folder.
    Default: beside the first output folder (in its parent)."""
    if out:
        p = Path(out)
        if p.suffix.lower() in (".html", ".htm"):
            return p, p.with_suffix(".md")
        if p.suffix.lower() == ".md":
            return p.with_suffix(".html"), p
        return p / "report.html", p / "report.md"
    base = (first_source if first_source is not None else Path(dirs[0])).resolve().parent
    while (base / "result.json").is_file() and base.parent != base:
        base = base.parent  # never inside a command's own folder (e.g. decide/ for decide/tune/)
    return base / "report.html", base / "report.md"


def build_report(dirs: list[str], out: str | None = None, title: str | None = None) -> tuple[Path, Path, dict]:
    """Read `dirs`, write the HTML and Markdown reports; returns their paths and a summary for the terminal."""
    from simlab.store import atomic_write_text
    from simlab.errors import InputError
    from simlab.outputs import output_file
    from simlab.reporting.collect import collect
    from simlab.reporting.page import build_document
    from simlab.reporting.html import render_html
    from simlab.reporting.markdown import render_markdown

    skipped: list[Path] = []
    sources = collect(dirs, skipped)
    html_path, md_path = output_paths(dirs, out, sources[0].path)
    html_path, md_path = html_path.absolute(), md_path.absolute()
    for target in (html_path, md_path):
        output_file(target, "--out" if out else None)  # a folder, or not writable: exit 2 before anything is built
    own = {(s.path / n).resolve() for s in sources for n in ("report.md", "report.html")}
    for target in (html_path, md_path):
        # never overwrite a command's own report: an input's, or any folder a command wrote (its result.json)
        if target.resolve() in own or (target.parent / "result.json").is_file():
            raise InputError(None, "--out", f"{target} is in a folder that a simlab command wrote; choose another "
                             "--out")
    doc = build_document(sources, md_path.parent, title)
    html = render_html(doc)
    md = render_markdown(doc, md_path.parent)
    atomic_write_text(html_path, html)
    atomic_write_text(md_path, md)
    return html_path, md_path, {"sources": [(s.kind, s.path) for s in sources], "figures": len(doc.figures()),
                                "tables": doc.count("Table"), "skipped": skipped}
