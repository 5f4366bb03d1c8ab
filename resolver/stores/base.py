"""The store interface: where pinned objects live, and what every store must say about itself.

Keys are relative to the store's root and always checked with `naming.check_relative_path`, so a
listing cannot make us read or write outside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from catalog import naming
from catalog.errors import CatalogError, UnsafePathError


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root
    size: int
    etag: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class ObjectStream(Protocol):
    """An open GET: `total` is the whole object's size (not the range's). A stream may also have an `etag`: the
    ETag of the object this very GET read (None where the store gives none), so what sync records as verified
    is the ETag of the bytes it hashed, never one read by another request."""

    total: int

    def readinto(self, buffer: memoryview) -> int: ...

    def close(self) -> None: ...


class Store(Protocol):
    url: str  # what messages show; never carries credentials
    requests: Counter[str]  # requests made, by operation (botocore's names for S3)

    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream: ...

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        """Store `source` under `key` so that it appears whole or not at all; `sha256` (hex) lets the
        server check the bytes where it can."""
        ...

    def delete(self, key: str) -> None: ...

    def stream_uri(self, prefix: str) -> str:
        """What an engine is handed to stream `prefix` from this store (an s3:// URI, a local folder)."""
        ...

    def stream_env(self) -> dict[str, str]:
        """What a streaming engine (runai, tensorizer) needs to reach this store exactly as we do: endpoint,
        addressing, region, unsigned. Never credentials: the engine finds those in the standard chain."""
        ...


class ObjectNotFound(LookupError):
    """Internal: the key is not in the store (the caller names the model and file)."""


class RangesIgnored(Exception):
    """Internal: the store answered a ranged GET with the whole object; the transfer fetches the file in one GET."""


def check_key(key: str) -> str:
    if (message := naming.check_relative_path(key)) is not None:
        raise UnsafePathError(f"refusing store key {key!r}: {message}")
    return key


def delete_many(store: Store, keys: Sequence[str]) -> dict[str, CatalogError]:
    """Delete `keys`: in batches where the store offers `delete_many` (S3's DeleteObjects, 1,000 keys a
    request), else one `delete` each. Returns the keys that were not deleted, with why; the rest are gone."""
    batched = getattr(store, "delete_many", None)
    if callable(batched):
        return dict(batched(keys))
    failed: dict[str, CatalogError] = {}
    for key in keys:
        try:
            store.delete(key)
        except CatalogError as exc:  # e.g. a key no file system could hold: report it, delete the rest
            failed[key] = exc
    return failed
