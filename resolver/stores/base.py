"""The store interface: where pinned objects live, and what every store must say about itself.

Keys are relative to the store's root and always checked with `naming.check_relative_path`, so a
listing cannot make us read or write outside it.

`Store` is the whole contract that resolve, sync, the transfer and the loaders use: the six object calls a store
must implement, and the members whose defaults fit most stores (retry classification, the stream target, batched
deletes, a content-addressed listing, binding a catalog's models). A store overrides only what differs for it, so
code above never asks which kind of store it holds (no getattr, no scheme or exception-module checks).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from catalog import naming
from catalog.errors import CatalogError, StoreUnavailableError, UnsafePathError

if TYPE_CHECKING:
    from catalog.schema import ModelManifest


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root
    size: int
    etag: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class ObjectStream(Protocol):
    """An open GET: `total` is the whole object's size (not the range's); `etag` is the ETag of the object this very
    GET read (None where the store gives none), so what sync records as verified is the ETag of the bytes it hashed,
    never one read by another request."""

    total: int
    etag: str | None

    def readinto(self, buffer: memoryview) -> int: ...

    def close(self) -> None: ...


class ViewStream:
    """An open GET whose bytes arrive in buffers of its own (obstore's `bytes`): `read_view` hands over the next of
    them, at most `limit` bytes, without the copy into the caller's buffer that `readinto` makes (the transfer writes
    and hashes from the view itself: a cold 1 GiB resolve spent 7% of its samples in that copy and the one before
    it). The view is valid until the next call, empty at the end. A subclass implements `read_view`; `readinto`
    copies from it. A stream without buffers of its own implements `readinto` only (ObjectStream)."""

    total: int
    etag: str | None

    def read_view(self, limit: int) -> memoryview:
        raise NotImplementedError

    def readinto(self, buffer: memoryview) -> int:
        view = self.read_view(len(buffer))
        count = len(view)
        buffer[:count] = view
        return count

    def close(self) -> None:
        pass


class EmptyStream:
    """No bytes: a GET that asked past the end of a shorter object (the transfer then names the short file)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.etag: str | None = None

    def readinto(self, buffer: memoryview) -> int:
        return 0

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class StreamTarget:
    """How a streaming engine or loader (runai, tensorizer, vLLM) reaches a store's objects exactly as the resolver
    does. `scheme` None: local files, read directly. Never credentials: the engine finds those in the standard
    chain. `env` is what the engines of that scheme read from their environment (runai's C++ core and tensorizer's
    curl take no other way in for some of it); the store that made the target spells it."""

    scheme: str | None = None  # the URI scheme the engine is handed ("s3"); None: a local folder
    endpoint: str | None = None  # None: the scheme's default endpoint (AWS itself for s3)
    addressing: str | None = None  # "path" | "virtual"; None: the engine's default
    region: str | None = None
    unsigned: bool = False  # a public bucket: the engine must not sign either
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def remote(self) -> bool:
        return self.scheme is not None

    @property
    def where(self) -> str:
        """For messages."""
        if self.scheme is None:
            return "local files"
        return f"endpoint {self.endpoint}" if self.endpoint else f"the default {self.scheme}:// endpoint"


LOCAL = StreamTarget()


class ObjectNotFound(LookupError):
    """Internal: the key is not in the store (the caller names the model and file)."""


class RangesIgnored(Exception):
    """Internal: the store answered a ranged GET with the whole object; the transfer fetches the file in one GET."""


class Store(ABC):
    """A store. Creating one does no I/O; `prepare` may start the expensive part early."""

    url: str  # what messages show; never carries credentials
    requests: Counter[str]  # requests made, by operation (botocore's names for S3)
    # Engines can stream from it (False: an OCI registry, the Hub; resolve then makes streamed formats' weights local).
    engine_streamable: bool = True
    # Ranged GETs work (False once a server answered one with the whole object: one GET per file from then on).
    ranged: bool = True
    # Its listing names every object's sha256 (`listed_sha256`) and `publish_model` makes a model's objects one
    # record (an OCI artifact): sync keeps no state object there.
    content_addressed: bool = False
    # What to check when it gave no usable answer after every attempt: its URL by default; S3 adds the endpoint's
    # variable, the Hub names HF_ENDPOINT.
    unreachable_hint: str = (
        "the store is unreachable or failing; retry later or check its URL (--store, --mirror, catalog.yaml)"
    )

    # -- objects: every store implements these -----------------------------------------------------
    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream: ...

    @abstractmethod
    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        """Store `source` under `key` so that it appears whole or not at all, with `metadata` (which `head` gives
        back: sync checks the sha256 it put there); `sha256` (hex) lets the server check the bytes where it can."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def stream_uri(self, prefix: str) -> str:
        """What an engine is handed to stream `prefix` from this store (an s3:// URI, a local folder)."""

    # -- what most stores share: override where a store differs --------------------------------------
    def stream_target(self) -> StreamTarget:
        """What a streaming engine needs to reach this store: by default a folder it reads directly."""
        return LOCAL

    def transient(self, exc: BaseException) -> bool:
        """Whether `exc` (raised by this store's `open` or a stream's `readinto`) is worth a retry from where the read
        stopped. A store adds its client library's failures; the default knows the catalog's own errors, the
        standard library's network failures and anything carrying a server's `retry_after`."""
        if isinstance(exc, StoreUnavailableError):
            return exc.transient
        if isinstance(exc, CatalogError):
            return False
        # http.client only if loaded (only a loaded library can have raised): the warm sync never imports it.
        client = sys.modules.get("http.client")
        if (
            isinstance(exc, (ConnectionError, TimeoutError))
            or hasattr(exc, "retry_after")
            or (client is not None and isinstance(exc, client.HTTPException))
        ):
            return True
        return isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError))

    def prepare(self) -> None:
        """Do the expensive set-up now (building a client), e.g. in a background thread while the caller sets up.
        Nothing by default."""

    def bind_models(self, models: Mapping[str, ModelManifest]) -> None:
        """Learn where each of a catalog's models is (key prefix -> manifest). Only a store that addresses objects by
        model (an OCI registry) needs it; nothing by default."""

    def delete_many(self, keys: Sequence[str]) -> dict[str, CatalogError]:
        """Delete `keys`; returns the keys that were not deleted, with why (the rest are gone). One `delete` each by
        default; a store with a batch call (S3's DeleteObjects) overrides it."""
        failed: dict[str, CatalogError] = {}
        for key in keys:
            try:
                self.delete(key)
            except CatalogError as exc:  # e.g. a key no file system could hold: report it, delete the rest
                failed[key] = exc
        return failed

    def listed_sha256(self, listing: Sequence[ObjectInfo]) -> dict[str, str]:
        """The sha256 of listed objects, by key, where the listing itself names it (a content-addressed store):
        sync's plan compares those with the pins without reading a byte. None known by default."""
        return {}

    def warm_listings(self) -> tuple[dict[str, Any], Sequence[tuple[str, str]]] | None:
        """How another process may make this process's listings of the store again without the full CLI, and a digest
        of each (catalog_app/warm_sync.py answers a no-op sync with them); None, the default: it may not."""
        return None

    def publish_model(self, name: str) -> None:
        """A content-addressed store: make model `name`'s objects, put since, one visible record. Nothing by default
        (sync writes its own state object for the other stores)."""


def check_key(key: str) -> str:
    if (message := naming.check_relative_path(key)) is not None:
        raise UnsafePathError(f"refusing store key {key!r}: {message}")
    return key
