"""The short examples in docstrings are executed, so the documentation cannot drift from the code."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "simlab.store",
    "simlab.policies.options",
    "simlab.experiments.stats",
    "simlab.experiments.tables",
    "simlab.calibration.openloop",
    "simlab.reporting.words",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
