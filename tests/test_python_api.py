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


def test_the_api_warns_where_the_commands_print_a_warning(tmp_path):
    """A notebook sees what the command prints as 'warning: ...', as a SimlabWarning: too few requests a run for a
    P95 (ab's runs, decide's selection runs), and the traffic beyond the backend's capacity; nothing on traffic
    that has neither."""
    import warnings

    import pytest

    import simlab

    tiny = ROOT / "docs" / "examples" / "tiny.toml"
    short = tmp_path / "short.toml"
    short.write_text(tiny.read_text().replace("duration_ms = 8_000", "duration_ms = 1_000"))
    with pytest.warns(simlab.SimlabWarning, match="few requests: the median run completes"):
        simlab.ab(short, replications=2, frontier=False)
    with pytest.warns(simlab.SimlabWarning, match="few requests: the median selection run completes"):
        simlab.decide(short, trials=0, replications=2, workers=1, out=tmp_path / "decide")
    overload = tmp_path / "overload.toml"
    overload.write_text(tiny.read_text().replace("rate_per_s = 8", "rate_per_s = 80"))
    with pytest.warns(simlab.SimlabWarning) as caught:
        simlab.ab(overload, policies=["static"], replications=2, frontier=False)
    said = [str(w.message) for w in caught]
    assert any(m.startswith("capacity: ") and "utilisation" in m for m in said), said  # before the runs
    assert any(m.startswith("capacity: with batch work absent") for m in said), said  # measured
    with warnings.catch_warnings():
        warnings.simplefilter("error", simlab.SimlabWarning)
        simlab.ab(tiny, policies=["static"], replications=2, frontier=False)
