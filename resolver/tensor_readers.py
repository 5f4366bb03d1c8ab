"""Readers of pinned tensor spans, one per kind of place a weights file can be: a local file (the cache, a shared
tier, a folder store), an object store an engine streams from (runai-model-streamer's C++ reader, the fastest
transport for s3://), and any other store (ranged GETs through the store interface: an HTTP or OCI mirror).

A reader only moves bytes: `stream` yields each requested tensor's bytes as they arrive (in any order), `read`
fetches one span again. It never judges them; resolver/verified_load.py hashes what it yields against the pins.
A reader that cannot go on (a missing or truncated object, a stalled server) raises ReadFailed, naming where it
read; the caller takes the rest from the next source.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from catalog.errors import CatalogError
from catalog.load_plan import PinnedTensor
from resolver import waits
from resolver.stores import ObjectNotFound, Store, StreamTarget

if TYPE_CHECKING:
    import torch


class ReadFailed(CatalogError, OSError):
    """A source could not deliver (the rest): missing, shorter than pinned, stalled, refused."""


class Reader(Protocol):
    @property
    def where(self) -> str:
        """For messages and the load record: a path, or a URI and its endpoint."""

    def stream(self, tensors: Sequence[PinnedTensor]) -> Iterator[tuple[PinnedTensor, bytearray | torch.Tensor]]:
        """Each tensor's bytes as they arrive, in any order (runai's view is valid until the next one is asked)."""


class RangeReader(Reader, Protocol):
    def read(self, tensor: PinnedTensor) -> bytearray:
        """One tensor's bytes again (after another source's were refused)."""


@dataclass(frozen=True)
class Source:
    """One place a weights file can be read from: its fast reader, and a reader of single spans."""

    stream: Reader
    ranges: RangeReader

    @property
    def where(self) -> str:
        return self.stream.where


@dataclass
class LocalReader:
    """A local file: spans read in file order with positioned reads (no mmap: a file truncated under us is a short
    read and a clear error, never a SIGBUS)."""

    path: Path
    label: str = ""  # what holds it, when the path does not say: "cache", "tier"

    @property
    def where(self) -> str:
        return f"{self.label} {self.path}" if self.label else str(self.path)

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise ReadFailed(f"cannot open {self.where}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ReadFailed(f"{self.where} is not a regular file")
        return fd

    def stream(self, tensors: Sequence[PinnedTensor]) -> Iterator[tuple[PinnedTensor, bytearray]]:
        fd = self._open()
        try:
            for tensor in sorted(tensors, key=lambda t: t.start):
                yield tensor, self._pread(fd, tensor)
        finally:
            os.close(fd)

    def read(self, tensor: PinnedTensor) -> bytearray:
        fd = self._open()
        try:
            return self._pread(fd, tensor)
        finally:
            os.close(fd)

    def _pread(self, fd: int, tensor: PinnedTensor) -> bytearray:
        buffer = bytearray(tensor.nbytes)
        view = memoryview(buffer)
        got = 0
        while got < len(buffer):
            count = os.preadv(fd, [view[got:]], tensor.start + got)
            if count == 0:
                raise ReadFailed(
                    f"{self.where} ends at byte {tensor.start + got}, inside tensor {tensor.name} "
                    f"(bytes {tensor.start}-{tensor.end - 1}): shorter than pinned"
                )
            got += count
        return buffer


@dataclass
class StoreReader:
    """Ranged GETs through the store interface (a mirror the engine cannot stream from, or one span fetched again),
    with the store's own retries of what is transient, each wait capped."""

    store: Store
    key: str
    size: int  # the pinned size: an object of another size holds other bytes
    max_wait: float = waits.DEFAULT_MAX_WAIT
    attempts: int = 3

    @property
    def where(self) -> str:
        return f"{self.store.url}{self.key}" if self.store.url.endswith("/") else f"{self.store.url}/{self.key}"

    def stream(self, tensors: Sequence[PinnedTensor]) -> Iterator[tuple[PinnedTensor, bytearray]]:
        for tensor in sorted(tensors, key=lambda t: t.start):
            yield tensor, self.read(tensor)

    def read(self, tensor: PinnedTensor) -> bytearray:
        for attempt in range(1, self.attempts + 1):
            try:
                return self._get(tensor)
            except ObjectNotFound:
                raise ReadFailed(f"{self.where} is missing") from None
            except ReadFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - the store decides what is transient
                if attempt >= self.attempts or not self.store.transient(exc):
                    raise ReadFailed(f"cannot read tensor {tensor.name} from {self.where}: {exc}") from None
                time.sleep(waits.retry_pause(exc, attempt, self.max_wait, self.where))
        raise AssertionError("unreachable")

    def _get(self, tensor: PinnedTensor) -> bytearray:
        buffer = bytearray(tensor.nbytes)
        if not buffer:
            return buffer
        stream = self.store.open(self.key, tensor.start, tensor.end)
        try:
            if stream.total != self.size:
                raise ReadFailed(f"{self.where} has {stream.total} bytes, not the pinned {self.size}: other bytes")
            view = memoryview(buffer)
            got = 0
            while got < len(buffer) and (count := stream.readinto(view[got:])):
                got += count
        finally:
            stream.close()
        if got != len(buffer):
            raise ReadFailed(f"{self.where} sent {got} of the {len(buffer)} bytes of tensor {tensor.name}")
        return buffer


@dataclass
class StreamerReader:
    """runai-model-streamer's reader: its C++ workers fetch the spans in parallel straight into a bounded ring of
    buffers (`window` bytes, or the largest tensor if that is larger), from an object store or a local file. The
    tensor it yields is a view of a ring slot that is reused once the caller asks for the next one.

    A stalled or trickling connection fails under the transfer's minimum rate (RUNAI_STREAMER_S3_LOW_SPEED_LIMIT
    bytes/s over RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS, unless the user set them), so a wait is capped and said."""

    uri: str
    target: StreamTarget
    window: int
    min_rate: int = 32 * 1024
    rate_window: float = 30.0

    @property
    def where(self) -> str:
        return f"{self.uri} at {self.target.where}"

    def environment(self) -> tuple[dict[str, str], dict[str, str]]:
        """(what must be set, what is set only where the user set nothing): the store's target, the rate floor."""
        defaults = {
            "RUNAI_STREAMER_S3_LOW_SPEED_LIMIT": str(self.min_rate),
            "RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS": str(int(self.rate_window * 1000)),
            "RUNAI_STREAMER_S3_MAX_RETRIES": "2",
        }
        return dict(self.target.env), defaults

    def stream(self, tensors: Sequence[PinnedTensor]) -> Iterator[tuple[PinnedTensor, bytearray | torch.Tensor]]:
        from runai_model_streamer.file_streamer.file_streamer import FileStreamer
        from runai_model_streamer.file_streamer.requests_iterator import FileChunks

        from resolver.loaders.common import quiet_defaults, scoped_environ

        wanted = [t for t in sorted(tensors, key=lambda t: t.start) if t.nbytes]
        empty = [t for t in tensors if not t.nbytes]
        for tensor in empty:
            yield tensor, bytearray()
        if not wanted:
            return
        values, defaults = self.environment()
        window = max(self.window, max(t.nbytes for t in wanted))
        with scoped_environ(values, {**quiet_defaults(), **defaults}):
            try:
                with FileStreamer() as streamer:
                    streamer.stream_files(
                        [FileChunks(0, self.uri, [t.start for t in wanted], [t.nbytes for t in wanted])],
                        device="cpu",
                        memory_limit=window,
                    )
                    for _, index, chunk in streamer.get_chunks():
                        yield wanted[index], chunk
            except ReadFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - runai's errors are terse: say which URI and endpoint
                from resolver.loaders.common import _terse

                raise ReadFailed(f"cannot stream {self.where}: {_terse(exc)}") from None
