"""The local cache, the one owner of every folder in it, and of the marker format.

    <root>/blobs/<aa>/<sha256>          read-only once published; shared by every model and revision
    <root>/tmp/<pid>-<token>.part       downloads in flight, owned by one process
    <root>/locks/<sha256>.lock          large downloads in flight, only to avoid duplicate work; removed after
    <root>/models/<name>/<view>/...     `--layout dir`: hard links to blobs (copies where links fail)
    <root>/hub/models--org--name/...    `--layout hf-cache`: the Hugging Face cache layout (datasets--org--name
                                        for datasets), with trees/<revision>.json and refs/main (see _build_hf_view)
    <root>/markers/<name>/<view>.json   written last and atomically: size, mtime_ns, inode, ctime_ns, sha256 per
                                        file, the mtime of every folder of the view, and the catalog that made it
    <root>/blob-stamps/<aa>/<sha256>    size, mtime_ns, inode, ctime_ns of a blob when the cache last verified or
                                        linked it: a blob whose stamp no longer holds is re-hashed before use
    <root>/warm-index/<key>.json        the warm resolve's answers (the application layer writes them)
    <root>/sync-state/<name>/<tag>.json what sync last read of a model's state object, by its ETag

`catalog gc` cleans every one of them. A warm resolve reads one marker and stats each file: no byte of
any weight is read. What a view and a marker are, and the pure decisions over them, are in resolver/views.py.
Standard library only (the warm path imports it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
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
from typing import TYPE_CHECKING, Any

from catalog import formats, naming
from catalog.errors import CacheWriteError, CatalogError, UnsafePathError
from resolver import hashing
from resolver.fsutil import atomic_write, link_or_copy, pid_alive, staging_name, staging_owner
from resolver.identity import dir_identity
from resolver.views import (FileStamp, Layout, Marker, ViewSpec, ViewState, changed_files, extra_paths, stamp_holds,
                            worth_rehash)

if TYPE_CHECKING:
    from catalog.schema import FileEntry, ModelManifest

log = logging.getLogger(__name__)

STALE_TEMP_SECONDS = 3600
RESOLVED_AT_EVERY = 3600.0  # a marker's resolved_at is refreshed at most this often (one small write)
TREE_FORMAT_VERSION = 1  # huggingface_hub's trees/<commit>.json (huggingface_hub/_tree_cache.py)
SMALL_FILE = 10 * 1024 * 1024  # a file with no recorded blob id that is not a weight: git sha1 of its bytes
IN_FLIGHT_LINK_SECONDS = 600  # an hf-cache snapshot link a concurrent builder made but has not listed yet
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def read_blob_record(root: Path, sha256: str) -> FileStamp | None:
    """The stamp `Cache.record_blob` took of blob `sha256` under cache root `root` (None: none or unreadable)."""
    if not _SHA256.fullmatch(sha256):
        return None
    try:
        size, mtime_ns, inode, ctime_ns = json.loads((root / "blob-stamps" / sha256[:2] / sha256).read_bytes())
        return FileStamp(int(size), int(mtime_ns), int(inode), sha256, int(ctime_ns))
    except (OSError, ValueError, TypeError):
        return None


def safe_join(root: Path, relative: str) -> Path:
    """root/relative, proven to stay inside root (no '..', no absolute path, no symlinked parent)."""
    if (message := naming.check_relative_path(relative)) is not None:
        raise UnsafePathError(f"refusing to write {relative!r}: {message}")
    target = root / relative
    parent = target.parent
    real_root = root.resolve()
    if not parent.resolve().is_relative_to(real_root):
        raise UnsafePathError(f"refusing to write {relative!r}: {parent} leads outside {root}")
    return target


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.blobs = self.root / "blobs"
        self.tmp = self.root / "tmp"
        self.locks = self.root / "locks"
        self.models = self.root / "models"
        self.hub = self.root / "hub"
        self.markers = self.root / "markers"
        self.warm_index = self.root / "warm-index"
        self.sync_state = self.root / "sync-state"
        self.blob_stamps = self.root / "blob-stamps"

    # -- blobs -------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if (message := naming.check_sha256(sha256)) is not None:
            raise UnsafePathError(message)
        return self.blobs / sha256[:2] / sha256

    def has_blob(self, entry: FileEntry) -> bool:
        """Published blobs were verified before they got their name; a size check catches truncation."""
        try:
            st = self.blob_path(entry.sha256).stat()
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_size == entry.size

    def record_blob(self, sha256: str) -> FileStamp | None:
        """Record the blob's stamp now (after publishing, verifying or linking it). Best effort: without a
        record the blob is re-hashed before its next use, which costs time, never correctness."""
        try:
            st = self.blob_path(sha256).stat()
            atomic_write(self.blob_stamps / sha256[:2] / sha256,
                         json.dumps([st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]).encode())
            return FileStamp.of(st, sha256)
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
        log.warning("cached blob for %s was modified in place (sha256 %s, expected %s); removing it so it is fetched "
                    "again", f"{name}/{entry.path}" if name else entry.path, digest, entry.sha256)
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
                if attempt == 2:
                    raise
        _flock(fd)
        return fd, path

    def contained(self, path: Path) -> Path:
        """`path` itself, once proven to resolve inside the cache (a planted symlink cannot redirect writes)."""
        if not path.resolve().is_relative_to(self.root):
            raise UnsafePathError(f"refusing to write through {path}: it resolves outside the cache {self.root}")
        return path

    def make_dirs(self, path: Path) -> Path:
        """`mkdir -p path` inside the cache: the deepest part that exists already (a planted symlink, say
        `blobs -> /elsewhere`) is proven to resolve inside the cache first, so nothing is created outside it."""
        probe = path
        while not os.path.lexists(probe) and probe != self.root and probe != probe.parent:
            probe = probe.parent
        self.contained(probe)
        path.mkdir(parents=True, exist_ok=True)
        return self.contained(path)

    def publish_blob(self, temp: Path, sha256: str) -> Path:
        """Give a verified temp file its content name. Replacing a concurrent twin is harmless: same bytes."""
        target = self.blob_path(sha256)
        self.make_dirs(target.parent)
        os.chmod(temp, 0o444)
        try:
            os.replace(temp, target)
        except IsADirectoryError:
            raise CacheWriteError(f"cannot give blob {sha256} its name: {target} is a folder, not a blob",
                                  hint=f"remove the folder {target} (nothing of the catalog's is in it)") from None
        self.record_blob(sha256)
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
            return self.hub / hf_repo_folder(spec.hf_repo, spec.repo_type) / "snapshots" / spec.revision
        return self.models / spec.name / spec.view_id

    def marker_holds(self, marker: Marker) -> bool:
        """Every file of the marker's view is unchanged since it was verified, and no folder of it changed (a
        file dropped in would have changed one). Stats only; a moved ctime reads one small record."""
        base = self.root / marker.path
        try:
            for rel, stamp in marker.files.items():
                st = os.stat(base / rel)
                if not stamp.holds_for(st) and not stamp_holds(stamp, FileStamp.of(st, stamp.sha256),
                                                                read_blob_record(self.root, stamp.sha256)):
                    return False
            return all(dir_identity(os.stat(base / rel)) == list(ident) for rel, ident in marker.dirs.items())
        except OSError:
            return False

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

    def records_for(self, spec: ViewSpec, marker: Marker, stamps: Mapping[str, FileStamp | None]) -> dict[str, FileStamp | None]:
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
            if not all(worth_rehash(marker.files.get(e.path), stamps.get(e.path)) for e in changed) \
                    or not self._rehash_holds(spec, changed):
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
        marker = Marker(spec.view_id, spec.name, spec.hf_repo, spec.revision, spec.layout.value,
                        self.view_dir(spec).relative_to(self.root).as_posix(), files, now, resolved_at=now,
                        catalog=catalog, dirs=self.view_dirs(spec))
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
                    self.make_dirs(target.parent)
                    os.replace(temp, target)
                self.record_blob(sha256)
                return True
            if os.stat(temp).st_size != size or not check(temp):
                return False
            target = self.blob_path(sha256)
            self.make_dirs(target.parent)
            os.replace(temp, target)
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
        is refused before anything is laid out (IncompleteModelError)."""
        for entry in spec.files:
            if not self.verified_blob(entry, spec.name):
                raise FileNotFoundError(f"blob for {spec.name}/{entry.path} is not in the cache")
        from resolver.completeness import check_view

        check_view(spec.name, spec.files, lambda entry: self.blob_path(entry.sha256).read_bytes())
        if spec.layout is Layout.HF_CACHE:
            path = self._build_hf_view(spec)
        else:
            path = self._build_dir_view(spec)
        for sha256 in sorted({e.sha256 for e in spec.files}):
            self.record_blob(sha256)
        self.write_marker(spec, catalog)
        return path

    def _build_dir_view(self, spec: ViewSpec) -> Path:
        final = self.view_dir(spec)
        final.parent.mkdir(parents=True, exist_ok=True)
        self.contained(final.parent)
        staging = final.parent / staging_name(spec.view_id)
        staging.mkdir()
        try:
            for entry in spec.files:
                target = safe_join(staging, entry.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                link_or_copy(self.blob_path(entry.sha256), target)
            _swap_dir(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return final

    def _build_hf_view(self, spec: ViewSpec) -> Path:
        """{models,datasets}--org--name/{blobs/<sha256>, snapshots/<revision>/<path> -> ../../blobs/<sha256>,
        trees/<revision>.json, refs/main}.

        A snapshot holds exactly one manifest's pinned files (the one answering for the repo id: resolve refuses
        the others in this layout), so a load by repo id never mixes two manifests' weights; files of any other
        view found there are removed (`_drop_extras`). `trees/<revision>.json` is huggingface_hub's cached tree
        listing: `snapshot_download` checks a snapshot against it and `get_cached_repo_tree` reads it, offline.
        It lists exactly the snapshot's files, so a snapshot is never reported incomplete for files the catalog
        chose not to pin.

        `refs/main` is written only while exactly one revision of the repo is in the cache: a request by repo
        id alone then gets the one pin there is. A second revision (another manifest pinning the same repo)
        removes it rather than pointing it at either pin: loading by id alone then fails loudly instead of
        silently giving one of two pins; each still loads by its revision.
        """
        repo_dir = self.hub / hf_repo_folder(spec.hf_repo, spec.repo_type)
        blobs = repo_dir / "blobs"
        snapshot = repo_dir / "snapshots" / spec.revision
        blobs.mkdir(parents=True, exist_ok=True)
        snapshot.mkdir(parents=True, exist_ok=True)
        self.contained(blobs)
        self.contained(snapshot)
        for entry in spec.files:
            hf_blob = blobs / entry.sha256
            # Always re-link from the verified blob: an hf blob left from before may have been corrupted
            # in place (it shares the inode) and dropped from blobs/ by `verify --deep` since.
            staged = blobs / staging_name(entry.sha256)
            link_or_copy(self.blob_path(entry.sha256), staged)
            os.replace(staged, hf_blob)
            # rename() between two links to one inode does nothing and leaves the source name behind.
            staged.unlink(missing_ok=True)
            link = safe_join(snapshot, entry.path)
            link.parent.mkdir(parents=True, exist_ok=True)
            relative = os.path.relpath(hf_blob, link.parent)
            staged_link = link.parent / staging_name(link.name)
            os.symlink(relative, staged_link)
            os.replace(staged_link, link)
        self._drop_extras(spec)
        self._write_tree(repo_dir, snapshot, spec)
        self._update_main_ref(repo_dir, spec)
        return snapshot

    def _drop_extras(self, spec: ViewSpec) -> None:
        """Remove from an hf-cache snapshot what no view of the revision put there (a file dropped in)."""
        snapshot = self.view_dir(spec)
        for rel in self.extra_files(spec):
            path = snapshot / rel
            log.warning("%s: removing %s from the cache's snapshot: no manifest pins it", spec.name, rel)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _write_tree(self, repo_dir: Path, snapshot: Path, spec: ViewSpec) -> None:
        trees = repo_dir / "trees"
        trees.mkdir(exist_ok=True)
        self.contained(trees)
        path = trees / f"{spec.revision}.json"
        files = {entry.path: tree_entry(entry, self.blob_path(entry.sha256)) for entry in spec.files}
        body = {"format_version": TREE_FORMAT_VERSION, "files": {p: files[p] for p in sorted(files)}}
        atomic_write(path, json.dumps(body, indent=1).encode())

    def _update_main_ref(self, repo_dir: Path, spec: ViewSpec) -> None:
        refs = repo_dir / "refs"
        refs.mkdir(exist_ok=True)
        main = refs / "main"
        if hf_revisions(repo_dir) == [spec.revision]:
            atomic_write(main, spec.revision.encode())  # no trailing newline, as huggingface_hub writes it
        # Checked again after writing: a builder of another revision may have added its snapshot meanwhile.
        revisions = hf_revisions(repo_dir)
        if len(revisions) > 1 and main.exists():
            log.warning("%s: the cache holds %d revisions of %s (%s); removed refs/main so a request without a "
                        "revision fails instead of loading one of them", spec.name, len(revisions), spec.hf_repo,
                        ", ".join(r[:12] for r in revisions))
            main.unlink(missing_ok=True)

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


def hf_repo_folder(repo: str, repo_type: str = "model") -> str:
    """huggingface_hub's folder name for a repo: models--org--name, datasets--org--name."""
    if repo_type not in ("model", "dataset"):
        raise UnsafePathError(f"unknown repo type {repo_type!r}")
    return f"{repo_type}s--" + repo.replace("/", "--")


def hf_revisions(repo_dir: Path) -> list[str]:
    """The commits with a snapshot folder in an hf-cache repo folder."""
    try:
        return sorted(d.name for d in (repo_dir / "snapshots").iterdir() if _COMMIT.fullmatch(d.name) and d.is_dir())
    except OSError:
        return []


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer_blob_id(sha256: str, size: int) -> str:
    """The git blob id of an LFS file: the sha1 of its pointer file, computed from the pin alone."""
    return git_blob_id(f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode())


def tree_entry(entry: FileEntry, blob: Path) -> dict[str, Any]:
    """One file of huggingface_hub's tree listing ({size, blob_id, lfs_sha256, lfs_size, xet_hash}).

    The blob id and Xet hash are the manifest's when lock recorded them. Without them, a weight file or a
    large one is taken as LFS (its blob id follows from sha256 and size), a small one is hashed as git does.
    """
    pointer_id = lfs_pointer_blob_id(entry.sha256, entry.size)
    if entry.blob_id is not None:
        blob_id, lfs = entry.blob_id, entry.blob_id == pointer_id
    elif entry.xet_hash is not None or formats.is_weight_file(entry.path) or entry.size > SMALL_FILE:
        blob_id, lfs = pointer_id, True
    else:
        blob_id, lfs = git_blob_id(blob.read_bytes()), False
    info: dict[str, Any] = {"size": entry.size, "blob_id": blob_id}
    if lfs or entry.xet_hash is not None:
        info |= {"lfs_sha256": entry.sha256, "lfs_size": entry.size}
    if entry.xet_hash is not None:
        info["xet_hash"] = entry.xet_hash
    return info


def _swap_dir(staging: Path, final: Path) -> None:
    """Put a fully built folder in place. A concurrent builder of the same view may win: equal content."""
    try:
        os.rename(staging, final)
        return
    except OSError:
        pass  # final exists (another process, or an old stale view)
    trash = final.with_name(staging_name(f"trash-{final.name}"))
    try:
        os.rename(final, trash)
    except FileNotFoundError:
        pass
    try:
        os.rename(staging, final)
    except OSError:
        pass  # someone else put theirs in place first: equally verified
    shutil.rmtree(trash, ignore_errors=True)


def _flock(fd: int) -> None:
    """Hold an exclusive flock on `fd` until it is closed (where flock exists; a no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def idle_file(path: Path) -> bool:
    """Nobody holds a flock on `path`: this process could take one without waiting."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return True
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)


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
    now = time.time()
    if marker is None or now - marker.last_used < every:
        return
    try:
        atomic_write(path, dataclasses.replace(marker, resolved_at=now).to_json())
    except OSError:
        log.debug("could not record the resolve time of %s", marker.name, exc_info=True)


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
    return {errno.EROFS: "the cache is read-only: resolve once where it is writable, or point --cache / CATALOG_CACHE "
                         "at a writable folder",
            errno.EACCES: "the cache is not writable by this user: point --cache / CATALOG_CACHE at a folder you own",
            errno.EPERM: "the cache is not writable by this user: point --cache / CATALOG_CACHE at a folder you own",
            errno.ENOSPC: "free disk space or point --cache / CATALOG_CACHE at a larger disk",
            errno.EFBIG: "a file size limit (ulimit -f) stopped the write: raise it or point --cache elsewhere",
            }.get(err or 0, "point --cache / CATALOG_CACHE at a folder (not a file) this user can write; `catalog gc` "
                            "tidies a damaged cache")
