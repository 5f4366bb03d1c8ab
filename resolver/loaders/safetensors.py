"""Formats the engine reads from local files (safetensors, auto, mistral, ...): resolve locally, every byte
verified against its pin on the way into the cache, and load every pinned `*.safetensors` with safetensors."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from catalog.lookup import Catalog
from catalog.schema import ModelManifest
from resolver.cache import Cache
from resolver.loaders.common import LoadedWeights, LoadError
from resolver.resolution import Resolution
from resolver.resolve import ResolveOptions
from resolver.stores import Store

if TYPE_CHECKING:
    import torch

NEEDS: tuple[str, ...] = ("torch", "safetensors")


def load(cat: Catalog, manifest: ModelManifest, resolution: Resolution, *, store: Store, cache: Cache,
         options: ResolveOptions) -> LoadedWeights:
    from safetensors.torch import load_file

    paths = [f.path for f in manifest.weight_files if f.path.endswith(".safetensors")]
    if not paths:
        raise LoadError(f"{manifest.name} ({manifest.load_format.value}) pins no *.safetensors weights to load",
                        hint="check-load loads safetensors, runai_streamer(_sharded) and tensorizer models")
    files: dict[str, dict[str, torch.Tensor]] = {}
    started = time.perf_counter()
    for path in paths:
        files[path] = load_file(str(resolution.path / path), device="cpu")
    return LoadedWeights(manifest.name, manifest.load_format, str(resolution.path), files, time.perf_counter() - started)
