"""Sharded safetensors checkpoints written to a folder, for the tests of tensor pins (real files, written by hand
with resolver.examples' writer, so no library version changes a byte)."""

from __future__ import annotations

import json
from pathlib import Path

from resolver.examples import Tensor, safetensors_bytes

INDEX = "model.safetensors.index.json"


def u8(*values: int) -> Tensor:
    return Tensor("U8", (len(values),), bytes(values))


def shard_name(i: int, count: int) -> str:
    return f"model-{i:05d}-of-{count:05d}.safetensors"


def write_checkpoint(folder: Path, shards: dict[str, dict[str, Tensor]], weight_map: dict[str, str]) -> Path:
    """config.json, the shards and an index with `weight_map` (tensor -> shard file)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    for name, tensors in shards.items():
        (folder / name).write_bytes(safetensors_bytes(tensors))
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2, sort_keys=True))
    return folder


def many_shards(folder: Path, count: int = 100, long_header: int = 0) -> Path:
    """`count` shards of two small tensors each; shard 1 also holds enough one-byte tensors that its header is
    longer than `long_header` bytes (0: none)."""
    shards: dict[str, dict[str, Tensor]] = {}
    for i in range(1, count + 1):
        shards[shard_name(i, count)] = {
            f"model.layers.{i}.weight": Tensor("F32", (2, 2), bytes(range(16))),
            f"model.layers.{i}.bias": u8(i % 256, 7),
        }
    first = shards[shard_name(1, count)]
    n = 0
    while long_header and len(json.dumps({k: [0] * 12 for k in first})) < long_header:
        first[f"model.extra.{n:06d}.scale_inverse_of_some_long_quantization_name"] = u8(n % 256)
        n += 1
    weight_map = {t: s for s, tensors in shards.items() for t in tensors}
    return write_checkpoint(folder, shards, weight_map)
