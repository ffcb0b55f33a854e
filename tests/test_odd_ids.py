"""Task ids that CSV must quote (commas, quotes, non-ASCII) survive run, ab and replay unchanged."""

from __future__ import annotations

import csv
from pathlib import Path


from tests.helpers import simlab

ODD_IDS = ["a,b", 'say "hi"', "café ü 東京", "both, \"and\" ñ", "plain"]


def trace_scenario(folder: Path) -> Path:
    rows = [("id", "kind", "arrival_ms", "service_ms")]
    for i, name in enumerate(ODD_IDS):
        rows.append((name, "interactive", str(i * 10.0), "50"))
        rows.append((f"{name}/batch", "batch", str(i * 10.0 + 1), "80"))
    with (folder / "odd.csv").open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    path = folder / "odd.toml"
    path.write_text(
        'name = "odd-ids"\nduration_ms = 1_000\n[backend]\nkind = "slots"\nslots = 2\n'
        "[scheduler]\nmaxConcurrency = 2\nbatchMaxConcurrency = 1\nbatchMinConcurrency = 1\n"
        "interactiveRpsThreshold = 10\ninteractiveP95LatencyMs = 500\n"
        '[[workload]]\nclass = "interactive"\narrivals = { process = "trace", file = "odd.csv" }\n'
        '[[workload]]\nclass = "batch"\narrivals = { process = "trace", file = "odd.csv" }\n'
        "[experiment]\nreplications = 1\n",
        encoding="utf-8",
    )
    return path


def ids_in(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    header = rows[0].keys()
    assert None not in header and all(None not in r for r in rows), "a row has more cells than the header"
    return [r["id"] for r in rows]


def test_odd_ids_round_trip_through_run_ab_and_replay(tmp_path):
    scenario = trace_scenario(tmp_path)
    expected = sorted(ODD_IDS + [f"{n}/batch" for n in ODD_IDS])
    simlab("run", scenario, "--policy", "static", "--out", tmp_path / "run", "--quiet")
    tasks = tmp_path / "run" / "runs" / "static" / "seed-1" / "tasks.csv"
    assert sorted(ids_in(tasks)) == expected
    with tasks.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            assert row["kind"] in ("interactive", "batch") and float(row["end_ms"]) > float(row["arrival_ms"])
    simlab("ab", scenario, "--out", tmp_path / "ab", "--quiet", "--no-figures", "--policies", "priority,static")
    assert sorted(ids_in(tmp_path / "ab" / "runs" / "priority" / "seed-1" / "tasks.csv")) == expected
    out = tmp_path / "replay.csv"
    simlab("replay", tmp_path / "odd.csv", "--out", out)
    assert ids_in(out) == [i for n in ODD_IDS for i in (n, f"{n}/batch")]  # trace order
