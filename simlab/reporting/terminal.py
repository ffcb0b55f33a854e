"""The report as terminal text: the same blocks as report.md and the HTML page, for what a command prints.

Tables are aligned plain text; a pass/fail cell keeps its detail in parentheses; a long "capacity" verdict is
shortened in its cell (the sentence stands once under the table, as the blocks put it); inline Markdown is
dropped. Figures are named by path."""

from __future__ import annotations

import textwrap

from simlab.reporting.document import (BAD, CAPACITY, FAIL, GOOD, PASS, Badges, Bullets, Callout, Cell, Code,
                                       Contents, Document, Figure, Heading, Paragraph, Table, plain)

WIDTH = 110


def cell_text(c: Cell) -> str:
    """One cell on one line: 'capacity' for the capacity verdict, pass/fail with its detail in parentheses."""
    text = "capacity" if c.status == CAPACITY else c.text
    if c.status in (PASS, FAIL, CAPACITY) and c.sub:
        return f"{text} ({c.sub})"
    if c.status in (GOOD, BAD):
        text = f"{text} ({'better' if c.status == GOOD else 'worse'})"
    return plain(f"{text} {c.sub}".strip() if c.sub else text)


def table_text(t: Table) -> str:
    rows = [[plain(h) for h in t.header]] + [[cell_text(c) for c in r] for r in t.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(t.header))]

    def line(cells):
        return "  ".join(c.ljust(w) if t.alignment(i) == "l" else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(rows[0]), line(["-" * w for w in widths])] + [line(r) for r in rows[1:]])


def render_terminal(blocks, width: int = WIDTH) -> str:
    """Blocks (or a Document) as text for a terminal."""
    if isinstance(blocks, Document):
        head = [blocks.title] + ([plain(blocks.subtitle)] if blocks.subtitle else [])
        blocks = blocks.blocks
    else:
        head = []
    out = head[:]
    for b in blocks:
        if isinstance(b, Heading):
            out += ["", plain(b.text) + ":"]
        elif isinstance(b, (Paragraph, Callout)):
            out.append(textwrap.fill(plain(b.text), width))
        elif isinstance(b, Bullets):
            out += [textwrap.fill(plain(i), width, initial_indent="- ", subsequent_indent="  ") for i in b.items]
        elif isinstance(b, Table):
            out.append(table_text(b))
        elif isinstance(b, Code):
            out.append(b.text)
        elif isinstance(b, Badges):
            out.append(", ".join(cell_text(c) for c in b.cells))
        elif isinstance(b, Figure):
            out.append(f"figure: {b.path}")
        elif isinstance(b, Contents):
            continue
        else:
            raise TypeError(f"unknown block {type(b).__name__}")
    return "\n".join(out).strip("\n")
