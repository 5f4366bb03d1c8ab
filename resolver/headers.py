"""Reading safetensors headers: at most two ranged reads per file, from any store or a local file.

The first read takes the first `PROBE` bytes: the 8-byte length and, for nearly every file, the whole header
(a shard of a large model names a few hundred tensors in some tens of KiB). Only a header longer than that
costs a second read, of exactly the rest. Bytes are checked by the pure parser
(`catalog.safetensors_header`); a file that is not valid safetensors is a `HeaderError` naming model, file
and what is wrong. Stores are the bucket, a mirror, or the Hub (`resolver.hub.HubStore`, ranged GETs on
`/resolve/`): each read's `total` must be the pinned size, so a header is never taken from other bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from catalog.bounded import open_regular
from catalog.errors import IntegrityError, MissingObjectError, StoreUnavailableError
from catalog.safetensors_header import PREFIX, Header, HeaderError, header_length, parse
from resolver import waits
from resolver.hashing import ANY_SIZE
from resolver.hub import RetryLater
from resolver.stores import ObjectNotFound, Store

_T = TypeVar("_T")

PROBE = 128 * 1024
NOT_SAFETENSORS = "the file is not valid safetensors: fix it at the source, or leave it out with source.exclude"


def read_store_header(
    store: Store,
    key: str,
    *,
    model: str,
    path: str,
    size: int,
    attempts: int = 4,
    sleep: Callable[[float], None] = time.sleep,
) -> Header:
    """The header of the `size`-byte object `key`: one ranged GET, a second only for a header past `PROBE`."""
    first = read_range(
        store, key, 0, min(PROBE, size), model=model, path=path, size=size, attempts=attempts, sleep=sleep
    )
    length = _checked(model, path, lambda: header_length(first, size))
    raw = first
    if len(first) < PREFIX + length:
        raw += read_range(
            store, key, len(first), PREFIX + length, model=model, path=path, size=size, attempts=attempts, sleep=sleep
        )
    return _checked(model, path, lambda: parse(raw, size))


def read_file_header(file: Path, *, model: str, path: str, size: int) -> Header:
    """The header of a local file (a folder being locked, a verified cache blob)."""
    with open_regular(file, ANY_SIZE)[0] as f:  # a FIFO or a device is refused unread
        first = f.read(PREFIX)
        length = _checked(model, path, lambda: header_length(first, size))
        raw = first + f.read(length)
    return _checked(model, path, lambda: parse(raw, size))


def _checked(model: str, path: str, parse_it: Callable[[], _T]) -> _T:
    try:
        return parse_it()
    except HeaderError as exc:
        raise HeaderError(f"{model}/{path}: {exc.message}", hint=NOT_SAFETENSORS) from None


def read_range(
    store: Store,
    key: str,
    start: int,
    end: int,
    *,
    model: str,
    path: str,
    size: int,
    attempts: int = 4,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """Bytes [start, end) of `key`, with retries of what is transient (a 429 waits what the server asked)."""
    for attempt in range(1, attempts + 1):
        try:
            stream = store.open(key, start, end)
            try:
                if stream.total != size:
                    raise IntegrityError(
                        model,
                        path,
                        "size",
                        str(size),
                        str(stream.total),
                        f"{store.url} holds other bytes under {key}; no header was read",
                    )
                buffer = bytearray(end - start)
                view = memoryview(buffer)
                got = 0
                while got < len(buffer) and (count := stream.readinto(view[got:])):
                    got += count
            finally:
                stream.close()
        except ObjectNotFound:
            raise MissingObjectError(model, path, store.url) from None
        except (RetryLater, OSError, StoreUnavailableError) as exc:
            if attempt >= attempts or (isinstance(exc, StoreUnavailableError) and not exc.transient):
                if isinstance(exc, StoreUnavailableError):
                    raise
                raise StoreUnavailableError(
                    f"{model}: cannot read the header of {path} from {store.url}: {exc}"
                ) from None
            sleep(waits.retry_pause(exc, attempt, waits.DEFAULT_MAX_WAIT, f"{store.url} ({model}/{path})"))
            continue
        if got != len(buffer):
            if attempt >= attempts:
                raise StoreUnavailableError(f"{model}: {store.url} sent {got} of bytes {start}-{end - 1} of {path}")
            continue
        return bytes(buffer)
    raise AssertionError("unreachable")
