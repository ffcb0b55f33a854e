"""One module per command: its record -> document blocks (rendered by simlab.reporting.markdown, html, ...)."""
