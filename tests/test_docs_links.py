"""Every relative link in the README and docs/ points at a file of the repository, and no page names a path of a
particular machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    missing = [target for target in LINK.findall(page.read_text(encoding="utf-8"))
               if "://" not in target and not (page.parent / target).exists()]
    assert not missing, f"{page.name}: links to missing files: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"/work/|/home/\w+|/root/|\.\./shared", text), page.name
