"""Figures, one module per command: each figure's data is built once from records (and run files), then drawn;
its caption stands beside it (`CAPTIONS`), and every file is written through `style.save` (PNG and SVG, atomic,
byte-identical on a rerun). Everything renders off-screen: no pyplot, no `matplotlib.use`."""

from __future__ import annotations

import importlib
from pathlib import Path

# The modules whose CAPTIONS name figures (imported when a caption is asked for: matplotlib is not light).
MODULES = ("ab", "decision", "tune", "knee", "fit", "gpu", "gateway")


def caption(path: Path) -> str:
    """The caption of a figure file, by its stem; a figure per class ('arrivals-batch') takes its family's."""
    stem = Path(path).stem
    for name in MODULES:
        module = f"simlab.reporting.figures.{name}"
        try:
            captions = getattr(importlib.import_module(module), "CAPTIONS", {})
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        if stem in captions:
            return captions[stem]
        family, _, kind = stem.partition("-")
        if kind and family in captions:
            return captions[family].format(kind=kind[:1].upper() + kind[1:])
    return stem.replace("_", " ").replace("-", " ")
