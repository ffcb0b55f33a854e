"""Small builders shared by tests."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT_REL = 1e-5  # results are written at 6 significant digits: one unit of the 6th, relative


def numbers_close(x: float, y: float, rel: float = RESULT_REL) -> bool:
    """Two committed numbers agree: within `rel` (a fit, or a sum whose last bits depend on the CPU), or both NaN."""
    import math

    return math.isclose(x, y, rel_tol=rel, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))


def assert_csv_close(fresh: Path, committed: Path, rel: float = RESULT_REL) -> None:
    """Two CSV files hold the same table: the same header and text cells, numbers within `rel` (a fit, or a sum
    whose last bits depend on the CPU)."""
    import csv

    def rows(path):
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.reader(f))

    a, b = rows(fresh), rows(committed)
    assert len(a) == len(b), f"{fresh}: {len(a)} rows, {committed}: {len(b)}"
    for line, (ra, rb) in enumerate(zip(a, b), start=1):
        assert len(ra) == len(rb), f"line {line}: {ra} vs {rb}"
        for x, y in zip(ra, rb):
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                assert x == y, f"{committed.name} line {line}: {x!r} vs {y!r}"
                continue
            assert numbers_close(fx, fy, rel), f"{committed.name} line {line}: {x} vs {y}"


def assert_record_close(fresh: Path, committed: Path, keys: tuple[str, ...], rel: float = RESULT_REL) -> None:
    """Two result.json files hold the same `keys` of their record: the same structure and text, numbers within
    `rel` (see assert_csv_close)."""
    import json

    def close(x, y, where):
        if isinstance(x, dict) and isinstance(y, dict):
            assert x.keys() == y.keys(), f"{committed} {where}: keys {sorted(x)} vs {sorted(y)}"
            for k in x:
                close(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, list) and isinstance(y, list):
            assert len(x) == len(y), f"{committed} {where}: {len(x)} items vs {len(y)}"
            for i, (u, v) in enumerate(zip(x, y)):
                close(u, v, f"{where}[{i}]")
        elif isinstance(x, float) or isinstance(y, float):
            assert isinstance(x, (int, float)) and isinstance(y, (int, float)) and numbers_close(x, y, rel), \
                f"{committed} {where}: {x} vs {y}"
        else:
            assert x == y, f"{committed} {where}: {x!r} vs {y!r}"

    a, b = (json.loads(Path(p).read_text())["record"] for p in (fresh, committed))
    for key in keys:
        close(a[key], b[key], key)


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


def sigint_as_a_terminal_gives_it() -> None:
    """preexec_fn of a command a test interrupts with SIGINT: a shell starting a background job without job
    control (nohup cmd &, some CI runners) makes it ignore SIGINT and its children inherit that, so the command
    is started with SIGINT as a terminal gives it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
