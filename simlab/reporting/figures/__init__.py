"""Figures, one module per command: a small data tuple built from the record, then the drawing, its caption
beside it, saved through simlab.plots.style.save."""
