"""One module per figure: a small data tuple built from records, then the drawing, its caption beside it."""
