"""The report as Markdown: the same content as the HTML page, figures linked by their path relative to the
Markdown file (so the .md stays small and the figures stay where their command wrote them), pass/fail marked
with ✅/❌ (⚠️ for a criterion no scheduler can meet) so the verdicts stand out on GitHub or any viewer."""

from __future__ import annotations

import os
import re
from pathlib import Path

from simlab.reporting.document import (BAD, CAPACITY, FAIL, GOOD, PASS, Badges, Bullets, Callout, Cell, Code, Contents,
                                       Document, Figure, Heading, Paragraph, Table, plain)

MARK = {PASS: "✅ ", FAIL: "❌ ", CAPACITY: "⚠️ "}


def render_markdown(doc: Document, base: Path) -> str:
    slugs = _github_slugs(doc)
    lines = [f"# {doc.title}", ""]
    if doc.subtitle:
        lines += [doc.subtitle, ""]
    for b in doc.blocks:
        lines += _block(b, base, slugs) + [""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def _block(b, base: Path, slugs: dict[str, str]) -> list[str]:
    if isinstance(b, Heading):
        return ["#" * b.level + " " + b.text]
    if isinstance(b, Paragraph):
        return [b.text]
    if isinstance(b, Bullets):
        return [f"- {i}" for i in b.items]
    if isinstance(b, Callout):
        return [f"> {MARK.get(b.status, '')}{b.text}"]
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Code):
        return [f"```{b.lang}", b.text, "```"]
    if isinstance(b, Badges):
        return [" · ".join(_cell(c) for c in b.cells)]
    if isinstance(b, Figure):
        rel = Path(os.path.relpath(b.path, base)).as_posix() if _same_drive(b.path, base) else b.path.as_posix()
        return [f"![Figure {b.number}]({rel})", "", f"*Figure {b.number}. {b.caption}*"]
    if isinstance(b, Contents):
        if len(b.entries) < 2:
            return []
        return ["**Contents**", ""] + [f"{i}. [{plain(t)}](#{slugs[a]})" for i, (a, t) in enumerate(b.entries, 1)]
    raise TypeError(f"unknown block {type(b).__name__}")


def _cell(c: Cell) -> str:
    if c.status in MARK:
        text = f"{MARK[c.status]}{c.text}"
        return f"{text} ({c.sub})" if c.sub else text
    elif c.status == GOOD:
        text = f"**{c.text}** (better)"
    elif c.status == BAD:
        text = f"**{c.text}** (worse)"
    else:
        text = c.text
    return f"{text} {c.sub}".strip() if c.sub else text


def _table(t: Table) -> list[str]:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    header = [esc(h) or " " for h in t.header]
    rule = [{"l": ":---", "c": ":---:"}.get(t.alignment(i), "---:") for i in range(len(header))]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    out += ["| " + " | ".join(esc(_cell(c)) for c in r) + " |" for r in t.rows]
    return out


def _github_slugs(doc: Document) -> dict[str, str]:
    """Heading anchor -> the id GitHub gives that heading (lowercase, punctuation dropped, spaces to hyphens)."""
    seen: dict[str, int] = {}
    out = {}
    for b in doc.blocks:
        if isinstance(b, Heading):
            s = re.sub(r"[^\w\- ]", "", plain(b.text).lower()).replace(" ", "-")
            n = seen.get(s, 0)
            seen[s] = n + 1
            out[b.anchor] = s if n == 0 else f"{s}-{n}"
    return out


def _same_drive(a: Path, b: Path) -> bool:
    try:
        os.path.relpath(a, b)
        return True
    except ValueError:
        return False
