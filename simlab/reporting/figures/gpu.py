"""`simlab calibrate-gpu`'s figure: the fitted step-time model against every measurement."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simlab.calibration.gpu import MEASURE_LABELS
from simlab.records import GpuFitRecord
from simlab.reporting.figures import style

CAPTIONS = {
    'gpu-fit': 'The step-time fit against the load test: each measure (time per output token, time to first token, latency) by concurrency, measured (dots) and fitted (lines), per prompt length.',
}

def gpu_figure(fit: GpuFitRecord, directory: Path) -> list[str]:
    """gpu-fit.png (and .svg) from the record; its name relative to the output folder."""
    preds = fit.predictions
    kinds = [k for k in MEASURE_LABELS if any(p.measure == k for p in preds)]
    ncols = 2 if len(kinds) > 1 else 1
    nrows = math.ceil(len(kinds) / ncols)
    prompts = sorted({p.prompt_tokens for p in preds if p.prompt_tokens is not None})
    colors = {pt: style.PALETTE[i % len(style.PALETTE)] for i, pt in enumerate(prompts)}
    with style.context():
        fig = style.new_figure(size=(13.0, 7.3 if nrows == 1 else 10.5))
        axes = np.atleast_2d(fig.subplots(nrows, ncols, squeeze=False))
        for ax in axes.flat[len(kinds):]:
            ax.set_axis_off()
        for ax, kind in zip(axes.flat, kinds):
            sel = [p for p in preds if p.measure == kind]
            groups = sorted({p.prompt_tokens for p in sel}, key=lambda v: -1 if v is None else v)
            for g in groups:
                pts = sorted((p for p in sel if p.prompt_tokens == g), key=lambda p: p.batch_size)
                x = [p.batch_size for p in pts]
                color = colors.get(g, style.PALETTE[0])
                label = f"prompt {g:,.0f}" if g is not None else "measured"
                ax.plot(x, [p.measured for p in pts], "o", color=color, ms=10, label=f"{label}: measured")
                ax.plot(x, [p.fitted for p in pts], "-", color=color, lw=2.4, label=f"{label}: fitted")
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(__import__("matplotlib.ticker", fromlist=["FuncFormatter"]).FuncFormatter(
                lambda v, _: f"{v:g}"))
            ax.set_xlabel("concurrency (sequences in the batch)")
            ax.set_title(MEASURE_LABELS[kind], fontsize=17)
            ax.set_ylim(bottom=0)
            if fit.r2_of(kind) is not None:
                ax.text(0.98, 0.04, f"R\u00b2 = {fit.r2_of(kind):.4f}", transform=ax.transAxes, ha="right", fontsize=15)
        axes.flat[0].legend(loc="upper left", fontsize=13)
        p = fit.parameters
        style.title(fig, f"Step-time fit: base {p.base_ms:.3g} ms + {p.per_token_ms:.3g} ms/token + "
                         f"{p.per_seq_ms:.3g} ms/sequence"
                         + (f" + {p.admit_ms:.3g} ms/admission" if p.admit_ms else "")
                         + f", front end {p.request_ms:.3g} ms "
                         f"(mean error {fit.mean_rel_error:.1%})")
        style.save(fig, directory, "gpu-fit")
    return [f"{Path(directory).name}/gpu-fit.png"]
