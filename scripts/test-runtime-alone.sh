#!/usr/bin/env bash
# The runtime's own tests with only the runtime distribution installed (runtime/pyproject.toml: simlab.runtime,
# simlab.policies, simlab.errors, simlab.version; pydantic, sortedcontainers, prometheus_client as its extra), plus pytest and
# hypothesis: a fresh virtualenv under the temporary folder, removed afterwards. Proves a service can take the
# Scheduler without the lab (numpy, SimPy, pandas, matplotlib, Optuna, SciPy are not even installed there).
#   scripts/test-runtime-alone.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/simlab-runtime-alone.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
pin() { grep -i "^$1==" "$ROOT/requirements.lock"; }  # the lab's exact versions
# Built from a copy of exactly what the distribution packages, so the checkout gets no build/ or egg-info litter.
mkdir -p "$WORK/src/simlab"
mkdir "$WORK/src/runtime"
cp "$ROOT/runtime/pyproject.toml" "$WORK/src/runtime/"
cp "$ROOT/simlab/__init__.py" "$ROOT/simlab/errors.py" "$ROOT/simlab/version.py" "$WORK/src/simlab/"
cp -r "$ROOT/simlab/runtime" "$ROOT/simlab/policies" "$WORK/src/simlab/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" "$WORK/src/runtime[prometheus]"
"${PIP[@]}" "$(pin pytest)" "$(pin hypothesis)"
# Only the runtime: the lab's modules and dependencies must be absent.
(cd "$WORK" && "$WORK/venv/bin/python" - <<'PYCHECK'
import importlib.util, sys
import simlab, simlab.runtime
assert "site-packages" in simlab.__file__, simlab.__file__
missing = [m for m in ("simlab.scenario", "simlab.world", "numpy", "simpy", "pandas", "matplotlib", "optuna", "scipy")
           if importlib.util.find_spec(m) is not None]
assert not missing, f"installed alongside the runtime: {missing}"
print(f"runtime alone: {simlab.runtime.__file__}")
PYCHECK
)
# The tests from a copy too: run in the checkout, Python would import the checkout's simlab, not the installed one.
mkdir "$WORK/tests"
cp "$ROOT/tests/test_runtime.py" "$ROOT/tests/test_runtime_alone.py" "$WORK/tests/"
cd "$WORK/tests"
"$WORK/venv/bin/pytest" -q -p no:cacheprovider "$@" test_runtime.py test_runtime_alone.py
