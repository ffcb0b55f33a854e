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


def read_text(path: Path, what: str, expected: str) -> str:
    """A user's file as text (UTF-8, a BOM allowed). Every failure is an InputError naming the file, and for a
    bad byte its line: the whole file is decoded at once, since a text handle decodes ahead in chunks."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, None, f"{what} not found") from None
    except IsADirectoryError:
        raise InputError(path, None, f"cannot read {what}: it is a folder") from None
    except OSError as exc:
        raise InputError(path, None, f"cannot read {what} ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            path, f"line {line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); expected {expected} saved as UTF-8"
        ) from None
