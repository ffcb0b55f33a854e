"""simlab.runtime is a library of its own: importing it (and its Prometheus export and virtual clock) loads none of
the lab's heavy dependencies, and its modules import only simlab.policies, simlab.errors, the standard library and
the runtime distribution's own dependencies (runtime/pyproject.toml; scripts/test-runtime-alone.sh installs only that
and runs these tests and tests/test_runtime.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import simlab.runtime

HEAVY = ("numpy", "simpy", "pandas", "matplotlib", "optuna", "scipy", "pyarrow", "psycopg2", "psutil", "h11")
RUNTIME = Path(simlab.runtime.__file__).parent
ALLOWED = {"simlab.runtime", "simlab.policies", "simlab.errors", "pydantic", "sortedcontainers", "prometheus_client",
           "redis"}


def test_importing_the_runtime_leaves_the_lab_out():
    code = ("import json, sys\nimport simlab.runtime, simlab.runtime.virtual, simlab.runtime.prometheus\n"
            "from simlab.runtime import Scheduler\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == []


def test_the_runtime_imports_only_the_policies_and_errors():
    stdlib = set(sys.stdlib_module_names)
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                ok = top in stdlib or top == "__future__" or any(name == a or name.startswith(a + ".")
                                                                  for a in ALLOWED)
                assert ok, f"{path.name} imports {name}"


def test_the_runtime_distribution_packages_only_the_runtime():
    import tomllib

    root = RUNTIME.parents[1]
    if not (root / "runtime" / "pyproject.toml").exists():
        pytest.skip("the repository's pyproject files: not in an installed runtime distribution")
    project = tomllib.loads((root / "runtime" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "simlab-runtime"
    assert sorted(project["tool"]["setuptools"]["packages"]) == ["simlab.policies", "simlab.runtime"]
    assert project["tool"]["setuptools"]["py-modules"] == ["simlab.errors", "simlab.version"]
    lab = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in project["project"]["dependencies"]:  # the same exact pins as the lab's
        assert dep in lab, dep
