"""The Hugging Face cache layout (`--layout hf-cache`): how huggingface_hub names a repo's folder, the tree listing it
caches, and writing one view as a snapshot of verified blobs that any tool finds offline by repo id at the pin.

    hub/{models,datasets}--org--name/blobs/<sha256>                       hard links to the cache's verified blobs
    hub/{models,datasets}--org--name/snapshots/<revision>/<path>          -> ../../blobs/<sha256>
    hub/{models,datasets}--org--name/trees/<revision>.json                huggingface_hub's cached tree listing
    hub/{models,datasets}--org--name/refs/main                            the one revision there is, else none

resolver/cache.py owns the cache and calls `build_snapshot` for an hf-cache view. Standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from catalog import formats
from catalog.errors import UnsafePathError
from resolver.fsutil import atomic_write, link_or_copy, prepared_target
from resolver.view_stamps import staging_name

if TYPE_CHECKING:
    from catalog.schema import FileEntry
    from resolver.views import ViewSpec

log = logging.getLogger(__name__)

TREE_FORMAT_VERSION = 1  # huggingface_hub's trees/<commit>.json (huggingface_hub/_tree_cache.py)
SMALL_FILE = 10 * 1024 * 1024  # a file with no recorded blob id that is not a weight: git sha1 of its bytes
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class SnapshotCache(Protocol):
    """What writing a snapshot needs of the cache (resolver/cache.py's Cache)."""

    hub: Path

    def blob_path(self, sha256: str) -> Path: ...

    def contained(self, path: Path) -> Path: ...

    def view_dir(self, spec: ViewSpec) -> Path: ...

    def extra_files(self, spec: ViewSpec) -> list[str]: ...

    def between_steps(self, step: str) -> None: ...


def build_snapshot(cache: SnapshotCache, spec: ViewSpec) -> Path:
    """{models,datasets}--org--name/{blobs/<sha256>, snapshots/<revision>/<path> -> ../../blobs/<sha256>,
    trees/<revision>.json, refs/main}.

    Built in place, one atomic rename per blob and per link, so a concurrent builder or a reader of the same
    snapshot never finds a pinned path missing (a folder is never swapped here).

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
    repo_dir = cache.hub / hf_repo_folder(spec.hf_repo, spec.repo_type)
    blobs = repo_dir / "blobs"
    snapshot = repo_dir / "snapshots" / spec.revision
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    cache.contained(blobs)
    cache.contained(snapshot)
    made: set[Path] = set()
    for entry in spec.files:
        hf_blob = blobs / entry.sha256
        # Always re-link from the verified blob: an hf blob left from before may have been corrupted
        # in place (it shares the inode) and dropped from blobs/ by `verify --deep` since.
        staged = blobs / staging_name(entry.sha256)
        link_or_copy(cache.blob_path(entry.sha256), staged)
        os.replace(staged, hf_blob)
        # rename() between two links to one inode does nothing and leaves the source name behind.
        staged.unlink(missing_ok=True)
        link = prepared_target(snapshot, entry.path, made)
        relative = os.path.relpath(hf_blob, link.parent)
        staged_link = link.parent / staging_name(link.name)
        os.symlink(relative, staged_link)
        os.replace(staged_link, link)
        cache.between_steps(f"linked {entry.path}")
    _drop_extras(cache, spec)
    cache.between_steps("extras dropped")
    _write_tree(cache, repo_dir, snapshot, spec)
    _update_main_ref(repo_dir, spec)
    return snapshot


def _drop_extras(cache: SnapshotCache, spec: ViewSpec) -> None:
    """Remove from an hf-cache snapshot what no view of the revision put there (a file dropped in)."""
    snapshot = cache.view_dir(spec)
    for rel in cache.extra_files(spec):
        path = snapshot / rel
        log.warning("%s: removing %s from the cache's snapshot: no manifest pins it", spec.name, rel)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _write_tree(cache: SnapshotCache, repo_dir: Path, snapshot: Path, spec: ViewSpec) -> None:
    trees = repo_dir / "trees"
    trees.mkdir(exist_ok=True)
    cache.contained(trees)
    path = trees / f"{spec.revision}.json"
    files = {entry.path: tree_entry(entry, cache.blob_path(entry.sha256)) for entry in spec.files}
    body = {"format_version": TREE_FORMAT_VERSION, "files": {p: files[p] for p in sorted(files)}}
    atomic_write(path, json.dumps(body, indent=1).encode())


def _update_main_ref(repo_dir: Path, spec: ViewSpec) -> None:
    refs = repo_dir / "refs"
    refs.mkdir(exist_ok=True)
    main = refs / "main"
    if hf_revisions(repo_dir) == [spec.revision]:
        atomic_write(main, spec.revision.encode())  # no trailing newline, as huggingface_hub writes it
    # Checked again after writing: a builder of another revision may have added its snapshot meanwhile.
    revisions = hf_revisions(repo_dir)
    if len(revisions) > 1 and main.exists():
        log.warning(
            "%s: the cache holds %d revisions of %s (%s); removed refs/main so a request without a "
            "revision fails instead of loading one of them",
            spec.name,
            len(revisions),
            spec.hf_repo,
            ", ".join(r[:12] for r in revisions),
        )
        main.unlink(missing_ok=True)


def tidy_repo(repo_dir: Path, keep_blobs: Collection[str] = ()) -> list[tuple[Path, int]]:
    """Remove what a repo folder holds for no snapshot once snapshots are gone (evicted): the tree listing of a
    revision with no snapshot folder, `refs/main` naming one, the repo's blobs no snapshot links (but `keep_blobs`:
    those a running resolve works on, which it may not have linked yet), then every folder left empty, the repo's own
    included. Returns what was removed, each with the bytes it freed (a blob that was the inode's last link)."""
    removed: list[tuple[Path, int]] = []

    def remove(path: Path) -> None:
        with contextlib.suppress(OSError):
            st = path.lstat()
            path.unlink()
            removed.append((path, st.st_size if st.st_nlink == 1 and not path.is_symlink() else 0))

    revisions = set(hf_revisions(repo_dir))
    for tree in (repo_dir / "trees").glob("*.json"):
        if tree.stem not in revisions:
            remove(tree)
    main = repo_dir / "refs" / "main"
    with contextlib.suppress(OSError):
        if main.read_text().strip() not in revisions:
            remove(main)
    linked: set[str] = set()
    for dirpath, _, filenames in os.walk(repo_dir / "snapshots"):
        for name in filenames:
            with contextlib.suppress(OSError):
                linked.add(os.path.basename(os.readlink(os.path.join(dirpath, name))))
    for blob in (repo_dir / "blobs").glob("*"):
        if blob.name not in linked and blob.name not in keep_blobs and _SHA256.fullmatch(blob.name):
            remove(blob)
    for folder in ("snapshots", "blobs", "refs", "trees", ""):
        with contextlib.suppress(OSError):
            os.rmdir(repo_dir / folder)  # only when empty: what a concurrent builder writes there stays
    return removed


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
