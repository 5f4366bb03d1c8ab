"""What makes a file the same file, for every decision that trusts a stat instead of re-reading bytes.

Device, inode, size, mtime and ctime. mtime can be put back by anyone (`touch -r`, `os.utime`); ctime cannot:
any write, chmod, link, unlink or utime moves it. So a file whose identity is unchanged since its bytes were
hashed still holds those bytes, and a file whose identity moved must be hashed again before it is trusted
(a moved ctime alone may be a harmless link made elsewhere, which the re-hash tells).

Used by the cache's views and markers (resolver/views.py), the shared tiers' check records
(resolver/tiers.py) and the folder store's ETag (resolver/stores/local.py). Standard library only (the
warm path imports it).
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class FileIdentity:
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @classmethod
    def of_path(cls, path: str | os.PathLike[str]) -> FileIdentity:
        return cls.of(os.stat(path))

    def as_list(self) -> list[int]:
        return list(astuple(self))

    @classmethod
    def from_list(cls, value: Any) -> FileIdentity | None:
        """The identity recorded as `as_list` gave it; None for anything else (an older record's shorter list)."""
        if not isinstance(value, (list, tuple)) or len(value) != len(fields(cls)):
            return None
        try:
            return cls(*(int(v) for v in value))
        except (TypeError, ValueError):
            return None

    def etag(self) -> str:
        """An ETag-like token that changes whenever the file is rewritten, replaced or has its mtime put back."""
        return f"{self.mtime_ns:x}-{self.size:x}-{self.ino:x}-{self.ctime_ns:x}"


def dir_identity(st: os.stat_result) -> list[int]:
    """What a view's marker records of one of its folders: a file added, removed or renamed in it moves its
    mtime and its ctime; putting the mtime back moves the ctime again."""
    return [st.st_mtime_ns, st.st_ctime_ns]
