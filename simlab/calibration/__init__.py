"""Calibration before rollout: fit workloads from request logs (`simlab fit`), find the latency knee
(`simlab calibrate`), fit the GPU step-time model from a load test (`simlab calibrate-gpu`).

One idea per module: `logs` reads request logs, `fit` fits arrivals and lengths with scipy.stats,
`scenario_writer` writes the fitted scenario TOML, `validate` simulates it and compares with the log, `knee` ramps
the interactive rate, `gpu` fits the step time, `openloop` refits it on open-loop runs; `run` has one call per
command (to its record, simlab/records.py) and `files` the tables stored beside it. Reports are rendered from the
records in simlab/reporting/ (this package never imports it).
"""
