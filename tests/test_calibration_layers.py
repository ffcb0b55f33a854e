"""The calibration package sits below the renderers and the commands: nothing under simlab/calibration/ imports
simlab.reporting or simlab.commands (at module level or inside a function)."""

from __future__ import annotations

import ast

from tests.helpers import ROOT

ABOVE = ("simlab.reporting", "simlab.commands", "simlab.cli")


def imports(path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_calibration_never_imports_upward():
    modules = sorted((ROOT / "simlab" / "calibration").glob("*.py"))
    assert len(modules) >= 9
    # `from simlab import reporting` is listed as simlab.reporting by imports()
    upward = {p.name: [n for n in imports(p) if n.startswith(ABOVE)] for p in modules}
    assert {k: v for k, v in upward.items() if v} == {}
