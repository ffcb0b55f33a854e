"""The report as one self-contained HTML page, for a design review on a projector.

No JavaScript, no web fonts, no external file: the CSS is inline and every figure is a base64 PNG data URI, so the
file can be mailed or opened offline. Sized to be read from the back of a room: 24 px body text, black-on-white
tables with a black header row, pass/fail cells as coloured badges that also say pass/FAIL (and carry a tick or a
cross; amber with a warning sign for a criterion no scheduler can meet) for anyone who cannot tell the colours apart, figures at the page's full width."""

from __future__ import annotations

import base64
import re
import struct
from html import escape

from simlab.errors import RECORD_MAX_BYTES, InputError, read_bytes
from simlab.reporting.document import (BAD, CAPACITY, FAIL, GOOD, PASS, Badges, Bullets, Callout, Cell, Code, Contents,
                                       Document, Figure, Heading, Paragraph, Table, plain)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

CSS = """
:root { --ink: #111; --soft: #333; --rule: #9a9a9a; --zebra: #eef0f3; --pass: #1a7f37; --fail: #c62828;
        --pass-bg: #e2f4e6; --fail-bg: #fde6e4; --cap: #8a5a00; --cap-bg: #fff1d6; --accent: #0b4f8a; }
* { box-sizing: border-box; }
html { font-size: 24px; -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #fff; color: var(--ink); line-height: 1.4;
       font-family: "DejaVu Sans", "Segoe UI", "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1880px; margin: 0 auto; padding: 36px 48px 120px; }
h1 { font-size: 2.1rem; line-height: 1.15; margin: 0 0 .35em; }
h2 { font-size: 1.65rem; margin: 1.7em 0 .6em; padding-bottom: .15em; border-bottom: 5px solid var(--ink); }
h3 { font-size: 1.25rem; margin: 1.3em 0 .5em; }
p, li { max-width: 75rem; }
p { margin: .5em 0 .8em; }
.subtitle { font-size: 1rem; color: var(--soft); margin: 0 0 1em; }
.small { font-size: .85rem; color: var(--soft); }
ul { padding-left: 1.3em; margin: .4em 0 1em; }
li { margin: .35em 0; }
code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .88em; background: var(--zebra);
       padding: 0 .2em; border-radius: 3px; overflow-wrap: anywhere; }
pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .9rem; line-height: 1.35;
      background: #f6f6f6; border: 2px solid var(--rule); border-radius: 4px; padding: .6em .9em; margin: .4em 0 1.2em;
      white-space: pre-wrap; overflow-wrap: anywhere; }
pre code { background: none; padding: 0; font-size: 1em; }
nav.contents { font-size: .95rem; border: 2px solid var(--rule); border-radius: 4px; padding: .4em 1em; margin: 0 0 1em; }
nav.contents ol { margin: .3em 0; padding-left: 1.4em; columns: 2; column-gap: 3em; }
nav.contents li { margin: .15em 0; break-inside: avoid; }
nav.contents a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; margin: .3em 0 1.1em; font-size: 1rem;
        font-variant-numeric: tabular-nums; }
table.compact { font-size: .9rem; }
table.narrow { width: auto; min-width: 55%; }
th { background: var(--ink); color: #fff; font-weight: 700; padding: .4em .6em; vertical-align: bottom;
     text-align: left; }
td { padding: .35em .6em; border-bottom: 2px solid var(--rule); vertical-align: top; }
tbody tr:nth-child(even) td { background: var(--zebra); }
th.r, td.r { text-align: right; }
th.c, td.c { text-align: center; }
td:first-child { font-weight: 700; white-space: nowrap; }
td .sub { display: block; font-size: .8em; font-weight: 400; color: var(--soft); white-space: nowrap; }
td.l .sub { white-space: normal; }
tbody tr td.pass { background: var(--pass-bg); }
tbody tr td.fail { background: var(--fail-bg); }
tbody tr td.capacity { background: var(--cap-bg); }
.badge { display: inline-block; padding: .05em .45em; border-radius: 5px; color: #fff; font-weight: 700;
         white-space: nowrap; }
.badge.pass { background: var(--pass); }
.badge.fail { background: var(--fail); }
.badge.capacity { background: var(--cap); white-space: normal; }
td .good { color: var(--pass); font-weight: 700; }
td .bad { color: var(--fail); font-weight: 700; }
td .tag { font-size: .72em; font-weight: 700; text-transform: uppercase; letter-spacing: .03em; margin-left: .35em; }
.badges { display: flex; flex-wrap: wrap; gap: .5em .8em; margin: .4em 0 1em; }
.badges .badge { font-size: 1.05rem; padding: .2em .7em; }
.callout { border-left: 14px solid var(--accent); background: #e9f1fa; padding: .7em 1em; margin: .4em 0 1em;
           font-size: 1.08rem; max-width: none; }
.callout.pass { border-color: var(--pass); background: var(--pass-bg); }
.callout.fail { border-color: var(--fail); background: var(--fail-bg); }
figure { margin: 1em 0 2.2em; break-inside: avoid; }
figure img { display: block; width: 100%; height: auto; border: 1px solid var(--rule); }
figcaption { font-size: .95rem; margin-top: .45em; max-width: 75rem; }
figcaption .src { color: var(--soft); font-size: .85em; }
@media print { html { font-size: 14px; } main { padding: 0; } h2 { break-after: avoid; } }
"""


def inline(text: str) -> str:
    """Escaped text with `code` and **bold**."""
    out = escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)


def render_html(doc: Document) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(plain(doc.title))}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>{inline(doc.title)}</h1>",
    ]
    if doc.subtitle:
        parts.append(f'<p class="subtitle">{inline(doc.subtitle)}</p>')
    for b in doc.blocks:
        parts.append(_block(b))
    parts += ["</main>", "</body>", "</html>", ""]
    return "\n".join(p for p in parts if p)


def _block(b) -> str:
    if isinstance(b, Heading):
        return f'<h{b.level} id="{escape(b.anchor)}">{inline(b.text)}</h{b.level}>'
    if isinstance(b, Paragraph):
        return f'<p class="small">{inline(b.text)}</p>' if b.small else f"<p>{inline(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{inline(i)}</li>" for i in b.items) + "\n</ul>"
    if isinstance(b, Callout):
        cls = f"callout {b.status}" if b.status in (PASS, FAIL) else "callout"
        return f'<p class="{cls}">{inline(b.text)}</p>'
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Code):
        return f"<pre><code>{escape(b.text, quote=False)}</code></pre>"
    if isinstance(b, Badges):
        return '<div class="badges">' + "".join(_badge(c) for c in b.cells) + "</div>"
    if isinstance(b, Figure):
        return _figure(b)
    if isinstance(b, Contents):
        if len(b.entries) < 2:
            return ""
        items = "".join(f'<li><a href="#{escape(a)}">{inline(t)}</a></li>' for a, t in b.entries)
        return f'<nav class="contents"><strong>Contents</strong><ol>{items}</ol></nav>'
    raise TypeError(f"unknown block {type(b).__name__}")


def _badge(c: Cell) -> str:
    mark = {PASS: "✔ ", FAIL: "✘ ", CAPACITY: "⚠ "}.get(c.status, "")
    return f'<span class="badge {c.status or ""}">{mark}{inline(c.text)}</span>'


def _cell(c: Cell, align: str) -> str:
    classes = [align]
    if c.status in (PASS, FAIL, CAPACITY):
        classes.append(c.status)
        main = _badge(c)
    elif c.status in (GOOD, BAD):
        word = "better" if c.status == GOOD else "worse"
        main = f'<span class="{c.status}">{inline(c.text)}</span><span class="tag {c.status}">{word}</span>'
    else:
        main = inline(c.text)
    sub = f' <span class="sub">{inline(c.sub)}</span>' if c.sub else ""
    return f'<td class="{" ".join(classes)}">{main}{sub}</td>'


def _table(t: Table) -> str:
    head = "".join(f'<th class="{t.alignment(i)}">{inline(h)}</th>' for i, h in enumerate(t.header))
    show_head = any(h for h in t.header)
    rows = "\n".join("<tr>" + "".join(_cell(c, t.alignment(i)) for i, c in enumerate(r)) + "</tr>" for r in t.rows)
    names = [n for n, on in (("compact", t.compact), ("narrow", t.narrow)) if on]
    cls = f' class="{" ".join(names)}"' if names else ""
    return (f"<table{cls}>" + (f"<thead><tr>{head}</tr></thead>" if show_head else "")
            + f"\n<tbody>\n{rows}\n</tbody></table>")


def png_size(data: bytes, path) -> tuple[int, int]:
    if not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise InputError(path, None, "not a PNG image (a figure the report embeds)")
    return struct.unpack(">II", data[16:24])


def _figure(f: Figure) -> str:
    data = read_bytes(f.path, "figure", RECORD_MAX_BYTES)  # a regular file, of a bounded size
    w, h = png_size(data, f.path)
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    src = f"{f.source}figures/{f.path.name}" if f.path.parent.name == "figures" else f"{f.source}{f.path.name}"
    return (f'<figure id="figure-{f.number}"><img src="{uri}" width="{w}" height="{h}" '
            f'alt="Figure {f.number}: {escape(plain(f.caption))}">'
            f"<figcaption><strong>Figure {f.number}.</strong> {inline(f.caption)} "
            f'<span class="src">({escape(src)})</span></figcaption></figure>')
