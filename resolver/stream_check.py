"""Streamed weights are verified too: before a URI is handed out, each streamed object must be the one whose
bytes were verified.

    manifest files + one listing of the model's prefix + sync's state record --check()--> problems

`check` is pure (a table of cases in tests/unit/test_stream_check.py). A streamed file passes when it is
listed, its size is the pin's, and the model's state record (written by `catalog sync` and `upload_from_dir`
after hashing the bytes they uploaded or verified) holds sha256 == the pin and ETag == the listed ETag: an
object rewritten since (same size or not) has a new ETag. `verify_streamed` is the I/O around it: one
listing, one small GET of the state object; `deep` instead hashes each listed object by streaming it
(for stores without sync records).

The state records live here (below both `resolver.resolve` and `resolver.sync`) so that sync, upload and
resolve share one reader and one writer: `.model-catalog/state/<name>.json`, {"model", "files": path ->
{size, sha256, etag}}.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from catalog import bounded
from catalog.errors import CatalogError, IntegrityError, MissingObjectError, UsageError
from catalog.schema import FileEntry
from resolver.cache import Cache
from resolver.fsutil import atomic_write
from resolver.stores import ObjectInfo, ObjectNotFound, Store
from resolver.transfer import TransferConfig, Wanted, fetch_digest

log = logging.getLogger(__name__)

STATE_PREFIX = ".model-catalog/state/"

LISTING = "listing"  # size and ETag against sync's record: one listing + one small GET
DEEP = "deep"  # stream and hash each object (stores without sync records)
LOADER = "loader"  # not a CLI choice: the caller (check-load) hashes every streamed byte against the pin itself
MODES = (LISTING, DEEP, LOADER)


class Kind(str, Enum):
    MISSING = "missing"  # not listed under the model's prefix
    SIZE = "size"  # listed with another size than the pin's
    REWRITTEN = "rewritten"  # sync verified it, but the object has a new ETag since
    UNVERIFIED = "unverified"  # no record (or a record for other bytes): sync never verified it
    SHA256 = "sha256"  # deep mode: the streamed bytes hash to something else


@dataclass(frozen=True)
class StreamProblem:
    path: str
    kind: Kind
    expected: str
    got: str


def check(
    files: Sequence[FileEntry],
    prefix: str,
    listing: Iterable[ObjectInfo],
    records: Mapping[str, Mapping[str, Any]],
    digests: Mapping[str, str] | None = None,
) -> list[StreamProblem]:
    """Pure: what is wrong with each streamed file, in manifest order; [] when every one is proven.

    `listing` is the store's listing of `prefix` (keys relative to the store root), `records` the model's
    state (path -> {size, sha256, etag}). With `digests` (path -> sha256 of the streamed bytes, deep mode)
    the hash itself is the proof and the records are not consulted.
    """
    objects = {o.key[len(prefix) :]: o for o in listing if o.key.startswith(prefix)}
    problems: list[StreamProblem] = []
    for entry in files:
        obj = objects.get(entry.path)
        if obj is None:
            problems.append(StreamProblem(entry.path, Kind.MISSING, f"{entry.size} bytes", "no object"))
            continue
        if obj.size != entry.size:
            problems.append(StreamProblem(entry.path, Kind.SIZE, str(entry.size), str(obj.size)))
            continue
        if digests is not None:
            got = digests.get(entry.path)
            if got != entry.sha256:
                problems.append(StreamProblem(entry.path, Kind.SHA256, entry.sha256, got or "nothing"))
            continue
        record = records.get(entry.path)
        if record is None or record.get("sha256") != entry.sha256:
            got = "no record" if record is None else f"a record of sha256 {record.get('sha256')}"
            problems.append(StreamProblem(entry.path, Kind.UNVERIFIED, f"a record of sha256 {entry.sha256}", got))
            continue
        if not obj.etag or record.get("etag") != obj.etag:
            problems.append(StreamProblem(entry.path, Kind.REWRITTEN, str(record.get("etag")), str(obj.etag)))
    return problems


class StreamIntegrityError(IntegrityError):
    """A streamed object that cannot be proven to hold the pinned bytes; nothing was handed out."""

    def __init__(self, model: str, problem: StreamProblem, cause: str, hint: str, more: str = "") -> None:
        super().__init__(model, problem.path, _WHAT[problem.kind], problem.expected, problem.got, cause)
        self.kind = problem.kind
        self.message = (
            f"expected {self.what} {problem.expected} but got {problem.got} for {model}/{problem.path} "
            f"in the store; {cause}; nothing was handed out{more}"
        )
        self.args = (self.message,)
        self.hint = hint


_WHAT = {
    Kind.MISSING: "object",
    Kind.SIZE: "size",
    Kind.REWRITTEN: "ETag",
    Kind.UNVERIFIED: "sync record",
    Kind.SHA256: "sha256",
}


def to_error(model: str, problems: Sequence[StreamProblem], where: str) -> CatalogError:
    """One error for the first problem (the others counted in its message): missing -> MissingObjectError,
    anything else -> an IntegrityError naming model, file, expected and got."""
    first = problems[0]
    more = ""
    if len(problems) > 1:
        others = ", ".join(f"{p.path} ({p.kind.value})" for p in problems[1:4]) + (" ..." if len(problems) > 4 else "")
        more = f" (and {len(problems) - 1} more: {others})"
    sync = f"run `catalog sync {model}` (it hashes the object and records it)"
    if first.kind is Kind.MISSING:
        error = MissingObjectError(model, first.path, where)
        error.message += more
        error.args = (error.message,)
        return error
    if first.kind is Kind.SIZE:
        return StreamIntegrityError(
            model,
            first,
            "the object in the store was resized since the manifest was pinned",
            f"{sync}, or fix the manifest",
            more,
        )
    if first.kind is Kind.REWRITTEN:
        return StreamIntegrityError(
            model,
            first,
            "the object was rewritten since sync verified it",
            f"{sync}, or pass --verify-stream deep to hash it now",
            more,
        )
    if first.kind is Kind.UNVERIFIED:
        return StreamIntegrityError(
            model,
            first,
            "the object was never verified by `catalog sync`",
            f"{sync}, or pass --verify-stream deep to hash it now",
            more,
        )
    return StreamIntegrityError(
        model,
        first,
        "the object in the store is corrupt or the manifest is stale",
        f"repair the object ({sync} replaces it) or fix the manifest",
        more,
    )


# -- I/O ----------------------------------------------------------------------------------------------
def verify_streamed(
    store: Store,
    model: str,
    prefix: str,
    files: Sequence[FileEntry],
    *,
    mode: str = LISTING,
    config: TransferConfig | None = None,
) -> None:
    """Raise unless every streamed file is proven (see `check`). `listing` mode: one listing of `prefix` and
    one small GET of the state object; `deep`: the listing, then each object streamed and hashed."""
    if mode not in MODES:
        raise UsageError(f"unknown stream verification {mode!r}", hint=f"use one of: {', '.join(MODES)}")
    if mode == LOADER:
        return
    listing = list(store.list(prefix))
    digests: dict[str, str] | None = None
    records: dict[str, Any] = {}
    if mode == DEEP:
        present = {o.key: o.size for o in listing}
        digests = {}
        for entry in files:
            key = prefix + entry.path
            if present.get(key) == entry.size:
                try:
                    digests[entry.path] = fetch_digest(store, Wanted(model, entry, key), config or TransferConfig())
                except IntegrityError as exc:  # the bytes and the listing disagree: report it as the hash problem
                    digests[entry.path] = f"{exc.got} bytes"
    else:
        records = read_state(store, model)
    problems = check(files, prefix, listing, records, digests)
    if problems:
        raise to_error(model, problems, store.url + prefix)
    log.debug("%s: %d streamed file(s) verified (%s)", model, len(files), mode)


def state_key(name: str) -> str:
    return f"{STATE_PREFIX}{name}.json"


def parse_state(data: bytes) -> dict[str, Any]:
    """The `files` records of a state object's bytes; {} for anything unreadable."""
    try:
        parsed = bounded.loads(data)
    except ValueError:
        return {}
    files = parsed.get("files", {}) if isinstance(parsed, dict) else {}
    return files if isinstance(files, dict) else {}


def read_state(store: Store, name: str) -> dict[str, Any]:
    """A model's records with one GET; {} when there is no state object."""
    try:
        return parse_state(read_small(store, state_key(name)))
    except ObjectNotFound:
        return {}


def read_small(store: Store, key: str, limit: int = bounded.MAX_RECORD) -> bytes:
    """A record's whole bytes (a state, the upstream audit), never more than `limit` (UsageError beyond it)."""
    stream = store.open(key)
    chunks = []
    size = 0
    buffer = memoryview(bytearray(1 << 20))
    try:
        while count := stream.readinto(buffer):
            chunks.append(bytes(buffer[:count]))
            size += count
            if size > limit:
                raise UsageError(
                    f"{store.url}: {key} is larger than the {bounded.human(limit)} a record may be; not read",
                    hint="remove or repair it: sync and audit-upstream write it again",
                )
    finally:
        stream.close()
    return b"".join(chunks)


def record(entry: FileEntry, info: ObjectInfo | None) -> dict[str, Any]:
    """What is recorded for a file whose bytes were just verified (uploaded or hashed) as `info`."""
    return {"size": entry.size, "sha256": entry.sha256, "etag": info.etag if info else None}


def write_state(store: Store, name: str, files: Mapping[str, Mapping[str, Any]], cache: Cache | None) -> None:
    """Merge new records into the model's state object (read, update, write)."""
    key = state_key(name)
    current: dict[str, Any] = {}
    if store.head(key) is not None:
        current = parse_state(read_small(store, key))
    current.update(files)
    data = json.dumps({"model": name, "files": current}, sort_keys=True).encode()
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(data)
        path = Path(f.name)
    try:
        info = store.put(key, path, {"kind": "model-catalog-sync-state"})
    finally:
        path.unlink(missing_ok=True)
    remember_state(cached_state(cache, store, name, info.etag), data)


def cached_state(cache: Cache | None, store: Store, name: str, etag: str | None) -> Path | None:
    """Where a model's state object with this ETag is kept locally (ETags change whenever the object does)."""
    if cache is None or not etag:
        return None
    tag = hashlib.sha256(f"{store.url}\0{name}\0{etag}".encode()).hexdigest()[:32]
    return cache.sync_state / name / f"{tag}.json"


def remember_state(local: Path | None, data: bytes) -> None:
    """Keep the state just read or written, and only it: older ETags of the model can never match again."""
    if local is None:
        return
    atomic_write(local, data)
    for other in local.parent.glob("*.json"):
        if other != local:
            other.unlink(missing_ok=True)
