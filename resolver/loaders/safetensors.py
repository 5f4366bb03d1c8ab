"""Formats the engine reads from local files (safetensors, auto, mistral, ...): resolve locally, every byte
verified against its pin on the way into the cache, and load every pinned `*.safetensors` with safetensors; each
file's header is compared with the pinned one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from catalog.lookup import Catalog
from catalog.schema import ModelManifest
from resolver.cache import Cache
from resolver.headers import read_file_header
from resolver.loaders.common import LoadedWeights, LoadError, header_problems, pinned_tables
from resolver.resolution import Resolution
from resolver.resolve import ResolveOptions
from resolver.stores import Store

if TYPE_CHECKING:
    import torch

NEEDS: tuple[str, ...] = ("torch", "safetensors")


def load(
    cat: Catalog,
    manifest: ModelManifest,
    resolution: Resolution,
    *,
    store: Store,
    cache: Cache,
    options: ResolveOptions,
) -> LoadedWeights:
    from safetensors.torch import load_file

    paths = [f.path for f in manifest.weight_files if f.path.endswith(".safetensors")]
    if not paths:
        raise LoadError(
            f"{manifest.name} ({manifest.load_format.value}) pins no *.safetensors weights to load",
            hint="check-load loads safetensors, runai_streamer(_sharded) and tensorizer models",
        )
    files: dict[str, dict[str, torch.Tensor]] = {}
    started = time.perf_counter()
    for path in paths:
        files[path] = load_file(str(resolution.path / path), device="cpu")
    seconds = time.perf_counter() - started
    # The view's bytes were verified against their pins on the way into the cache; their headers are then
    # compared with the pinned ones (a stale pin, or tensor tables that do not describe these bytes).
    tables = pinned_tables(cat, manifest)
    problems = []
    for entry in manifest.weight_files:
        if entry.path in files:
            header = read_file_header(
                resolution.path / entry.path, model=manifest.name, path=entry.path, size=entry.size
            )
            problems += header_problems(manifest.name, entry, header, tables)
    return LoadedWeights(manifest.name, manifest.load_format, str(resolution.path), files, seconds, problems)
