"""Cache upkeep: `catalog verify` and `catalog gc`. Decisions over listings; deletions only where decided."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from catalog import bounded
from catalog.lookup import Catalog
from catalog.signing import Statement
from resolver import hashing, signatures
from resolver.cache import Cache
from resolver.fsutil import pid_alive, staging_owner
from resolver.views import Layout, Marker, ViewSpec, ViewState


@dataclass
class VerifyReport:
    checked: int = 0
    files: int = 0
    problems: list[str] = field(default_factory=list)


def _spec_from_marker(marker: Marker | None, cat: Catalog) -> ViewSpec | None:
    """The view a marker describes, if it still matches the catalog (None: obsolete or unreadable)."""
    if marker is None or marker.name not in cat:
        return None
    manifest = cat.get(marker.name)
    entries = tuple(e for e in manifest.files if e.path in marker.files)
    if len(entries) != len(marker.files):
        return None  # the manifest changed since: the view is obsolete, gc's business
    try:
        layout = Layout(marker.layout)
    except ValueError:
        return None
    spec = ViewSpec.of(manifest, layout, entries)
    return spec if spec.view_id == marker.view else None


def verify(
    cat: Catalog, cache: Cache, names: Sequence[str] | None, *, deep: bool, anchors: signatures.Anchors | None = None
) -> VerifyReport:
    """Every view whose marker matches the current manifests: stats (and with `deep`, hashes) still true; with
    `anchors`, also what each view holds against its model's signature (`verify --signatures`). A model named in
    `names` with no such view is a problem: nothing of it was verified."""
    report = VerifyReport()
    seen: set[str] = set()
    signed: dict[str, Statement | None] = {}
    wanted = set(names) if names else None
    for name in wanted or ():
        cat.get(name)
    for _, marker in cache.markers_all():
        spec = _spec_from_marker(marker, cat)
        if spec is None or (wanted is not None and spec.name not in wanted):
            continue
        seen.add(spec.name)
        report.checked += 1
        report.files += len(spec.files)
        extras = cache.extra_files(spec)
        if extras:
            report.problems.append(
                f"{spec.name}: view {cache.view_dir(spec)} holds files no manifest pins: "
                f"{', '.join(extras[:10])}{' ...' if len(extras) > 10 else ''}; resolve again to remove them"
            )
        state = cache.view_state(spec)
        if state is not ViewState.FRESH and not extras:
            report.problems.append(
                f"{spec.name}: view {cache.view_dir(spec)} changed since it was verified "
                f"({state.value}); resolve again to repair"
            )
        if anchors is not None and marker is not None:
            if spec.name not in signed:
                signed[spec.name], finding = signatures.vouched(cat.get(spec.name), cat.sources[spec.name], anchors)
                if finding is not None:
                    report.problems.append(f"{spec.name}: {finding.message}")
            statement = signed[spec.name]
            if statement is not None and state is ViewState.FRESH:
                report.problems.extend(
                    _against_signature(
                        spec.name, cache.view_dir(spec), statement, {p: s.sha256 for p, s in marker.files.items()}
                    )
                )
        if deep:
            root = cache.view_dir(spec)
            bad = False
            for entry in spec.files:
                try:
                    size, digest = hashing.hash_file(root / entry.path)
                except FileNotFoundError:
                    continue  # reported above as a changed view
                if (size, digest) != (entry.size, entry.sha256):
                    bad = True
                    # The view file is a hard link to the blob: both are wrong. Drop them so a resolve refetches.
                    cache.blob_path(entry.sha256).unlink(missing_ok=True)
                    report.problems.append(
                        f"{spec.name}/{entry.path}: expected sha256 {entry.sha256} ({entry.size} bytes) "
                        f"but got {digest} ({size} bytes); removed it, resolve again to refetch"
                    )
            if bad:
                cache.remove_view(spec)
    for name in sorted((wanted or set()) - seen):
        report.problems.append(
            f"{name}: not in the cache at {cache.root} (no view of its current pins), so nothing of "
            f"it was verified; run `catalog resolve {name}` with this cache first"
        )
    return report


def _against_signature(name: str, view: Path, statement: Statement, held: dict[str, str]) -> list[str]:
    """Each file a view holds (its digest as verified into the view) against the signed digest. Signed files the
    view lacks are the streamed weights: proven against the same pins when resolve hands out their URI."""
    signed = {r.name: r.digest for r in statement.resources}
    return [
        f"{name}/{path}: view {view} holds sha256 {digest} but the signature says "
        f"{signed.get(path) or 'nothing (not signed)'}; resolve again to repair"
        for path, digest in sorted(held.items())
        if signed.get(path) != digest
    ]


@dataclass
class GcResult:
    removed: list[Path] = field(default_factory=list)
    bytes: int = 0


MARKERLESS_GRACE_SECONDS = 600  # a view renamed into place gets its marker right after; never race that


def gc(cat: Catalog, cache: Cache, *, dry_run: bool, now: float | None = None, all_catalogs: bool = False) -> GcResult:
    """Remove what no manifest references: blobs, views and their markers, and what dead writers left.

    Safe beside running resolves: staging names (`.<name>.<pid>-<token>`) of live processes are kept,
    a view is removed for lacking a marker only when it is old and still has none at removal time,
    and only blobs no manifest references are removed. The default cache is shared by every checkout of a
    user: a view another catalog made (its marker says which) is kept, with every blob a kept marker names,
    unless `all_catalogs`. A pinned file of a view is never removed, whatever its name looks like.
    """
    now = time.time() if now is None else now
    referenced: set[str] = {f.sha256 for m in cat for f in m.files}
    from resolver.derived import gc_candidates  # derived entries: a recent record keeps its blobs (resolver/derived.py)

    stale_derived, derived_blobs = gc_candidates(cache, now)
    referenced |= derived_blobs
    ours = str(cat.root.resolve())
    result = GcResult()

    def remove(path: Path) -> None:
        try:
            size = (
                path.stat().st_size
                if path.is_file()
                else sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
            )
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

    kept: list[Marker] = []
    for marker_path, marker in cache.markers_all():
        if marker is not None and marker.catalog and marker.catalog != ours and not all_catalogs:
            kept.append(marker)  # another catalog's view: its own gc decides
            referenced |= {stamp.sha256 for stamp in marker.files.values()}
            continue
        if _spec_from_marker(marker, cat) is None:  # the manifest changed or is gone: the view is obsolete
            remove(marker_path)
            view = cache.root / marker.path if marker is not None else None
            if (
                marker is not None
                and view is not None
                and marker.layout == Layout.DIR.value
                and view.resolve().is_relative_to(cache.models)
            ):
                remove(view)
        elif marker is not None:
            kept.append(marker)
    pinned = _pinned_paths(cache, cat, kept)
    if cache.models.is_dir():
        for model_dir in cache.models.iterdir():
            if not model_dir.is_dir() or model_dir.is_symlink():
                continue  # `.DS_Store` and the like: not a model's folder
            if not all_catalogs and model_dir.name not in cat and any(m.name == model_dir.name for m in kept):
                continue  # another catalog's model
            for view in model_dir.iterdir():
                if view in result.removed or staging_owner(view.name) is not None:
                    continue  # staging folders are the sweep's business below
                marker_file = cache.markers / model_dir.name / f"{view.name}.json"
                if _older_than(view, now, MARKERLESS_GRACE_SECONDS) and not marker_file.exists():
                    remove(view)  # a view whose builder died before writing its marker
    for blob in cache.blobs.glob("*/*") if cache.blobs.is_dir() else ():
        if blob.name not in referenced and staging_owner(blob.name) is None:
            remove(blob)
    if cache.hub.is_dir():
        for blob in cache.hub.glob("*s--*/blobs/*"):
            if blob.name not in referenced and staging_owner(blob.name) is None:
                remove(blob)
        for link in cache.hub.glob("*s--*/snapshots/*/**/*"):
            if link.is_symlink() and not link.exists():
                remove(link)
    for leftover in _dead_staging(cache):
        if leftover not in pinned:
            remove(leftover)
    for lock in _idle_locks(cache):
        remove(lock)
    for entry in _stale_warm_entries(cache, now):
        remove(entry)
    for record in signatures.stale_records(cache.signature_checks):  # verifications that held (resolver/signatures.py)
        remove(record)
    for state in _stale_sync_states(cache, cat):
        remove(state)
    for record in stale_derived:
        remove(record)
    tier_checks = cache.tier_checks
    for record in sorted(tier_checks.glob("*.json")) if tier_checks.is_dir() else ():
        if record.stem not in referenced:
            remove(record)
    from resolver.capacity import in_use  # activity records of resolves that died (resolver/capacity.py)

    for record in in_use(cache, now).dead:
        remove(record)
    if cache.blob_stamps.is_dir():  # records of blobs that are gone (or were replaced: another inode)
        for record in cache.blob_stamps.glob("*/*"):
            blob = cache.blobs / record.parent.name / record.name
            if staging_owner(record.name) is None and (record.name not in referenced or not blob.is_file()):
                remove(record)
    for temp in cache.clean_stale_temps(dry_run=dry_run):
        result.removed.append(temp)
    return result


def _pinned_paths(cache: Cache, cat: Catalog, markers: Sequence[Marker]) -> set[Path]:
    """Every pinned file of every view (by its marker, and by the catalog for views still being marked), with
    its folders: gc never removes one, even when its name looks like a staging name."""
    pinned: set[Path] = set()
    for marker in markers:
        base = cache.root / marker.path
        for rel in marker.files:
            parts = rel.split("/")
            pinned |= {base.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)}
    by_name = {m.name: [f.path for f in m.files] for m in cat}
    if cache.models.is_dir():
        for model_dir in cache.models.iterdir():
            for rel in by_name.get(model_dir.name, ()):
                parts = rel.split("/")
                for view in model_dir.iterdir() if model_dir.is_dir() else ():
                    pinned |= {view.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)}
    return pinned


def _older_than(path: Path, now: float, seconds: float) -> bool:
    try:
        return now - path.lstat().st_mtime > seconds
    except OSError:
        return False


def _dead_staging(cache: Cache) -> list[Path]:
    """Staging files and folders whose writer is gone (killed mid-write). Not in blobs/ and tmp/ (temp files have
    their own sweep), active/ (a record nobody holds a lock on goes, whatever its name) and signature-checks/
    (resolver/signatures.py sweeps it)."""
    found: list[Path] = []
    for top in (
        cache.models,
        cache.markers,
        cache.hub,
        cache.warm_index,
        cache.blob_stamps,
        cache.sync_state,
        cache.tier_checks,
    ):
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [*dirnames, *filenames]:
                pid = staging_owner(name)
                if pid is not None and not pid_alive(pid):
                    found.append(Path(dirpath) / name)
            dirnames[:] = [d for d in dirnames if staging_owner(d) is None]
    return found


def _idle_locks(cache: Cache) -> list[Path]:
    """Lock files nobody holds (a killed downloader's): taking one without waiting proves it is idle."""
    from filelock import FileLock, Timeout

    found: list[Path] = []
    for path in sorted(cache.locks.glob("*.lock")) if cache.locks.is_dir() else ():
        lock = FileLock(str(path), thread_local=False)
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):
            continue  # held by a live download
        lock.release()
        found.append(path)
    return found


WARM_INDEX_MAX_AGE = 7 * 24 * 3600  # an entry unused for a week is rebuilt by the next full resolve
WARM_INDEX_MAX_ENTRIES = 1000


def _stale_warm_entries(cache: Cache, now: float) -> list[Path]:
    """Warm-index entries whose views are gone, that are older than a week, or beyond the newest 1,000."""
    if not cache.warm_index.is_dir():
        return []
    entries: list[tuple[float, Path]] = []
    stale: list[Path] = []
    for path in cache.warm_index.glob("*.json"):
        try:
            mtime = path.stat().st_mtime
            markers = bounded.loads(bounded.read_file(path, bounded.MAX_RECORD)).get("markers", [])
        except (OSError, ValueError, AttributeError):
            stale.append(path)
            continue
        if now - mtime > WARM_INDEX_MAX_AGE or not all(Path(m).is_file() for m in markers):
            stale.append(path)
        else:
            entries.append((mtime, path))
    entries.sort(reverse=True)
    return stale + [path for _, path in entries[WARM_INDEX_MAX_ENTRIES:]]


def _stale_sync_states(cache: Cache, cat: Catalog) -> list[Path]:
    """Recorded sync states of models no longer in the catalog (each model keeps only its newest one)."""
    if not cache.sync_state.is_dir():
        return []
    return sorted(p for p in cache.sync_state.iterdir() if p.name not in cat)
