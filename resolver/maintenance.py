"""Cache upkeep: `catalog verify` and `catalog gc`. Decisions over listings; deletions only where decided."""

from __future__ import annotations

import shutil
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


def gc(cat: Catalog, cache: Cache, *, dry_run: bool) -> GcResult:
    """Remove what no manifest references: blobs, views and their markers, stale temp files."""
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

    live_views: set[Path] = set()
    for marker_path, marker in cache.markers_all():
        spec = _spec_from_marker(marker, cat)
        if spec is None:
            remove(marker_path)
            view = Path(str(marker.get("path", "")))
            if marker.get("layout") == Layout.DIR.value and view.is_relative_to(cache.models):
                remove(view)
        else:
            live_views.add(cache.view_dir(spec))
    if cache.models.is_dir():
        for model_dir in cache.models.iterdir():
            for view in model_dir.iterdir():
                if view not in live_views and view not in result.removed and not _in_flight(view):
                    remove(view)  # half-built staging folders and views without a marker
    if cache.blobs.is_dir():
        for blob in cache.blobs.glob("*/*"):
            if blob.name not in referenced:
                remove(blob)
    if cache.hub.is_dir():
        for blob in cache.hub.glob("models--*/blobs/*"):
            if blob.name not in referenced:
                remove(blob)
        for link in cache.hub.glob("models--*/snapshots/*/**/*"):
            if link.is_symlink() and not link.exists():
                remove(link)
    if not dry_run:
        removed_temps = cache.clean_stale_temps()
        if removed_temps:
            result.removed.append(cache.tmp / f"({removed_temps} stale temp files)")
    return result


def _in_flight(path: Path) -> bool:
    """A staging folder (`.<view>.<pid>-<token>`) of a process that is still running."""
    if not path.name.startswith("."):
        return False
    pid = path.name.rsplit(".", 1)[-1].split("-", 1)[0]
    return pid.isdigit() and pid_alive(int(pid))

