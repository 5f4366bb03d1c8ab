"""Stat-only checks of a view against its marker, on the marker's JSON as it is stored.

A view's marker records, per file, [size, mtime_ns, inode, sha256, ctime_ns] and, per folder, [mtime_ns, ctime_ns]
(resolver/views.py owns the format). The cache (`Cache.marker_holds`) and the warm resolve (catalog_app/warm.py)
both ask "does this view still hold?" here, so the answer is one function; the warm resolve runs before anything
heavier than `os` and `json` is imported, which is why this module works on lists and strings, not on the
dataclasses of views.py.
"""

from __future__ import annotations

import json
import os
import time

from catalog import front_door

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

MARKER_VERSION = 4  # 3: ctime_ns per file, folder mtimes, the catalog that made the view; 4: folder mtime and ctime
RESOLVED_AT_EVERY = 3600.0  # a marker's resolved_at is refreshed at most this often (one small write)
STAGING_MARK = "~catalog"  # reserved: a pinned path segment never contains it (see staging_name)
BLOB_STAMPS = front_door.BLOB_STAMPS.name  # <cache>/blob-stamps/<aa>/<sha256>: [size, mtime_ns, inode, ctime_ns]
_HEX = frozenset("0123456789abcdef")


def staging_name(name: str) -> str:
    """A temporary sibling name for `name` (`.<name>~catalog.<pid>-<token>`): hidden, unique, telling gc its
    writer, and marked: a segment ending in `~catalog.<digits>-<hex>` is one validation is to refuse as a
    pinned path, so a pinned file can never look like the cache's own staging file. gc also never removes a
    pinned file of a view, whatever its name."""
    return f".{name}{STAGING_MARK}.{os.getpid()}-{os.urandom(4).hex()}"


def replace_atomically(path: str, data: bytes) -> None:
    """Write `data` to `path` (whose folder exists) so a reader sees the old content or the new, never a part."""
    folder, name = os.path.split(path)
    temp = os.path.join(folder, staging_name(name))
    try:
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def stamp_holds(then: Sequence[Any], now: Sequence[Any], record: Sequence[Any] | None = None) -> bool:
    """Pure: a file stamped `then` when verified and `now` today ([size, mtime_ns, inode, sha256, ctime_ns]) is
    unchanged. Size, mtime and inode must agree; a ctime that moved is vouched for by the blob's own record
    (`record`: [size, mtime_ns, inode, ctime_ns], taken after the cache linked the inode again) when it matches
    `now` exactly."""
    if list(then[:4]) != list(now[:4]):
        return False
    if then[4] == now[4]:
        return True
    return record is not None and list(record) == [now[0], now[1], now[2], now[4]]


def blob_record(cache_root: str, sha256: str) -> list[int] | None:
    """The stamp the cache took of blob `sha256` when it last verified or linked it; None: none or unreadable."""
    if len(sha256) != 64 or not _HEX.issuperset(sha256):
        return None
    try:
        with open(os.path.join(cache_root, BLOB_STAMPS, sha256[:2], sha256), "rb") as f:
            size, mtime_ns, inode, ctime_ns = json.loads(f.read())
        return [int(size), int(mtime_ns), int(inode), int(ctime_ns)]
    except (OSError, ValueError, TypeError):
        return None


def view_holds(
    cache_root: str, view_path: str, files: Mapping[str, Sequence[Any]], dirs: Mapping[str, Sequence[int]]
) -> bool:
    """Every file of the view under `cache_root/view_path` is unchanged since it was verified, and no folder of it
    changed (a file dropped in would have changed one). Stats only; a moved ctime reads one small record."""
    base = os.path.join(cache_root, view_path)
    try:
        for rel, then in files.items():
            st = os.stat(os.path.join(base, rel))
            now = [st.st_size, st.st_mtime_ns, st.st_ino, then[3], st.st_ctime_ns]
            if list(then) != now and not stamp_holds(then, now, blob_record(cache_root, str(then[3]))):
                return False
        for rel, ident in dirs.items():
            st = os.stat(os.path.join(base, rel))
            if [st.st_mtime_ns, st.st_ctime_ns] != list(ident):
                return False
        return True
    except (OSError, TypeError, IndexError):
        return False


def note_used(marker_path: str, marker: dict[str, Any], every: float, now: float | None = None) -> None:
    """Set the stored marker's `resolved_at` to now, rewriting it only when its last use is older than `every`
    seconds (a warm resolve writes at most once an hour); a failure is harmless (a read-only cache, say)."""
    now = time.time() if now is None else now
    try:
        last_used = max(float(marker.get("resolved_at", 0.0)), float(marker.get("verified_at", 0.0)))
        if now - last_used < every:
            return
        replace_atomically(marker_path, json.dumps({**marker, "resolved_at": now}, sort_keys=True).encode())
    except (OSError, ValueError, TypeError):
        pass
