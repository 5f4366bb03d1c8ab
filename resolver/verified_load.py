"""A verified load: every tensor's bytes hashed against its pinned digest before anyone sees the tensor.

This is what the engine's loader (`--load-format catalog`, catalog_app/vllm_plugin.py) runs, inside the engine
process, so that trust no longer ends at the hand-off: a stream URI proves only that an object matched at one
moment, while here the bytes the model receives are the bytes that were hashed.

For each weights file the loader rank needs (catalog/load_plan.py: every pinned tensor, its span and digest), the
sources are tried in order: the verified cache, the shared tiers, the mirrors, the primary store (the places
`resolve` takes bytes from, by the same settings). The first source streams every tensor with its fastest reader
(resolver/tensor_readers.py: runai's C++ reader for s3://, positioned reads for local files, ranged GETs
otherwise). Each tensor's bytes are copied out of the reader's buffer, hashed (in a few threads: hashlib releases
the GIL, so a runner with idle cores hashes in parallel while the reader keeps streaming) and handed on only if
the digest is the pinned one. A tensor whose bytes are not is fetched again, that span alone, from the next
sources; if none has the pinned bytes the load fails naming model, file and tensor, and that tensor is never
delivered. A source that cannot go on (missing, truncated, stalled under the minimum rate) hands the tensors it
did not deliver to the next source. Memory stays bounded by `window` bytes of tensors in flight (plus the
reader's own ring of the same size), not by the files' sizes.

`LoadRecord` says what was delivered, from where, and what was refused: the engine's log line, the job's record
(CATALOG_LOAD_RECORD) and the tests count it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import stat
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.errors import CatalogError
from catalog.load_plan import FileLoad, PinnedTensor
from catalog.safetensors_header import TORCH_DTYPES
from catalog.schema import FileEntry, ModelManifest
from resolver.cache import Cache
from resolver.stores import Store
from resolver.tensor_readers import LocalReader, ReadFailed, Source, StoreReader, StreamerReader
from resolver.tiers import SharedTier

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_WINDOW = 128 * MiB  # tensors copied and being hashed at once (the streamer's ring is as large again)


class TensorRefused(CatalogError, ValueError):
    """A tensor whose bytes no source had as pinned: never delivered."""

    def __init__(self, model: str, tensor: PinnedTensor, got: str, where: str, tried: Sequence[str]) -> None:
        others = (
            f"; the other sources did not have them either ({'; '.join(tried)})"
            if tried
            else "; no other source was configured to fetch it from"
        )
        super().__init__(
            f"{model}/{tensor.file}: tensor {tensor.name} (bytes {tensor.start}-{tensor.end - 1}) has sha256 {got} in "
            f"{where}, pinned {tensor.sha256}; refused before the model saw it{others}",
            hint=f"the object changed under its pin: repair it (`catalog sync {model}` re-uploads the pinned bytes) and "
            "find out who wrote it",
        )
        self.model = model
        self.tensor = tensor
        self.got = got


class LoadIncomplete(CatalogError, OSError):
    """Tensors that no source could deliver (missing, truncated, stalled)."""


@dataclass
class FileRecord:
    path: str
    sha256: str
    tensors: int  # pinned
    delivered: int = 0
    bytes: int = 0
    by_source: dict[str, int] = field(default_factory=dict)  # where -> tensors delivered from it
    refused: list[dict[str, str]] = field(default_factory=list)  # {"tensor", "from", "got"}
    failures: list[str] = field(default_factory=list)  # sources that could not go on, and why
    hash_seconds: float = 0.0  # CPU seconds the hashing threads spent on this file's tensors

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "tensors": self.tensors,
            "delivered": self.delivered,
            "bytes": self.bytes,
            "by_source": dict(self.by_source),
            "refused": list(self.refused),
            "failures": list(self.failures),
            "hash_seconds": round(self.hash_seconds, 3),
        }


@dataclass
class LoadRecord:
    """What one verified load handed the engine."""

    model: str
    rank: int | None = None
    files: list[FileRecord] = field(default_factory=list)
    seconds: float = 0.0
    ok: bool = False
    error: str | None = None

    @property
    def delivered(self) -> int:
        return sum(f.delivered for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "rank": self.rank,
            "ok": self.ok,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "tensors": self.delivered,
            "bytes": self.bytes,
            "hash_seconds": round(sum(f.hash_seconds for f in self.files), 3),
            "files": [f.to_json() for f in self.files],
        }

    def summary(self) -> str:
        sources = sorted({s for f in self.files for s in f.by_source})
        refused = sum(len(f.refused) for f in self.files)
        return (
            f"{self.model}: {self.delivered} tensors ({self.bytes / MiB:.1f} MiB) verified against their pins and "
            f"delivered in {self.seconds:.2f} s (hashing: {sum(f.hash_seconds for f in self.files):.2f} CPU s) from "
            f"{', '.join(sources) or 'nowhere'}" + (f"; {refused} refused and fetched again" if refused else "")
        )

    def append_to(self, path: Path) -> None:
        """One JSON line per load (a job's record of what it loaded); best effort, never fails a load."""
        try:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(self.to_json(), sort_keys=True) + "\n")
        except OSError as exc:
            log.warning("cannot write the load record to %s: %s", path, exc.strerror or exc)


# -- where a file's bytes can come from -------------------------------------------------------------------
def sources_for(
    manifest: ModelManifest,
    entry: FileEntry,
    key: str,
    *,
    cache: Cache | None,
    tiers: Sequence[SharedTier],
    stores: Sequence[Store],
    window: int = DEFAULT_WINDOW,
    min_rate: int = 32 * 1024,
    rate_window: float = 30.0,
    max_wait: float = 60.0,
) -> list[Source]:
    """The places to read `entry` from, in order: the cache's verified blob, the shared tiers, then `stores` (the
    mirrors, then the primary store). Local copies are taken by size only: every tensor is hashed anyway."""
    out: list[Source] = []
    if cache is not None and cache.has_blob(entry):
        local = LocalReader(cache.blob_path(entry.sha256), "cache")
        out.append(Source(local, local))
    for tier in tiers:
        for path in tier.candidates(entry, manifest.source):
            if _regular_of_size(path, entry.size):
                local = LocalReader(path, "tier")
                out.append(Source(local, local))
                break
    for store in stores:
        ranged = StoreReader(store, key, entry.size, max_wait=max_wait)
        target = store.stream_target()
        if store.engine_streamable and target.scheme == "s3" and _streamer_installed():
            out.append(Source(StreamerReader(store.stream_uri(key), target, window, min_rate, rate_window), ranged))
        elif store.engine_streamable and target.scheme is None:
            local = LocalReader(Path(store.stream_uri(key).rstrip("/")))
            out.append(Source(local, local))
        else:
            out.append(Source(ranged, ranged))
    return out


def _regular_of_size(path: Path, size: int) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def _streamer_installed() -> bool:
    """runai's reader where the engine has it (vLLM's runai extra); else the store's own ranged GETs, same checks."""
    return importlib.util.find_spec("runai_model_streamer") is not None


# -- the load ---------------------------------------------------------------------------------------------
def verified_tensors(
    model: str,
    load: FileLoad,
    sources: Sequence[Source],
    record: FileRecord,
    *,
    window: int = DEFAULT_WINDOW,
    workers: int | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every pinned tensor of `load`, each only after its bytes hashed to its pin."""
    pending = {t.name: t for t in load.tensors}
    workers = workers or min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="catalog-hash") as pool:
        for position, source in enumerate(sources):
            if not pending:
                break
            later = sources[position + 1 :]
            try:
                for tensor, owned, digest in _hashed(
                    source.stream.stream(list(pending.values())), pool, window, record
                ):
                    if tensor.name not in pending:
                        continue
                    if digest != tensor.sha256:
                        owned = _refetch(model, tensor, digest, source, later, record)
                    del pending[tensor.name]
                    yield tensor.name, _typed(owned, tensor)
                    _count(record, tensor, source if digest == tensor.sha256 else None)
            except ReadFailed as exc:
                record.failures.append(exc.message)
                log.warning(
                    "%s/%s: %s; %s",
                    model,
                    load.entry.path,
                    exc.message,
                    f"{len(pending)} tensor(s) left for the next source" if later else "no source left",
                )
    if pending:
        names = ", ".join(sorted(pending)[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
        raise LoadIncomplete(
            f"{model}/{load.entry.path}: {len(pending)} of {len(load.tensors)} tensors could not be read "
            f"({names}): {'; '.join(record.failures) or 'no source holds the file'}",
            hint="check the store and its endpoint (`catalog resolve` says which), or add a mirror",
        )


def _count(record: FileRecord, tensor: PinnedTensor, source: Source | None) -> None:
    record.delivered += 1
    record.bytes += tensor.nbytes
    if source is not None:
        record.by_source[source.where] = record.by_source.get(source.where, 0) + 1


def _refetch(
    model: str, tensor: PinnedTensor, got: str, source: Source, later: Sequence[Source], record: FileRecord
) -> torch.Tensor:
    """The span alone from the next sources, until one has the pinned bytes; TensorRefused if none does."""
    record.refused.append({"tensor": tensor.name, "from": source.where, "got": got})
    log.warning(
        "%s/%s: tensor %s from %s has sha256 %s, pinned %s: refused, fetching it again",
        model,
        tensor.file,
        tensor.name,
        source.where,
        got,
        tensor.sha256,
    )
    tried = []
    for other in later:
        try:
            owned = _own(other.ranges.read(tensor))
        except ReadFailed as exc:
            tried.append(exc.message)
            continue
        digest, cpu = _sha256(owned)
        record.hash_seconds += cpu
        if digest == tensor.sha256:
            record.by_source[other.where] = record.by_source.get(other.where, 0) + 1
            return owned
        record.refused.append({"tensor": tensor.name, "from": other.where, "got": digest})
        tried.append(f"{other.where}: sha256 {digest}")
    raise TensorRefused(model, tensor, got, source.where, tried)


def _hashed(
    stream: Iterator[tuple[PinnedTensor, Any]], pool: ThreadPoolExecutor, window: int, record: FileRecord
) -> Iterator[tuple[PinnedTensor, torch.Tensor, str]]:
    """The reader's tensors, each copied out of its buffer here (before the reader reuses it), hashed in `pool`,
    yielded in arrival order with its digest; at most `window` bytes (or one tensor) copied and not yet yielded."""
    queue: deque[tuple[PinnedTensor, torch.Tensor, Future[tuple[str, float]]]] = deque()
    in_flight = 0
    try:
        for tensor, chunk in stream:
            owned = _own(chunk)
            queue.append((tensor, owned, pool.submit(_sha256, owned)))
            in_flight += tensor.nbytes
            while queue and (in_flight > window or queue[0][2].done()):
                done = queue.popleft()
                in_flight -= done[0].nbytes
                yield done[0], done[1], _digest(done[2], record)
        while queue:
            done = queue.popleft()
            yield done[0], done[1], _digest(done[2], record)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a reader's generator releases its buffers and connections now, not at garbage collection


def _own(chunk: Any) -> torch.Tensor:
    """A uint8 tensor owning the bytes: a reader's bytearray as is (each is fresh), a view of runai's ring copied."""
    import torch

    if isinstance(chunk, (bytearray, bytes)):
        return torch.frombuffer(chunk, dtype=torch.uint8) if len(chunk) else torch.empty(0, dtype=torch.uint8)
    copied: torch.Tensor = chunk.reshape(-1).clone()
    return copied


def _digest(future: Future[tuple[str, float]], record: FileRecord) -> str:
    digest, cpu = future.result()
    record.hash_seconds += cpu
    return digest


def _sha256(owned: torch.Tensor) -> tuple[str, float]:
    """The digest, and the CPU seconds this thread spent on it (the load record says where the hashing went)."""
    started = time.thread_time()
    data: Any = owned.numpy()  # a uint8 array over the tensor's memory: no copy
    digest = hashlib.sha256(data).hexdigest()
    return digest, time.thread_time() - started


def _typed(owned: torch.Tensor, tensor: PinnedTensor) -> torch.Tensor:
    """The verified bytes as the pinned dtype and shape (a view: no copy)."""
    import torch

    name = TORCH_DTYPES.get(tensor.dtype)
    if name is None:
        raise LoadIncomplete(
            f"{tensor.file}: tensor {tensor.name} is {tensor.dtype}, which torch cannot hold",
            hint="load it with the format's own loader (CATALOG_ENGINE_LOADER=plain)",
        )
    dtype = getattr(torch, name)
    if not owned.numel():
        return torch.empty(tensor.shape, dtype=dtype)
    return owned.view(dtype).reshape(tensor.shape)
