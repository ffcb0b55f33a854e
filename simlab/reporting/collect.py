"""Which simlab command wrote a folder, recognised by its files, and what is in it.

    ab         meta.json, policies.csv        (+ comparison.csv, verdicts.csv, bounds.csv, report.md, figures/)
    tune       validation-summary.csv, trials.csv   (+ best-options.json, report.md, figures/)
    calibrate  calibration.json               (+ recommended-options.json, report.md, figures/knee.png)
    fit        fit.json                       (+ report.md, figures/)

A folder that holds none of these but has such folders inside (e.g. results/SCENARIO/ with ab/ and tune/) stands
for them, in name order. Anything else is an InputError (exit 2) naming the folder and what was expected."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from simlab.errors import InputError

KINDS = {
    "ab": ("meta.json", "policies.csv"),
    "tune": ("validation-summary.csv", "trials.csv"),
    "calibrate": ("calibration.json",),
    "fit": ("fit.json",),
}
ORDER = tuple(KINDS)  # the order of the sections in the report
EXPECTED = ("the output folder of simlab ab (meta.json, policies.csv), simlab tune (validation-summary.csv, "
            "trials.csv), simlab calibrate (calibration.json) or simlab fit (fit.json)")


@dataclass
class Source:
    kind: str
    path: Path  # absolute
    given: str  # as typed
    files: dict = field(default_factory=dict)  # name -> parsed content (dict for JSON, list of rows for CSV)
    report: str = ""  # the command's own report.md, for its prose ("" when missing)
    figures: list[Path] = field(default_factory=list)  # PNGs, in the order the command's report.md shows them
    label: str = ""  # the folder relative to the report, e.g. "ab/" (set when the document is built)
    name: str = ""  # the scenario's name, or "fit of LOG"

    def has(self, name: str) -> bool:
        return self.files.get(name) is not None


def kind_of(path: Path) -> str | None:
    for kind, needed in KINDS.items():
        if all((path / n).is_file() for n in needed):
            return kind
    return None


def _partial(path: Path) -> str | None:
    """'looks like a simlab ab output, but policies.csv is missing' for a folder with some of a kind's files."""
    for kind, needed in KINDS.items():
        have = [n for n in needed if (path / n).is_file()]
        if have and len(have) < len(needed):
            missing = ", ".join(n for n in needed if n not in have)
            return (f"looks like the output of simlab {kind} ({', '.join(have)}), but {missing} is missing "
                    f"(an interrupted run? run simlab {kind} again to finish it)")
    return None


def _listing(path: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir() if not p.name.startswith("."))
    if not names:
        return "the folder is empty"
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return f"found {', '.join(names[:8])}{more}"


def resolve(given: str) -> list[tuple[str, Path]]:
    """(kind, folder) for one DIR argument: the folder itself, or the output folders directly inside it."""
    path = Path(given)
    if not path.exists():
        raise InputError(given, None, f"no such folder; expected {EXPECTED}")
    if not path.is_dir():
        raise InputError(given, None, f"is a file, not a folder; expected {EXPECTED}")
    kind = kind_of(path)
    if kind:
        return [(kind, path)]
    partial = _partial(path)
    if partial:
        raise InputError(given, None, partial)
    inside = [(kind_of(p), p) for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    inside = [(k, p) for k, p in inside if k]
    if inside:
        return inside
    raise InputError(given, None, f"not a simlab output folder ({_listing(path)}); expected {EXPECTED}")


def collect(dirs: list[str]) -> list[Source]:
    """Every DIR recognised and read, sorted into report order (ab, tune, calibrate, fit; then as given)."""
    found: list[Source] = []
    seen = set()
    for given in dirs:
        for kind, path in resolve(given):
            key = path.resolve()
            if key in seen:
                continue
            seen.add(key)
            found.append(_read(kind, path.absolute(), given))
    found.sort(key=lambda s: ORDER.index(s.kind))  # stable: command-line order within a kind
    return found


# --- reading ------------------------------------------------------------------------------------------------

OPTIONAL = {
    "ab": ("comparison.csv", "verdicts.csv", "bounds.csv"),
    "tune": ("best-options.json",),
    "calibrate": ("recommended-options.json",),
    "fit": ("validation.csv",),
}
REQUIRED_COLUMNS = {
    "policies.csv": ("policy",),
    "comparison.csv": ("candidate", "baseline", "metric", "diff", "diff_ci_low", "diff_ci_high", "ratio", "significant"),
    "verdicts.csv": ("policy", "p95_not_stuck_above_slo", "batch_keeps_moving", "concurrency_within_cap"),
    "bounds.csv": ("policy",),
    "validation-summary.csv": ("config", "holdout_objective_ms", "holdout_objective_ci_low", "holdout_objective_ci_high",
                               "holdout_throughput_per_min", "holdout_throughput_ci_low", "holdout_throughput_ci_high",
                               "meets_constraint"),
    "trials.csv": ("trial", "state"),
    "validation.csv": (),
}


def _read(kind: str, path: Path, given: str) -> Source:
    src = Source(kind, path, given)
    for name in KINDS[kind] + OPTIONAL[kind]:
        f = path / name
        if f.is_file():
            src.files[name] = read_json(f) if name.endswith(".json") else read_csv(f, REQUIRED_COLUMNS.get(name, ()))
    report = path / "report.md"
    if report.is_file():
        try:
            src.report = report.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(report, None, f"cannot be read ({exc})") from None
    src.figures = _figures(path, src.report)
    return src


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(path, f"line {exc.lineno}", f"not valid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, f"cannot be read ({exc})") from None


def read_csv(path: Path, required=()) -> list[dict]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(path, None, f"cannot be read as CSV ({exc})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(path, "line 1", f"missing column(s) {', '.join(missing)} (found: {', '.join(header) or 'no header'})")
    return rows


def num(value) -> float:
    """A CSV or JSON value as a float; NaN when empty or missing."""
    if value is None or value == "":
        return math.nan
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def truth(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


_FIG = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")


def _figures(path: Path, report: str) -> list[Path]:
    """The PNGs the command's report.md shows, in its order (a report that shows none: none, so stale figures of an
    earlier run stay out); without a report.md, figures/*.png by name."""
    listed = []
    for rel in _FIG.findall(report):
        f = (path / rel)
        if f.is_file() and f not in listed:
            listed.append(f)
    if not report and (path / "figures").is_dir():
        listed = sorted((path / "figures").glob("*.png"))
    return listed


def md_sections(report: str) -> dict[str, str]:
    """report.md split by '## ' headings: {'': text before the first, 'Verdict': ..., ...}."""
    out: dict[str, str] = {}
    name, buf = "", []
    for line in report.splitlines():
        if line.startswith("## "):
            out[name] = "\n".join(buf).strip()
            name, buf = line[3:].strip(), []
        elif line.startswith("# ") and name == "" and not buf:
            continue
        else:
            buf.append(line)
    out[name] = "\n".join(buf).strip()
    return out


def paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a Markdown fragment (tables, code blocks, images and HTML left out), each on one line."""
    out, buf, fenced = [], [], False
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not s:
            if buf:
                out.append(" ".join(buf))
            buf = []
        elif s.startswith(("|", "![", "<", "#")):
            continue
        else:
            buf.append(s)
    return out
