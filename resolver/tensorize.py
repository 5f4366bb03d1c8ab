"""`catalog tensorize NAME --out DIR`: a byte-deterministic `model.tensors` from a model's safetensors.

Tensors are written in sorted name order with tensorizer's state-dict writer, which is deterministic
for a given tensorizer version, so the artifact's sha256 can be pinned in a tensorizer manifest.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from catalog.errors import UsageError
from catalog.formats import LoadFormat
from catalog.lookup import Catalog
from catalog.schema import ModelManifest
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import Store
from resolver.view_stamps import staging_name

TENSORS_FILE = "model.tensors"


def tensorize(cat: Catalog, name: str, out: Path, *, cache: Cache, store: Store, options: ResolveOptions) -> Path:
    """Write out/model.tensors plus the non-weight files a tensorizer manifest of that repo and revision pins (so `out`
    is its lock/sync source). `name` is the safetensors model, or the tensorizer manifest itself: then its weights
    come from the safetensors model pinning the same repo and revision."""
    manifest = cat.get(name)
    target = manifest if manifest.load_format is LoadFormat.TENSORIZER else _tensorizer_of(cat, manifest)
    source = manifest if manifest is not target else _twin(cat, manifest)
    shards = sorted(f.path for f in source.weight_files if f.path.endswith(".safetensors"))
    if not shards:
        raise UsageError(
            f"{source.name} pins no *.safetensors weights to tensorize",
            hint="name the model whose safetensors hold the weights (the tensorizer manifest's twin)",
        )
    result = resolve(
        cat, source.name, cache=cache, store=store, options=dataclasses.replace(options, materialize_weights=True)
    )
    from safetensors.torch import load_file
    from tensorizer import TensorSerializer

    state = {}
    for shard in shards:
        state.update(load_file(str(result.path / shard)))
    out.mkdir(parents=True, exist_ok=True)
    tensors = out / TENSORS_FILE
    temp = out / staging_name(TENSORS_FILE)
    serializer = TensorSerializer(str(temp))
    serializer.write_state_dict({key: state[key] for key in sorted(state)})
    serializer.close()
    os.replace(temp, tensors)
    held = {f.path for f in source.files}
    for entry in (target or source).files:
        if entry in (target or source).weight_files or entry.path == TENSORS_FILE:
            continue
        if entry.path not in held:
            raise UsageError(
                f"{entry.path}, which {target.name if target else source.name} pins, is not among "
                f"{source.name}'s files to copy from",
                hint="pin it in both manifests, or drop it",
            )
        destination = out / entry.path
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result.path / entry.path, destination)
    return tensors


def _tensorizer_of(cat: Catalog, manifest: ModelManifest) -> ModelManifest | None:
    """The tensorizer manifest pinning the same repo and revision, whose non-weight files `out` must hold."""
    return next(
        (
            m
            for m in cat.by_repo(manifest.source.hf_repo)
            if m.load_format is LoadFormat.TENSORIZER and m.source.revision == manifest.source.revision
        ),
        None,
    )


def _twin(cat: Catalog, manifest: ModelManifest) -> ModelManifest:
    from resolver.loaders import safetensors_twin

    twin = safetensors_twin(cat, manifest)
    if twin is None:
        raise UsageError(
            f"{manifest.name} is a tensorizer manifest and no safetensors model pins "
            f"{manifest.source.hf_repo}@{manifest.source.revision[:12]} to take its weights from",
            hint="add the safetensors model of that repo and revision, then `catalog tensorize` it",
        )
    return twin
