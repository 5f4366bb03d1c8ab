"""Is a model ready on this runner? Answered from stats alone, before any test runs (`pytest --catalog-preflight`).

A model's local files (what `catalog resolve` would lay out in the asked layout: every file, except the weights a
streamed format leaves in the store) are ready when the view's marker still holds (the warm path's trust-by-stat:
stats and the marker, no byte of a file read), else file by file when the cache holds the blob at its pinned size
(published blobs were verified before they got their name) or a shared tier holds the file at that size (the resolve
then hashes it once, reading the tier, not a store). Nothing here opens a store, reads a weight or writes anything.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from resolver.hf_layout import hf_repo_folder
from resolver.tiers import tiers_of
from resolver.views import Layout, ViewSpec

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.schema import FileEntry, ModelManifest
    from resolver.cache import Cache


@dataclass(frozen=True)
class Readiness:
    """What `name` in `layout` lacks on this runner (empty: ready), and how the rest was found."""

    name: str
    layout: Layout
    missing: tuple[FileEntry, ...]
    verified_view: bool  # the view's marker holds: nothing to do at all
    streamed: int = 0  # weight files the engine streams from the store (not checked: no store is read here)

    @property
    def ready(self) -> bool:
        return not self.missing


def needed(manifest: ModelManifest, layout: Layout, materialize_weights: bool) -> tuple[tuple[FileEntry, ...], int]:
    """The files a resolve lays out locally and how many weight files stay in the store: resolve's `plan_files`
    decision (every file, but a streamed format's weights unless they are materialized or the layout is an hf-cache
    snapshot, which a load by repo id reads locally), written here so that the preflight does not import the resolve
    machinery (stores, transfers: a third of its time); a test holds the two equal."""
    if not manifest.load_format.streams_weights or materialize_weights or layout is Layout.HF_CACHE:
        return manifest.files, 0
    weights = {f.path for f in manifest.weight_files}
    return tuple(f for f in manifest.files if f.path not in weights), len(weights)


def _at_size(path: Path, size: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def readiness(
    cat: Catalog,
    cache: Cache,
    tiers: tuple[Path, ...],
    name: str,
    layout: Layout = Layout.DIR,
    materialize_weights: bool = False,
) -> Readiness:
    """Stat-level: which of `name`'s local files (and its tokenizer model's) neither the cache nor a shared tier holds."""
    manifest = cat.get(name)
    local, streamed = needed(manifest, layout, materialize_weights)
    spec = ViewSpec.of(manifest, layout, local)
    marker = cache.read_marker(spec)
    fresh = marker is not None and cache.marker_holds(marker)
    wanted: list[tuple[ModelManifest, FileEntry]] = [] if fresh else [(manifest, e) for e in local]
    if manifest.tokenizer and manifest.tokenizer in cat:  # another model's tokenizer files, laid out in its own view
        other = cat.get(manifest.tokenizer)
        wanted += [(other, e) for e in other.files if e not in other.weight_files]
    shared = tiers_of(tiers)
    missing = tuple(
        e
        for m, e in wanted
        if not cache.has_blob(e) and not any(_at_size(p, e.size) for t in shared for p in t.candidates(e, m.source))
    )
    return Readiness(name, layout, missing, fresh, streamed)


def hf_snapshot_gaps(hf_cache: Path, manifest: ModelManifest) -> list[int]:
    """The indexes of `manifest`'s files that a Hugging Face cache (HF_HUB_CACHE) does not hold at its pinned revision
    and size: what a load by repo id there would miss. Stats only (the snapshot's links followed)."""
    folder = (
        hf_cache
        / hf_repo_folder(manifest.source.hf_repo, manifest.source.repo_type)
        / "snapshots"
        / manifest.source.revision
    )
    return [i for i, e in enumerate(manifest.files) if not _at_size(folder / e.path, e.size)]
