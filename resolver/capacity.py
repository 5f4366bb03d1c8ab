"""Cache capacity: fail at once when a download cannot fit, and evict least recently resolved views.

- `check_space` compares the bytes a resolve still needs with the free space of the cache's filesystem
  before any byte moves: "needs X, has Y" (CacheWriteError, exit 1) instead of a disk filling mid-download.
- `evict` (`catalog gc --max-size/--keep-free`, and resolve under `CATALOG_CACHE_MAX_SIZE`) removes whole
  views, least recently resolved first (the marker's `resolved_at`, refreshed at most hourly by resolve),
  then the blobs no remaining view uses, until the cache is under the size or the disk has the free space. It
  leaves no empty folder, and nothing of an evicted hf-cache snapshot (its tree listing, `refs/main`, its repo's
  blobs no other snapshot links).
- In use: a resolve writes an activity record `<cache>/active/<token>.json` naming the models and blobs it
  works on, and holds an exclusive `flock` on it for as long as it runs (the whole command: `resolve A B`
  holds one record for both, so resolving B never evicts A). Eviction never touches a view of a model, or a
  blob, named by a record someone holds a lock on, whatever host or PID namespace holds it: no PID or host
  name is judged. A record nobody holds (its process is gone, or it was never finished) is swept. Only on a
  filesystem without flock is a record judged by its age (live for ACTIVE_UNLOCKABLE_SECONDS).
- A command never evicts its own models: `check_limit` refuses, before anything is fetched or evicted, a
  request whose own views are larger than the size limit.
  A view handed out earlier and still read by a test is not protected beyond its recency: size the limit so
  that the models of one job fit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog import bounded
from catalog.errors import CacheWriteError, CatalogError
from resolver import hf_layout
from resolver.cache import Cache
from resolver.fsutil import lock_free
from resolver.view_stamps import staging_name
from resolver.views import Layout

log = logging.getLogger(__name__)

ACTIVE_UNLOCKABLE_SECONDS = 6 * 3600  # where flock cannot tell (no such lock on that filesystem): live this long
DiskUsage = Callable[[Path], Any]


def human(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def free_bytes(path: Path, disk_usage: DiskUsage | None = None) -> int:
    """Free space of the filesystem holding `path` (or its nearest existing parent)."""
    disk_usage = disk_usage or shutil.disk_usage  # looked up now: a test may replace it
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return int(disk_usage(probe).free)


SPACE_HINT = (
    "free disk space, run `catalog gc --keep-free SIZE`, set CATALOG_CACHE_MAX_SIZE, "
    "or point --cache / CATALOG_CACHE at a larger disk"
)


def check_space(
    cache: Cache,
    needed: int,
    what: str,
    disk_usage: DiskUsage | None = None,
    *,
    where: str = "the cache",
    hint: str = SPACE_HINT,
) -> None:
    """Raise before any download when `needed` bytes cannot fit on the cache's filesystem."""
    if needed <= 0:
        return
    free = free_bytes(cache.root, disk_usage)
    if needed > free:
        raise CacheWriteError(
            f"{what} needs {human(needed)} in {where} at {cache.root}, has {human(free)} free", hint=hint
        )


def check_limit(max_size: int | None, needed: int, what: str) -> None:
    """Raise before anything is fetched or evicted when one request's own views could never fit under the
    size limit: evicting would only throw away what the same command resolves (CacheWriteError, exit 1)."""
    if max_size is not None and needed > max_size:
        raise CacheWriteError(
            f"{what} needs {human(needed)} in the cache, more than CATALOG_CACHE_MAX_SIZE={human(max_size)}; "
            "nothing was fetched or evicted",
            hint="raise CATALOG_CACHE_MAX_SIZE above what one command resolves, or resolve fewer models per command",
        )


# -- activity records ----------------------------------------------------------------------------------
@contextlib.contextmanager
def active(cache: Cache, names: Iterable[str], blobs: Iterable[str]) -> Iterator[Path | None]:
    """Mark `names` (models) and `blobs` (sha256s) in use while the body runs: a record in `active/` with an
    exclusive flock held on it until the body ends (taken before the record gets its name, so it is never
    seen unlocked while its writer lives). Best effort: a cache that cannot be written (read-only, say) fails
    later with the real error, or answers without writing, not here."""
    folder = cache.active
    path = folder / f"{secrets.token_hex(8)}.json"
    body = {
        "names": sorted(set(names)),
        "blobs": sorted(set(blobs)),
        "started": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }  # host and pid: for people reading it, never judged
    fd, written = -1, None
    temp = folder / staging_name(path.name)
    try:
        cache.make_dirs(folder)
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        _lock(fd)
        os.write(fd, json.dumps(body).encode())
        os.replace(temp, path)
        written = path
    except (OSError, CatalogError):
        log.debug("could not record this resolve as active in %s", folder, exc_info=True)
        with contextlib.suppress(OSError):
            temp.unlink()
    try:
        yield written
    finally:
        if written is not None:
            written.unlink(missing_ok=True)  # removed while still locked: never seen unlocked
        if fd >= 0:
            os.close(fd)


def _lock(fd: int) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise  # no flock on this filesystem: the record is judged by its age instead


def _held(path: Path) -> bool | None:
    """Whether someone holds a flock on the record: True, False, or None where it cannot be told (no flock on
    that filesystem, or the record cannot be opened)."""
    try:
        free = lock_free(path, exclusive=False)
    except OSError:
        return None
    return None if free is None else not free


@dataclass
class InUse:
    names: set[str] = field(default_factory=set)
    blobs: set[str] = field(default_factory=set)
    dead: list[Path] = field(default_factory=list)  # records nobody holds: their resolve is over (or never began)


def in_use(cache: Cache, now: float | None = None) -> InUse:
    """What running resolves use, by the records someone holds a lock on; and the records nobody holds."""
    now = time.time() if now is None else now
    found = InUse()
    folder = cache.active
    try:
        entries = list(folder.iterdir())
    except OSError:
        return found
    for path in entries:
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        held = _held(path)
        if held is None:
            held = now - st.st_mtime < ACTIVE_UNLOCKABLE_SECONDS
        if not held:
            found.dead.append(path)  # finished, killed, or never finished writing: nobody's any more
            continue
        try:
            data = bounded.loads(bounded.read_file(path, bounded.MAX_RECORD))
            found.names |= set(map(str, data["names"]))
            found.blobs |= set(map(str, data["blobs"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # held but unreadable: a record of a version to come; its holder's lock still counts
    return found


# -- eviction ---------------------------------------------------------------------------------------------
@dataclass
class Eviction:
    views: list[str] = field(default_factory=list)  # "<name> <view>" evicted
    removed: list[Path] = field(default_factory=list)
    bytes: int = 0
    size_after: int = 0
    free_after: int = 0
    kept_in_use: list[str] = field(default_factory=list)
    unmet: str = ""  # the target that could not be reached, and why ("" when it was)


def cache_size(cache: Cache) -> int:
    """Bytes the cache holds on disk: each inode once (view files are hard links to blobs)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in (cache.blobs, cache.models, cache.hub, cache.tmp):
        if not top.is_dir():
            continue
        for dirpath, _, filenames in os.walk(top):
            for filename in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, filename))
                except OSError:
                    continue
                if (
                    (st.st_dev, st.st_ino) in seen
                    or not os.path.isfile(os.path.join(dirpath, filename))
                    or os.path.islink(os.path.join(dirpath, filename))
                ):
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def evict(
    cache: Cache,
    *,
    max_size: int | None = None,
    keep_free: int | None = None,
    dry_run: bool = False,
    disk_usage: DiskUsage | None = None,
) -> Eviction:
    """Remove whole views, least recently resolved first, and then the blobs no remaining view uses, until
    the cache holds at most `max_size` bytes and its filesystem has `keep_free` bytes free. Views and blobs
    a running resolve works on are never touched (see the module's docstring)."""
    result = Eviction()
    size = cache_size(cache)
    free = free_bytes(cache.root, disk_usage)

    def satisfied() -> bool:
        return (max_size is None or size <= max_size) and (keep_free is None or free >= keep_free)

    busy = in_use(cache)
    for record in busy.dead:
        if not dry_run:
            record.unlink(missing_ok=True)
    markers = [(path, m) for path, m in cache.markers_all() if m is not None]
    remaining_refs: dict[str, int] = {}
    for _, marker in markers:
        for stamp in marker.files.values():
            remaining_refs[stamp.sha256] = remaining_refs.get(stamp.sha256, 0) + 1

    def drop_blob(sha256: str) -> None:
        """The blob, its hf-cache twins (hard links of one inode, or copies; counted once) and its stamp record."""
        nonlocal size, free
        main = cache.blob_path(sha256)
        twins = list(cache.hub.glob(f"*--*/blobs/{sha256}")) if cache.hub.is_dir() else []
        freed = 0
        seen: set[tuple[int, int]] = set()
        for path in (main, *twins):
            try:
                st = path.lstat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                freed += st.st_size
            result.removed.append(path)
            if not dry_run:
                path.unlink(missing_ok=True)
        if not dry_run:
            record = cache.blob_stamps / sha256[:2] / sha256
            record.unlink(missing_ok=True)
            _remove_empty(main.parent, cache.blobs)
            _remove_empty(record.parent, cache.blob_stamps)
        size, free = size - freed, free + freed
        result.bytes += freed

    # 1. Blobs no view uses at all (a resolve that failed before its view; views evicted by hand).
    if not satisfied():
        for blob in sorted(cache.blobs.glob("*/*")) if cache.blobs.is_dir() else ():
            if satisfied():
                break
            if blob.name in remaining_refs or blob.name in busy.blobs or blob.name.startswith("."):
                continue
            drop_blob(blob.name)
    # 2. Whole views, least recently resolved first.
    snapshots_evicted: set[Path] = set()  # hf-cache repo folders a snapshot was evicted from
    for path, marker in sorted(markers, key=lambda pm: pm[1].last_used):
        if satisfied():
            break
        if marker.name in busy.names:
            result.kept_in_use.append(f"{marker.name} {marker.view}")
            continue
        result.views.append(f"{marker.name} {marker.view}")
        result.removed.append(path)
        view = cache.root / marker.path
        if not dry_run:
            path.unlink(missing_ok=True)  # the marker first: nothing trusts the view from here on
            if marker.layout == Layout.DIR.value and view.resolve().is_relative_to(cache.models):
                shutil.rmtree(view, ignore_errors=True)
                _remove_empty(view.parent, cache.models)
            elif marker.layout == Layout.HF_CACHE.value and view.resolve().is_relative_to(cache.hub):
                for rel in marker.files:
                    (view / rel).unlink(missing_ok=True)
                    _remove_empty((view / rel).parent, view)
                _remove_empty(view, view.parent)
                snapshots_evicted.add(view.parent.parent)
            _remove_empty(path.parent, cache.markers)
        for stamp in marker.files.values():
            remaining_refs[stamp.sha256] -= 1
            if remaining_refs[stamp.sha256] == 0 and stamp.sha256 not in busy.blobs:
                drop_blob(stamp.sha256)
    for repo in sorted(snapshots_evicted):  # its tree listing, refs/main, blobs no snapshot links, empty folders
        for removed, freed in hf_layout.tidy_repo(repo, keep_blobs=busy.blobs):
            result.removed.append(removed)
            size, free, result.bytes = size - freed, free + freed, result.bytes + freed
    result.size_after, result.free_after = size, free
    if not satisfied():
        wanted = " and ".join(
            w
            for w in (
                f"at most {human(max_size)} in the cache" if max_size is not None else "",
                f"{human(keep_free)} free" if keep_free is not None else "",
            )
            if w
        )
        why = (
            f"{len(result.kept_in_use)} view(s) in use by running resolves are kept"
            if result.kept_in_use
            else "nothing evictable is left"
        )
        result.unmet = f"could not reach {wanted}: {human(size)} in the cache, {human(free)} free after evicting; {why}"
    return result


def _remove_empty(folder: Path, stop: Path) -> None:
    """Remove `folder` and its parents up to (not including) `stop` while they are empty: an evicted view leaves no
    empty folders behind (a folder someone writes into meanwhile is simply not empty, and stays)."""
    while folder != stop and folder.is_relative_to(stop):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def evict_for(cache: Cache, max_size: int, needed: int) -> Eviction:
    """Before a resolve fetches `needed` bytes: make room so the cache stays under `max_size` afterwards
    (the resolve's own activity record protects its model and blobs)."""
    result = evict(cache, max_size=max(0, max_size - needed))
    if result.views:
        log.warning(
            "cache over CATALOG_CACHE_MAX_SIZE=%s: evicted %d view(s) (%s), freed %s",
            human(max_size),
            len(result.views),
            ", ".join(v.split(" ")[0] for v in result.views[:5]),
            human(result.bytes),
        )
    if result.unmet:
        log.warning("CATALOG_CACHE_MAX_SIZE=%s: %s; fetching %s anyway", human(max_size), result.unmet, human(needed))
    return result
