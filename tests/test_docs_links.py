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


def machine_paths() -> list[str]:
    """Paths only this checkout's machine has: the folder the checkout sits in, the home folder, the temporary
    folder, and the sibling folder of shared inputs a user of the repository does not have."""
    import tempfile

    temp = Path(tempfile.gettempdir())
    # a checkout straight under the temporary folder (or /) names no folder of its own: its checkout path stands in
    sits_in = ROOT if ROOT.parent in (temp, Path("/")) else ROOT.parent
    return sorted({f"{sits_in}/", f"{Path.home()}/", f"{temp}/simlab", "../shared"})


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths(page):
    text = page.read_text(encoding="utf-8")
    found = [p for p in machine_paths() if p in text]
    assert not found, f"{page.name} names {found}"
