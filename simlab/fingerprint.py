"""What a result depends on, as hashes: the scenario's settings, the bytes of every file it points at, and
simlab's own code. Cached runs (`run`, `ab`) and tuning studies are keyed on these, so an edited trace, lengths
file, profile or a code change can never bring old numbers back."""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from pathlib import Path

from simlab.version import __version__

# Keys of a scenario table whose value is a path to a file the scenario reads (e.g. `file` of a trace or an
# empirical distribution, `profile` of a GPU step model). Found anywhere in the scenario, so a new table that
# points at a file is covered without touching this module.
FILE_KEYS = ("file", "profile")


@functools.lru_cache(maxsize=256)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (re-read whenever its size or modification time changes)."""
    st = Path(path).stat()
    return _sha256(str(path), st.st_mtime_ns, st.st_size)


@functools.cache
def code_fingerprint() -> str:
    """sha256 over every .py file of the simlab package (path and bytes), computed once per process."""
    root = Path(__file__).resolve().parent  # the simlab package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# Libraries whose versions can change a run's numbers (random streams, the event loop, file readers and writers).
LIBRARIES = ("numpy", "simpy", "pandas", "pyarrow")


@functools.cache
def library_versions() -> str:
    """'python 3.11.9, numpy 2.1.3, ...': a new version of one of them may draw or compute differently."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"python {platform.python_version()}"]
    for name in LIBRARIES:
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} absent")
    return ", ".join(parts)


def _walk(value, where: str):
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{where}.{k}" if where else str(k)
            if k in FILE_KEYS and isinstance(v, str):
                yield sub, v
            else:
                yield from _walk(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{where}[{i}]")


def scenario_files(scenario) -> dict[str, str]:
    """Every file the scenario points at, as written, by where (e.g. 'workload[0].arrivals.file')."""
    return dict(_walk(scenario.model_dump(mode="json", by_alias=True), ""))


def input_hashes(scenario) -> dict[str, str]:
    """'where (file as written)' -> sha256 of its bytes, 'missing' when it is not there. Where the scenario
    was loaded from does not matter: only the bytes do."""
    out = {}
    for where, file in scenario_files(scenario).items():
        try:
            out[f"{where} ({file})"] = file_sha256(scenario.resolve(file))
        except OSError:
            out[f"{where} ({file})"] = "missing"
    return out


def digest(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def scenario_settings(scenario, drop_tune: tuple[str, ...] = ()) -> dict:
    """The scenario as validated (paths as written), without the `[tune]` keys in `drop_tune`."""
    dump = scenario.model_dump(mode="json", by_alias=True)
    for key in drop_tune:
        dump.get("tune", {}).pop(key, None)
    return dump


def identity(scenario, extra: dict, drop_tune: tuple[str, ...] = ()) -> dict[str, str]:
    """A study's identity, in parts that can be compared one by one to say what changed."""
    return {
        "simlab_settings": digest({"scenario": scenario_settings(scenario, drop_tune), **extra}),
        "simlab_inputs": json.dumps(input_hashes(scenario), sort_keys=True),
        "simlab_code": code_fingerprint(),
        "simlab_version": __version__,
        "simlab_libraries": library_versions(),
    }


def describe_changes(stored: dict, current: dict) -> list[str]:
    """Human-readable differences between two identities from `identity()` (empty when they agree)."""
    changes = []
    for key, now in current.items():
        was = stored.get(key)
        if was == now:
            continue
        if was is None:
            changes.append(f"{key}: not recorded in the stored study (made by an older simlab)")
        elif key == "simlab_inputs":
            try:
                before = json.loads(was)
            except (TypeError, json.JSONDecodeError):
                before = {}
            after = json.loads(now)
            for name in sorted(set(before) | set(after)):
                if name not in after:
                    changes.append(f"input file no longer used: {name}")
                elif name not in before:
                    changes.append(f"new input file: {name}")
                elif before[name] != after[name]:
                    changes.append(f"input file changed: {name} (sha256 {before[name][:12]} -> {after[name][:12]})")
        elif key == "simlab_settings":
            changes.append("scenario settings, options or search space changed")
        elif key == "simlab_code":
            changes.append(f"simlab's code changed (fingerprint {was} -> {now})")
        elif key == "simlab_libraries":
            changes.append(f"libraries changed ({was} -> {now})")
        elif key == "simlab_version":
            changes.append(f"simlab version {was} -> {now}")
        else:
            changes.append(f"{key}: {was} -> {now}")
    return changes
