"""simlab's version, in a module of its own: what records and fingerprints stamp, importable without the API."""

__version__ = "0.1.0"
