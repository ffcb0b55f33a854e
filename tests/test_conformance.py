"""Conformance: simlab's `adaptive` policy must be decision-for-decision identical to the article's scheduler.

The golden outputs in tests/conformance/cases/*/expected.csv were produced by the article's own scheduler code
(tests/conformance/article_scheduler.js, a verbatim JavaScript port) under a virtual clock
(tests/conformance/replay.js). See tests/conformance/README.md.

* test_checked_in_case: every checked-in case through `python -m simlab replay ... --backend delay`.
* test_live_random_cases: 3 freshly generated random cases (needs `node`; fails if it is missing). The seed is
  fixed (so CI is reproducible) unless SIMLAB_CONFORMANCE_SEED is set; `SIMLAB_CONFORMANCE_SEED=random` draws one.
  The seed is printed in every failure message.
* test_harness_selfcheck: the JavaScript harness against hand-worked scenarios (needs `node`).
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONFORMANCE = TESTS / "conformance"
CASES = CONFORMANCE / "cases"
TOLERANCE_MS = 1e-6


def _load_make_cases():
    spec = importlib.util.spec_from_file_location("simlab_conformance_make_cases", CONFORMANCE / "make_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


make_cases = _load_make_cases()


def _case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "expected.csv").is_file()) if CASES.is_dir() else []


def _require_node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "Node.js ('node') is not on PATH: the conformance harness runs the article's scheduler "
            "(tests/conformance/replay.js) with Node.js 20+. Install it (e.g. apt-get install nodejs)."
        )
    return node


def _simlab_replay(case_dir: Path, out: Path) -> None:
    cmd = [
        sys.executable, "-m", "simlab", "replay", str(case_dir / "trace.csv"),
        "--options", str(case_dir / "options.json"),
        "--backend", "delay",
        "--out", str(out),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(
            f"`simlab replay` failed for {case_dir.name} (exit {proc.returncode}):\n"
            f"$ {' '.join(cmd)}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )


def _check_case(case_dir: Path, tmp_path: Path, context: str = "") -> None:
    out = tmp_path / f"{case_dir.name}-actual.csv"
    _simlab_replay(case_dir, out)
    problem = make_cases.compare_outputs(case_dir / "expected.csv", out, tol=TOLERANCE_MS)
    if problem is not None:
        pytest.fail(
            f"{context}case {case_dir.name} differs from the article's scheduler: {problem}\n"
            f"options: {(case_dir / 'options.json').read_text().strip()}\n"
            f"expected: {case_dir / 'expected.csv'}\nactual: {out}"
        )


def test_cases_are_present():
    assert len(_case_dirs()) >= 10, f"expected checked-in conformance cases under {CASES}"


@pytest.mark.parametrize("case_dir", _case_dirs(), ids=lambda p: p.name)
def test_checked_in_case(case_dir: Path, tmp_path: Path):
    _check_case(case_dir, tmp_path)


def test_live_random_cases(tmp_path: Path):
    node = _require_node()
    seed_env = os.environ.get("SIMLAB_CONFORMANCE_SEED")
    if seed_env == "random":
        seed = random.SystemRandom().randrange(1, 2**31)
    else:
        seed = int(seed_env) if seed_env else 20261129
    context = f"[live, seed {seed}; rerun with SIMLAB_CONFORMANCE_SEED={seed}] "
    try:
        dirs = make_cases.generate_cases(tmp_path / "cases", seed, 3, node=node, quiet=True)
    except Exception as exc:  # the generator or the JavaScript harness itself failed
        pytest.fail(f"{context}could not generate cases: {exc}")
    assert len(dirs) == 3
    for d in dirs:
        _check_case(d, tmp_path, context)


def test_harness_selfcheck():
    node = _require_node()
    proc = subprocess.run([node, str(CONFORMANCE / "selfcheck.js")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"harness self-check failed:\n{proc.stdout}\n{proc.stderr}"
