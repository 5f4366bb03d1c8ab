"""Downloads that verify while they stream, in parallel ranged parts, resuming after dropped connections.

Every pinned file is cut into parts of `part_size`; all parts of all files go through one FIFO thread
pool. Each part writes at its offset (pwrite) into a temp file owned by this process. Hashing must see
the bytes in order, so the part at the hash "head" is hashed as it streams and later parts buffer
only until the head reaches them (at most about `concurrency` parts in memory). A dropped connection
re-requests the part from the last byte received; bytes already hashed stay hashed. A file is
published into the cache (renamed to its sha256) only when its size and sha256 match the manifest.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol
from pathlib import Path

from catalog.errors import CacheWriteError, CatalogError, IntegrityError, MissingObjectError, StoreUnavailableError
from catalog.schema import FileEntry
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.stores import ObjectNotFound, ObjectStream, Store

log = logging.getLogger(__name__)

MiB = 1024 * 1024
class Progress(Protocol):
    """Where transfers report; the application layer draws it (a bar on a terminal, lines in CI logs)."""

    def __call__(self, label: str, count: int) -> None:
        """`count` more bytes of `label` (model/path) arrived."""

    def file_done(self, label: str, size: int) -> None:
        """`label` is verified and in the cache."""


@dataclass(frozen=True)
class TransferConfig:
    part_size: int = 64 * MiB
    concurrency: int = 8
    attempts: int = 5  # per part, on transient errors
    backoff: float = 0.25  # seconds, doubled each attempt, with jitter
    read_size: int = 4 * MiB  # per read call; larger reads cost fewer Python-level calls per GiB

    @classmethod
    def from_settings(cls, settings: Settings) -> TransferConfig:
        default = cls()
        return cls(part_size=settings.part_size or default.part_size, concurrency=settings.concurrency or default.concurrency)


@dataclass(frozen=True)
class Wanted:
    """One file to bring into the cache: which model (for messages), the pin, and its store key."""

    model: str
    entry: FileEntry
    key: str

    @property
    def label(self) -> str:
        return f"{self.model}/{self.entry.path}"


class _Transient(Exception):
    """A failure worth retrying from where the part stopped."""


class _FileJob:
    """One file in flight: the temp file, the in-order hasher, and the parts' state."""

    def __init__(self, wanted: Wanted, cache: Cache, config: TransferConfig) -> None:
        self.wanted = wanted
        self.cache_root = cache.root
        size = wanted.entry.size
        bounds = list(range(0, size, config.part_size)) or [0]
        self.parts = [(start, min(start + config.part_size, size)) for start in bounds]
        try:
            self.fd, self.temp = cache.new_temp()
        except OSError as exc:
            raise _cache_error(wanted, cache.root, exc) from None
        self.hasher = hashlib.sha256()
        self.head = 0
        self.buffers: list[list[bytes]] = [[] for _ in self.parts]
        self.done = [False] * len(self.parts)
        self.received = 0
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.remaining = len(self.parts)

    def deliver(self, index: int, offset: int, data: memoryview) -> None:
        try:
            os.pwrite(self.fd, data, offset)
        except OSError as exc:
            raise _cache_error(self.wanted, self.cache_root, exc) from None
        with self.lock:
            self.received += len(data)
            if index == self.head:
                self.hasher.update(data)
            else:
                self.buffers[index].append(bytes(data))

    def part_finished(self, index: int) -> bool:
        """Mark a part complete; returns True when it was the file's last one."""
        with self.lock:
            self.done[index] = True
            while self.head < len(self.parts) and self.done[self.head]:
                self.head += 1
                if self.head < len(self.parts):
                    for chunk in self.buffers[self.head]:
                        self.hasher.update(chunk)
                    self.buffers[self.head].clear()
            self.remaining -= 1
            return self.remaining == 0

    def discard(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.temp.unlink(missing_ok=True)


def fetch(
    store: Store,
    wanted: Sequence[Wanted],
    cache: Cache,
    config: TransferConfig = TransferConfig(),
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Bring every wanted file into the cache, verified. Raises the first error after all have ended;
    files that verified are kept (they are correct whatever happened to the others)."""
    unique: dict[str, Wanted] = {}
    for item in wanted:
        if not cache.has_blob(item.entry):
            unique.setdefault(item.entry.sha256, item)
    if not unique:
        return
    errors: list[BaseException] = []
    workers = max(1, config.concurrency)
    # Two pools so that a file task never waits on work queued behind itself: file tasks (which also
    # stream their first part) wait only on part tasks, and part tasks wait on nothing.
    with ThreadPoolExecutor(workers, thread_name_prefix="catalog-file") as files, \
            ThreadPoolExecutor(workers, thread_name_prefix="catalog-part") as parts:
        futures: list[Future[None]] = [
            files.submit(_fetch_one, store, item, cache, config, progress, sleep, parts) for item in unique.values()
        ]
        for future in futures:
            exc = future.exception()
            if exc is not None:
                errors.append(exc)
    if errors:
        # Integrity problems first: they are the ones a user must act on.
        errors.sort(key=lambda e: 0 if isinstance(e, IntegrityError) else 1 if isinstance(e, CatalogError) else 2)
        raise errors[0]


def _fetch_one(
    store: Store, item: Wanted, cache: Cache, config: TransferConfig, progress: Progress | None,
    sleep: Callable[[float], None], pool: ThreadPoolExecutor,
) -> None:
    """Lock (best effort), re-check, then download every part; the last part to finish verifies."""
    with cache.download_lock(item.entry.sha256):
        if cache.has_blob(item.entry):
            return  # another process brought it while we waited
        job = _FileJob(item, cache, config)
        try:
            # Parts after the first run on the pool; the first runs here, so a file always progresses.
            others = [pool.submit(_fetch_part, store, job, i, config, progress, sleep) for i in range(1, len(job.parts))]
            first_error: BaseException | None = None
            try:
                _fetch_part(store, job, 0, config, progress, sleep)
            except BaseException as exc:  # noqa: BLE001 - re-raised below after the other parts end
                first_error = exc
            for future in others:
                first_error = first_error or future.exception()
            if first_error is not None:
                raise first_error
            _verify_and_publish(job, cache)
            if progress is not None:
                progress.file_done(item.label, item.entry.size)
        finally:
            job.discard()


def _fetch_part(
    store: Store, job: _FileJob, index: int, config: TransferConfig, progress: Progress | None,
    sleep: Callable[[float], None],
) -> None:
    start, end = job.parts[index]
    whole = len(job.parts) == 1
    expected = job.wanted.entry.size
    position = start
    buffer = bytearray(config.read_size)
    view = memoryview(buffer)
    attempt = 0
    while True:
        if job.error is not None:
            return  # another part already failed for good; stop spending bandwidth
        try:
            stream = _open(store, job.wanted, position, None if whole and position == 0 else end)
            try:
                if stream.total != expected:
                    raise IntegrityError(job.wanted.model, job.wanted.entry.path, "size", str(expected), str(stream.total),
                                         "the object in the store has another size: it is truncated or replaced, or the manifest is stale")
                while position < end:
                    count = stream.readinto(view[: min(len(view), end - position)])
                    if count == 0:
                        raise _Transient(f"connection closed at byte {position} of {job.wanted.label}")
                    job.deliver(index, position, view[:count])
                    position += count
                    if progress is not None:
                        progress(job.wanted.label, count)
                    attempt = 0  # progress was made: the next failure gets a fresh budget
            finally:
                stream.close()
            job.part_finished(index)
            return
        except (IntegrityError, MissingObjectError, CacheWriteError) as exc:
            job.error = exc
            raise
        except Exception as exc:  # noqa: BLE001 - classified just below
            if not _is_transient(exc) or attempt + 1 >= config.attempts:
                job.error = exc
                if isinstance(exc, CatalogError) and not _is_transient(exc):
                    raise
                raise StoreUnavailableError(
                    f"giving up on {job.wanted.label} from {store.url} after {attempt + 1} attempts: {_describe(exc)}",
                    hint="the store is unreachable or failing; retry later or check --store / AWS_ENDPOINT_URL",
                ) from None
            attempt += 1
            asked = getattr(exc, "retry_after", None)  # the server said when (429/503 Retry-After)
            delay = float(asked) if asked is not None else config.backoff * (2 ** (attempt - 1)) * (0.5 + random.random())
            log.info("retrying %s from byte %d in %.2fs (%s)", job.wanted.label, position, delay, _describe(exc))
            sleep(delay)


def fetch_digest(store: Store, item: Wanted, config: TransferConfig, sleep: Callable[[float], None] = time.sleep) -> str:
    """Stream one (small) object and return its sha256, writing nothing; resumes and retries like `fetch`."""
    digest = hashlib.sha256()
    position = 0
    attempt = 0
    buffer = memoryview(bytearray(config.read_size))
    while True:
        try:
            stream = _open(store, item, position, None)
            try:
                while count := stream.readinto(buffer):
                    digest.update(buffer[:count])
                    position += count
            finally:
                stream.close()
            if position != item.entry.size:
                raise IntegrityError(item.model, item.entry.path, "size", str(item.entry.size), str(position),
                                     "the source's listing and its bytes disagree")
            return digest.hexdigest()
        except Exception as exc:  # noqa: BLE001 - classified just below
            if not _is_transient(exc) or attempt + 1 >= config.attempts:
                raise
            attempt += 1
            asked = getattr(exc, "retry_after", None)
            sleep(float(asked) if asked is not None else config.backoff * 2 ** (attempt - 1))


def _cache_error(item: Wanted, root: Path, exc: OSError) -> CacheWriteError:
    return CacheWriteError(
        f"cannot write {item.label} into the cache at {root}: {exc.strerror or exc}; the partial download was deleted",
        hint="free disk space or point --cache / CATALOG_CACHE at a larger disk",
    )


def _open(store: Store, item: Wanted, start: int, end: int | None) -> ObjectStream:
    try:
        return store.open(item.key, start, end)
    except ObjectNotFound:
        raise MissingObjectError(item.model, item.entry.path, store.url) from None


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, StoreUnavailableError):
        return exc.transient
    if isinstance(exc, (_Transient, ConnectionError, TimeoutError)) or hasattr(exc, "retry_after"):
        return True
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "urllib3", "http.client", "httpx", "httpcore"))


def _describe(exc: BaseException) -> str:
    text = str(exc).split("\n")[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _verify_and_publish(job: _FileJob, cache: Cache) -> Path:
    entry = job.wanted.entry
    got = job.hasher.hexdigest()
    if job.received != entry.size:
        raise IntegrityError(job.wanted.model, entry.path, "size", str(entry.size), str(job.received),
                             "the store sent a different number of bytes")
    if got != entry.sha256:
        raise IntegrityError(job.wanted.model, entry.path, "sha256", entry.sha256, got,
                             "the object in the store is corrupt or the manifest is stale")
    os.close(job.fd)
    job.fd = -1
    return cache.publish_blob(job.temp, entry.sha256)
