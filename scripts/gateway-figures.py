#!/usr/bin/env python3
"""The figures and tables of docs/many-instances.md: interactive P95 and the backend's peak in flight against the
number of gateway instances for each limiter (scenarios/many-gateways.toml), and lost and duplicated work per
restart policy (scenarios/gateway-restarts.toml). Deterministic: the same numbers on every rerun.

    .venv/bin/python scripts/gateway-figures.py [OUT]        # default OUT: docs/many-instances
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simlab.store import atomic_write_text  # noqa: E402
from simlab.experiments.gateways import as_rows, instances_sweep, restart_sweep  # noqa: E402
from simlab.reporting.figures.gateway import instances_figure, restarts_figure  # noqa: E402
from simlab.scenario import load_scenario  # noqa: E402
from simlab.store import csv_text  # noqa: E402

POLICY = "adaptive"
SEEDS = range(1, 11)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    many = load_scenario(ROOT / "scenarios" / "many-gateways.toml")
    for delay in (0.0, 5.0):
        points = instances_sweep(many, POLICY, SEEDS, shared_delay_ms=delay)
        rows = as_rows(points)
        name = "instances" if delay == 0 else f"instances-delay-{delay:g}ms"
        atomic_write_text(out / f"{name}.csv", csv_text(rows, list(rows[0])))
        if delay == 0:
            print(instances_figure(points, out, many.name, POLICY)[0])
    restarts = load_scenario(ROOT / "scenarios" / "gateway-restarts.toml")
    points = restart_sweep(restarts, POLICY, SEEDS)
    rows = as_rows(points)
    atomic_write_text(out / "restarts.csv", csv_text(rows, list(rows[0])))
    print(restarts_figure(points, out, restarts.name, POLICY)[0])
    for svg in out.glob("*.svg"):
        svg.unlink()  # the PNGs are what the docs show; the SVGs (same drawing) are not kept
    print(out / "instances.csv", out / "restarts.csv", sep="\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "many-instances")
