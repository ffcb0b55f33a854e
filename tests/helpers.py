"""Small builders shared by tests."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def simlab(*args, cwd=None, check=True, timeout=600) -> subprocess.CompletedProcess:
    """Run the CLI as a user types it."""
    proc = subprocess.run(
        [sys.executable, "-m", "simlab", *map(str, args)],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"simlab {' '.join(map(str, args))} exited {proc.returncode}\n{proc.stderr}")
    return proc


def random_trace(path: Path, n: int, seed: int, integer_times: bool = False) -> Path:
    rng = random.Random(seed)
    t = 0.0
    lines = ["id,kind,arrival_ms,service_ms"]
    for i in range(n):
        kind = "batch" if rng.random() < 0.3 else "interactive"
        if rng.random() < 0.05:  # a backlog burst
            for j in range(rng.randint(5, 30)):
                svc = rng.randint(0, 3000) if integer_times else rng.expovariate(1 / 1500)
                lines.append(f"b{i}-{j},batch,{t!r},{svc!r}")
        svc = rng.expovariate(1 / (1000 if kind == "batch" else 150))
        if integer_times:
            svc = float(int(svc))
        lines.append(f"t{i},{kind},{t!r},{svc!r}")
        gap = rng.expovariate(1 / 40)
        t += float(int(gap)) if integer_times else gap
    path.write_text("\n".join(lines) + "\n")
    return path
