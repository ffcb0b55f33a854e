"""Figures from simlab's output directories: `simlab.plots.ab.ab_figures` for `simlab ab`; the shared look is in
`simlab.plots.style`. Everything renders off-screen (no display, no pyplot)."""
