"""Where commands write. A default folder is made from a sanitised name and always stays under `results/`; a
folder given with --out is checked (a folder, or one that can be made, and writable) before any work, so a bad
--out is an input error (exit 2) naming the flag rather than a failure after minutes of simulation."""

from __future__ import annotations

import os
import tempfile
import unicodedata
from pathlib import Path

from simlab.errors import InputError

RESULTS = Path("results")
NAME_CHARS = "._-+"  # besides letters and digits (any script)
MAX_NAME = 100


def safe_name(name: str, fallback: str = "scenario") -> str:
    """`name` as one folder name: letters, digits and ._-+ kept, every run of anything else (slashes, backslashes,
    spaces, control characters) one '-', no leading or trailing dot or dash (so never '.' or '..'), at most
    MAX_NAME characters; `fallback` when nothing is left."""
    out, gap = [], False
    for ch in unicodedata.normalize("NFC", name):
        if ch.isalnum() or ch in NAME_CHARS:
            if gap and out:
                out.append("-")
            out.append(ch)
            gap = False
        else:
            gap = True
    return "".join(out)[:MAX_NAME].strip(".-") or fallback


def default_folder(*parts: str) -> Path:
    """results/PART/...: each part made safe, so the folder is always inside results/."""
    return RESULTS.joinpath(*(safe_name(p) for p in parts))


def _where(flag: str | None) -> str:
    return flag or "output folder"


def output_folder(path: str | Path, flag: str | None = "--out") -> Path:
    """`path`, made if needed, once it is known to be a folder this process can write in; else an InputError at
    `flag` (None for a default folder: the message then suggests --out)."""
    path = Path(path)
    hint = "" if flag else "; give --out a folder you can write in"
    if path.exists() and not path.is_dir():
        raise InputError(None, _where(flag), f"{path} exists and is not a folder{hint}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(None, _where(flag), f"{path}: {parent} is not a folder{hint}")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".simlab-write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(None, _where(flag), f"cannot write in {path} ({exc.strerror or exc}){hint}") from None
    return path


def output_file(path: str | Path, flag: str | None = "--out") -> Path:
    """`path` as a file to write: not a folder, in a folder this process can write in (made if needed)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(None, _where(flag), f"{path} is a folder; give a file name")
    if not path.name or path.name in (".", ".."):
        raise InputError(None, _where(flag), f"{str(path)!r} is not a file name")
    output_folder(path.parent, flag)
    return path
