"""What a verified load reads: every pinned tensor of the weights an engine rank loads, where its bytes lie in its
file, and the digest they must have (pure: from the manifest and its tensor tables, no I/O).

A safetensors file's tensors tile its data section in the order the table lists them (lock pinned them from the
header, whose parser refuses gaps and overlaps), so each tensor's offset follows from the pinned header length
and the sizes before it; a file without a header (`table:`) has its offsets pinned. Nothing the file says about
itself is needed: the loader reads exactly these spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from catalog.errors import UsageError
from catalog.formats import LoadFormat
from catalog.safetensors_header import DTYPE_BITS, PREFIX
from catalog.schema import FileEntry, ModelManifest
from catalog.tensor_tables import TensorTables

# The formats whose weights the catalog's loader can read by pinned span: safetensors files (one model, or a rank's
# shards) and tensorizer files. A new one is a row here when its tensor tables can be pinned the same way.
VERIFIED_FORMATS = (
    LoadFormat.RUNAI_STREAMER,
    LoadFormat.RUNAI_STREAMER_SHARDED,
    LoadFormat.TENSORIZER,
    LoadFormat.SAFETENSORS,
    LoadFormat.AUTO,
)


@dataclass(frozen=True)
class PinnedTensor:
    """One tensor as pinned: its file, name, dtype (safetensors' name), shape, byte span and digest."""

    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int
    sha256: str

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class FileLoad:
    entry: FileEntry
    tensors: tuple[PinnedTensor, ...]  # in file order

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


class NotVerifiable(UsageError):
    """The pins do not say enough to check every tensor (a manifest locked before tensor digests)."""


def weight_entries(manifest: ModelManifest, rank: int | None = None) -> list[FileEntry]:
    """The weights files an engine rank loads: a per-rank format's files of `rank` (None: every rank's), else every
    weights file of the format."""
    spec = manifest.load_format.spec
    paths = [f.path for f in manifest.files]
    if spec.tensor_parallel_files is not None and rank is not None:
        wanted = {p for p in paths if "/" not in p and fnmatchcase(p, spec.tensor_parallel_files.format(rank=rank))}
    else:
        wanted = set(spec.weight_files(paths))
    return [f for f in manifest.files if f.path in wanted]


def plan(manifest: ModelManifest, tables: TensorTables | None, rank: int | None = None) -> list[FileLoad]:
    """Every tensor of the weights `rank` loads, with its span and digest. NotVerifiable, naming the first file,
    when a file's tensors have no digests (or the format cannot be read by span)."""
    if manifest.load_format not in VERIFIED_FORMATS:
        raise NotVerifiable(
            f"{manifest.name}: load_format {manifest.load_format.value} has no tensor pins a verified load can read",
            hint=f"use the format's own loader (--load-format {manifest.load_format.value})",
        )
    out = []
    for entry in weight_entries(manifest, rank):
        rows = tables.headers.get(entry.path) if tables is not None else None
        digests = tables.digests.get(entry.path, {}) if tables is not None else {}
        if (
            rows is None
            or any(name not in digests for name, _, _ in rows)
            or (entry.header is None and entry.table is None)
        ):
            raise NotVerifiable(
                f"{manifest.name}/{entry.path}: no digest is pinned for each of its tensors, so a "
                "loader cannot check them before the model sees them",
                hint=f"pin them from the bytes: catalog lock {manifest.name} --from-dir DIR (or "
                "--tensor-digests), or load it with the format's own loader "
                "(CATALOG_ENGINE_LOADER=plain)",
            )
        assert tables is not None
        offsets = tables.offsets.get(entry.path, {})
        position = PREFIX + entry.header.length if entry.header is not None else 0
        tensors = []
        for name, dtype, shape in rows:
            start = offsets[name] if entry.table is not None else position
            end = start + tensor_bytes(dtype, shape)
            tensors.append(PinnedTensor(entry.path, name, dtype, shape, start, end, digests[name]))
            position = end
        out.append(FileLoad(entry, tuple(tensors)))
    if not out:
        raise NotVerifiable(
            f"{manifest.name}: no weights file to load" + (f" for rank {rank}" if rank is not None else "")
        )
    return out


def tensor_bytes(dtype: str, shape: Sequence[int]) -> int:
    elements = 1
    for dim in shape:
        elements *= dim
    return elements * DTYPE_BITS[dtype] // 8


def has_tensor_digests(manifest: ModelManifest, tables: TensorTables | None) -> bool:
    """Every weights file of the model pins a digest for each of its tensors (what `--load-format catalog` needs)."""
    try:
        plan(manifest, tables)
    except NotVerifiable:
        return False
    return True
