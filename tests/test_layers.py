"""The package's structure: no import cycle, and no module imports upward across the layers

    policies <- world <- experiments / decision / tuning / calibration / realcheck <- reporting <- commands

with the runtime (what a service imports) on policies alone. Every import counts, at module level or inside a
function: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simlab"

# The layer of each top-level module or package of simlab; a module may import its own layer or lower ones.
LAYERS = {
    "errors": 0, "version": 0, "store": 0, "outputs": 0, "records": 1,
    "policies": 2, "runtime": 3,
    "scenario": 3, "traces": 3, "fingerprint": 4, "replay": 4, "world": 4,
    "experiments": 5, "decision": 5, "tuning": 5, "calibration": 5, "realcheck": 5,
    "reporting": 8,
    "api": 9, "commands": 10, "cli": 11, "__main__": 12,  # the Python API below the commands: it never imports them
}
RUNTIME_MAY_IMPORT = {"runtime", "policies", "errors"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The simlab modules `name` imports (a `from pkg import sub` names the submodule when it is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "simlab"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            if base.split(".")[0] != "simlab":
                continue
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return found - {name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_has_a_layer(graph):
    missing = sorted({top(m) for m in graph if m != "simlab"} - set(LAYERS))
    assert not missing, f"add these to LAYERS: {missing}"


def test_no_module_imports_upward(graph):
    upward = [f"{a} -> {b}" for a, deps in graph.items() for b in deps
              if a != "simlab" and b != "simlab" and top(a) != top(b) and LAYERS[top(b)] > LAYERS[top(a)]]
    assert not upward, "imports across the layers upward:\n" + "\n".join(sorted(upward))


def test_the_runtime_imports_only_policies(graph):
    wrong = [f"{a} -> {b}" for a, deps in graph.items() if top(a) == "runtime" for b in deps
             if top(b) not in RUNTIME_MAY_IMPORT]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle(graph):
    """Tarjan's strongly connected components over the module graph: every one must be a single module."""
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"
