"""Downloads that verify while they stream, in parallel ranged parts, resuming after dropped connections.

First a pure choice (`TransferConfig.for_sizes`): with no part size or concurrency given, both follow the
file sizes (few large files: large parts, about concurrency/2 streams of bulk; many small files: many
files in parallel, one GET each). A file that fits in one part is one GET, hashed from the read buffer
as it streams, in order by nature. A larger file is cut into parts that pwrite at their offsets into a
temp file owned by this process, and the file's own task hashes behind the contiguous write frontier,
reading the bytes back from the temp file (the page cache): nothing is buffered out of order, so memory
stays near one read buffer per thread whatever the part size. A dropped connection re-requests the
part from the last byte received. A file is published into the cache (renamed to its sha256) only when
its size and sha256 match the manifest. Small files take no lock (a duplicate download of a small file
costs less than the lock) and reuse their thread's read buffer and the store's connection pool.

Every wait is bounded. A server's Retry-After is waited out only up to `max_wait` and said on stderr
(resolver/waits.py); a longer one ends that source at once. A part that delivers less than `min_rate` bytes
a second over `rate_window` seconds (a mirror trickling a byte every two seconds never trips a read timeout)
is abandoned and retried like a dropped connection, said on stderr, so a trickle costs at most `attempts`
windows before the next source. A store that answers a ranged GET with the whole object has each file
fetched in one GET (never every part re-reading from byte 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from catalog.errors import CacheWriteError, CatalogError, IntegrityError, MissingObjectError, StoreUnavailableError
from catalog.schema import FileEntry
from catalog.settings import Settings
from resolver import waits
from resolver.cache import Cache, write_hint
from resolver.stores import ObjectNotFound, ObjectStream, Store
from resolver.stores.base import RangesIgnored, ViewStream

log = logging.getLogger(__name__)

MiB = 1024 * 1024
GiB = 1024 * MiB
DEFAULT_PART_SIZE = 64 * MiB  # when a caller asks for fixed values without naming them (and for sync's uploads)
DEFAULT_CONCURRENCY = 8
SMALL_FILE = 16 * MiB  # below this a file takes no download lock and counts as small for the auto choice
SMALL_FILES_CONCURRENCY = 16  # only small files: GETs are mostly round trips, so more of them in flight
MIN_AUTO_PART = 64 * MiB  # never below the old fixed default: more GETs of one object buy nothing on a fast link
MAX_AUTO_PART = 1 * GiB


class Progress(Protocol):
    """Where transfers report; the application layer draws it (a bar on a terminal, lines in CI logs)."""

    def __call__(self, label: str, count: int) -> None:
        """`count` more bytes of `label` (model/path) arrived."""

    def file_done(self, label: str, size: int) -> None:
        """`label` is verified and in the cache."""


@dataclass(frozen=True)
class TransferConfig:
    """How bytes move. `part_size`/`concurrency` are used as given unless their `auto_*` flag is set;
    then `for_sizes` chooses them from the files of one fetch (`from_settings` sets the flags when the
    user gave no value)."""

    part_size: int = DEFAULT_PART_SIZE
    concurrency: int = DEFAULT_CONCURRENCY
    attempts: int = 5  # per part, on transient errors
    backoff: float = 0.25  # seconds, doubled each attempt, with jitter
    read_size: int = (
        256 * 1024
    )  # per read call: fits the CPU cache between recv, hash and pwrite (4 MiB cost 2x the sys time)
    auto_part_size: bool = False
    auto_concurrency: bool = False
    lock_threshold: int = SMALL_FILE  # files at least this large take the per-blob download lock
    lock_wait: float = 60.0  # seconds to wait on another process's download of a blob before fetching it here
    max_wait: float = 60.0  # longest Retry-After waited out (CATALOG_HUB_MAX_WAIT); a longer one ends the source
    min_rate: int = 32 * 1024  # bytes/s a part must average over rate_window, else it is abandoned (a trickle)
    rate_window: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings) -> TransferConfig:
        return cls(
            part_size=settings.part_size or DEFAULT_PART_SIZE,
            concurrency=settings.concurrency or DEFAULT_CONCURRENCY,
            auto_part_size=settings.part_size is None,
            auto_concurrency=settings.concurrency is None,
            max_wait=float(settings.hub_max_wait),
        )

    def for_sizes(self, sizes: Sequence[int]) -> TransferConfig:
        """Pure: this config with its auto values chosen for files of `sizes` (fixed values kept)."""
        concurrency = choose_concurrency(sizes) if self.auto_concurrency else self.concurrency
        part_size = choose_part_size(sizes, concurrency) if self.auto_part_size else self.part_size
        return dataclasses.replace(
            self, part_size=part_size, concurrency=max(1, concurrency), auto_part_size=False, auto_concurrency=False
        )

    def needs_lock(self, size: int) -> bool:
        """Pure: whether a file of `size` takes the per-blob lock. The lock only avoids duplicate work, and
        for a small file the lock file costs more than the duplicate download it could avoid."""
        return size >= self.lock_threshold

    def part_bounds(self, size: int) -> list[tuple[int, int]]:
        """Pure: the [start, end) byte ranges of a file of `size`; one range (one GET) when it fits a part."""
        return [(start, min(start + self.part_size, size)) for start in range(0, size, self.part_size)] or [(0, 0)]


def choose_concurrency(sizes: Sequence[int]) -> int:
    """Only small files: up to SMALL_FILES_CONCURRENCY GETs in flight (each is mostly a round trip);
    any large file: DEFAULT_CONCURRENCY streams, enough to fill a link without thrashing a few cores."""
    if sizes and all(size < SMALL_FILE for size in sizes):
        return max(1, min(SMALL_FILES_CONCURRENCY, len(sizes)))
    return DEFAULT_CONCURRENCY


def choose_part_size(sizes: Sequence[int], concurrency: int) -> int:
    """About concurrency/2 streams of bulk: part = 2 x total / concurrency, in whole MiB, clamped to
    [64 MiB, 1 GiB]. A model of a few large shards gets one GET per shard (4 x 256 MiB at 8: 257 MiB
    parts), hashed as it streams; a single huge file is cut so that its parts still run in parallel."""
    total = sum(sizes)
    target = -(-2 * total // max(1, concurrency))
    target = -(-target // MiB) * MiB
    return max(MIN_AUTO_PART, min(MAX_AUTO_PART, target))


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


class _Stopped(Exception):
    """The fetch was interrupted (Ctrl-C): queued work is cancelled, running work stops between reads."""


class _TooSlow(_Transient):
    """A part delivered less than the minimum rate over a whole window: abandoned, retried from where it was."""


class _Rate:
    """The minimum-rate guard of one GET: `add` each read; raises _TooSlow once a whole window went by with less
    than `min_rate` bytes a second (a part never waits longer than one window on a trickle)."""

    def __init__(self, config: TransferConfig, label: str, source: str) -> None:
        self.floor = config.min_rate * config.rate_window
        self.window = config.rate_window
        self.label = label
        self.source = source
        self.began = time.monotonic()
        self.count = 0

    def add(self, count: int) -> None:
        self.count += count
        elapsed = time.monotonic() - self.began
        if elapsed < self.window:
            return
        if self.count < self.floor:
            log.warning(
                "%s: %s delivered %d bytes in %.0fs, below %d bytes/s; abandoning this request",
                self.label,
                self.source,
                self.count,
                elapsed,
                int(self.floor / self.window),
            )
            raise _TooSlow(f"{self.source} delivered {self.count} bytes of {self.label} in {elapsed:.0f}s")
        self.began, self.count = time.monotonic(), 0


LOCK_NOTICE_SECONDS = 5.0  # waiting this long on another process's download is said once


class _ThreadBuffer(threading.local):
    """One read buffer per thread, reused by every part and file it handles (grown on demand, never
    zeroed again): a small file costs no fresh 4 MiB allocation."""

    view: memoryview | None = None


_buffers = _ThreadBuffer()


def _buffer(size: int) -> memoryview:
    view = _buffers.view
    if view is None or len(view) < size:
        view = _buffers.view = memoryview(bytearray(max(size, 64 * 1024)))
    return view


class _FileJob:
    """One file in flight: the temp file, the hasher, and the parts' state.

    One part: the part's reader hashes each read as it arrives (in order by nature). Several parts: the
    file's task calls `follow`, which hashes behind the contiguous frontier of written bytes, reading
    them back from the temp file."""

    def __init__(
        self, wanted: Wanted, cache: Cache, parts: list[tuple[int, int]], stop: threading.Event | None = None
    ) -> None:
        self.wanted = wanted
        self.stop = stop if stop is not None else threading.Event()
        self.cache_root = cache.root
        self.size = wanted.entry.size
        self.parts = parts
        self.inline = len(self.parts) == 1
        try:
            self.fd, self.temp = cache.new_temp()
        except OSError as exc:
            raise _cache_error(wanted, cache.root, exc) from None
        self.published = False
        self.hasher = hashlib.sha256()
        self.hashed = 0  # bytes hashed so far (always a prefix of the file)
        self.filled = [0] * len(self.parts)  # bytes written contiguously from each part's start
        self.done = [False] * len(self.parts)
        self.head = 0  # the first unfinished part
        self.received = 0
        self.changed = threading.Condition()
        self.error: BaseException | None = None

    def deliver(self, index: int, offset: int, data: memoryview) -> None:
        try:
            _pwrite_all(self.fd, data, offset)
        except OSError as exc:
            raise _cache_error(self.wanted, self.cache_root, exc) from None
        if self.inline:
            self.hasher.update(data)  # the only part: its bytes arrive in order
            self.hashed += len(data)
            self.received += len(data)
            return
        with self.changed:
            self.received += len(data)
            self.filled[index] = offset + len(data) - self.parts[index][0]
            if index == self.head:
                self.changed.notify_all()

    def part_finished(self, index: int) -> None:
        with self.changed:
            self.done[index] = True
            while self.head < len(self.parts) and self.done[self.head]:
                self.head += 1
            self.changed.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self.changed:
            if self.error is None:
                self.error = exc
            self.changed.notify_all()

    def _frontier(self) -> int:
        if self.head >= len(self.parts):
            return self.size
        return self.parts[self.head][0] + self.filled[self.head]

    def follow(self, read_size: int) -> None:
        """Hash every byte in order as soon as it is written, reading it back from the temp file; returns
        when the whole file is hashed or a part failed for good."""
        while True:
            with self.changed:
                while self.error is None and self.hashed >= (frontier := self._frontier()) and self.hashed < self.size:
                    if self.stop.is_set():
                        raise _Stopped(self.wanted.label)
                    self.changed.wait(0.5)
                if self.error is not None or self.hashed >= self.size:
                    return
            view = _buffer(min(read_size, frontier - self.hashed))
            while self.hashed < frontier:
                count = _pread_into(self.fd, view[: min(len(view), frontier - self.hashed)], self.hashed)
                if count <= 0:
                    raise CacheWriteError(
                        f"the partial download of {self.wanted.label} in the cache at {self.cache_root} "
                        f"is shorter than what was written to it; it was deleted",
                        hint="something else truncated files in the cache's tmp folder",
                    )
                self.hasher.update(view[:count])
                self.hashed += count

    def discard(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if not self.published:
            self.temp.unlink(missing_ok=True)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    # A write that crosses a file-size limit (ulimit -f) or fills the disk may write part of the buffer and
    # return a short count; only the next write raises (EFBIG, ENOSPC). Ignoring the count would leave a
    # hole that the hash catches later as "something else truncated the file", with the wrong hint.
    while data:
        written = os.pwrite(fd, data, offset)
        data = data[written:]
        offset += written


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


def fetch(
    store: Store,
    wanted: Sequence[Wanted],
    cache: Cache,
    config: TransferConfig = TransferConfig(),
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> set[str]:
    """Bring every wanted file into the cache, verified. Raises the first error after all have ended;
    files that verified are kept (they are correct whatever happened to the others). Returns the sha256s this
    call downloaded (not those already there, or brought meanwhile by another process it waited for)."""
    unique: dict[str, Wanted] = {}
    for item in wanted:
        if item.entry.sha256 in unique or cache.has_blob(item.entry):
            continue
        if not unique:
            _prepare(store)  # the client (boto3's import) is built while the rest is set up
        unique[item.entry.sha256] = item
    if not unique:
        return set()
    config = config.for_sizes([item.entry.size for item in unique.values()])
    errors: list[BaseException] = []
    stop = threading.Event()
    workers = max(1, config.concurrency)
    # GETs run on one pool of `concurrency` threads. A file cut into parts has a task of its own on a
    # second pool that queues its parts and hashes behind them; it waits only on GETs, GETs wait on nothing.
    with (
        ThreadPoolExecutor(workers, thread_name_prefix="catalog-get") as gets,
        ThreadPoolExecutor(workers, thread_name_prefix="catalog-file") as files,
    ):
        futures: list[Future[bool]] = []
        try:
            for item in unique.values():
                if len(config.part_bounds(item.entry.size)) == 1 or not store.ranged:
                    futures.append(gets.submit(_fetch_whole, store, item, cache, config, progress, sleep, stop))
                else:
                    futures.append(files.submit(_fetch_parts, store, item, cache, config, progress, sleep, gets, stop))
            for future in futures:
                exc = future.exception()
                if exc is not None:
                    errors.append(exc)
        except BaseException:
            # Ctrl-C (or any abort): nothing queued starts, what runs stops at its next read and deletes its
            # temp file; the pools' exit then waits only for that.
            stop.set()
            files.shutdown(wait=False, cancel_futures=True)
            gets.shutdown(wait=False, cancel_futures=True)
            raise
    if errors:
        # Integrity problems first: they are the ones a user must act on.
        errors.sort(key=lambda e: 0 if isinstance(e, IntegrityError) else 1 if isinstance(e, CatalogError) else 2)
        raise errors[0]
    return {sha256 for sha256, future in zip(unique, futures, strict=True) if future.result()}


def _prepare(store: Store) -> None:
    """Let the store build its client in the background (an S3 store imports boto3: ~0.1-0.2 s)."""

    def run() -> None:
        try:
            store.prepare()
        except Exception:
            log.debug("preparing %s failed", store.url, exc_info=True)

    threading.Thread(target=run, name="catalog-prepare", daemon=True).start()


@contextlib.contextmanager
def _lock_if_large(
    cache: Cache, item: Wanted, config: TransferConfig, stop: threading.Event | None = None
) -> Iterator[bool]:
    """The per-blob lock for a large file (yields whether it is held); nothing at all for a small one.

    Waiting on another process's download is said once after a few seconds, and given up after
    `config.lock_wait` (a stopped or hung holder): then this process downloads the file itself. Correctness
    never depends on the lock; it only saves duplicate work."""
    if not config.needs_lock(item.entry.size):
        yield False
        return
    started = time.monotonic()
    said = False
    while True:
        waited = time.monotonic() - started
        step = max(0.05, min(1.0, config.lock_wait - waited))
        with cache.download_lock(item.entry.sha256, step) as held:
            took = time.monotonic() - started - waited
            waited += took
            if held or (stop is not None and stop.is_set()) or waited >= config.lock_wait or took < step / 2:
                if not held and waited >= config.lock_wait:
                    log.warning(
                        "gave up waiting after %.0fs for another process's download of %s; downloading it here",
                        waited,
                        item.label,
                    )
                yield held  # took < step / 2 without the lock: the lock cannot be used here at all
                return
        if not said and waited >= min(LOCK_NOTICE_SECONDS, config.lock_wait / 2):
            said = True
            log.warning(
                "waiting for another process's download of %s (its lock in %s); giving up after %.0fs",
                item.label,
                cache.locks,
                config.lock_wait,
            )


def _fetch_whole(
    store: Store,
    item: Wanted,
    cache: Cache,
    config: TransferConfig,
    progress: Progress | None,
    sleep: Callable[[float], None],
    stop: threading.Event | None = None,
) -> bool:
    """A file that is one GET: streamed, hashed as it arrives, verified, published. False: another process brought
    it while this one waited."""
    if not config.needs_lock(item.entry.size):
        _whole_job(store, item, cache, config, progress, sleep, stop)  # too small for the lock: nobody to wait for
    else:
        with _lock_if_large(cache, item, config, stop):
            if cache.has_blob(item.entry):
                return False  # another process brought it while we waited
            _whole_job(store, item, cache, config, progress, sleep, stop)
    if progress is not None:
        progress.file_done(item.label, item.entry.size)
    return True


def _whole_job(
    store: Store,
    item: Wanted,
    cache: Cache,
    config: TransferConfig,
    progress: Progress | None,
    sleep: Callable[[float], None],
    stop: threading.Event | None,
) -> None:
    """The file in one GET (one part whatever its size), verified, published."""
    job = _FileJob(item, cache, [(0, item.entry.size)], stop)
    try:
        _fetch_part(store, job, 0, config, progress, sleep)
        _verify_and_publish(job, cache, config)
    finally:
        job.discard()


def _fetch_parts(
    store: Store,
    item: Wanted,
    cache: Cache,
    config: TransferConfig,
    progress: Progress | None,
    sleep: Callable[[float], None],
    gets: ThreadPoolExecutor,
    stop: threading.Event | None = None,
) -> bool:
    """A file in parts: lock (best effort), re-check, queue every part, hash behind them, verify, publish. False:
    another process brought it while this one waited."""
    with _lock_if_large(cache, item, config, stop) as locked:
        if cache.has_blob(item.entry) and (locked or config.needs_lock(item.entry.size)):
            return False
        job = _FileJob(item, cache, config.part_bounds(item.entry.size), stop)
        try:
            parts = [gets.submit(_fetch_part, store, job, i, config, progress, sleep) for i in range(len(job.parts))]
            first_error: BaseException | None = None
            try:
                job.follow(config.read_size)
            except BaseException as exc:  # noqa: BLE001 - re-raised below after the parts end
                first_error = exc
                job.fail(exc)
            for future in parts:
                first_error = first_error or future.exception()
            if isinstance(first_error, RangesIgnored):
                job.discard()
                log.warning("%s ignores Range requests; fetching %s in one GET", store.url, item.label)
                _whole_job(store, item, cache, config, progress, sleep, stop)
            elif first_error is not None:
                raise first_error
            else:
                _verify_and_publish(job, cache, config)
        finally:
            job.discard()
    if progress is not None:
        progress.file_done(item.label, item.entry.size)
    return True


def _fetch_part(
    store: Store,
    job: _FileJob,
    index: int,
    config: TransferConfig,
    progress: Progress | None,
    sleep: Callable[[float], None],
) -> None:
    start, end = job.parts[index]
    whole = len(job.parts) == 1
    expected = job.wanted.entry.size
    position = start + job.filled[index]
    view = _buffer(min(config.read_size, max(1, end - start)))
    attempt = 0
    progressed = False
    try:
        while True:
            if job.error is not None:
                return  # another part already failed for good; stop spending bandwidth
            if job.stop.is_set():
                raise _Stopped(job.wanted.label)
            try:
                stream = _open(store, job.wanted, position, None if whole else end)
                direct = stream.read_view if isinstance(stream, ViewStream) else None
                rate = _Rate(config, job.wanted.label, store.url)
                try:
                    if stream.total != expected:
                        raise IntegrityError(
                            job.wanted.model,
                            job.wanted.entry.path,
                            "size",
                            str(expected),
                            str(stream.total),
                            "the object in the store has another size: it is truncated or replaced, or the manifest is stale",
                        )
                    while position < end:
                        if job.stop.is_set():
                            raise _Stopped(job.wanted.label)
                        if direct is not None:  # written and hashed from the stream's own buffer
                            got = direct(min(config.read_size, end - position))
                        else:
                            got = view[: stream.readinto(view[: min(len(view), end - position)])]
                        count = len(got)
                        if count == 0:
                            raise _Transient(f"connection closed at byte {position} of {job.wanted.label}")
                        job.deliver(index, position, got)
                        position += count
                        if progress is not None:
                            progress(job.wanted.label, count)
                        rate.add(count)
                        progressed = True
                finally:
                    stream.close()
                job.part_finished(index)
                return
            except (IntegrityError, MissingObjectError, CacheWriteError, _Stopped, RangesIgnored):
                raise
            except Exception as exc:  # noqa: BLE001 - classified just below
                # Progress made buys a fresh budget of attempts; a trickle's progress does not (it is the failure).
                attempt = 0 if progressed and not isinstance(exc, _TooSlow) else attempt
                progressed = False
                sleep(_retry_delay(store, job.wanted, exc, attempt, config, position))
                attempt += 1
    except BaseException as exc:
        job.fail(exc)  # the file's other parts stop, and its hasher stops waiting
        raise


def _retry_delay(
    store: Store, wanted: Wanted, exc: Exception, attempt: int, config: TransferConfig, position: int
) -> float:
    """Seconds before the next attempt after `exc` (attempt `attempt`, counting from 0), or raise: a failure that
    is final, the last attempt spent, or a server hint beyond `config.max_wait` (said, and final for this source)."""
    transient = _is_transient(store, exc)
    if not transient or attempt + 1 >= config.attempts:
        if isinstance(exc, CatalogError) and not transient:
            raise exc
        raise StoreUnavailableError(
            f"giving up on {wanted.label} from {store.url} after {attempt + 1} attempts: {_describe(exc)}",
            hint=store.unreachable_hint,
        ) from None
    asked = waits.hinted_delay(getattr(exc, "retry_after", None), config.max_wait, f"{store.url} ({wanted.label})")
    delay = asked if asked is not None else config.backoff * (2**attempt) * (0.5 + random.random())
    log.info("retrying %s from byte %d in %.2fs (%s)", wanted.label, position, delay, _describe(exc))
    return delay


def fetch_digest(
    store: Store, item: Wanted, config: TransferConfig, sleep: Callable[[float], None] = time.sleep
) -> str:
    """Stream one (small) object and return its sha256, writing nothing; resumes and retries like `fetch`."""
    return fetch_digest_etag(store, item, config, sleep)[0]


def fetch_digest_etag(
    store: Store, item: Wanted, config: TransferConfig, sleep: Callable[[float], None] = time.sleep
) -> tuple[str, str | None]:
    """The sha256 of one object's bytes and the ETag of the GET that read them (None where the store gives none),
    writing nothing. A resume whose GET reads another ETag (the object was replaced meanwhile) starts over from
    byte 0: the digest is always of one object, the one the ETag names."""
    digest = hashlib.sha256()
    position = 0
    attempt = 0
    progressed = False
    etag: str | None = None
    buffer = _buffer(min(config.read_size, max(1, item.entry.size)))
    while True:
        try:
            stream = _open(store, item, position, None)
            try:
                got = stream.etag
                if position and got != etag:
                    log.warning(
                        "%s changed in %s while it was read (ETag %s -> %s); reading it again from the start",
                        item.label,
                        store.url,
                        etag,
                        got,
                    )
                    digest, position = hashlib.sha256(), 0
                    raise _Transient(f"{item.label} was replaced while it was read")
                etag = got
                rate = _Rate(config, item.label, store.url)
                direct = stream.read_view if isinstance(stream, ViewStream) else None
                while chunk := (direct(config.read_size) if direct is not None else buffer[: stream.readinto(buffer)]):
                    count = len(chunk)
                    digest.update(chunk)
                    position += count
                    rate.add(count)
                    progressed = True
            finally:
                stream.close()
            if position != item.entry.size:
                raise IntegrityError(
                    item.model,
                    item.entry.path,
                    "size",
                    str(item.entry.size),
                    str(position),
                    "the source's listing and its bytes disagree",
                )
            return digest.hexdigest(), etag
        except Exception as exc:
            if isinstance(exc, (IntegrityError, MissingObjectError)):
                raise
            attempt = 0 if progressed and not isinstance(exc, _TooSlow) else attempt
            progressed = False
            sleep(_retry_delay(store, item, exc, attempt, config, position))
            attempt += 1


def _cache_error(item: Wanted, root: Path, exc: OSError) -> CacheWriteError:
    return CacheWriteError(
        f"cannot write {item.label} into the cache at {root}: {exc.strerror or exc}; the partial download was deleted",
        hint=write_hint(exc.errno),
    )


def _open(store: Store, item: Wanted, start: int, end: int | None) -> ObjectStream:
    try:
        return store.open(item.key, start, end)
    except ObjectNotFound:
        raise MissingObjectError(item.model, item.entry.path, store.url) from None


def _is_transient(store: Store, exc: BaseException) -> bool:
    """The transfer's own retryable failures (a dropped connection, a trickle), else what the store says of its own."""
    return isinstance(exc, _Transient) or store.transient(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc).split("\n")[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _verify_and_publish(job: _FileJob, cache: Cache, config: TransferConfig) -> Path:
    entry = job.wanted.entry
    if job.received != entry.size or job.hashed != entry.size:
        raise IntegrityError(
            job.wanted.model,
            entry.path,
            "size",
            str(entry.size),
            str(job.received),
            "the store sent a different number of bytes",
        )
    got = job.hasher.hexdigest()
    if got != entry.sha256:
        raise IntegrityError(
            job.wanted.model,
            entry.path,
            "sha256",
            entry.sha256,
            got,
            "the object in the store is corrupt or the manifest is stale",
        )
    # The fd (and its flock: gc keeps off) stays open until named. A file too small for the download lock is too small
    # for its stamp record to pay before the view links it (and records it): see Cache.publish_blob.
    path = cache.publish_blob(job.temp, entry.sha256, persist_stamp=config.needs_lock(entry.size))
    job.published = True
    os.close(job.fd)
    job.fd = -1
    return path
