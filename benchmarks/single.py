"""One simulation of bench-1h and nothing else, for instruction and cache counts, which are exact where CPU time
on a shared machine is not. Subtract a `none` run (the interpreter, the imports, the workload draw):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benchmarks/single.py adaptive
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benchmarks/single.py none

`floor` runs `floor.lean_floor` on the same arrivals; any other argument is a policy name.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floor import lean_floor  # noqa: E402

from simlab.scenario import load_scenario  # noqa: E402
from simlab.world import workloads  # noqa: E402
from simlab.world.engine import Engine  # noqa: E402

scenario = load_scenario(ROOT / "scenarios" / "bench-1h.toml")
columns = workloads.open_loop_columns(scenario, 1)
what = sys.argv[1] if len(sys.argv) > 1 else "adaptive"
if what == "floor":
    lean_floor(columns.arrival_ms.tolist(), columns.service_ms.tolist(), columns.interactive.tolist(),
               scenario.backend.slots)
elif what != "none":
    Engine(scenario, scenario.options(what), 1, workload=columns).run()
