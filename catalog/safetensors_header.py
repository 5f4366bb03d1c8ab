"""safetensors headers, parsed and checked (pure, standard library only).

A safetensors file is 8 bytes of little-endian header length N, N bytes of JSON (tensor name -> dtype, shape,
data_offsets relative to the end of the header, plus an optional `__metadata__` of strings), then the data
section. The header names every tensor without a weight byte, so `catalog lock` pins it from one ranged read,
`validate` checks checkpoints from what was pinned, `check-load` compares what it loads with it and `show`
prints the inventory. One parser for all of them, as strict as the reference implementation where that one is
strict, and stricter where it is lenient about something that makes a checkpoint ambiguous:

- the length must fit the file (and the reference's bound of 100,000,000 bytes);
- the JSON must be an object of tensors with a known dtype, a shape of non-negative integers and two offsets;
- offsets, sorted, must tile the data section from 0 to its end: no gap, no overlap, nothing past the file;
- each tensor's byte span must be exactly its element count x its dtype's width;
- a name may appear once (the reference keeps the last of two silently; we refuse, since which tensor a
  loader gets would then depend on the JSON parser).

Every refusal is a `HeaderError` whose message says what is wrong; callers add the model and file.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog import bounded
from catalog.errors import CatalogError

PREFIX = 8  # the little-endian u64 header length
MAX_HEADER = 100_000_000  # bytes: the reference implementation refuses a longer header (checked with safetensors 0.8)
METADATA = "__metadata__"
MAX_DIM = 1 << 64  # safetensors stores dimensions as u64

# Bits per element of every dtype safetensors 0.8 reads (checked against its parser). Sub-byte types (F4, F6)
# pack elements, so a tensor's span is element count x bits / 8, which must be a whole number of bytes.
DTYPE_BITS: Mapping[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}


# safetensors dtype names -> torch's (str(torch.float32) == "torch.float32"): the loaders build tensors from spans,
# and tensorizer's opaque dtypes are named back through it (resolver/tensor_pins.py).
TORCH_DTYPES: Mapping[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}


class HeaderError(CatalogError, ValueError):
    """Bytes that are not a valid safetensors header; the message says what is wrong (the caller names the file)."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header describes it."""

    name: str
    dtype: str  # the safetensors name: F32, BF16, ...
    shape: tuple[int, ...]
    start: int  # data_offsets, relative to the end of the header
    end: int

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Header:
    """A checked header: `tensors` in data-offset order (the file's own layout)."""

    length: int  # N, the JSON's length in bytes
    sha256: str  # of the file's first 8 + N bytes: what the pin names
    tensors: tuple[TensorInfo, ...]
    metadata: Mapping[str, str]
    raw: bytes = field(
        default=b"", repr=False, compare=False
    )  # those 8 + N bytes (a streamed file's hash starts with them)

    @property
    def data_bytes(self) -> int:
        return self.tensors[-1].end if self.tensors else 0

    @property
    def parameters(self) -> int:
        return sum(t.elements for t in self.tensors)

    def bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return dict(sorted(out.items()))

    def by_name(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}


def header_length(prefix: bytes, file_size: int) -> int:
    """N from the file's first 8 bytes, checked against the file's size: the header must end inside the file."""
    if len(prefix) < PREFIX:
        raise HeaderError(f"the file is {len(prefix)} bytes long, shorter than a safetensors header's 8-byte length")
    (length,) = struct.unpack("<Q", prefix[:PREFIX])
    if length > MAX_HEADER:
        raise HeaderError(f"the header length {length} is beyond safetensors' bound of {MAX_HEADER} bytes")
    if PREFIX + length > file_size:
        raise HeaderError(f"the header length {length} runs past the end of the {file_size}-byte file")
    return int(length)


def parse(raw: bytes, file_size: int) -> Header:
    """The header of a `file_size`-byte file from its first bytes (`raw` holds at least 8 + N of them)."""
    length = header_length(raw, file_size)
    if len(raw) < PREFIX + length:
        raise HeaderError(f"only {len(raw)} of the header's {PREFIX + length} bytes were given")
    head = raw[: PREFIX + length]
    try:
        data = bounded.loads(head[PREFIX:].decode("utf-8"), limit=MAX_HEADER, object_pairs_hook=_no_duplicates)
    except HeaderError:
        raise
    except UnicodeDecodeError as exc:
        raise HeaderError(f"the header is not UTF-8 ({exc.reason} at byte {PREFIX + exc.start})") from None
    except ValueError as exc:
        raise HeaderError(f"the header is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HeaderError(f"the header is a JSON {type(data).__name__}, not an object of tensors")
    metadata = _metadata(data.pop(METADATA, {}))
    tensors = sorted((_tensor(name, info) for name, info in data.items()), key=lambda t: (t.start, t.end, t.name))
    position = 0
    for t in tensors:
        if t.start != position:
            what = "overlaps the tensor before it" if t.start < position else f"leaves a gap after byte {position}"
            raise HeaderError(
                f"tensor {t.name!r} starts at data byte {t.start} and {what}: the data section must be contiguous"
            )
        position = t.end
    data_size = file_size - PREFIX - length
    if position != data_size:
        where = "past the end of" if position > data_size else "short of"
        raise HeaderError(f"the tensors end at data byte {position}, {where} the file's {data_size}-byte data section")
    return Header(length, hashlib.sha256(head).hexdigest(), tuple(tensors), metadata, bytes(head))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        _unicode(key)
        if key in out:
            raise HeaderError(f"the header names {key!r} twice")
        out[key] = value
    return out


def _unicode(text: str) -> None:
    """JSON's `\\ud800` escapes decode to lone surrogates, which no UTF-8 file (a manifest, a tensor table) can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise HeaderError(f"the header names {text[:80]!r}, which is not valid Unicode (a lone surrogate)") from None


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HeaderError(f"{METADATA} must map names to strings")
    for text in value.values():
        _unicode(text)
    return dict(value)


def _tensor(name: str, info: Any) -> TensorInfo:
    if not isinstance(info, dict):
        raise HeaderError(f"tensor {name!r} is described by a JSON {type(info).__name__}, not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise HeaderError(
            f"tensor {name!r} has dtype {dtype!r}, which safetensors does not know (known: {', '.join(DTYPE_BITS)})"
        )
    if not isinstance(shape, list) or not all(_count(d) and d < MAX_DIM for d in shape):
        raise HeaderError(
            f"tensor {name!r} has shape {_cut(shape)}: expected a list of non-negative integers below 2**64"
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise HeaderError(
            f"tensor {name!r} has data_offsets {_cut(offsets)}: expected [begin, end] with 0 <= begin <= end"
        )
    tensor = TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])
    bits = tensor.elements * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != tensor.nbytes:
        fraction = f".{bits % 8 * 125}".rstrip("0") if bits % 8 else ""  # exact, where a float overflows past 1e308
        raise HeaderError(
            f"tensor {name!r} is {dtype} {_cut(shape)}, {bits // 8}{fraction} bytes, but its data_offsets "
            f"span {tensor.nbytes} bytes"
        )
    return tensor


def _cut(value: Any) -> str:
    """A value as the header spelled it, cut short (a 400-digit dimension stays one line)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
