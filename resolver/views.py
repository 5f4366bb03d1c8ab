"""What a view is and what was verified of it: plain values and the pure decisions over them.

A view is some files of one model laid out one way (`ViewSpec`); its marker (`Marker`) records, per file,
the stat stamp (`FileStamp`) taken when the bytes were verified. Whether a view still holds, which of its
files changed, whether a moved stamp is worth a re-hash: decided here, without I/O. resolver/cache.py does
the I/O around them. Standard library only (the warm path imports it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog import bounded
from resolver import view_stamps

if TYPE_CHECKING:
    from catalog.schema import FileEntry, ModelManifest

MARKER_VERSION = view_stamps.MARKER_VERSION


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
    repo_type: str = "model"  # "dataset": the hf-cache layout puts it under datasets--org--name

    @classmethod
    def of(cls, manifest: ModelManifest, layout: Layout, files: tuple[FileEntry, ...]) -> ViewSpec:
        """The view of these files of `manifest`."""
        return cls(
            manifest.name, manifest.source.hf_repo, manifest.source.revision, layout, files, manifest.source.repo_type
        )

    @functools.cached_property  # a hash over every file's pin: a resolve asks for it about seven times
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
    # A write that restores the mtime (`touch -r`) still moves ctime. So does a new hard link to the inode:
    # the cache records a blob's ctime again after it links it (`Cache.record_blob`), see `vouched`.
    ctime_ns: int = 0

    @classmethod
    def of(cls, st: os.stat_result, sha256: str) -> FileStamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, sha256, st.st_ctime_ns)

    def as_list(self) -> list[Any]:
        return [self.size, self.mtime_ns, self.inode, self.sha256, self.ctime_ns]

    @classmethod
    def from_list(cls, value: Any) -> FileStamp | None:
        try:
            size, mtime_ns, inode, sha256, ctime_ns = value
            return cls(int(size), int(mtime_ns), int(inode), str(sha256), int(ctime_ns))
        except (TypeError, ValueError):
            return None

    def same_content_stamp(self, other: FileStamp) -> bool:
        """Size, mtime and inode agree (ctime aside)."""
        return (self.size, self.mtime_ns, self.inode) == (other.size, other.mtime_ns, other.inode)

    def holds_for(self, st: os.stat_result) -> bool:
        """The file behind `st` is still the one this stamp was taken of (ctime included)."""
        return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) == (
            self.size,
            self.mtime_ns,
            self.inode,
            self.ctime_ns,
        )


def stamp_holds(then: FileStamp | None, now: FileStamp | None, record: FileStamp | None = None) -> bool:
    """Pure: a file stamped `then` when verified, `now` today, is unchanged. Size, mtime and inode must agree;
    a ctime that moved is vouched for by the blob's own record (`record`: the cache linked the inode again
    since, and recorded its ctime after) when that record matches `now` exactly."""
    if then is None or now is None:
        return False
    blob = None if record is None else [record.size, record.mtime_ns, record.inode, record.ctime_ns]
    return view_stamps.stamp_holds(then.as_list(), now.as_list(), blob)


@dataclass(frozen=True)
class Marker:
    """What was verified of one view, and when: written last and atomically, so a reader sees all or nothing.

    `path` is relative to the cache root: a cache copied or mounted elsewhere still names its own files.
    """

    view: str
    name: str
    hf_repo: str
    revision: str
    layout: str
    path: str
    files: Mapping[str, FileStamp]
    verified_at: float = 0.0
    version: int = MARKER_VERSION
    resolved_at: float = 0.0  # the last resolve that used the view (refreshed at most hourly): gc's LRU order
    catalog: str = ""  # the resolved catalog folder whose resolve made the view: gc of another catalog keeps it
    # folder of the view -> [mtime_ns, ctime_ns] (resolver/identity.dir_identity): a file added changes both, and
    # putting the folder's mtime back moves its ctime again
    dirs: Mapping[str, list[int]] = field(default_factory=dict)

    @property
    def last_used(self) -> float:
        return max(self.resolved_at, self.verified_at)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "view": self.view,
                "name": self.name,
                "hf_repo": self.hf_repo,
                "revision": self.revision,
                "layout": self.layout,
                "path": self.path,
                "verified_at": self.verified_at,
                "resolved_at": self.resolved_at,
                "files": {p: stamp.as_list() for p, stamp in self.files.items()},
                "catalog": self.catalog,
                "dirs": {d: list(i) for d, i in self.dirs.items()},
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Marker | None:
        """The marker in `raw`, or None for anything unreadable, of another version or malformed."""
        try:
            data = bounded.loads(raw)
            if not isinstance(data, dict) or data.get("version") != MARKER_VERSION:
                return None
            files = {str(p): FileStamp.from_list(v) for p, v in dict(data["files"]).items()}
            if any(v is None for v in files.values()):
                return None
            return cls(
                str(data["view"]),
                str(data["name"]),
                str(data["hf_repo"]),
                str(data["revision"]),
                str(data["layout"]),
                str(data["path"]),
                {p: v for p, v in files.items() if v is not None},
                float(data.get("verified_at", 0.0)),
                resolved_at=float(data.get("resolved_at", 0.0)),
                catalog=str(data.get("catalog", "")),
                dirs=_dirs(data.get("dirs", {})),
            )
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def read(cls, path: Path) -> Marker | None:
        try:
            return cls.from_json(bounded.read_file(path, bounded.MAX_RECORD))
        except OSError:
            return None


def _dirs(value: Any) -> dict[str, list[int]]:
    dirs = {str(d): [int(x) for x in ident] for d, ident in dict(value).items()}
    if any(len(ident) != 2 for ident in dirs.values()):
        raise ValueError("a folder's identity is [mtime_ns, ctime_ns]")
    return dirs


class ViewState(Enum):
    FRESH = "fresh"  # marker present, every file unchanged since it was verified
    STALE = "stale"  # marker present but some file changed, vanished or was replaced
    MISSING = "missing"  # never built (or its marker is unreadable)


def judge_view(
    spec: ViewSpec,
    marker: Marker | None,
    stamps: Mapping[str, FileStamp | None],
    records: Mapping[str, FileStamp | None] | None = None,
) -> ViewState:
    """Pure: is the view still what was verified? `stamps` are the current stats of the files, `records` the
    blobs' own stamps (by sha256) for files whose ctime moved."""
    if marker is None or marker.view != spec.view_id:
        return ViewState.MISSING
    return ViewState.FRESH if not changed_files(spec, marker, stamps, records) else ViewState.STALE


def changed_files(
    spec: ViewSpec,
    marker: Marker,
    stamps: Mapping[str, FileStamp | None],
    records: Mapping[str, FileStamp | None] | None = None,
) -> list[FileEntry]:
    """Pure: the files of `spec` whose current stamp differs from the recorded one (or is missing)."""
    changed = []
    for entry in spec.files:
        then = marker.files.get(entry.path)
        if (
            then is None
            or then.sha256 != entry.sha256
            or not stamp_holds(then, stamps.get(entry.path), (records or {}).get(entry.sha256))
        ):
            changed.append(entry)
    return changed


def worth_rehash(then: FileStamp | None, now: FileStamp | None) -> bool:
    """Pure: a file of the same size whose stamp moved: a link or unlink elsewhere, a `touch`, an edit, or a
    copy of the whole cache (`cp -a` to a read-only mount: every inode and ctime new, every byte there).
    Re-hashing tells which, without fetching anything (and without writing, in a read-only cache)."""
    return (
        then is not None
        and now is not None
        and then.size == now.size
        and (then.inode, then.mtime_ns, then.ctime_ns) != (now.inode, now.mtime_ns, now.ctime_ns)
    )


def extra_paths(pinned: set[str], present: set[str]) -> list[str]:
    """Pure: what a view holds beyond its pinned files (`present`: every file and link below it, and every
    folder that is no parent of a pinned file), sorted."""
    parents = {p.rsplit("/", 1)[0] for p in pinned if "/" in p}
    parents |= {d.rsplit("/", i)[0] for d in list(parents) for i in range(1, d.count("/") + 1)}
    return sorted(p for p in present if p not in pinned and p not in parents)
