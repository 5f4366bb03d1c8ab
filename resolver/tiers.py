"""Shared cache tiers: read-only folders with the local cache's `blobs/<aa>/<sha256>` layout, consulted by
sha256 before any download (`--shared-cache DIR`, `CATALOG_SHARED_CACHE`).

A tier is typically a network or read-only mount filled by a publisher job (`catalog publish`, see
`resolver/publish.py`). A runner only stats and reads there: it never writes, chmods or locks in a tier,
so a tier mounted read-only works as well as a writable one.

A tier is not trusted blindly. A blob found there must have the pinned size, and its sha256 is checked
once per tier-file identity (device, inode, size, mtime_ns); the identities that hashed right are
remembered in the local cache (`<cache>/tier-checks/<sha256>.json`), so the next runner process on the
same machine only stats it. The blob is then hard-linked into the local cache (no space, no copy) or,
where the filesystem refuses a link (another filesystem, another owner under protected_hardlinks), copied
and the copy hashed (a copy is a new file: no earlier check vouches for it). A blob that fails its check is
skipped (logged) and that file comes from the stores instead; the tier is left untouched.

`hf:DIR` names a Hugging Face cache (an HF_HUB_CACHE folder CI already fills) as a tier of its own kind
(`resolver/hf_tier.py`): it only says where a pinned file may lie there; the checks above are the same.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from catalog import naming
from catalog.schema import FileEntry, Source
from catalog.settings import HF_TIER
from resolver.cache import Cache
from resolver.fsutil import atomic_write
from resolver.hashing import hash_file
from resolver.hf_tier import HfTier

log = logging.getLogger(__name__)

MAX_IDENTITIES = 8  # remembered per blob (a tier rewritten many times keeps only the newest)


@dataclass(frozen=True)
class Tier:
    root: Path

    @property
    def url(self) -> str:
        """What `sources` and messages name."""
        return f"tier:{self.root}"

    def blob_path(self, sha256: str) -> Path:
        if (message := naming.check_sha256(sha256)) is not None:
            raise ValueError(message)
        return self.root / "blobs" / sha256[:2] / sha256

    def candidates(self, entry: FileEntry, source: Source | None) -> list[Path]:
        return [self.blob_path(entry.sha256)]


class SharedTier(Protocol):
    """A read-only folder that may hold a pinned file: a catalog tier, or a Hugging Face cache (`hf:DIR`)."""

    @property
    def root(self) -> Path: ...

    @property
    def url(self) -> str: ...

    def candidates(self, entry: FileEntry, source: Source | None) -> list[Path]:
        """Where the tier may hold `entry` (of the repo at the revision `source` names), best first."""


def tiers_of(paths: Sequence[Path]) -> tuple[SharedTier, ...]:
    """The tier kind by prefix: `hf:DIR` is a Hugging Face cache, anything else a catalog tier."""
    return tuple(HfTier(Path(str(p)[len(HF_TIER):]).expanduser().absolute()) if str(p).startswith(HF_TIER)
                 else Tier(Path(p).expanduser().absolute()) for p in paths)


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


class CheckRecord:
    """What this machine already hashed in the tiers: per sha256, the file identities whose bytes matched."""

    def __init__(self, cache: Cache) -> None:
        self.folder = cache.root / "tier-checks"

    def _path(self, sha256: str) -> Path:
        return self.folder / f"{sha256}.json"

    def _read(self, sha256: str) -> list[list[int]]:
        try:
            data = json.loads(self._path(sha256).read_bytes())
            return [list(map(int, item)) for item in data] if isinstance(data, list) else []
        except (OSError, ValueError, TypeError):
            return []

    def knows(self, sha256: str, st: os.stat_result) -> bool:
        return _identity(st) in self._read(sha256)

    def remember(self, sha256: str, st: os.stat_result) -> None:
        known = [i for i in self._read(sha256) if i != _identity(st)] + [_identity(st)]
        try:
            atomic_write(self._path(sha256), json.dumps(known[-MAX_IDENTITIES:]).encode())
        except OSError:
            log.debug("could not record the tier check of %s", sha256, exc_info=True)


def take_from_tiers(tiers: Sequence[SharedTier], cache: Cache, model: str, entries: Sequence[FileEntry],
                    where: Source | None = None) -> dict[str, str]:
    """Bring every entry some tier holds (verified) into the cache; returns path -> the tier that served it.
    Entries no tier holds, or holds with other bytes, are left for the stores. `where` (the manifest's
    source) lets an HF cache tier find a file by revision and path."""
    served: dict[str, str] = {}
    if not tiers:
        return served
    record = CheckRecord(cache)
    for entry in entries:
        if cache.has_blob(entry):
            continue
        for tier in tiers:
            if any(_take_one(tier, path, cache, record, model, entry) for path in tier.candidates(entry, where)):
                served[entry.path] = tier.url
                break
    return served


def _take_one(tier: SharedTier, source: Path, cache: Cache, record: CheckRecord, model: str, entry: FileEntry) -> bool:
    try:
        st = os.stat(source)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if st.st_size != entry.size:
        log.warning("shared tier %s: %s/%s has %d bytes, the pin says %d; fetching it from the stores instead",
                    tier.root, model, entry.path, st.st_size, entry.size)
        return False
    trusted = record.knows(entry.sha256, st)

    def check(local: Path) -> bool:
        """The local link or copy holds the pinned bytes (hashed unless this tier file was hashed before)."""
        now = os.stat(local)
        if trusted and now.st_ino == st.st_ino and now.st_dev == st.st_dev and now.st_mtime_ns == st.st_mtime_ns:
            return True
        size, digest = hash_file(local)
        if (size, digest) != (entry.size, entry.sha256):
            log.warning("shared tier %s: %s/%s hashes to %s, the pin says %s; skipped it (the tier is left as it is) "
                        "and fetching it from the stores instead", tier.root, model, entry.path, digest, entry.sha256)
            return False
        if now.st_ino == st.st_ino and now.st_dev == st.st_dev:
            record.remember(entry.sha256, st)  # a hard link: the tier file itself was hashed
        else:
            try:
                again = os.stat(source)
            except OSError:
                return True
            if _identity(again) == _identity(st):
                record.remember(entry.sha256, st)  # a copy taken of an unchanged tier file
        return True

    try:
        return cache.adopt_blob(source, entry.sha256, entry.size, check)
    except OSError as exc:
        log.warning("shared tier %s: cannot take %s/%s (%s); fetching it from the stores instead",
                    tier.root, model, entry.path, exc.strerror or exc)
        return False

