"""The local cache: content-addressed blobs, per-model views, and markers of what was verified.

    <root>/blobs/<aa>/<sha256>          read-only once published; shared by every model and revision
    <root>/tmp/<pid>-<token>.part       downloads in flight, owned by one process
    <root>/locks/<sha256>.lock          only to avoid duplicate downloads; correctness never needs them
    <root>/models/<name>/<view>/...     `--layout dir`: hard links to blobs (copies where links fail)
    <root>/hub/models--org--name/...    `--layout hf-cache`: the Hugging Face cache layout
    <root>/markers/<name>/<view>.json   written last and atomically: size, mtime_ns, inode, sha256 per file

A warm resolve reads one marker and stats each file: no byte of any weight is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from catalog import naming
from catalog.errors import UnsafePathError
from catalog.schema import FileEntry

log = logging.getLogger(__name__)

MARKER_VERSION = 1
STALE_TEMP_SECONDS = 3600


class Layout(str, Enum):
    DIR = "dir"
    HF_CACHE = "hf-cache"


@dataclass(frozen=True)
class ViewSpec:
    """What one view holds: these files of this model, laid out this way."""

    name: str
    hf_repo: str
    revision: str
    layout: Layout
    files: tuple[FileEntry, ...]

    @property
    def view_id(self) -> str:
        listing = "".join(f"{f.path}\0{f.size}\0{f.sha256}\n" for f in sorted(self.files, key=lambda f: f.path))
        digest = hashlib.sha256(f"{self.layout.value}\n{self.hf_repo}\n{self.revision}\n{listing}".encode()).hexdigest()
        return f"{self.revision[:12]}-{digest[:12]}"


@dataclass(frozen=True)
class FileStamp:
    """What was true of a verified file; if all of it still holds, the bytes are the verified ones."""

    size: int
    mtime_ns: int
    inode: int
    sha256: str

    @classmethod
    def of(cls, st: os.stat_result, sha256: str) -> FileStamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, sha256)


class ViewState(Enum):
    FRESH = "fresh"  # marker present, every file unchanged since it was verified
    STALE = "stale"  # marker present but some file changed, vanished or was replaced
    MISSING = "missing"  # never built (or its marker is unreadable)


def judge_view(spec: ViewSpec, marker: dict[str, Any] | None, stamps: dict[str, FileStamp | None]) -> ViewState:
    """Pure: is the view still what was verified? `stamps` are the current stats of the files."""
    if marker is None or marker.get("version") != MARKER_VERSION or marker.get("view") != spec.view_id:
        return ViewState.MISSING
    recorded = marker.get("files", {})
    for entry in spec.files:
        then = recorded.get(entry.path)
        now = stamps.get(entry.path)
        if then is None or now is None or then != [now.size, now.mtime_ns, now.inode, entry.sha256]:
            return ViewState.STALE
    return ViewState.FRESH


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

    def new_temp(self) -> tuple[int, Path]:
        """A fresh temp file owned by this process (O_EXCL), for a download in flight."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.contained(self.tmp)
        path = self.tmp / f"{os.getpid()}-{secrets.token_hex(6)}.part"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        return fd, path

    def contained(self, path: Path) -> Path:
        """`path` itself, once proven to resolve inside the cache (a planted symlink cannot redirect writes)."""
        if not path.resolve().is_relative_to(self.root):
            raise UnsafePathError(f"refusing to write through {path}: it resolves outside the cache {self.root}")
        return path

    def publish_blob(self, temp: Path, sha256: str) -> Path:
        """Give a verified temp file its content name. Replacing a concurrent twin is harmless: same bytes."""
        target = self.blob_path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.contained(target.parent)
        os.chmod(temp, 0o444)
        os.replace(temp, target)
        return target

    @contextlib.contextmanager
    def download_lock(self, sha256: str, timeout: float = 600.0) -> Iterator[bool]:
        """Hold a per-blob lock if we can get one; yields whether we did. Never required for safety."""
        from filelock import FileLock, Timeout

        self.locks.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.locks / f"{sha256}.lock"), thread_local=False)
        try:
            lock.acquire(timeout=timeout)
        except (Timeout, OSError):
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def clean_stale_temps(self, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Remove temp files of dead processes (or very old ones). Returns how many were removed."""
        removed = 0
        if not self.tmp.is_dir():
            return 0
        now = time.time()
        for path in self.tmp.iterdir():
            pid_text = path.name.split("-", 1)[0]
            alive = pid_text.isdigit() and pid_alive(int(pid_text))
            try:
                old = now - path.stat().st_mtime > older_than
            except FileNotFoundError:
                continue
            if not alive or old:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        return removed

    # -- views and markers ---------------------------------------------------------------------
    def marker_path(self, spec: ViewSpec) -> Path:
        return self.markers / spec.name / f"{spec.view_id}.json"

    def view_dir(self, spec: ViewSpec) -> Path:
        if spec.layout is Layout.HF_CACHE:
            return self.hub / hf_repo_folder(spec.hf_repo) / "snapshots" / spec.revision
        return self.models / spec.name / spec.view_id

    def read_marker(self, spec: ViewSpec) -> dict[str, Any] | None:
        try:
            data = json.loads(self.marker_path(spec).read_bytes())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

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

    def view_state(self, spec: ViewSpec) -> ViewState:
        marker = self.read_marker(spec)
        if marker is None:
            return ViewState.MISSING
        return judge_view(spec, marker, self.current_stamps(spec))

    def write_marker(self, spec: ViewSpec) -> None:
        """Record what is verified now; written last, atomically, so a reader sees all or nothing."""
        stamps = self.current_stamps(spec)
        files = {}
        for entry in spec.files:
            stamp = stamps[entry.path]
            if stamp is None:
                raise FileNotFoundError(f"{spec.name}/{entry.path} vanished while the view was being built")
            files[entry.path] = [stamp.size, stamp.mtime_ns, stamp.inode, entry.sha256]
        data = {"version": MARKER_VERSION, "view": spec.view_id, "name": spec.name, "hf_repo": spec.hf_repo,
                "revision": spec.revision, "layout": spec.layout.value, "path": str(self.view_dir(spec)),
                "verified_at": time.time(), "files": files}
        atomic_write(self.marker_path(spec), json.dumps(data, sort_keys=True).encode())

    def build_view(self, spec: ViewSpec) -> Path:
        """Lay the (already verified) blobs out as the view, then write its marker."""
        for entry in spec.files:
            if not self.has_blob(entry):
                raise FileNotFoundError(f"blob for {spec.name}/{entry.path} is not in the cache")
        if spec.layout is Layout.HF_CACHE:
            path = self._build_hf_view(spec)
        else:
            path = self._build_dir_view(spec)
        self.write_marker(spec)
        return path

    def _build_dir_view(self, spec: ViewSpec) -> Path:
        final = self.view_dir(spec)
        final.parent.mkdir(parents=True, exist_ok=True)
        self.contained(final.parent)
        staging = final.parent / f".{spec.view_id}.{os.getpid()}-{secrets.token_hex(4)}"
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
        """models--org--name/{blobs/<sha256>, snapshots/<revision>/<path> -> ../../blobs/<sha256>, refs/main}."""
        repo_dir = self.hub / hf_repo_folder(spec.hf_repo)
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
            staged = blobs / f".{entry.sha256}.{os.getpid()}-{secrets.token_hex(4)}"
            link_or_copy(self.blob_path(entry.sha256), staged)
            os.replace(staged, hf_blob)
            link = safe_join(snapshot, entry.path)
            link.parent.mkdir(parents=True, exist_ok=True)
            relative = os.path.relpath(hf_blob, link.parent)
            staged_link = link.parent / f".{link.name}.{os.getpid()}-{secrets.token_hex(4)}"
            os.symlink(relative, staged_link)
            os.replace(staged_link, link)
        refs = repo_dir / "refs"
        refs.mkdir(exist_ok=True)
        atomic_write(refs / "main", spec.revision.encode())  # no trailing newline, as huggingface_hub writes it
        return snapshot

    def remove_view(self, spec: ViewSpec) -> None:
        self.marker_path(spec).unlink(missing_ok=True)
        if spec.layout is Layout.DIR:
            shutil.rmtree(self.view_dir(spec), ignore_errors=True)

    def markers_all(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        if not self.markers.is_dir():
            return
        for path in sorted(self.markers.glob("*/*.json")):
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                yield path, data


def hf_repo_folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def link_or_copy(source: Path, target: Path) -> None:
    """Hard link (no extra space, same inode as the blob), falling back to a read-only copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    with open(temp, "wb") as f:
        f.write(data)
    os.replace(temp, path)


def _swap_dir(staging: Path, final: Path) -> None:
    """Put a fully built folder in place. A concurrent builder of the same view may win: equal content."""
    try:
        os.rename(staging, final)
        return
    except OSError:
        pass  # final exists (another process, or an old stale view)
    trash = final.with_name(f".trash-{final.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(final, trash)
    except FileNotFoundError:
        pass
    try:
        os.rename(staging, final)
    except OSError:
        pass  # someone else put theirs in place first: equally verified
    shutil.rmtree(trash, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

