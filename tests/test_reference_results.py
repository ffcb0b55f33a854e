"""`make results` reproduces the committed reference tables exactly: a change in behaviour shows up as a diff."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_csv_close

REFERENCE = ROOT / "results" / "reference"
TABLES = ("summary.csv", "policies.csv", "comparison.csv", "verdicts.csv", "bounds.csv")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    # from another folder, with OUT relative to it: the script finds its own checkout
    subprocess.run(["bash", str(ROOT / "scripts" / "make-results.sh"), out.name, "--no-figures"], cwd=out.parent,
                   check=True, capture_output=True, text=True, timeout=900)
    return out


SCENARIOS = sorted(p.name for p in REFERENCE.iterdir() if p.is_dir()) if REFERENCE.exists() else []


def test_every_bundled_scenario_has_reference_results():
    bundled = sorted(p.stem for p in (ROOT / "scenarios").glob("*.toml"))
    assert SCENARIOS == bundled


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reference_tables_are_reproduced(regenerated, scenario):
    for name in TABLES:
        committed = REFERENCE / scenario / name
        fresh = regenerated / scenario / name
        assert committed.exists(), committed
        assert_csv_close(fresh, committed)  # "differs: rerun `make results` and review"
    # the record every table and report is made from: the same, but for the figures it lists (regenerated without)
    assert _record(regenerated / scenario) == _record(REFERENCE / scenario), \
        f"{scenario}/result.json differs: rerun `make results` and review"


def _record(folder: Path) -> str:
    data = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    data["record"].pop("figures")
    return json.dumps(data, sort_keys=True)
