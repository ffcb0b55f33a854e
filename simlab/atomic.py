"""Transitional: atomic writes live in simlab.store."""

from simlab.store import atomic_open, atomic_write_bytes, atomic_write_text  # noqa: F401
