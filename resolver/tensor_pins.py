"""Per-tensor pins: the sha256 of every tensor's own bytes, taken from bytes whose whole-file sha256 is the pin.

`catalog lock` records them in the tensor tables (catalog/tensor_tables.py) so that the engine's loader
(`--load-format catalog`, resolver/verified_load.py) can check each tensor before the model sees it, while the
file is still streaming: a whole-file sha256 is only known after the last byte, long after the first tensors
reached the device.

One digest per tensor, not per fixed-size range: a tensor is the unit the engine receives, so a tensor waits on
its own bytes only, never on a neighbour's, and a refused tensor names itself. The cost is the same sha256 over
the same bytes either way; the table grows by one 64-hex string per tensor.

A safetensors file says where each tensor's bytes are (its header); a tensorizer file's own index does too, but
that index is part of the file an attacker would replace, so lock copies each tensor's offset into the table
(`table:` pins it) and the loader reads only those spans.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import CatalogError
from catalog.safetensors_header import PREFIX, TORCH_DTYPES, Header
from catalog.tensor_tables import Row
from resolver.hashing import CHUNK

TENSORIZER_SUFFIX = ".tensors"

# numpy's dtype strings (what tensorizer records) -> the safetensors names the tables use
_NUMPY_DTYPES = {
    "<f4": "F32",
    "<f2": "F16",
    "<f8": "F64",
    "<i8": "I64",
    "<i4": "I32",
    "<i2": "I16",
    "|i1": "I8",
    "|u1": "U8",
    "<u2": "U16",
    "<u4": "U32",
    "<u8": "U64",
    "|b1": "BOOL",
    "<c8": "C64",
}
# torch's dtype names -> the safetensors names (tensorizer stores bfloat16 and float8 opaquely; torch names them)
_TORCH_DTYPES = {torch: name for name, torch in TORCH_DTYPES.items()}


class TensorPinError(CatalogError, ValueError):
    """A weights file whose tensors cannot be pinned (not the format its name says)."""


@dataclass(frozen=True)
class Span:
    """One tensor's bytes in its file: [start, end), absolute offsets."""

    name: str
    start: int
    end: int


@dataclass(frozen=True)
class FilePins:
    """What one pass over a file gives: its size and sha256, and each tensor's digest."""

    size: int
    sha256: str
    digests: dict[str, str]


def safetensors_spans(header: Header) -> list[Span]:
    """Where each tensor of a parsed safetensors header lies in the file, in file order."""
    base = PREFIX + header.length
    return [Span(t.name, base + t.start, base + t.end) for t in header.tensors]


def hash_file_spans(path: Path, spans: Sequence[Span]) -> FilePins:
    """One read of the file: the sha256 of all of it, and of each span (spans in file order, not overlapping)."""
    ordered = sorted(spans, key=lambda s: s.start)
    whole = hashlib.sha256()
    digests: dict[str, str] = {}
    current = 0  # the index of the first span not yet finished
    hasher = hashlib.sha256()
    position = 0
    view = memoryview(bytearray(CHUNK))
    with open(path, "rb", buffering=0) as f:
        while count := f.readinto(view):
            chunk = view[:count]
            whole.update(chunk)
            end = position + count
            while current < len(ordered) and ordered[current].start < end:
                span = ordered[current]
                lo, hi = max(span.start, position) - position, min(span.end, end) - position
                hasher.update(chunk[lo:hi])
                if span.end > end:
                    break  # the span goes on in the next chunk
                digests[span.name] = hasher.hexdigest()
                hasher = hashlib.sha256()
                current += 1
            position = end
    for span in ordered[current:]:  # empty spans at the very end, or spans past a file shorter than its header says
        if span.start == span.end and span.end <= position:
            digests[span.name] = hashlib.sha256().hexdigest()
        else:
            raise TensorPinError(
                f"{path.name}: tensor {span.name!r} ends at byte {span.end}, past the file's {position}"
            )
    return FilePins(position, whole.hexdigest(), digests)


def is_tensorizer_file(path: str) -> bool:
    return path.endswith(TENSORIZER_SUFFIX)


def tensorizer_table(path: Path, where: str) -> tuple[tuple[Row, ...], dict[str, int], list[Span]]:
    """A tensorizer file's tensors in file order: rows (name, dtype, shape), each one's data offset, and their spans.

    Read with tensorizer's own deserializer (the `loaders` extra), from bytes the caller has verified or is about to
    hash; its index is taken from this file once, then pinned. TensorPinError when the file is not tensorizer's."""
    try:
        from tensorizer import TensorDeserializer
    except ImportError:
        raise TensorPinError(
            f"{where}: pinning a tensorizer file's tensors needs tensorizer",
            hint="install the loaders extra: pip install 'model-catalog[loaders]'",
        ) from None
    try:
        deserializer = TensorDeserializer(str(path), lazy_load=True, device="cpu", verify_hash=False)
    except Exception as exc:  # noqa: BLE001 - whatever tensorizer refuses, the file is not one of its
        raise TensorPinError(
            f"{where}: not a tensorizer file: {' '.join(str(exc).split())[:200]}",
            hint="fix the file at its source, or the manifest's load_format",
        ) from None
    try:
        entries = sorted(deserializer._metadata.values(), key=lambda e: e.data_offset)  # noqa: SLF001 - its index
        rows: list[Row] = []
        offsets: dict[str, int] = {}
        spans: list[Span] = []
        for entry in entries:
            name = str(entry.name)
            dtype = _NUMPY_DTYPES.get(entry.dtype) or _opaque_dtype(deserializer, name, where)
            rows.append((name, dtype, tuple(int(d) for d in entry.shape)))
            offsets[name] = int(entry.data_offset)
            spans.append(Span(name, int(entry.data_offset), int(entry.data_offset) + int(entry.data_length)))
    finally:
        deserializer.close()
    return tuple(rows), offsets, spans


def _opaque_dtype(deserializer: object, name: str, where: str) -> str:
    """bfloat16 and the float8 types have no numpy dtype: tensorizer stores them opaquely; torch's tensor names it."""
    tensor = deserializer[name]  # type: ignore[index]
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in _TORCH_DTYPES:
        raise TensorPinError(f"{where}: tensor {name!r} has dtype {dtype}, which the tensor tables cannot name")
    return _TORCH_DTYPES[dtype]
