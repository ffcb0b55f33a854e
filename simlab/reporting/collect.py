"""Which simlab command wrote a folder, and its record: every command writes `result.json` (simlab/records.py), with
its kind (ab, tune, calibrate, fit, calibrate-gpu) and schema version; the report renders that record and the figures it lists.

A folder that holds no result.json but has such folders inside (e.g. results/SCENARIO/ with ab/ and tune/) stands
for them, in name order. Anything else is an InputError (exit 2) naming the folder and what was expected: a folder
of an older simlab (its tables but no result.json), an interrupted run, a damaged or old-schema result.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simlab import records
from simlab.errors import InputError

ORDER = ("decide", "ab", "tune", "calibrate", "fit", "calibrate-gpu")  # the order of the sections in the report
# files each command writes besides result.json: a folder with some of them but no result.json is old or unfinished
SIGNS = {
    "ab": ("summary.csv", "policies.csv", "meta.json", "runs"),
    "decide": ("frontier.csv", "selection", "confirmation", "answer.json"),
    "tune": ("validation-summary.csv", "trials.csv", "study.db"),
    "calibrate": ("calibration.json", "knee.csv"),
    "fit": ("fit.json", "rates.csv"),
    "calibrate-gpu": ("step.toml", "fit.csv"),
}
EXPECTED = ("the output folder of simlab decide, ab, tune, calibrate, fit or calibrate-gpu (with its result.json), or a "
            "folder holding such folders")


@dataclass
class Source:
    kind: str
    path: Path  # absolute
    given: str  # as typed
    record: object = None  # the command's record (records.AbRecord, TuneRecord, CalibrationRecord, FitRecord, ...)
    figures: list[Path] = field(default_factory=list)  # PNGs the record lists, in its order
    label: str = ""  # the folder relative to the report, e.g. "ab/" (set when the document is built)
    name: str = ""  # the scenario's name, or "fit of LOG"


def _is_output(path: Path) -> bool:
    # exists, not is_file: a result.json that is a FIFO, a device or a folder is then refused by name when read
    return (path / records.RESULT_FILE).exists()


def _unfinished(path: Path) -> str | None:
    """'looks like the output of simlab ab (summary.csv, runs/) but has no result.json ...' for an old or interrupted
    folder."""
    for kind, signs in SIGNS.items():
        have = [n + ("/" if (path / n).is_dir() else "") for n in signs if (path / n).exists()]
        if have:
            return (f"looks like the output of simlab {kind} ({', '.join(have)}), but result.json is missing: "
                    f"written by an older simlab, or interrupted; run simlab {kind} again to finish or regenerate it")
    return None


def _listing(path: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir() if not p.name.startswith("."))
    if not names:
        return "the folder is empty"
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return f"found {', '.join(names[:8])}{more}"


def resolve(given: str, skipped: list[Path] | None = None) -> list[Path]:
    """The output folders one DIR argument stands for: the folder itself, or the output folders directly inside
    (the other folders inside are appended to `skipped`, so the report can name them)."""
    path = Path(given)
    if not path.exists():
        raise InputError(given, None, f"no such folder; expected {EXPECTED}")
    if not path.is_dir():
        raise InputError(given, None, f"is a file, not a folder; expected {EXPECTED}")
    if _is_output(path):
        return [path]
    unfinished = _unfinished(path)
    if unfinished:
        raise InputError(given, None, unfinished)
    inside = [p for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    outputs = [p for p in inside if _is_output(p)]
    if outputs:
        if skipped is not None:
            skipped.extend(p for p in inside if p not in outputs)
        return outputs
    for p in inside:
        unfinished = _unfinished(p)
        if unfinished:
            raise InputError(p, None, unfinished)
    raise InputError(given, None, f"not a simlab output folder ({_listing(path)}); expected {EXPECTED}")


def collect(dirs: list[str], skipped: list[Path] | None = None) -> list[Source]:
    """Every DIR recognised and read, sorted into report order (decide, ab, tune, calibrate, fit, calibrate-gpu;
    then as given).
    Folders inside a DIR that are not simlab outputs go to `skipped`."""
    found: list[Source] = []
    seen = set()
    for given in dirs:
        for path in resolve(given, skipped):
            key = path.resolve()
            if key in seen:
                continue
            seen.add(key)
            found.append(_read(path.absolute(), given))
    found.sort(key=lambda s: ORDER.index(s.kind))  # stable: command-line order within a kind
    return found


# --- reading ------------------------------------------------------------------------------------------------

def _read(path: Path, given: str) -> Source:
    record = records.load(path / records.RESULT_FILE)
    if record.KIND not in ORDER:  # e.g. validate-real: its own report.md, not a section of this page
        raise InputError(path, None, f"a simlab {record.KIND} result; `simlab report` renders the folders of "
                         f"simlab {', '.join(ORDER)}")
    figures = []
    for rel in record.figures:
        f = path / rel
        if not f.is_file():
            raise InputError(f, None, f"not found: {path / records.RESULT_FILE} lists this figure; run simlab "
                             f"{record.KIND} again to redraw it")
        figures.append(f)
    return Source(record.KIND, path, given, record, figures)
