"""check-load's failure paths, each on real bytes: unreadable headers, tensors missing, extra or of the wrong
dtype or shape, streamed bytes that do not hash to the pin, tensors that differ from the reference, kwargs
tensorizer refuses, and a missing loaders extra."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch

from catalog.schema import FileEntry
from resolver.loaders import LOCAL, LoadError, compare_tensors, deserialize_tensorizer, parse_header
from resolver.loaders.common import _need
from resolver.loaders.runai import check_streamed


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    header: dict[str, object] = {}
    data = b""
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": {torch.float32: "F32", torch.int64: "I64"}[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


TENSORS = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.arange(4, dtype=torch.int64)}
FILE = safetensors_bytes(TENSORS)
ENTRY = FileEntry(path="m.safetensors", size=len(FILE), sha256=hashlib.sha256(FILE).hexdigest())
HEADER = parse_header("m", ENTRY, FILE[: 8 + struct.unpack("<Q", FILE[:8])[0]])


def test_the_streamed_tensors_of_an_intact_file_pass() -> None:
    assert check_streamed("m", ENTRY, HEADER, TENSORS) == []


@pytest.mark.parametrize(
    ("tensors", "says"),
    [
        ({"a": TENSORS["a"]}, "tensor b named in the header did not arrive"),
        ({**TENSORS, "c": torch.zeros(1)}, "tensor c arrived but is not in the header"),
        ({**TENSORS, "a": TENSORS["a"].to(torch.float64)}, "tensor a arrived as torch.float64"),
        ({**TENSORS, "a": TENSORS["a"].reshape(3, 2)}, "tensor a arrived as torch.float32 (3, 2)"),
        ({**TENSORS, "a": TENSORS["a"] + 1}, "the streamed bytes hash to"),
    ],
)
def test_streamed_tensors_that_differ_from_the_file_are_problems(tensors: dict[str, torch.Tensor], says: str) -> None:
    problems = check_streamed("m", ENTRY, HEADER, tensors)
    assert problems and says in problems[0] and problems[0].startswith("m/m.safetensors: "), problems


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack("<Q", 5) + b"not j",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 40) + b'{"a": {"dtype": "F32"}}'.ljust(40),
    ],
)
def test_an_unreadable_header_is_a_load_error(raw: bytes) -> None:
    with pytest.raises(LoadError, match="unreadable safetensors header"):
        parse_header("m", ENTRY, raw)


def test_tensors_that_differ_from_the_reference_are_named() -> None:
    got = {"a": TENSORS["a"], "b": TENSORS["b"] + 1, "extra": torch.zeros(1)}
    problems = compare_tensors(got, {**TENSORS, "gone": torch.zeros(1)}, what="t", reference="r")
    assert problems == [
        "t: tensor gone is missing (it is in r)",
        "t: tensor extra is not in r",
        "t: tensor b differs from r's",
    ]


def test_kwargs_tensorizer_refuses_are_a_load_error_naming_them(tmp_path: Path) -> None:
    from tensorizer import TensorSerializer

    path = tmp_path / "m.tensors"
    serializer = TensorSerializer(str(path))
    serializer.write_state_dict(TENSORS)
    serializer.close()
    tensors, problems = deserialize_tensorizer("m", str(path), LOCAL, {})
    assert problems == [] and torch.equal(tensors["a"], TENSORS["a"])
    with pytest.raises(LoadError, match="refused the deserialization_kwargs"):
        deserialize_tensorizer("m", str(path), LOCAL, {"no_such_option": 1})


def test_a_missing_loader_library_says_which_extra_to_install() -> None:
    with pytest.raises(LoadError) as caught:
        _need("m", "torch", "no_such_loader_library")
    assert "no_such_loader_library" in caught.value.message and "model-catalog[loaders]" in (caught.value.hint or "")
