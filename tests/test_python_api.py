"""The Python API: the examples of docs/python-api.md run as doctests; `import simlab` stays light."""

from __future__ import annotations

import doctest
import subprocess
import sys

from tests.helpers import ROOT


def test_the_documented_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name files relative to the repository
    result = doctest.testfile(str(ROOT / "docs" / "python-api.md"), module_relative=False, globs={"OUT": tmp_path},
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 15 and result.failed == 0, result


def test_import_simlab_loads_no_heavy_module_and_the_api_loads_on_use():
    code = ("import sys, simlab; heavy = {'numpy', 'pandas', 'simpy', 'matplotlib', 'optuna', 'scipy'}; "
            "print(sorted(heavy & set(sys.modules))); simlab.load; print('simlab.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"]


def test_version_flag():
    from simlab import __version__

    out = subprocess.run([sys.executable, "-m", "simlab", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"simlab {__version__}"
