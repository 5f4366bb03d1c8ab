"""The local cache: the one owner of what every folder in it holds, and of the marker format.

The folders under the root are named, each with what it holds, once in catalog/front_door.py (`CACHE_FOLDERS`, which
docs/resolve.md's cache layout is rendered from); `Cache` joins those names to its root, and no other module joins a
folder name to a cache root (tests/unit/test_architecture.py).

`catalog gc` cleans every one of them. A warm resolve reads one marker and stats each file: no byte of
any weight is read. What a view and a marker are, and the pure decisions over them, are in resolver/views.py.
Standard library only (the warm path imports it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from catalog import front_door, naming
from catalog.errors import CacheWriteError, CatalogError, UnsafePathError
from resolver import hashing, hf_layout, view_stamps
from resolver.fsutil import (
    atomic_write,
    exchange,
    link_or_copy,
    lock_free,
    pid_alive,
    prepared_target,
    remove_tree,
    staging_owner,
)
from resolver.identity import dir_identity
from resolver.view_stamps import staging_name
from resolver.views import FileStamp, Layout, Marker, ViewSpec, ViewState, changed_files, extra_paths, worth_rehash

if TYPE_CHECKING:
    from catalog.schema import FileEntry

log = logging.getLogger(__name__)

STALE_TEMP_SECONDS = 3600
RESOLVED_AT_EVERY = view_stamps.RESOLVED_AT_EVERY
T = TypeVar("T")
LAYOUT_ATTEMPTS = 3  # a view laid out again when a file or folder of it vanished meanwhile (Cache.build_view)
_IN_THE_WAY = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)  # rename(2) onto a name already taken
IN_FLIGHT_LINK_SECONDS = 600  # an hf-cache snapshot link a concurrent builder made but has not listed yet
_SHA256 = re.compile(r"[0-9a-f]{64}")


# A blob smaller than this gets no stamp record on disk: reading a record costs about what re-hashing such a blob
# does (an open and a small read), while writing one created a file per blob, the largest share of the kernel time
# of a cold resolve of 1,000 small files (docs/benchmarks.md).
UNRECORDED_BELOW = 64 * 1024


def read_blob_record(root: Path, sha256: str) -> FileStamp | None:
    """The stamp `Cache.record_blob` took of blob `sha256` under cache root `root` (None: none or unreadable)."""
    record = view_stamps.blob_record(str(root), sha256)
    return None if record is None else FileStamp(record[0], record[1], record[2], sha256, record[3])


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.blobs = self.root / front_door.BLOBS.name
        self.tmp = self.root / front_door.TMP.name
        self.locks = self.root / front_door.LOCKS.name
        self.models = self.root / front_door.MODELS.name
        self.hub = self.root / front_door.HUB.name
        self.markers = self.root / front_door.MARKERS.name
        self.warm_index = self.root / front_door.WARM_INDEX.name  # catalog_app/warm.py, warm_sync.py
        self.sync_state = self.root / front_door.SYNC_STATE.name
        self.blob_stamps = self.root / front_door.BLOB_STAMPS.name
        self.tier_checks = self.root / front_door.TIER_CHECKS.name  # resolver/tiers.py
        self.active = self.root / front_door.ACTIVE.name  # resolver/capacity.py
        self.signature_checks = (
            self.root / front_door.SIGNATURE_CHECKS.name
        )  # earlier versions' verdicts, for gc to remove
        self.derived = self.root / front_door.DERIVED.name  # resolver/derived.py
        # Folders this process made or found, proven inside the cache: a download of many small files writes into
        # the same few, and proving each again cost several syscalls per file (docs/benchmarks.md).
        self._made: set[Path] = set()
        # Stamps this process took of blobs, the in-memory twin of blob-stamps/: a small blob fetched now gets its
        # record written once, after the view links it (linking moves its ctime), not also when it is published.
        self._stamps: dict[str, FileStamp] = {}
        # Each blob's path, joined once: a resolve asks for it about six times a file, and pathlib's joins were a
        # sixth of the CPU of a cold resolve of 1,000 small files.
        self._blob_paths: dict[str, Path] = {}
        self._blob_folders: dict[str, Path] = {}  # the same for their 256 folders (a Path hashes itself once)
        # Called with a step's name between the steps of laying out a view; nothing outside tests, which pause a
        # builder there to look at the cache as a reader and a concurrent builder would at that moment.
        self.between_steps: Callable[[str], None] = _no_step

    # -- blobs -------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        path = self._blob_paths.get(sha256)
        if path is None:
            if (message := naming.check_sha256(sha256)) is not None:
                raise UnsafePathError(message)
            path = self._blob_paths[sha256] = self._blob_folder(sha256) / sha256
        return path

    def _blob_folder(self, sha256: str) -> Path:
        folder = self._blob_folders.get(sha256[:2])
        if folder is None:
            folder = self._blob_folders[sha256[:2]] = self.blobs / sha256[:2]
        return folder

    def has_blob(self, entry: FileEntry) -> bool:
        """Published blobs were verified before they got their name; a size check catches truncation."""
        try:
            st = self.blob_path(entry.sha256).stat()
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == entry.size

    def record_blob(self, sha256: str, persist: bool = True) -> FileStamp | None:
        """Record the blob's stamp now (after publishing, verifying or linking it); `persist=False`, or a blob under
        UNRECORDED_BELOW, keeps it in this process only. Best effort: without a record the blob is re-hashed before
        its next use, which costs time, never correctness."""
        try:
            st = self.blob_path(sha256).stat()
            stamp = self._stamps[sha256] = FileStamp.of(st, sha256)
            if persist and st.st_size >= UNRECORDED_BELOW:
                data = json.dumps([st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]).encode()
                folder = self.blob_stamps / sha256[:2]
                self._in_folder(folder, lambda: view_stamps.replace_atomically(str(folder / sha256), data))
            return stamp
        except OSError:
            log.debug("could not record the stamp of blob %s", sha256, exc_info=True)
            return None

    def blob_record(self, sha256: str) -> FileStamp | None:
        return read_blob_record(self.root, sha256)

    def verified_blob(self, entry: FileEntry, name: str = "") -> bool:
        """The blob is present and holds the pinned bytes: its recorded stamp (ctime included) still holds,
        else it is re-hashed (and recorded again). A blob edited in place (through a view's hard link) is
        removed, so it is fetched again instead of being linked into a new view. Stats only when nothing moved."""
        path = self.blob_path(entry.sha256)
        try:
            st = path.stat()
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
            return False
        taken = self._stamps.get(entry.sha256)
        if taken is not None and taken.holds_for(st):
            return True
        record = self.blob_record(entry.sha256)
        if record is not None and record.holds_for(st):
            return True
        try:
            size, digest = hashing.hash_file(path)
        except OSError:
            return False
        if (size, digest) == (entry.size, entry.sha256):
            self.record_blob(entry.sha256)
            return True
        log.warning(
            "cached blob for %s was modified in place (sha256 %s, expected %s); removing it so it is fetched again",
            f"{name}/{entry.path}" if name else entry.path,
            digest,
            entry.sha256,
        )
        with contextlib.suppress(OSError):
            path.unlink()
        return False

    def new_temp(self) -> tuple[int, Path]:
        """A fresh temp file owned by this process (O_EXCL), for a download in flight. An exclusive flock is
        held on it while the fd is open: gc removes only temp files it can lock itself, so a download in
        another PID namespace (a container sharing the cache volume) is never taken for a dead one."""
        path = self.tmp / f"{os.getpid()}-{secrets.token_hex(6)}.part"
        for attempt in (1, 2):
            self.make_dirs(self.tmp)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileNotFoundError:  # another process removed the empty tmp/ just now (a publisher ending): again
                self._made.discard(self.tmp)
                if attempt == 2:
                    raise
        _flock(fd)
        return fd, path

    def contained(self, path: Path) -> Path:
        """`path` itself, once proven to resolve inside the cache (a planted symlink cannot redirect writes).

        Cheap in the usual case, which runs once per downloaded file: a path spelled below the (resolved) root whose
        existing parts are plain folders and files is inside it; only a path with a symlink, a `..` or another
        spelling is resolved in full (os.path.realpath walks every part from / in Python)."""
        if not self._plainly_inside(path) and not path.resolve().is_relative_to(self.root):
            raise UnsafePathError(f"refusing to write through {path}: it resolves outside the cache {self.root}")
        return path

    def _plainly_inside(self, path: Path) -> bool:
        root = str(self.root)
        text = str(path)
        if not text.startswith(root + os.sep):
            return False
        current = root
        for part in text[len(root) + 1 :].split(os.sep):
            if part in ("", ".", ".."):
                return False
            current = f"{current}{os.sep}{part}"
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return True  # the rest does not exist yet: nothing there can redirect a write
            except OSError:
                return False
            if stat.S_ISLNK(mode):
                return False
        return True

    def make_dirs(self, path: Path) -> Path:
        """`mkdir -p path` inside the cache: the deepest part that exists already (a planted symlink, say
        `blobs -> /elsewhere`) is proven to resolve inside the cache first, so nothing is created outside it."""
        if path in self._made:
            return path
        probe = path
        while not os.path.lexists(probe) and probe != self.root and probe != probe.parent:
            probe = probe.parent
        self.contained(probe)
        path.mkdir(parents=True, exist_ok=True)
        self.contained(path)
        self._made.add(path)
        return path

    def _in_folder(self, folder: Path, write: Callable[[], T]) -> T:
        """`write()`, which creates a file in `folder`, once the folder exists; again if another process removed the
        folder meanwhile (gc and finished publishers remove empty folders)."""
        self.make_dirs(folder)
        try:
            return write()
        except FileNotFoundError:
            self._made.discard(folder)
            self.make_dirs(folder)
            return write()

    def publish_blob(self, temp: Path, sha256: str, persist_stamp: bool = True) -> Path:
        """Give a verified temp file its content name. Replacing a concurrent twin is harmless: same bytes.
        `persist_stamp=False` (a small file the caller links into a view next, which records it) skips writing the
        blob's record now; another process finding the blob without one re-hashes it, a small cost for a small file."""
        target = self.blob_path(sha256)
        os.chmod(temp, 0o444)
        try:
            self._in_folder(self._blob_folder(sha256), lambda: os.replace(temp, target))
        except IsADirectoryError:
            raise CacheWriteError(
                f"cannot give blob {sha256} its name: {target} is a folder, not a blob",
                hint=f"remove the folder {target} (nothing of the catalog's is in it)",
            ) from None
        self.record_blob(sha256, persist=persist_stamp)
        return target

    @contextlib.contextmanager
    def download_lock(self, sha256: str, timeout: float = 600.0) -> Iterator[bool]:
        """Hold a per-blob lock if we can get one; yields whether we did. Never required for safety.

        The lock file is removed on release: a process still waiting on the old file may then download
        the same blob again, which costs time but never correctness (the blob is verified either way).
        """
        from filelock import FileLock, Timeout

        path = self.locks / f"{sha256}.lock"
        lock = FileLock(str(path), thread_local=False)
        try:
            self.locks.mkdir(parents=True, exist_ok=True)
            lock.acquire(timeout=timeout)
        except (Timeout, OSError):  # held elsewhere, or `locks` is no folder we can use: go on without it
            yield False
            return
        try:
            yield True
        finally:
            path.unlink(missing_ok=True)
            lock.release()

    def clean_stale_temps(self, older_than: float = STALE_TEMP_SECONDS, dry_run: bool = False) -> list[Path]:
        """Remove temp files nobody writes: only a file this process can flock without waiting (a download in
        flight holds the lock, whatever PID namespace it runs in), and then only when the PID in its name is
        not alive here or the file is old. Returns what was (or would be) removed."""
        removed: list[Path] = []
        if not self.tmp.is_dir():
            return removed
        now = time.time()
        for path in self.tmp.iterdir():
            pid_text = path.name.split("-", 1)[0]
            alive = pid_text.isdigit() and pid_alive(int(pid_text))
            try:
                st = path.lstat()
            except OSError:
                continue
            if alive and now - st.st_mtime <= older_than:
                continue
            if stat.S_ISREG(st.st_mode) and not idle_file(path):
                continue  # a writer holds it (in this namespace or another)
            removed.append(path)
            if not dry_run:
                with contextlib.suppress(OSError):
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        return removed

    # -- views and markers ---------------------------------------------------------------------
    def marker_path(self, spec: ViewSpec) -> Path:
        return self.markers / spec.name / f"{spec.view_id}.json"

    def view_dir(self, spec: ViewSpec) -> Path:
        if spec.layout is Layout.HF_CACHE:
            return self.hub / hf_layout.hf_repo_folder(spec.hf_repo, spec.repo_type) / "snapshots" / spec.revision
        return self.models / spec.name / spec.view_id

    def marker_holds(self, marker: Marker) -> bool:
        """Every file of the marker's view is unchanged since it was verified, and no folder of it changed (a
        file dropped in would have changed one). Stats only; a moved ctime reads one small record."""
        return view_stamps.view_holds(
            str(self.root), marker.path, {rel: s.as_list() for rel, s in marker.files.items()}, marker.dirs
        )

    def read_marker(self, spec: ViewSpec) -> Marker | None:
        return Marker.read(self.marker_path(spec))

    def pinned_present(self, spec: ViewSpec) -> tuple[set[str], set[str]]:
        """What the view may hold (its pinned files: an hf-cache snapshot holds one manifest's files, see
        `resolve.check_snapshot_owner`) and what it holds: every file and link, and every folder, relative to
        the view. Staging names of live writers and, in a snapshot, links to the repo's blobs made in the last
        minutes (a concurrent builder of the same view lists them next) are left out."""
        root = self.view_dir(spec)
        allowed = {e.path for e in spec.files}
        repo_blobs = root.parent.parent / "blobs" if spec.layout is Layout.HF_CACHE else None
        present: set[str] = set()
        now = time.time()
        for dirpath, dirnames, filenames in os.walk(root):
            base = Path(dirpath)
            for name in [*dirnames, *filenames]:
                owner = staging_owner(name)
                if owner is not None and pid_alive(owner):
                    continue
                path = base / name
                rel = path.relative_to(root).as_posix()
                if repo_blobs is not None and rel not in allowed and _fresh_blob_link(path, repo_blobs, now):
                    continue
                present.add(rel)
        return allowed, present

    def extra_files(self, spec: ViewSpec) -> list[str]:
        """What the view holds beyond its pinned files: a `modeling_*.py` or `chat_template.json` dropped in."""
        allowed, present = self.pinned_present(spec)
        return extra_paths(allowed, present)

    def view_dirs(self, spec: ViewSpec) -> dict[str, list[int]]:
        """The identity (mtime, ctime) of the view's folder and of every folder holding a pinned file (a file
        added to any of them changes both; a new sub-folder changes its parent's; a folder's mtime put back
        moves its ctime)."""
        root = self.view_dir(spec)
        rels = {""} | {e.path.rsplit("/", 1)[0] for e in spec.files if "/" in e.path}
        rels |= {r.rsplit("/", i)[0] for r in list(rels) if r for i in range(1, r.count("/") + 1)}
        return {rel: dir_identity(os.stat(root / rel if rel else root)) for rel in sorted(rels)}

    def current_stamps(self, spec: ViewSpec) -> dict[str, FileStamp | None]:
        root = self.view_dir(spec)
        stamps: dict[str, FileStamp | None] = {}
        for entry in spec.files:
            try:
                st = os.stat(root / entry.path)  # follows the hf-cache symlinks to the blob
            except OSError:
                stamps[entry.path] = None
                continue
            stamps[entry.path] = FileStamp.of(st, entry.sha256) if stat.S_ISREG(st.st_mode) else None
        return stamps

    def records_for(
        self, spec: ViewSpec, marker: Marker, stamps: Mapping[str, FileStamp | None]
    ) -> dict[str, FileStamp | None]:
        """The blobs' own records, read only for the files whose ctime moved since the marker (a link)."""
        records: dict[str, FileStamp | None] = {}
        for entry in spec.files:
            then, now = marker.files.get(entry.path), stamps.get(entry.path)
            if then is not None and now is not None and then.same_content_stamp(now) and then.ctime_ns != now.ctime_ns:
                records[entry.sha256] = self.blob_record(entry.sha256)
        return records

    def view_state(self, spec: ViewSpec) -> ViewState:
        """FRESH, STALE or MISSING. Stats only; when a folder of the view changed, it is listed: a file that
        is not pinned makes the view STALE (if none, the new folder mtimes are recorded, best effort)."""
        marker = self.read_marker(spec)
        if marker is None:
            return ViewState.MISSING
        stamps = self.current_stamps(spec)
        changed = changed_files(spec, marker, stamps, self.records_for(spec, marker, stamps))
        if changed:
            # Only a ctime or mtime that moved (a link or unlink of the inode elsewhere: another view built or
            # removed; a touch; or an edit, maybe with its mtime put back): re-hash just those files; if they
            # hold, record them again.
            if not all(
                worth_rehash(marker.files.get(e.path), stamps.get(e.path)) for e in changed
            ) or not self._rehash_holds(spec, changed):
                return ViewState.STALE
            files = {**marker.files, **{e.path: s for e in changed if (s := stamps.get(e.path)) is not None}}
            marker = dataclasses.replace(marker, files=files)
            with contextlib.suppress(OSError):  # a read-only cache: re-hashed again next time, no harm
                atomic_write(self.marker_path(spec), marker.to_json())
        try:
            dirs = self.view_dirs(spec)
        except OSError:
            return ViewState.STALE
        if dirs != {d: list(i) for d, i in marker.dirs.items()}:
            if self.extra_files(spec):
                return ViewState.STALE
            with contextlib.suppress(OSError):  # a read-only cache: listed again next time, no harm
                atomic_write(self.marker_path(spec), dataclasses.replace(marker, dirs=dirs).to_json())
        return ViewState.FRESH

    def _rehash_holds(self, spec: ViewSpec, entries: list[FileEntry]) -> bool:
        """The view's files for `entries` still hash to their pins (their blobs' records are taken again)."""
        root = self.view_dir(spec)
        for entry in entries:
            try:
                size, digest = hashing.hash_file(root / entry.path)
            except OSError:
                return False
            if (size, digest) != (entry.size, entry.sha256):
                return False
        for entry in entries:
            with contextlib.suppress(OSError):
                if os.stat(root / entry.path).st_ino == self.blob_path(entry.sha256).stat().st_ino:
                    self.record_blob(entry.sha256)  # the view file is the blob (a link): it was just hashed
        return True

    def write_marker(self, spec: ViewSpec, catalog: str = "") -> Marker:
        """Record what is verified now; written last, atomically, so a reader sees all or nothing."""
        stamps = self.current_stamps(spec)
        files: dict[str, FileStamp] = {}
        for entry in spec.files:
            stamp = stamps[entry.path]
            if stamp is None:
                raise FileNotFoundError(f"{spec.name}/{entry.path} vanished while the view was being built")
            files[entry.path] = stamp
        now = time.time()
        marker = Marker(
            spec.view_id,
            spec.name,
            spec.hf_repo,
            spec.revision,
            spec.layout.value,
            self.view_dir(spec).relative_to(self.root).as_posix(),
            files,
            now,
            resolved_at=now,
            catalog=catalog,
            dirs=self.view_dirs(spec),
        )
        atomic_write(self.marker_path(spec), marker.to_json())
        return marker

    def note_resolved(self, spec: ViewSpec, every: float = RESOLVED_AT_EVERY) -> None:
        """Record that a resolve used the view now (gc's least-recently-resolved order)."""
        path = self.marker_path(spec)
        note_marker_used(path, Marker.read(path), every)

    def adopt_blob(self, source: Path, sha256: str, size: int, check: Callable[[Path], bool]) -> bool:
        """Bring a blob from a read-only shared tier into the cache: a hard link where the filesystem allows
        one, else a copy; `check(local_temp)` vouches for the bytes before the blob gets its name. Nothing
        is ever written, chmod-ed or locked at `source`. False when the bytes were refused."""
        fd, temp = self.new_temp()
        os.close(fd)
        temp.unlink()
        held = -1
        try:
            try:
                os.link(source, temp)  # same inode: no space, no copy; the tier's mode stays as it is
                with contextlib.suppress(OSError):
                    held = os.open(temp, os.O_RDONLY)
                    _flock(held)  # gc leaves a temp file alone while someone holds it
            except OSError:
                with open(source, "rb") as src, open(temp, "xb") as out:
                    _flock(out.fileno())
                    shutil.copyfileobj(src, out, 8 * 1024 * 1024)
                    out.flush()
                    os.chmod(temp, 0o444)
                    target = self.blob_path(sha256)
                    if os.stat(temp).st_size != size or not check(temp):
                        return False
                    self._in_folder(target.parent, lambda: os.replace(temp, target))
                self.record_blob(sha256)
                return True
            if os.stat(temp).st_size != size or not check(temp):
                return False
            target = self.blob_path(sha256)
            self._in_folder(target.parent, lambda: os.replace(temp, target))  # eviction removes empty blob folders
            self.record_blob(sha256)
            return True
        finally:
            if held >= 0:
                os.close(held)
            temp.unlink(missing_ok=True)

    def build_view(self, spec: ViewSpec, catalog: str = "") -> Path:
        """Lay the verified blobs out as the view, then write its marker (naming `catalog`, the resolved catalog
        folder, for gc). Every blob is proven first (`verified_blob`: its stamp, else its hash): a blob edited
        through another view's hard link is never linked into a new one. Linking moves the blob's ctime, so
        its stamp is recorded again after. A view whose weights index names a file the manifest does not pin
        is refused before anything is laid out (IncompleteModelError).

        Concurrent builders of one view never take it away from each other or from a reader (see
        `_build_dir_view`); the marker is taken of the folder in place. Should a file or folder of it vanish
        meanwhile all the same (gc removing a view nobody marked for ten minutes just as this builder found it
        complete; an eviction removing an hf-cache repo folder it emptied), the view is laid out again."""
        for entry in spec.files:
            if not self.verified_blob(entry, spec.name):
                raise FileNotFoundError(f"blob for {spec.name}/{entry.path} is not in the cache")
        from resolver.completeness import check_view

        check_view(spec.name, spec.files, lambda entry: self.blob_path(entry.sha256).read_bytes())
        for attempt in range(1, LAYOUT_ATTEMPTS + 1):
            try:
                if spec.layout is Layout.HF_CACHE:
                    path = hf_layout.build_snapshot(self, spec)
                else:
                    path = self._build_dir_view(spec)
                for sha256 in sorted({e.sha256 for e in spec.files}):
                    self.record_blob(sha256)
                self.between_steps("laid out")
                self.write_marker(spec, catalog)
                return path
            except FileNotFoundError:
                if attempt == LAYOUT_ATTEMPTS:
                    raise
                log.info(
                    "%s: a file or folder of the view vanished while it was laid out; laying it out again", spec.name
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _build_dir_view(self, spec: ViewSpec) -> Path:
        """Put the view in place so that neither a reader nor a concurrent builder ever finds it absent.

        A view already in place that holds exactly the pinned, verified files (a concurrent builder's) is kept
        as it is: the usual race of several resolves of one view needs no swap at all, on any filesystem.
        Otherwise the view is built under a staging name and renamed into place when nothing is there (the whole
        folder appears at once); a stale or damaged folder in place is swapped with it in one step (`exchange`:
        renameat2's RENAME_EXCHANGE). Where the filesystem has no such swap (NFS), the folder in place is
        repaired instead, one atomic rename per pinned file (as hf-cache snapshots always are built), then
        whatever is not pinned is removed: each pinned path names its verified file or the one before, never
        nothing. No lock: correctness rests on renames alone."""
        final = self.view_dir(spec)
        final.parent.mkdir(parents=True, exist_ok=True)
        self.contained(final.parent)
        if self._complete_in_place(spec):
            self.between_steps("kept")
            return final
        staging = final.parent / staging_name(spec.view_id)
        staging.mkdir()
        try:
            made: set[Path] = set()
            for entry in spec.files:
                link_or_copy(self.blob_path(entry.sha256), prepared_target(staging, entry.path, made))
            self.between_steps("staged")
            try:
                os.rename(staging, final)
                self.between_steps("placed")
                return final
            except OSError as exc:
                if exc.errno not in _IN_THE_WAY:
                    raise
            self.between_steps("found a folder in place")
            if self._complete_in_place(spec):
                self.between_steps("kept")
            elif exchange(staging, final):  # `staging` now names the folder that was in place: removed below
                self.between_steps("exchanged")
            else:
                self._repair_in_place(spec)
                self.between_steps("repaired")
        finally:
            remove_tree(staging)
        self.between_steps("dropped")
        return final

    def _complete_in_place(self, spec: ViewSpec) -> bool:
        """The folder at the view's path holds exactly its pinned files, each the verified blob itself (the hard
        link a builder made: one inode) or, where a builder had to copy, bytes that hash to the pin. Stats only
        in the usual case; one lstat when nothing is there."""
        final = self.view_dir(spec)
        try:
            if not stat.S_ISDIR(os.lstat(final).st_mode):
                return False
            for entry in spec.files:
                st = os.lstat(final / entry.path)
                if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
                    return False
                blob = self.blob_path(entry.sha256).stat()
                if (st.st_dev, st.st_ino) != (blob.st_dev, blob.st_ino) and hashing.hash_file(final / entry.path) != (
                    entry.size,
                    entry.sha256,
                ):
                    return False
            return not self.extra_files(spec)
        except OSError:
            return False

    def _repair_in_place(self, spec: ViewSpec) -> None:
        """Make the folder at the view's path hold the pinned files, each linked from its verified blob under a
        staging name and renamed over its path (atomic per file), then remove what no manifest pins. What stands
        in the way of a pinned path (a file where its folder belongs, a folder or symlink where the file belongs)
        is removed first: it was never a pinned file."""
        final = self.view_dir(spec)
        try:
            mode: int | None = os.lstat(final).st_mode
        except FileNotFoundError:
            mode = None
        if mode is None or not stat.S_ISDIR(mode):  # a file or symlink is no folder to repair (nor to write through)
            if mode is not None:
                os.unlink(final)
            final.mkdir(exist_ok=True)
        self.contained(final)
        made: set[Path] = set()
        for entry in spec.files:
            _clear_the_way(final, entry.path)
            target = prepared_target(final, entry.path, made)
            temp = target.parent / staging_name(target.name)
            link_or_copy(self.blob_path(entry.sha256), temp)
            try:
                os.replace(temp, target)
            finally:
                temp.unlink(missing_ok=True)  # a rename between two links to one inode does nothing
        for rel in self.extra_files(spec):
            remove_tree(final / rel)

    def remove_view(self, spec: ViewSpec) -> None:
        self.marker_path(spec).unlink(missing_ok=True)
        if spec.layout is Layout.DIR:
            shutil.rmtree(self.view_dir(spec), ignore_errors=True)

    def markers_all(self) -> Iterator[tuple[Path, Marker | None]]:
        """Every marker file, with its content (None: unreadable or of another version)."""
        if not self.markers.is_dir():
            return
        for path in sorted(self.markers.glob("*/*.json")):
            yield path, Marker.read(path)


def _clear_the_way(root: Path, relative: str) -> None:
    """Remove what is not a real folder where a folder of `root/relative` belongs (a file, a symlink), and a
    folder or symlink where the file itself belongs."""
    current = root
    for part in relative.split("/")[:-1]:
        current = current / part
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                os.unlink(current)
    target = root / relative
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(target).st_mode):
            remove_tree(target)


def _no_step(step: str) -> None:
    """`Cache.between_steps` outside tests: nothing."""


def _flock(fd: int) -> None:
    """Hold an exclusive flock on `fd` until it is closed (where flock exists; a no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def idle_file(path: Path) -> bool:
    """Nobody holds a flock on `path`: this process could take one without waiting (also where flock cannot tell;
    a file that cannot be opened is not idle)."""
    try:
        return lock_free(path, exclusive=True) is not False
    except OSError:
        return False


def _fresh_blob_link(path: Path, repo_blobs: Path, now: float) -> bool:
    """A symlink to one of the repo's blobs, made minutes ago: a concurrent builder's, listed next."""
    try:
        if not path.is_symlink() or now - path.lstat().st_mtime > IN_FLIGHT_LINK_SECONDS:
            return False
        target = Path(os.path.normpath(path.parent / os.readlink(path)))
    except OSError:
        return False
    return target.parent == repo_blobs and _SHA256.fullmatch(target.name) is not None


def note_marker_used(path: Path, marker: Marker | None, every: float = RESOLVED_AT_EVERY) -> None:
    """Set the marker's `resolved_at` to now. Cheap: rewritten only when older than `every` seconds (so a
    warm resolve writes at most once an hour); a failure is harmless (a read-only cache, say)."""
    if marker is not None:
        view_stamps.note_used(str(path), json.loads(marker.to_json()), every)


def cache_error(cache: Cache, exc: OSError, name: str = "") -> CatalogError:
    """One line for an OS error met in the cache (a file where a folder belongs, a read-only or vanished
    cache, no permission); an error elsewhere keeps its own words."""
    where = exc.filename if isinstance(exc.filename, str) else None
    what = f"{exc.strerror or exc}" + (f": {where}" if where else "")
    if where is not None and not Path(where).is_relative_to(cache.root):
        return CatalogError(f"{name + ': ' if name else ''}{what}")
    hint = write_hint(exc.errno)
    return CacheWriteError(f"cannot use the cache at {cache.root}{' for ' + name if name else ''}: {what}", hint=hint)


def write_hint(err: int | None) -> str:
    """What to do about an OS error writing the cache: by its errno, not "free disk space" for everything."""
    return {
        errno.EROFS: "the cache is read-only: resolve once where it is writable, or point --cache / CATALOG_CACHE "
        "at a writable folder",
        errno.EACCES: "the cache is not writable by this user: point --cache / CATALOG_CACHE at a folder you own",
        errno.EPERM: "the cache is not writable by this user: point --cache / CATALOG_CACHE at a folder you own",
        errno.ENOSPC: "free disk space or point --cache / CATALOG_CACHE at a larger disk",
        errno.EFBIG: "a file size limit (ulimit -f) stopped the write: raise it or point --cache elsewhere",
    }.get(
        err or 0,
        "point --cache / CATALOG_CACHE at a folder (not a file) this user can write; `catalog gc` "
        "tidies a damaged cache",
    )
