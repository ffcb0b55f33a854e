"""One simulation of bench-1h and nothing else, for instruction and cache counts, which are exact where CPU time
on a shared machine is not. Subtract a `none` run (the interpreter, the imports, the workload draw):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benchmarks/single.py adaptive
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python benchmarks/single.py none

`floor` runs `floor.lean_floor` on the same arrivals; any other argument is a policy name. The workload is
drawn as `run.py` draws it (so this also runs on older commits, for before/after counts).
"""

from __future__ import annotations

import sys

from run import ROOT, engine_input, floor_arrays, lean_floor, run_engine

from simlab.scenario import load_scenario

scenario = load_scenario(ROOT / "scenarios" / "bench-1h.toml")
what = sys.argv[1] if len(sys.argv) > 1 else "adaptive"
if what == "floor":
    lean_floor(*floor_arrays(scenario), scenario.backend.slots)
else:
    prepare, _ = engine_input(scenario)
    if what != "none":
        run_engine(scenario, scenario.options(what), prepare())
