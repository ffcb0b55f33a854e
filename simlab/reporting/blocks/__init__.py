"""Document blocks, one module per command: record -> blocks (simlab/reporting/document.py)."""
