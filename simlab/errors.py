"""One error type for every bad input, so the CLI can print it and exit 2."""

from __future__ import annotations

import difflib
from pathlib import Path


class InputError(Exception):
    """Bad user input: names the file, the place in it, what was found and what was expected."""

    def __init__(self, source: str | Path | None, where: str | None, message: str):
        self.source = str(source) if source is not None else None
        self.where = where
        self.message = message
        super().__init__(str(self))

    def __reduce__(self):
        # Picklable with its three fields, so an error raised in a worker process (--workers N) reaches the CLI.
        return (type(self), (self.source, self.where, self.message))

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.where) if p]
        return ": ".join(parts + [self.message])


def did_you_mean(word: str, choices) -> str:
    """' (did you mean X?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
