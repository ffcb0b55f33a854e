"""Write scenarios/traces/bursty-chat.csv: 20 minutes of chat from a two-state Markov-modulated Poisson process
(calm 4 req/s for 150 s on average, bursts of 30 req/s for 45 s on average), service times lognormal
(median 300 ms, p95 1 s). Deterministic (seed 2023); prints the measured inter-arrival CV and dispersion."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

SEED, MINUTES = 2023, 20
CALM, BURST = (4.0, 150.0), (30.0, 45.0)  # (rate per s, mean sojourn s)


def main(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    end, t, state, times = MINUTES * 60.0, 0.0, 0, []
    while t < end:
        rate, mean = (CALM, BURST)[state]
        stay = min(rng.exponential(mean), end - t)
        n = rng.poisson(rate * stay)
        times.append(t + np.sort(rng.uniform(0, stay, n)))
        t, state = t + stay, 1 - state
    arrivals = np.concatenate(times) * 1000.0
    sigma = math.log(1000 / 300) / 1.6448536269514722
    service = rng.lognormal(math.log(300), sigma, len(arrivals))
    lines = ["id,kind,arrival_ms,service_ms"] + [f"c{i},interactive,{a:.1f},{s:.1f}" for i, (a, s) in enumerate(zip(arrivals, service))]
    out.write_text("\n".join(lines) + "\n")
    gaps = np.diff(arrivals)
    counts = np.bincount((arrivals // 10_000).astype(int))
    print(f"{out}: {len(arrivals)} requests, {len(arrivals) / (end):.2f} req/s, inter-arrival CV {gaps.std() / gaps.mean():.2f}, "
          f"10 s count dispersion {counts.var() / counts.mean():.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "scenarios/traces/bursty-chat.csv")
