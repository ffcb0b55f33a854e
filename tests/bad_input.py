"""Shared checks for tests of bad input through the CLI: exit code 2, the message names what is wrong, no traceback,
and nothing written anywhere but the output folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def tree(folder: Path) -> set[str]:
    """Every path under `folder`, relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def simlab_in(workdir: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI as a user types it, from `workdir` (so a default results/ folder would land there)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "simlab", *map(str, args)], cwd=workdir, capture_output=True,
                          text=True, timeout=timeout, env=env)


def assert_input_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one `error:` line naming every word, no traceback; the message."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for word in words:
        assert str(word) in errors[0], f"{word!r} not in {errors[0]!r}"
    return errors[0]


def assert_bad_input(workdir: Path, *args, words=(), allowed: tuple[str, ...] = (), timeout: float = 120) -> str:
    """Run from `workdir`, expect an input error naming `words`, and nothing written in `workdir` except paths under
    `allowed` (relative to it)."""
    before = tree(workdir)
    proc = simlab_in(workdir, *args, timeout=timeout)
    message = assert_input_error(proc, *words)
    new = {p for p in tree(workdir) - before if not any(p == a or p.startswith(a + os.sep) for a in allowed)}
    assert not new, f"written outside the output folder: {sorted(new)}"
    return message
