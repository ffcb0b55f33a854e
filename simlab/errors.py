"""One error type for every bad input, so the CLI can print it and exit 2."""

from __future__ import annotations

import difflib
import io
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


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


# --- reading users' files: regular files only, never more than a stated size (docs/limits.md) ---------------
MiB = 1 << 20
CONFIG_MAX_BYTES = 16 * MiB  # scenario and options files, tune-bounds.json, calibration snippets, step profiles,
#                              load-test tables
DATA_MAX_BYTES = 1024 * MiB  # traces, request logs, empirical columns, resampled arrivals, request records
RECORD_MAX_BYTES = 256 * MiB  # a result.json that `simlab report` reads

_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device (such as /dev/zero)"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def size_text(n: int) -> str:
    """A byte count as people say it: 512 bytes, 3.5 KiB, 16 MiB, 1 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def _a(what: str) -> str:
    return what if what.endswith("s") else ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _too_large(path, what: str, size: str, max_bytes: int, exact: int | None = None) -> InputError:
    limit = size_text(max_bytes)
    if size == limit and exact is not None:  # just above the limit: say by how much
        size, limit = f"{exact:,} bytes", f"{limit} ({max_bytes:,} bytes)"
    return InputError(path, None, f"too large ({size}): the limit for {_a(what)} is {limit}")


def _refuse(path, what: str, st: os.stat_result, max_bytes: int | None) -> None:
    for test, kind in _NOT_REGULAR:
        if test(st.st_mode):
            raise InputError(path, None, f"cannot read {what}: it is {kind}, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, None, f"cannot read {what}: not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise _too_large(path, what, size_text(st.st_size), max_bytes, st.st_size)


def _oserror(path, what: str, exc: OSError) -> InputError:
    if isinstance(exc, FileNotFoundError):
        return InputError(path, None, f"{what} not found")
    if isinstance(exc, IsADirectoryError):
        return InputError(path, None, f"cannot read {what}: it is a folder, not a regular file")
    return InputError(path, None, f"cannot read {what} ({exc.strerror or exc})")


def check_file(path: str | Path, what: str, max_bytes: int | None = None) -> os.stat_result:
    """The file's stat when it is a regular file of at most `max_bytes`; else an InputError naming it (a FIFO,
    a device, a folder or a socket is refused without being opened, so nothing blocks)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise _oserror(path, what, exc if isinstance(exc, OSError) else OSError(str(exc))) from None
    _refuse(path, what, st, max_bytes)
    return st


def _open_fd(path, what: str, max_bytes: int) -> int:
    """A read-only descriptor on a regular file of at most `max_bytes`. Checked before opening (nothing but a
    regular file is opened) and again on the open descriptor (the name may have been swapped in between);
    O_NONBLOCK so that even then a FIFO cannot make the open wait for a writer."""
    check_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _oserror(path, what, exc) from None
    try:
        _refuse(path, what, os.fstat(fd), max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Bounded(io.RawIOBase):
    """A file read through a limit: reading past `max_bytes` is an InputError (a file that grows while read, or
    one whose size the system does not know)."""

    def __init__(self, fd: int, path, what: str, max_bytes: int):
        self._file = io.FileIO(fd, "rb", closefd=True)
        self._path, self._what, self._max, self._seen = path, what, max_bytes, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._file.readinto(buffer)
        if n:
            self._seen += n
            if self._seen > self._max:
                raise _too_large(self._path, self._what, f"more than {size_text(self._max)}", self._max)
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


@contextmanager
def open_bytes(path: str | Path, what: str, max_bytes: int = DATA_MAX_BYTES) -> Iterator[BinaryIO]:
    """A user's file opened for streaming (e.g. to pandas), through the same checks and limit as `read_text`."""
    with io.BufferedReader(_Bounded(_open_fd(path, what, max_bytes), path, what, max_bytes), 1 << 16) as handle:
        yield handle


def read_bytes(path: str | Path, what: str, max_bytes: int = DATA_MAX_BYTES) -> bytes:
    """A user's file's bytes: a regular file of at most `max_bytes`, else an InputError naming it."""
    fd = _open_fd(path, what, max_bytes)
    with _Bounded(fd, path, what, max_bytes) as raw:
        try:
            size = os.fstat(fd).st_size
            data = raw.read(size + 1) if size else b""  # one read of the size it has (no buffer of max_bytes)
            return data + (raw.readall() or b"")  # more only if it grew, or its size was not known (/proc)
        except OSError as exc:
            raise _oserror(path, what, exc) from None


def read_text(path: Path, what: str, expected: str, max_bytes: int = DATA_MAX_BYTES) -> str:
    """A user's file as text (UTF-8, a BOM allowed). Every failure is an InputError naming the file: not a regular
    file, larger than `max_bytes` (CONFIG_MAX_BYTES for settings, DATA_MAX_BYTES for traces and logs), and for a
    bad byte its line: the whole file is decoded at once, since a text handle decodes ahead in chunks."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            path, f"line {line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); expected {expected} saved as UTF-8"
        ) from None
