"""Shared cache tiers: read-only folders with the local cache's `blobs/<aa>/<sha256>` layout, consulted by
sha256 before any download (`--shared-cache DIR`, `CATALOG_SHARED_CACHE`).

A tier is typically a network or read-only mount filled by a publisher job (`catalog publish`, see
`resolver/publish.py`). A runner only stats and reads there: it never writes, chmods or locks in a tier,
so a tier mounted read-only works as well as a writable one.

A tier is not trusted blindly. A blob found there must have the pinned size, and its sha256 is checked
once per tier-file identity (resolver/identity.py: device, inode, size, mtime and ctime, so a blob edited
in place with its mtime put back is hashed again); the identities that hashed right, and those that hashed
wrong, are remembered in the local cache (`<cache>/tier-checks/<sha256>.json`), so the next runner process
on the same machine only stats it: a good one is linked without a re-read, a bad one is skipped without one
(never adopted unhashed, never re-hashed by every resolve). The blob is then hard-linked into the local
cache (no space, no copy) or, where the filesystem refuses a link (another filesystem, another owner under
protected_hardlinks), copied and the copy hashed (a copy is a new file: no earlier check vouches for it). A
blob that fails its check is skipped (logged) and that file comes from the stores instead; the tier is left
untouched. A tier folder that does not exist is said once per process (a mount that failed is not silently
a cold cache). A hard-linked tier blob's ctime moves with every link and unlink made of it anywhere, so it is
hashed again when it is taken again (after an eviction): correctness first.

`hf:DIR` names a Hugging Face cache (an HF_HUB_CACHE folder CI already fills) as a tier of its own kind
(`resolver/hf_tier.py`): it only says where a pinned file may lie there; the checks above are the same.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from catalog import bounded, front_door, naming
from catalog.schema import FileEntry, Source
from catalog.settings import HF_TIER
from resolver.cache import Cache
from resolver.fsutil import atomic_write
from resolver.hashing import hash_file
from resolver.hf_tier import HfTier
from resolver.identity import FileIdentity

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
        return self.root / front_door.BLOBS.name / sha256[:2] / sha256  # the cache's own layout

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
    return tuple(
        HfTier(Path(str(p)[len(HF_TIER) :]).expanduser().absolute())
        if str(p).startswith(HF_TIER)
        else Tier(Path(p).expanduser().absolute())
        for p in paths
    )


class CheckRecord:
    """What this machine already hashed in the tiers: per sha256, the file identities whose bytes matched
    ("good") and those whose bytes did not ("bad"). Records of older versions (identities without ctime)
    match nothing, so those files are hashed once more."""

    def __init__(self, cache: Cache) -> None:
        self.folder = cache.tier_checks

    def _path(self, sha256: str) -> Path:
        return self.folder / f"{sha256}.json"

    def _read(self, sha256: str) -> dict[str, list[FileIdentity]]:
        try:
            data = bounded.loads(bounded.read_file(self._path(sha256), bounded.MAX_RECORD))
        except (OSError, ValueError):
            return {"good": [], "bad": []}
        data = data if isinstance(data, dict) else {}
        return {
            verdict: [i for i in map(FileIdentity.from_list, data.get(verdict) or []) if i is not None]
            for verdict in ("good", "bad")
        }

    def verdict(self, sha256: str, st: os.stat_result) -> bool | None:
        """True: this very file hashed right before; False: it hashed wrong; None: never hashed here."""
        known, identity = self._read(sha256), FileIdentity.of(st)
        return True if identity in known["good"] else False if identity in known["bad"] else None

    def knows(self, sha256: str, st: os.stat_result) -> bool:
        return self.verdict(sha256, st) is True

    def remember(self, sha256: str, st: os.stat_result, good: bool = True) -> None:
        known, identity = self._read(sha256), FileIdentity.of(st)
        verdict, other = ("good", "bad") if good else ("bad", "good")
        known[verdict] = [i for i in known[verdict] if i != identity][-(MAX_IDENTITIES - 1) :] + [identity]
        known[other] = [i for i in known[other] if i != identity]
        try:
            atomic_write(
                self._path(sha256), json.dumps({k: [i.as_list() for i in v] for k, v in known.items()}).encode()
            )
        except OSError:
            log.debug("could not record the tier check of %s", sha256, exc_info=True)


_SAID: set[Path] = set()  # tier folders already said to be missing (once per process, not per file)
_SAID_LOCK = threading.Lock()


def usable(tier: SharedTier) -> bool:
    """The tier's folder is there; a missing one (a mount that failed, a typo) is said once, on stderr."""
    try:
        if stat.S_ISDIR(os.stat(tier.root).st_mode):
            return True
        why = "is not a folder"
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc})"
    with _SAID_LOCK:
        if tier.root not in _SAID:
            _SAID.add(tier.root)
            log.warning(
                "shared tier %s %s; ignoring it (every file it would serve comes from the stores)", tier.root, why
            )
    return False


def local_bytes(
    tiers: Sequence[SharedTier], cache: Cache, entries: Sequence[FileEntry], where: Source | None = None
) -> int:
    """Bytes of `entries` that would take new disk space in the cache: all but those a tier on the cache's own
    filesystem holds with the pinned size (a hard link costs nothing). A tier on another filesystem is copied,
    so its bytes count like a download's (the free-space check and the size limit see them)."""
    try:
        probe = cache.root
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        device = os.stat(probe).st_dev
    except OSError:
        return sum(e.size for e in entries)
    usable_tiers = [t for t in tiers if usable(t)]
    total = 0
    for entry in {e.sha256: e for e in entries}.values():
        if not any(_linkable(path, entry, device) for tier in usable_tiers for path in tier.candidates(entry, where)):
            total += entry.size
    return total


def _linkable(path: Path, entry: FileEntry, device: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == entry.size and st.st_dev == device


def take_from_tiers(
    tiers: Sequence[SharedTier], cache: Cache, model: str, entries: Sequence[FileEntry], where: Source | None = None
) -> dict[str, str]:
    """Bring every entry some tier holds (verified) into the cache; returns path -> the tier that served it.
    Entries no tier holds, or holds with other bytes, are left for the stores. `where` (the manifest's
    source) lets an HF cache tier find a file by revision and path."""
    served: dict[str, str] = {}
    tiers = [t for t in tiers if usable(t)]
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
        log.warning(
            "shared tier %s: %s/%s is not a regular file there (%s); fetching it from the stores instead",
            tier.root,
            model,
            entry.path,
            source,
        )
        return False
    if st.st_size != entry.size:
        log.warning(
            "shared tier %s: %s/%s has %d bytes, the pin says %d; fetching it from the stores instead",
            tier.root,
            model,
            entry.path,
            st.st_size,
            entry.size,
        )
        return False
    verdict = record.verdict(entry.sha256, st)
    if verdict is False:
        log.warning(
            "shared tier %s: %s/%s is the file that hashed wrong here before (unchanged since); fetching it "
            "from the stores instead",
            tier.root,
            model,
            entry.path,
        )
        return False

    def check(local: Path) -> bool:
        """The local link or copy holds the pinned bytes (hashed unless this very tier file hashed right before:
        a hard link to the same identity, ctime aside, since linking moves the ctime of the tier file too)."""
        now = os.stat(local)
        linked = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
        if verdict and linked and FileIdentity.of(now) in (FileIdentity.of(st), _after_link(st, now)):
            return True
        size, digest = hash_file(local)
        if (size, digest) != (entry.size, entry.sha256):
            log.warning(
                "shared tier %s: %s/%s hashes to %s, the pin says %s; skipped it (the tier is left as it is) "
                "and fetching it from the stores instead",
                tier.root,
                model,
                entry.path,
                digest,
                entry.sha256,
            )
            failed.append(True)
            return False
        if linked or _unchanged(source, st):
            record.remember(entry.sha256, st)  # the tier file itself (a link), or an unchanged one a copy was taken of
        return True

    failed: list[bool] = []
    try:
        taken = cache.adopt_blob(source, entry.sha256, entry.size, check)
    except OSError as exc:
        log.warning(
            "shared tier %s: cannot take %s/%s (%s); fetching it from the stores instead",
            tier.root,
            model,
            entry.path,
            exc.strerror or exc,
        )
        return False
    if failed:
        _remember_failure(record, entry.sha256, source, st)
    return taken


def _after_link(before: os.stat_result, now: os.stat_result) -> FileIdentity:
    """The identity `before` has once linked into the cache: only the ctime moved (a link moves it), and only
    to the link's own time. Anything else (size, mtime, inode) moved means another file."""
    return FileIdentity(before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, now.st_ctime_ns)


def _remember_failure(record: CheckRecord, sha256: str, source: Path, st: os.stat_result) -> None:
    """Remember the tier file that hashed wrong, as it is now: our own link and unlink of it moved its ctime
    (nothing else), so its current identity is the one the next resolve will see. Remembering a file as bad
    that someone fixed meanwhile only costs a download; a bad file is never taken for a good one."""
    try:
        again = os.stat(source)
    except OSError:
        return
    if (again.st_dev, again.st_ino, again.st_size, again.st_mtime_ns) == (
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    ):
        record.remember(sha256, again, good=False)


def _unchanged(source: Path, st: os.stat_result) -> bool:
    try:
        return FileIdentity.of_path(source) == FileIdentity.of(st)
    except OSError:
        return False
