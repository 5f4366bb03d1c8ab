"""Cache upkeep: `catalog verify` and `catalog gc`. Decisions over listings; deletions only where decided."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from catalog.lookup import Catalog
from resolver import hashing
from resolver.cache import Cache, Layout, ViewSpec, ViewState, pid_alive


@dataclass
class VerifyReport:
    checked: int = 0
    files: int = 0
    problems: list[str] = field(default_factory=list)


def _spec_from_marker(marker: dict[str, object], cat: Catalog) -> ViewSpec | None:
    name = str(marker.get("name"))
    if name not in cat:
        return None
    manifest = cat.get(name)
    files = marker.get("files")
    if not isinstance(files, dict):
        return None
    entries = tuple(e for e in manifest.files if e.path in files)
    if len(entries) != len(files):
        return None  # the manifest changed since: the view is obsolete, gc's business
    spec = ViewSpec(name, manifest.source.hf_repo, manifest.source.revision, Layout(str(marker.get("layout", "dir"))), entries)
    return spec if spec.view_id == marker.get("view") else None


def verify(cat: Catalog, cache: Cache, names: Sequence[str] | None, *, deep: bool) -> VerifyReport:
    """Every view whose marker matches the current manifests: stats (and with `deep`, hashes) still true."""
    report = VerifyReport()
    wanted = set(names) if names else None
    for name in wanted or ():
        cat.get(name)
    for _, marker in cache.markers_all():
        spec = _spec_from_marker(marker, cat)
        if spec is None or (wanted is not None and spec.name not in wanted):
            continue
        report.checked += 1
        report.files += len(spec.files)
        state = cache.view_state(spec)
        if state is not ViewState.FRESH:
            report.problems.append(f"{spec.name}: view {cache.view_dir(spec)} changed since it was verified ({state.value}); resolve again to repair")
            continue
        if deep:
            root = cache.view_dir(spec)
            bad = False
            for entry in spec.files:
                size, digest = hashing.hash_file(root / entry.path)
                if (size, digest) != (entry.size, entry.sha256):
                    bad = True
                    # The view file is a hard link to the blob: both are wrong. Drop them so a resolve refetches.
                    cache.blob_path(entry.sha256).unlink(missing_ok=True)
                    report.problems.append(f"{spec.name}/{entry.path}: expected sha256 {entry.sha256} ({entry.size} bytes) "
                                           f"but got {digest} ({size} bytes); removed it, resolve again to refetch")
            if bad:
                cache.remove_view(spec)
    return report


@dataclass
class GcResult:
    removed: list[Path] = field(default_factory=list)
    bytes: int = 0


MARKERLESS_GRACE_SECONDS = 600  # a view renamed into place gets its marker right after; never race that


def gc(cat: Catalog, cache: Cache, *, dry_run: bool, now: float | None = None) -> GcResult:
    """Remove what no manifest references: blobs, views and their markers, and what dead writers left.

    Safe beside running resolves: staging names (`.<name>.<pid>-<token>`) of live processes are kept,
    a view is removed for lacking a marker only when it is old and still has none at removal time,
    and only blobs no manifest references are removed.
    """
    now = time.time() if now is None else now
    referenced: set[str] = {f.sha256 for m in cat for f in m.files}
    result = GcResult()

    def remove(path: Path) -> None:
        try:
            size = path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        except OSError:
            size = 0
        result.removed.append(path)
        result.bytes += size
        if dry_run:
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    for marker_path, marker in cache.markers_all():
        if _spec_from_marker(marker, cat) is None:  # the manifest changed or is gone: the view is obsolete
            remove(marker_path)
            view = Path(str(marker.get("path", "")))
            if marker.get("layout") == Layout.DIR.value and view.is_relative_to(cache.models):
                remove(view)
    if cache.models.is_dir():
        for model_dir in cache.models.iterdir():
            for view in model_dir.iterdir():
                if view in result.removed or staging_owner(view.name) is not None:
                    continue  # staging folders are the sweep's business below
                marker_file = cache.markers / model_dir.name / f"{view.name}.json"
                if _older_than(view, now, MARKERLESS_GRACE_SECONDS) and not marker_file.exists():
                    remove(view)  # a view whose builder died before writing its marker
    for blob in (cache.blobs.glob("*/*") if cache.blobs.is_dir() else ()):
        if blob.name not in referenced and staging_owner(blob.name) is None:
            remove(blob)
    if cache.hub.is_dir():
        for blob in cache.hub.glob("models--*/blobs/*"):
            if blob.name not in referenced and staging_owner(blob.name) is None:
                remove(blob)
        for link in cache.hub.glob("models--*/snapshots/*/**/*"):
            if link.is_symlink() and not link.exists():
                remove(link)
    for leftover in _dead_staging(cache):
        remove(leftover)
    if not dry_run:
        removed_temps = cache.clean_stale_temps()
        if removed_temps:
            result.removed.append(cache.tmp / f"({removed_temps} stale temp files)")
    return result


_STAGING = re.compile(r"^\..+\.(\d+)-[0-9a-f]+$")


def staging_owner(name: str) -> int | None:
    """The pid in a staging name (`.<name>.<pid>-<token>`: every temporary name the cache writes)."""
    match = _STAGING.match(name)
    return int(match.group(1)) if match else None


def _older_than(path: Path, now: float, seconds: float) -> bool:
    try:
        return now - path.lstat().st_mtime > seconds
    except OSError:
        return False


def _dead_staging(cache: Cache) -> list[Path]:
    """Staging files and folders whose writer is gone (killed mid-write), anywhere but blobs/ and tmp/."""
    found: list[Path] = []
    for top in (cache.models, cache.markers, cache.hub):
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [*dirnames, *filenames]:
                pid = staging_owner(name)
                if pid is not None and not pid_alive(pid):
                    found.append(Path(dirpath) / name)
            dirnames[:] = [d for d in dirnames if staging_owner(d) is None]
    return found
