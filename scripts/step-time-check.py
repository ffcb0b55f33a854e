"""Held-out check of a step-time fit: the fitted model's time per output token against an independent load test.

usage: python scripts/step-time-check.py FIT/step.toml CHECK/loadtest.csv  (prints a Markdown table)
"""

import sys
import tomllib

import numpy as np

from simlab.calibration.gpu import read_table

step = tomllib.loads(open(sys.argv[1]).read())["backend"]["step"]
theta = np.array([step["base_ms"], step["per_token_ms"], step["per_seq_ms"]])
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
