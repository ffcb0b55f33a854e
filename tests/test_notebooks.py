"""The notebooks in notebooks/: each runs top to bottom without an error in a kernel of this interpreter (the
project's .venv), from notebooks/ as Jupyter starts them, and each is stored without outputs so git stays clean."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell; each notebook takes well under a minute in all
PROBE = "import json, os, sys\nprint(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, 'cwd': os.getcwd()}))"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A `python3` kernelspec that launches this very interpreter, found first through JUPYTER_PATH, so the
    notebooks run in the project's environment whatever kernelspecs the machine has. Notebook outputs go to a
    temporary folder (SIMLAB_NOTEBOOK_OUT), never to results/ or the source tree."""
    from ipykernel.kernelspec import write_kernel_spec

    jupyter = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(jupyter / "kernels" / "python3", overrides={"display_name": "simlab test kernel"})
    spec = json.loads((jupyter / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    out = tmp_path_factory.mktemp("notebook-out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(jupyter))
        mp.setenv("SIMLAB_NOTEBOOK_OUT", str(out))
        mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))  # no user profile or startup files
        mp.setenv("MPLBACKEND", "agg")  # the notebooks switch to inline themselves
        mp.delenv("JUPYTER_CONFIG_DIR", raising=False)
        yield out


def _execute(nb, cwd: Path) -> float:
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT,
                                     resources={"metadata": {"path": str(cwd)}})
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    return time.perf_counter() - started


def _probe_result(nb) -> dict:
    probe = nb.cells[-1]
    text = "".join(o.get("text", "") for o in probe.outputs if o.output_type == "stream")
    return json.loads(text.strip().splitlines()[-1])


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    for expected in ("01-ab-article-scenario.ipynb", "02-tuning-pareto.ipynb", "03-fit-azure-and-calibrate.ipynb"):
        assert expected in names


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, kernel_env, capsys):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    before = sorted(p.name for p in NOTEBOOK_DIR.iterdir())
    elapsed = _execute(nb, NOTEBOOK_DIR)
    seen = _probe_result(nb)
    # the kernel is this interpreter, in this environment (a venv's python resolves to the base one: check the prefix too)
    assert seen["executable"] == sys.executable
    assert Path(seen["prefix"]).resolve() == Path(sys.prefix).resolve()
    assert Path(seen["cwd"]).resolve() == NOTEBOOK_DIR.resolve()
    # it wrote its outputs under SIMLAB_NOTEBOOK_OUT and nothing beside the notebooks
    assert any(kernel_env.iterdir())
    assert sorted(p.name for p in NOTEBOOK_DIR.iterdir()) == before
    with capsys.disabled():
        print(f"\n{path.name}: {elapsed:.1f} s")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_finds_the_repository_from_the_root(path, kernel_env):
    """Jupyter may be started from the repository root too: the setup cell finds the same ROOT."""
    nb = nbformat.read(path, as_version=4)
    setup = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
    assert len(setup) == 1, "the notebook needs exactly one code cell tagged 'setup'"
    nb.cells = setup + [nbformat.v4.new_code_cell("import json\nprint(json.dumps({'root': str(ROOT), 'out': str(OUT)}))")]
    _execute(nb, ROOT)
    seen = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream").strip())
    assert Path(seen["root"]) == ROOT.resolve()
    assert Path(seen["out"]).resolve().is_relative_to(kernel_env.resolve())


def _tracked_or_present() -> list[Path]:
    """The notebooks git knows about (committed or staged), and any others in the folder."""
    paths = set(NOTEBOOKS)
    try:
        listed = subprocess.run(["git", "ls-files", "--", "notebooks/*.ipynb"], cwd=ROOT, capture_output=True,
                                text=True, check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        listed = []  # not a git checkout: the files on disk are all there is
    paths |= {ROOT / p for p in listed if (ROOT / p).is_file()}
    return sorted(paths)


@pytest.mark.parametrize("path", _tracked_or_present(), ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert "widgets" not in nb.metadata
    dirty = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.outputs or cell.execution_count is not None:
            dirty.append(f"cell {i}: outputs or an execution count")
        if "execution" in cell.metadata or "collapsed" in cell.metadata or "scrolled" in cell.metadata:
            dirty.append(f"cell {i}: execution metadata")
    assert not dirty, f"{path.name} must be saved with outputs cleared: " + "; ".join(dirty)
    assert any(c.cell_type == "markdown" for c in nb.cells)
