"""`catalog check-load`: load a model the way its load format says, from where CI would, and check every tensor.

One loader module per kind of load, picked by the format's `FormatSpec.loader` (catalog/formats.py):

    runai        runai_streamer(_sharded): runai-model-streamer streams the safetensors from the store
    tensorizer   tensorizer deserializes the .tensors file, hashed against its pin and compared with a
                 safetensors twin of the same repo and revision
    safetensors  everything read from local files: resolved (every byte verified), loaded with safetensors

A format whose spec names no loader (gguf, pt, ...) is reported as skipped, not failed. A new loader is one
module with `NEEDS` and `load(...)` plus one line in `LOADERS`.

torch, safetensors, runai_model_streamer and tensorizer are imported inside functions only: importing this
package (and so the CLI) stays cheap and works without the `loaders` extra.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from catalog.lookup import Catalog
from catalog.safetensors_header import Header
from catalog.schema import ModelManifest
from resolver.cache import Cache
from resolver.loaders import runai, safetensors, tensorizer
from resolver.loaders.common import (
    LoadedWeights,
    LoadError,
    LoadReport,
    MiB,
    TensorSpec,
    _need,
    compare_tensors,
    parse_header,
    read_header,
    scoped_environ,
    stream_target,
)
from resolver.loaders.runai import stream_safetensors
from resolver.loaders.tensorizer import deserialize_tensorizer
from resolver.resolution import Resolution
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LOCAL, Store, StreamTarget


class Loader(Protocol):
    """What a loader module provides: the libraries it imports, and the load itself."""

    NEEDS: tuple[str, ...]

    def load(
        self,
        cat: Catalog,
        manifest: ModelManifest,
        resolution: Resolution,
        *,
        store: Store,
        cache: Cache,
        options: ResolveOptions,
    ) -> LoadedWeights: ...


# FormatSpec.loader -> the module that loads it.
LOADERS: dict[str, Loader] = {
    "runai": runai,
    "safetensors": safetensors,
    "tensorizer": tensorizer,
}


def loader_for(manifest: ModelManifest) -> Loader | None:
    """The loader of the manifest's format; None when the format cannot be load-checked."""
    name = manifest.load_format.spec.loader
    if name is None:
        return None
    if name not in LOADERS:  # a format table naming a loader nobody registered: a bug, not the user's fault
        raise LookupError(f"load format {manifest.load_format.value} names loader {name!r}, which is not registered")
    return LOADERS[name]


def check_load(
    cat: Catalog, name: str, *, store: Store, cache: Cache, options: ResolveOptions | None = None
) -> LoadReport:
    """Load `name` per its load format and report tensors, bytes, time and every problem found."""
    manifest = cat.get(name)
    if loader_for(manifest) is None:
        return LoadReport(
            manifest.name, manifest.load_format, skipped=f"no load check for {manifest.load_format.value}"
        )
    loaded = load_weights(cat, name, store=store, cache=cache, options=options)
    report = LoadReport(
        name=loaded.name,
        load_format=loaded.load_format,
        tensors=loaded.count,
        bytes=loaded.bytes,
        seconds=loaded.seconds,
        problems=list(loaded.problems),
        uri=loaded.uri,
    )
    report.throughput_mib_s = report.bytes / MiB / report.seconds if report.seconds > 0 else 0.0
    twin = safetensors_twin(cat, manifest) if manifest.load_format.spec.loader == "tensorizer" else None
    if twin is not None and loaded.files:
        report.compared_with = twin.name
        reference = load_weights(cat, twin.name, store=store, cache=cache, options=options)
        report.problems += reference.problems
        report.problems += compare_tensors(loaded.merged(), reference.merged(), what=name, reference=twin.name)
    return report


def load_weights(
    cat: Catalog, name: str, *, store: Store, cache: Cache, options: ResolveOptions | None = None
) -> LoadedWeights:
    """Resolve `name` (configs and tokenizers local and verified) and load its weights per its load format."""
    manifest = cat.get(name)
    loader = loader_for(manifest)
    if loader is None:
        raise LoadError(
            f"{name} ({manifest.load_format.value}): no loader reads this load format",
            hint="check-load loads safetensors, runai_streamer(_sharded) and tensorizer models",
        )
    options = options or ResolveOptions()
    _need(name, *loader.NEEDS)
    # The loaders hash every streamed byte against the pin themselves: resolve's listing check would only
    # stop them from reporting what they find (and cost a listing). A streamed format is checked streaming, even
    # where local copies of its weights would be handed out.
    resolution = resolve(
        cat,
        name,
        cache=cache,
        store=store,
        options=dataclasses.replace(options, verify_stream="loader", prefer="stream", engine_loader="plain"),
    )
    return loader.load(cat, manifest, resolution, store=store, cache=cache, options=options)


def safetensors_twin(cat: Catalog, manifest: ModelManifest) -> ModelManifest | None:
    """Another model pinning the same repo and revision with local safetensors weights (the reference copy)."""
    for other in cat.by_repo(manifest.source.hf_repo):
        if (
            other.name != manifest.name
            and other.source.revision == manifest.source.revision
            and not other.load_format.streams_weights
            and any(f.path.endswith(".safetensors") for f in other.weight_files)
        ):
            return other
    return None


__all__ = [
    "LOADERS",
    "LOCAL",
    "Header",
    "LoadError",
    "LoadReport",
    "LoadedWeights",
    "Loader",
    "StreamTarget",
    "TensorSpec",
    "check_load",
    "compare_tensors",
    "deserialize_tensorizer",
    "load_weights",
    "loader_for",
    "parse_header",
    "read_header",
    "safetensors_twin",
    "scoped_environ",
    "stream_safetensors",
    "stream_target",
]
