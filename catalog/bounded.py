"""Inputs from outside, bounded before they are read: files on disk and JSON text. Standard library only.

Files: `open_regular` is how the catalog opens every file it reads that it did not write itself (manifests,
catalog.yaml, tensor tables, signatures, trusted keys, an HF cache's files, the JSON records of the cache and
the stores). The open is non-blocking, so a FIFO cannot hold it; the opened descriptor must be a regular file
(no FIFO, device, socket or folder) whose size is within the caller's bound, checked before a byte is read;
with `root`, the path (its symlinks resolved) must lie inside that folder, so a committed link to /dev/zero or
to a secret elsewhere is refused unread. `read_file` reads one whole, and never more than its bound even if
the file grows while it is read.

JSON: `loads` bounds the text's size and turns nesting deeper than the parser follows (`RecursionError`, at
about a thousand levels, hit by `[[[[...` in a few KB) into a `BadJsonError`, a ValueError like any other
malformed JSON, so every caller that refuses bad JSON refuses this too.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from catalog.errors import CatalogError

KiB, MiB = 1 << 10, 1 << 20
MAX_KEY = MiB  # a PEM key or certificate chain
MAX_RECORD = 256 * MiB  # a JSON record or listing: a marker, a plan, a sync state of 100,000 files is some tens of MB
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class UnsafeFileError(CatalogError, OSError):
    """A file refused before its content was read: not a regular file, larger than its bound, or leading outside
    the folder it belongs to. `reason` says which, without the path (the caller names the file its own way)."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason
        self.strerror = reason  # read by callers that report any OSError by its strerror


class BadJsonError(CatalogError, ValueError):
    """JSON text beyond a bound (size, nesting); the message says which."""


def human(size: int) -> str:
    return f"{size // MiB} MiB" if size >= MiB and size % MiB == 0 else f"{size:,} bytes"


def kind_of(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO", ...); None for a regular file."""
    return None if stat.S_ISREG(mode) else next((what for test, what in _KINDS if test(mode)), "not a regular file")


def outside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str | None:
    """Where `path` really leads when that is outside `root` (both with their symlinks resolved), else None."""
    real = os.path.realpath(path)
    top = os.path.realpath(root)
    return None if real == top or real.startswith(top.rstrip(os.sep) + os.sep) else real


def open_regular(
    path: str | os.PathLike[str], limit: int, *, root: str | os.PathLike[str] | None = None
) -> tuple[io.FileIO, int]:
    """(the file opened for reading, its size): only a regular file of at most `limit` bytes, inside `root` when given;
    UnsafeFileError otherwise (OSError as ever for a file that is missing or unreadable)."""
    if root is not None and (real := outside(path, root)) is not None:
        raise UnsafeFileError(path, f"leads outside {root} (to {real}); refused unread")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        what = kind_of(st.st_mode)
        if what is not None:
            raise UnsafeFileError(path, f"is {what}, not a regular file; refused unread")
        if st.st_size > limit:
            raise UnsafeFileError(
                path, f"is {st.st_size:,} bytes, more than the {human(limit)} such a file may hold; refused unread"
            )
        return io.FileIO(fd, "r"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike[str], limit: int, *, root: str | os.PathLike[str] | None = None) -> bytes:
    """The whole content of a regular file of at most `limit` bytes (see `open_regular`)."""
    f, size = open_regular(path, limit, root=root)
    data = bytearray()
    with f:  # what fstat said, then on to the end (a file that grew meanwhile), never past limit + 1 bytes
        while chunk := f.read(min(max(size + 1 - len(data), 64 * KiB), limit + 1 - len(data))):
            data += chunk
            if len(data) > limit:
                raise UnsafeFileError(path, f"grew past {human(limit)} while it was read; refused")
    return bytes(data)


def read_text(path: Path, limit: int, *, root: Path | None = None) -> str:
    """`read_file` decoded as UTF-8 (UnicodeDecodeError as ever)."""
    return read_file(path, limit, root=root).decode("utf-8")


def loads(
    data: str | bytes,
    *,
    limit: int = MAX_RECORD,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """json.loads within `limit` characters (bytes) and the parser's nesting; BadJsonError beyond either, ValueError
    (json.JSONDecodeError, UnicodeDecodeError) for text that is not JSON."""
    if len(data) > limit:
        raise BadJsonError(f"{len(data):,} bytes of JSON, more than the {human(limit)} read")
    try:
        return json.loads(data, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise BadJsonError(
            "JSON nested deeper than the parser follows (about a thousand levels); no real file is"
        ) from None
