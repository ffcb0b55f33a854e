"""One look for every simlab figure: large type and thick lines that survive a projector, one colour per policy
in every figure, and byte-identical files on a rerun (no timestamps, fixed SVG ids).

Figures are built on `matplotlib.figure.Figure`, never through pyplot: `savefig` renders PNG with Agg and SVG
with the SVG backend directly, so no display is needed, and the caller's backend is left alone (calling
`matplotlib.use("Agg")` here would break inline plots in a notebook that imports simlab)."""

from __future__ import annotations

import contextlib
import math
import io
from pathlib import Path

import matplotlib
from matplotlib import colors as mcolors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simlab.store import atomic_write_bytes

DPI = 150
WIDE = (13.0, 7.3)  # 16:9, 1950 x 1095 px at DPI

# Okabe-Ito, the colour-blind safe palette; yellow left out (invisible on a projector).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#8C564B"]
POLICY_COLORS = {
    "unscheduled": "#D55E00",  # vermillion: the baseline with no scheduler
    "fifo": "#E69F00",
    "priority": "#0072B2",
    "static": "#CC79A7",  # not orange: orange and vermillion blur together on a projector
    "adaptive": "#009E73",
    "holdback": "#56B4E9",  # the gateway gates (issue 23): the palette's sky blue, a brown, an olive
    "aimd": "#8C564B",
    "gradient2": "#999933",  # olive (Paul Tol): black would hide the black cap line
}
POLICY_MARKERS = {"unscheduled": "X", "fifo": "P", "priority": "s", "static": "D", "adaptive": "o",
                  "holdback": "^", "aimd": "v", "gradient2": "*"}
MARKERS = ["o", "s", "D", "^", "v", "P", "X", "*"]
INK = "#222222"  # reference lines (SLO, caps): near-black
REF_GREY = "#555555"
# The policy families of `decide` (simlab/decision/families.py) on its frontier figure: the policies' own colours;
# markers apart from the choice's star (gradient2's policy marker), the static "D" and the others' "o"
FAMILY_COLORS = {"static": POLICY_COLORS["static"], "adaptive": POLICY_COLORS["adaptive"],
                 "holdback": POLICY_COLORS["holdback"], "aimd": POLICY_COLORS["aimd"],
                 "gradient2": POLICY_COLORS["gradient2"], "engine-priority": "#332288",  # indigo (Paul Tol)
                 "baseline": REF_GREY}
FAMILY_MARKERS = {"static": "D", "adaptive": "o", "holdback": "^", "aimd": "v", "gradient2": "p",
                  "engine-priority": "h", "baseline": "o"}

RC = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: same glyphs on every machine
    "font.size": 17,
    "axes.titlesize": 19,
    "axes.titleweight": "bold",
    "axes.labelsize": 18,
    "xtick.labelsize": 16,
    "ytick.labelsize": 16,
    "legend.fontsize": 16,
    "legend.title_fontsize": 16,
    "legend.framealpha": 0.92,
    "legend.edgecolor": "#999999",
    "figure.titlesize": 22,
    "figure.titleweight": "bold",
    "figure.labelsize": 18,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.facecolor": "white",
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "axes.edgecolor": "#333333",
    "axes.linewidth": 1.4,
    "axes.grid": True,
    "grid.color": "#CCCCCC",
    "grid.linewidth": 1.0,
    "grid.alpha": 1.0,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 3.2,
    "lines.markersize": 11,
    "xtick.major.width": 1.4,
    "ytick.major.width": 1.4,
    "xtick.major.size": 6,
    "ytick.major.size": 6,
    "errorbar.capsize": 7,
    "svg.fonttype": "path",  # the SVG looks exactly like the PNG, whatever fonts the viewer has
    "svg.hashsalt": "simlab",  # fixed ids: reruns give identical files
    "svg.id": "simlab-figure",
    "path.simplify": True,
    "agg.path.chunksize": 20000,
}
# Neither format gets a creation date; the PNG keeps only matplotlib's "Software" tag (a constant).
METADATA = {"svg": {"Date": None}, "png": {"Date": None}}


@contextlib.contextmanager
def context():
    """The simlab style, for the figures made inside the block only."""
    with matplotlib.rc_context(RC):
        yield


def policy_colors(policies) -> dict[str, str]:
    """A colour per policy, fixed for the known policies, then the palette in order for the others."""
    used = {POLICY_COLORS[p] for p in policies if p in POLICY_COLORS}
    spare = [c for c in PALETTE if c not in used]
    out = {}
    for p in policies:
        out[p] = POLICY_COLORS.get(p) or (spare.pop(0) if spare else PALETTE[len(out) % len(PALETTE)])
    return out


def policy_markers(policies) -> dict[str, str]:
    used = {POLICY_MARKERS[p] for p in policies if p in POLICY_MARKERS}
    spare = [m for m in MARKERS if m not in used]
    return {p: POLICY_MARKERS.get(p) or (spare.pop(0) if spare else "o") for p in policies}


def tint(color: str, amount: float = 0.55) -> tuple[float, float, float]:
    """`color` mixed with `amount` of white: the light shade of a policy colour."""
    r, g, b = mcolors.to_rgb(color)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def plain_log_ticks(axis) -> None:
    """Ticks written as plain numbers (10, 20, 50, 100), not 10^1: at 1, 2, 5 x 10^k over up to three decades,
    at powers of ten only beyond that (so labels never run into each other). Call after setting the limits."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 99
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 3.2 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def title(fig: Figure, text: str) -> None:
    """The figure's title, wrapped to the figure's width so a long scenario name is never cut off."""
    import textwrap

    from matplotlib.font_manager import FontProperties

    size = FontProperties(size=matplotlib.rcParams["figure.titlesize"]).get_size_in_points()
    width = int(fig.get_figwidth() * 72 / (size * 0.62))  # bold DejaVu Sans: ~0.62 em per character
    fig.suptitle("\n".join(textwrap.wrap(text, width=max(width, 20))))


def new_figure(size=WIDE, **kwargs) -> Figure:
    """A figure on an Agg canvas (text can be measured before saving), with constrained layout."""
    fig = Figure(figsize=size, layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, directory: Path, name: str) -> list[Path]:
    """`name`.png and `name`.svg in `directory`, each written atomically."""
    paths = []
    for fmt in ("png", "svg"):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=METADATA[fmt])
        path = Path(directory) / f"{name}.{fmt}"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths


def log_ticks(axis, lo: float, hi: float, max_ticks: int = 9) -> None:
    """Plain-number ticks on a log axis inside [lo, hi]: the densest of 1-1.5-2-3-...-8, 1-2-5, 1-3, 1 x 10^k,
    then every other power of ten, with at most `max_ticks` (at least 3 when there is room)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    def grid(mantissas, every=1):
        return [m * 10**k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                if k % every == 0 for m in mantissas if lo <= m * 10**k <= hi]

    options = [grid((1, 1.5, 2, 3, 4, 5, 6, 7, 8)), grid((1, 2, 5)), grid((1, 3)), grid((1,)), grid((1,), 2)]
    ticks = next((t for t in options if len(t) <= max_ticks and len(t) >= 3), None)
    if ticks is None:
        ticks = next((t for t in options if len(t) <= max_ticks), options[-1])
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())
