"""catalog/bounded.py: every file the catalog reads is a regular file inside its root and within its bound before a
byte is read; JSON from outside is bounded in size and nesting. Real files, FIFOs and devices in a temp folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from catalog import bounded, signing, tensor_tables
from catalog.bounded import BadJsonError, UnsafeFileError
from catalog.safetensors_header import HeaderError, parse
from resolver.completeness import BadIndexError, index_shards
from resolver.last_copy import from_bytes

DEEP = "[" * 100_000 + "]" * 100_000  # a few hundred KB that sent json into RecursionError (exit 3)


def test_a_regular_file_inside_its_root_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_bytes(b"name: a\n")
    (tmp_path / "b.yaml").symlink_to("a.yaml")  # a link that stays inside the root is fine
    assert bounded.read_file(tmp_path / "b.yaml", 100, root=tmp_path) == b"name: a\n"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "x.yaml")  # nobody writes it: a blocking open would wait forever
    with pytest.raises(UnsafeFileError, match="is a FIFO, not a regular file; refused unread"):
        bounded.read_file(tmp_path / "x.yaml", 100)


def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeFileError, match="is a character device"):
        bounded.read_file("/dev/zero", 1 << 30)
    (tmp_path / "x.yaml").symlink_to("/dev/zero")
    with pytest.raises(UnsafeFileError, match=r"leads outside .* \(to /dev/zero\)"):
        bounded.read_file(tmp_path / "x.yaml", 1 << 30, root=tmp_path)


def test_a_link_out_of_the_root_is_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"key")
    root = tmp_path / "root"
    root.mkdir()
    (root / "k.pem").symlink_to(secret)
    with pytest.raises(UnsafeFileError, match=f"to {secret}"):
        bounded.read_file(root / "k.pem", 100, root=root)
    assert bounded.read_file(root / "k.pem", 100) == b"key"  # no root: where the caller named it, it may lie anywhere


def test_the_size_is_checked_before_reading_and_an_error_is_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(OSError, match="is 101 bytes, more than the 100 bytes such a file may hold"):
        bounded.read_file(tmp_path / "big", 100)
    with pytest.raises(FileNotFoundError):
        bounded.read_file(tmp_path / "missing", 100)
    with pytest.raises(UnsafeFileError, match="is a folder"):
        bounded.read_file(tmp_path, 100)


def test_deep_json_is_a_value_error_wherever_json_from_outside_is_parsed() -> None:
    with pytest.raises(BadJsonError, match="nested deeper"):
        bounded.loads(DEEP)
    assert bounded.loads("[[1]]") == [[1]]
    with pytest.raises(signing.SignatureFormatError):  # NAME.sig
        signing.parse_bundle(DEEP.encode())
    with pytest.raises(signing.SignatureFormatError):  # its payload
        signing.parse_statement(DEEP.encode())
    with pytest.raises(tensor_tables.TableError, match="nested deeper"):  # NAME.tensors.json
        tensor_tables.parse(DEEP)
    with pytest.raises(BadIndexError, match="nested deeper"):  # a weights index
        index_shards("model.safetensors.index.json", DEEP.encode())
    with pytest.raises(ValueError, match="nested deeper"):  # the bucket's audit record: refused, never guessed
        from_bytes(DEEP.encode())
    header = DEEP.encode()
    with pytest.raises(HeaderError, match="nested deeper"):  # a safetensors header
        parse(len(header).to_bytes(8, "little") + header, 8 + len(header))


def test_json_larger_than_its_bound_is_refused() -> None:
    with pytest.raises(BadJsonError, match="more than the 10 bytes"):
        bounded.loads(json.dumps(list(range(10))), limit=10)
