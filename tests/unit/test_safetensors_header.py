"""The safetensors header parser lock, validate, check-load and show share: what it reads from real files, and
each kind of broken header it refuses, with what it says."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from catalog.safetensors_header import MAX_HEADER, HeaderError, header_length, parse
from resolver.examples import Tensor, decoder_tensors, safetensors_bytes


def file_of(header: dict[str, object], data: bytes = b"", *, raw: bytes | None = None) -> bytes:
    text = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def u8(start: int, end: int, shape: list[int] | None = None, dtype: str = "U8") -> dict[str, object]:
    return {"dtype": dtype, "shape": shape if shape is not None else [end - start], "data_offsets": [start, end]}


def test_a_generated_model_parses_to_its_tensors_in_offset_order() -> None:
    tensors = decoder_tensors(seed=1, dtype="BF16")
    data = safetensors_bytes(tensors, {"format": "pt"})
    header = parse(data, len(data))
    assert [t.name for t in header.tensors] == sorted(tensors)  # the writer lays them out by name
    assert {t.name: (t.dtype, t.shape) for t in header.tensors} == {n: ("BF16", t.shape) for n, t in tensors.items()}
    assert header.metadata == {"format": "pt"}
    assert header.parameters == sum(len(t.data) // 2 for t in tensors.values())
    assert header.bytes_by_dtype() == {"BF16": sum(len(t.data) for t in tensors.values())}
    assert header.sha256 == hashlib.sha256(data[: 8 + header.length]).hexdigest()
    assert 8 + header.length + header.data_bytes == len(data)


def test_the_real_minilm_header_parses() -> None:
    from resolver.examples import minilm_dir

    data = (minilm_dir() / "model.safetensors").read_bytes()
    header = parse(data[: 8 + header_length(data, len(data))], len(data))
    assert len(header.tensors) == 104 and header.bytes_by_dtype() == {"F32": 90_852_864, "I64": 4_096}


def test_sub_byte_dtypes_count_bits() -> None:
    data = file_of({"a": u8(0, 4, [8], "F4"), "b": u8(4, 10, [8], "F6_E2M3")}, b"\0" * 10)
    assert [t.nbytes for t in parse(data, len(data)).tensors] == [4, 6]
    odd = file_of({"a": u8(0, 2, [3], "F4")}, b"\0" * 2)  # 12 bits: not a whole number of bytes
    with pytest.raises(HeaderError, match=r"tensor 'a' is F4 \[3\], 1.5 bytes, but its data_offsets span 2 bytes"):
        parse(odd, len(odd))


def test_an_empty_header_is_a_file_with_no_tensors() -> None:
    data = safetensors_bytes({}, {"note": "x"})
    header = parse(data, len(data))
    assert header.tensors == () and header.parameters == 0 and header.data_bytes == 0


BROKEN = {
    "too short": (b"\x05\x00", 2, "shorter than a safetensors header's 8-byte length"),
    "length past the end": (
        struct.pack("<Q", 100) + b"{}",
        10,
        "header length 100 runs past the end of the 10-byte file",
    ),
    "length beyond the bound": (struct.pack("<Q", MAX_HEADER + 1), 2 * MAX_HEADER, "beyond safetensors' bound"),
    "not JSON": (file_of({}, raw=b"{nope"), 0, "the header is not JSON"),
    "not UTF-8": (file_of({}, raw=b'{"\xff": 1}'), 0, "the header is not UTF-8"),
    "a list": (file_of({}, raw=b"[]"), 0, "the header is a JSON list, not an object of tensors"),
    "unknown dtype": (
        file_of({"a": u8(0, 2, dtype="Q4")}, b"ab"),
        0,
        "tensor 'a' has dtype 'Q4', which safetensors does not know",
    ),
    "bad shape": (
        file_of({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"a"),
        0,
        r"tensor 'a' has shape \[-1\]: expected a list of non-negative integers",
    ),
    "bad offsets": (
        file_of({"a": {"dtype": "U8", "shape": [1], "data_offsets": [2, 1]}}, b"ab"),
        0,
        r"tensor 'a' has data_offsets \[2, 1\]",
    ),
    "shape x dtype != span": (
        file_of({"a": u8(0, 6, [2], "F32")}, b"\0" * 6),
        0,
        r"tensor 'a' is F32 \[2\], 8 bytes, but its data_offsets span 6 bytes",
    ),
    "overlap": (file_of({"a": u8(0, 4), "b": u8(2, 6)}, b"\0" * 6), 0, "tensor 'b' starts at data byte 2 and overlaps"),
    "gap": (
        file_of({"a": u8(0, 2), "b": u8(4, 6)}, b"\0" * 6),
        0,
        "tensor 'b' starts at data byte 4 and leaves a gap after byte 2",
    ),
    "out of the file": (
        file_of({"a": u8(0, 2), "b": u8(2, 9)}, b"\0" * 4),
        0,
        "the tensors end at data byte 9, past the end",
    ),
    "bytes nothing covers": (
        file_of({"a": u8(0, 2)}, b"\0" * 5),
        0,
        "the tensors end at data byte 2, short of the file's 5-byte",
    ),
    "duplicate names": (
        file_of(
            {},
            raw=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
            b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}',
        )
        + b"ab",
        0,
        "the header names 'a' twice",
    ),
    "metadata not strings": (file_of({"__metadata__": {"k": 1}}), 0, "__metadata__ must map names to strings"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_header_is_refused_saying_what_is_wrong(case: str) -> None:
    data, size, says = BROKEN[case]
    with pytest.raises(HeaderError, match=says):
        parse(data, size or len(data))


def test_the_header_bound_is_the_references(tmp_path: Path) -> None:
    """A header of exactly MAX_HEADER bytes opens in safetensors and parses here; one byte more is refused by both."""
    from safetensors import safe_open

    for length, valid in ((MAX_HEADER, True), (MAX_HEADER + 1, False)):
        data = struct.pack("<Q", length) + b"{}" + b" " * (length - 2)
        path = tmp_path / "f.safetensors"
        path.write_bytes(data)
        try:
            with safe_open(str(path), "np"):
                opened = True
        except Exception:  # noqa: BLE001 - the reference raises its own error types
            opened = False
        try:
            parse(data, len(data))
            parsed = True
        except HeaderError:
            parsed = False
        assert opened is parsed is valid, length


def test_the_reference_reader_agrees_on_what_is_valid(tmp_path: Path) -> None:
    """What we accept, safetensors itself opens; what it refuses (but for duplicate names, which it takes as the
    last one silently), we refuse too."""
    from safetensors import safe_open

    def opens(data: bytes) -> bool:
        path = tmp_path / "f.safetensors"
        path.write_bytes(data)
        try:
            with safe_open(str(path), "np"):
                return True
        except Exception:  # noqa: BLE001 - the reference raises its own error types
            return False

    good = safetensors_bytes({"w": Tensor("F32", (2, 2), b"\0" * 16)})
    assert opens(good) and parse(good, len(good)).tensors
    for case, (data, _size, _) in BROKEN.items():
        if case in ("duplicate names", "length beyond the bound", "too short", "length past the end"):
            continue  # the reference takes the last duplicate; the others are about the file's size, not its bytes
        assert not opens(data), case
