"""sha256 of files, in large reads (hashlib releases the GIL, so threads hash in parallel)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from catalog.bounded import open_regular

CHUNK = 256 * 1024  # fits the CPU cache between read and hash


ANY_SIZE = 1 << 62


def hash_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a regular file's bytes (a FIFO or a device is refused unread: catalog/bounded.py)."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open_regular(path, ANY_SIZE)[0] as f:
        while count := f.readinto(view):
            digest.update(view[:count])
            size += count
    return size, digest.hexdigest()


def copy_hashing(source: Path, fd: int) -> tuple[int, str]:
    """Copy `source` into the open file `fd` (closed here), hashing every byte written: (size, sha256 hex).
    What is sent afterwards is exactly what was hashed, whatever happens to `source` meanwhile."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with os.fdopen(fd, "wb") as out, open_regular(source, ANY_SIZE)[0] as src:
        while count := src.readinto(view):
            digest.update(view[:count])
            out.write(view[:count])
            size += count
    return size, digest.hexdigest()


def hash_range(path: Path, offset: int, length: int) -> str:
    """sha256 hex of `length` bytes of the file from `offset` (a multipart upload's part), read in CHUNKs."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(CHUNK))
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while length > 0 and (count := f.readinto(view[: min(CHUNK, length)])):
            digest.update(view[:count])
            length -= count
    return digest.hexdigest()
