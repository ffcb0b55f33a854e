"""Held-out check of a step-time fit: the fitted model's time per output token against an independent load test.

usage: python scripts/step-time-check.py FIT/step.toml CHECK/loadtest.csv  (prints a Markdown table)
"""

import sys
import tomllib

import numpy as np

from simlab.calibration.gpu import read_table

step = tomllib.loads(open(sys.argv[1]).read())["backend"]["step"]
theta = np.array([step["base_ms"], step["per_token_ms"], step["per_seq_ms"], step.get("request_ms", 0.0)])
rows = [r for r in read_table(sys.argv[2]) if r.kind == "tpot"]
print(f"# Step time: fit ({sys.argv[1]}) vs an independent load test ({sys.argv[2]})\n")
print(f"model: {theta[0]:.4g} ms + {theta[2]:.4g} ms x sequences + {theta[1]:.4g} ms x prefill tokens "
      "(time per output token with C sequences in a closed loop, the others' prefills included)\n")
print("| sequences | prompt tokens | measured (ms) | fitted (ms) | error |")
print("|---:|---:|---:|---:|---:|")
errs = {}
for r in rows:
    pred = r.predict(theta)
    e = (pred - r.value) / r.value
    errs.setdefault(int(r.c), []).append(e)
    print(f"| {r.c:g} | {r.p:g} | {r.value:.2f} | {pred:.2f} | {e:+.1%} |")
print("\n| sequences | mean abs error | within 10% |")
print("|---:|---:|---|")
for c, es in sorted(errs.items()):
    m = float(np.mean(np.abs(es)))
    print(f"| {c} | {m:.1%} | {'yes' if all(abs(e) <= 0.10 for e in es) else 'no'} |")
allerr = [abs(e) for es in errs.values() for e in es]
print(f"\nall rows: mean {np.mean(allerr):.1%}, largest {np.max(allerr):.1%}; "
      f"{sum(e <= 0.10 for e in allerr)}/{len(allerr)} within 10%")

# The noise floor: the same load test run twice on this (shared) machine.
fit_table = sys.argv[1].replace("/fit/step.toml", "/loadtest.csv")
try:
    first = {(r.c, r.p): r.value for r in read_table(fit_table) if r.kind == "tpot"}
except Exception:
    first = {}
if first:
    print(f"\n## Test-retest: the fit's own load test ({fit_table}) vs the check run, same settings\n")
    print("| sequences | prompt tokens | fit run (ms) | check run (ms) | difference |")
    print("|---:|---:|---:|---:|---:|")
    diffs = []
    for r in rows:
        if (r.c, r.p) in first:
            d = (r.value - first[(r.c, r.p)]) / first[(r.c, r.p)]
            diffs.append(abs(d))
            print(f"| {r.c:g} | {r.p:g} | {first[(r.c, r.p)]:.2f} | {r.value:.2f} | {d:+.1%} |")
    print(f"\nmean |difference| between two identical runs: {np.mean(diffs):.1%} (largest {np.max(diffs):.1%}): "
          "no model can be checked more finely than this on this machine")
