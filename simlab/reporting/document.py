"""The report as a list of blocks, rendered to HTML and to Markdown alike.

Text in Paragraph, Bullets, Callout, captions and cells may use two bits of inline Markdown: `code` and **bold**
(what the commands' own reports use); everything else is plain text (escaped in HTML)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PASS, FAIL = "pass", "fail"  # verdict cells: coloured badges
CAPACITY = "capacity"  # a criterion no scheduler can pass on this traffic: neither pass nor the policy's fail
GOOD, BAD = "good", "bad"  # significant improvements / worsenings: coloured text


@dataclass
class Cell:
    text: str
    sub: str = ""  # a second, smaller line (a 95% CI, a detail)
    status: str | None = None  # PASS, FAIL, CAPACITY, GOOD, BAD or None

    def line(self) -> str:
        """Text and detail on one line (terminal, Markdown)."""
        return f"{self.text} {self.sub}".strip() if self.sub else self.text


@dataclass
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass
class Paragraph:
    text: str
    small: bool = False


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Callout:
    """A boxed statement: the tuning verdict."""
    text: str
    status: str | None = None


@dataclass
class Table:
    header: list[str]
    rows: list[list[Cell]]
    align: str = ""  # one letter per column, l, c or r; default: first column l, the others r
    compact: bool = False  # a long table: smaller type
    narrow: bool = False  # as wide as its content (a few columns of short values), not the page

    def alignment(self, i: int) -> str:
        if i < len(self.align):
            return self.align[i]
        return "l" if i == 0 else "r"


@dataclass
class Code:
    text: str
    lang: str = ""


@dataclass
class Badges:
    """A row of pass/fail badges (the fit's validation)."""
    cells: list[Cell]


@dataclass
class Figure:
    path: Path
    caption: str
    number: int = 0
    source: str = ""  # the folder's label, for the caption's "from ..."


@dataclass
class Contents:
    """The table of contents: (anchor, text) of the level-2 headings, filled in by Document.finish()."""
    entries: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Document:
    title: str
    subtitle: str = ""
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(b for b in blocks if b is not None)

    def figures(self) -> list[Figure]:
        return [b for b in self.blocks if isinstance(b, Figure)]

    def count(self, kind: str) -> int:
        return sum(type(b).__name__ == kind for b in self.blocks)

    def finish(self) -> "Document":
        """Unique anchors for the headings, figure numbers, and the contents."""
        used: set[str] = set()
        contents = None
        for b in self.blocks:
            if isinstance(b, Heading):
                base = b.anchor or slug(b.text)
                anchor, i = base, 2
                while anchor in used:
                    anchor, i = f"{base}-{i}", i + 1
                used.add(anchor)
                b.anchor = anchor
            if isinstance(b, Contents):
                contents = b
        for n, f in enumerate(self.figures(), 1):
            f.number = n
        if contents is not None:
            contents.entries = [(b.anchor, b.text) for b in self.blocks if isinstance(b, Heading) and b.level == 2]
        return self


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", plain(text).lower()).strip("-")
    return s or "section"


def plain(text: str) -> str:
    """Inline Markdown removed: for titles, anchors and alt text."""
    return text.replace("**", "").replace("`", "")
