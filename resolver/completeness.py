"""Complete pins: every file a weights index names is pinned too (pure; standard library only).

A sharded checkpoint is an index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`, a
diffusers subfolder's `unet/diffusion_pytorch_model.safetensors.index.json`) whose `weight_map` maps each
tensor to the shard file holding it, relative to the index's folder. An include/exclude that drops one
shard gives a model that validates, syncs and resolves, and then fails to load. So:

- `catalog lock` reads each selected index and refuses a selection that leaves a shard out, naming the
  shard and the pattern that dropped it; it records the shards on the index's entry (`shards:`);
- `catalog validate` checks the recorded shards are pinned (the `shard-missing` rule, no network);
- the cache checks a view before marking it: every file a local index names is in the view or pinned
  (streamed) by the manifest (`check_view`, called from `Cache.build_view`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalog import bounded, formats, naming
from catalog.errors import CatalogError

if TYPE_CHECKING:
    from catalog.schema import FileEntry


class BadIndexError(CatalogError, ValueError):
    """An index file that is not a JSON object with a `weight_map` of relative file names."""


class IncompleteModelError(CatalogError, LookupError):
    """A weights index names files that are not pinned: the model could not load."""

    def __init__(self, model: str, missing: Mapping[str, Sequence[str]], *, hint: str | None = None) -> None:
        listing = "; ".join(f"{index} names {', '.join(shards)}" for index, shards in sorted(missing.items()))
        super().__init__(f"{model} is incomplete: {listing}, not pinned", hint=hint)
        self.model = model
        self.missing = {k: list(v) for k, v in missing.items()}


def index_shards(index_path: str, raw: bytes) -> tuple[str, ...]:
    """The repo paths of the files an index's weight_map names (sorted, once each)."""
    try:
        data = bounded.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadIndexError(f"{index_path} is not JSON: {exc}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise BadIndexError(f"{index_path} has no weight_map of tensor names to file names")
    folder = posixpath.dirname(index_path)
    out = set()
    for name in set(weight_map.values()):
        if (message := naming.check_relative_path(name)) is not None:
            raise BadIndexError(f"{index_path} names {name!r}: {message}")
        out.add(posixpath.join(folder, name) if folder else name)
    return tuple(sorted(out))


def missing_shards(pinned: Collection[str], shards: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """index -> the files it names that are not in `pinned` (only indexes with some missing)."""
    have = set(pinned)
    out = {index: [s for s in names if s not in have] for index, names in shards.items()}
    return {index: names for index, names in out.items() if names}


@dataclass(frozen=True)
class ViewGap:
    index: str
    shards: tuple[str, ...]


def view_gaps(files: Sequence[FileEntry], read: Callable[[FileEntry], bytes]) -> list[ViewGap]:
    """The local indexes of a view (its `files`) naming a file that is neither in the view nor recorded as
    pinned on the index's entry (`shards`, which validation proves pinned: streamed shards count)."""
    in_view = {f.path for f in files}
    gaps = []
    for entry in files:
        if not formats.is_index_file(entry.path):
            continue
        named = index_shards(entry.path, read(entry))
        pinned = in_view | set(entry.shards or ())
        unpinned = tuple(s for s in named if s not in pinned)
        if unpinned:
            gaps.append(ViewGap(entry.path, unpinned))
    return gaps


def check_view(model: str, files: Sequence[FileEntry], read: Callable[[FileEntry], bytes]) -> None:
    """Refuse a view whose local index names an unpinned file (IncompleteModelError)."""
    gaps = view_gaps(files, read)
    if gaps:
        raise IncompleteModelError(
            model,
            {g.index: g.shards for g in gaps},
            hint=f"pin the missing shards: widen source.include/exclude and run `catalog lock {model}`",
        )
