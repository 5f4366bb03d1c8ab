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
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.fsutil import staging_name
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import Store

TENSORS_FILE = "model.tensors"


def tensorize(cat: Catalog, name: str, out: Path, *, cache: Cache, store: Store, options: ResolveOptions) -> Path:
    """Write out/model.tensors plus the model's non-weight files (so `out` can be a lock/sync source)."""
    manifest = cat.get(name)
    shards = sorted(f.path for f in manifest.weight_files if f.path.endswith(".safetensors"))
    if not shards:
        raise UsageError(f"{name} pins no *.safetensors weights to tensorize")
    result = resolve(cat, name, cache=cache, store=store, options=dataclasses.replace(options, materialize_weights=True))
    from safetensors.torch import load_file
    from tensorizer import TensorSerializer

    state = {}
    for shard in shards:
        state.update(load_file(str(result.path / shard)))
    out.mkdir(parents=True, exist_ok=True)
    target = out / TENSORS_FILE
    temp = out / staging_name(TENSORS_FILE)
    serializer = TensorSerializer(str(temp))
    serializer.write_state_dict({key: state[key] for key in sorted(state)})
    serializer.close()
    os.replace(temp, target)
    weights = {f.path for f in manifest.weight_files}
    for entry in manifest.files:
        if entry.path not in weights:
            destination = out / entry.path
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(result.path / entry.path, destination)
    return target
