"""The tensor tables `catalog lock` writes beside a manifest, `<name>.tensors.json` (pure: text <-> values).

A manifest pins each safetensors header by digest and a short summary (`header:` on the file's entry); the
tensor names, dtypes and shapes behind it live here, one tensor per line, so a re-lock's diff shows each
tensor that changed and every problem names its line. Where lock read the bytes (a folder, or `--tensor-digests`),
each tensor also carries the sha256 of its own bytes: what the engine's loader (`--load-format catalog`) checks a
tensor against before the model sees it. A file without a safetensors header (a tensorizer file) pins its table
with `table:` and each tensor also carries the absolute offset of its bytes in the file. A large checkpoint has
tens of thousands of tensors: in the manifest they would bury the pins a reviewer must read. Each file's section is pinned by a digest in
the manifest (`header.table_sha256`, `weight_map.sha256`), so an edit here that the manifest does not carry
is caught by `validate` (the `tensor-table` rule), and the sidecar needs no trust of its own.

    {
      "model": "tiny-qwen2",
      "files": {
        "model-00001-of-00002.safetensors": {
          "model.embed_tokens.weight": ["BF16", [64, 32], "5f1c..."],   <- a header: tensors in data-offset order
          ...                                                             (the sha256 of its bytes, where locked)
        },
        "model.tensors": {
          "lm_head.weight": ["F32", [64, 128], "9a0e...", 262308],     <- another format's table: + the data offset
          ...
        },
        "model.safetensors.index.json": {
          "lm_head.weight": "model-00002-of-00002.safetensors",   <- an index's weight_map: repo paths, by name
          ...
        }
      }
    }
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from catalog import bounded
from catalog.safetensors_header import Header
from catalog.schema import FileEntry

SUFFIX = ".tensors.json"
SAFETENSORS_INDEX = ".safetensors.index.json"

Row = tuple[str, str, tuple[int, ...]]  # tensor name, dtype, shape
Digests = Mapping[str, str]  # tensor name -> sha256 of its bytes
Offsets = Mapping[str, int]  # tensor name -> where its bytes start in the file (formats without a safetensors header)

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SECTION = re.compile(r'^ {4}("(?:[^"\\]|\\.)*"): \{')
_ENTRY = re.compile(r'^ {6}("(?:[^"\\]|\\.)*"): ')


class TableError(ValueError):
    """A tensor table that cannot be read; `line` is 1-based (0: unknown)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def sidecar_path(manifest: Path) -> Path:
    """`<name>.tensors.json` beside `<name>.yaml`."""
    return manifest.with_name(manifest.stem + SUFFIX)


def is_safetensors_index(path: str) -> bool:
    return path.endswith(SAFETENSORS_INDEX)


# -- canonical forms and their digests (what the manifest pins) -------------------------------------------
def header_rows(header: Header) -> tuple[Row, ...]:
    return tuple((t.name, t.dtype, t.shape) for t in header.tensors)


def table_sha256(rows: Sequence[Row], digests: Digests | None = None, offsets: Offsets | None = None) -> str:
    """The digest of a file's tensor table, in offset order (the file's layout is part of what is pinned), with each
    tensor's byte digest and offset where the table has them (a table without them digests as it always did)."""
    return _digest([_canonical(row, digests, offsets) for row in rows])


def _canonical(row: Row, digests: Digests | None, offsets: Offsets | None) -> list[object]:
    name, dtype, shape = row
    out: list[object] = [name, dtype, list(shape)]
    if digests is not None and name in digests:
        out.append(digests[name])
        if offsets is not None and name in offsets:
            out.append(offsets[name])
    return out


def weight_map_sha256(mapping: Mapping[str, str]) -> str:
    return _digest(sorted(mapping.items()))


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def weight_map(index_path: str, raw: bytes) -> dict[str, str]:
    """An index's weight_map as tensor -> repo path of its shard (the map's names are relative to the index's
    folder). `raw` was already checked to be an index (`resolver.completeness.index_shards`)."""
    data = bounded.loads(raw)
    folder = posixpath.dirname(index_path)
    return {str(t): posixpath.join(folder, f) if folder else str(f) for t, f in sorted(data["weight_map"].items())}


# -- the file ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorTables:
    model: str
    headers: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)  # weights file -> its tensors, in file order
    weight_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # index -> tensor -> shard
    digests: Mapping[str, Digests] = field(default_factory=dict)  # weights file -> tensor -> sha256 (where locked)
    offsets: Mapping[str, Offsets] = field(default_factory=dict)  # a file without a safetensors header -> offsets
    text: str = field(default="", repr=False, compare=False)  # what was parsed: lines are found in it when asked

    @cached_property
    def lines(self) -> Mapping[tuple[str, ...], int]:
        """(file,) or (file, tensor) -> line. Only a problem needs one: a clean validate never scans for them."""
        return _lines(self.text)

    def line_of(self, path: str, tensor: str | None = None) -> int:
        key = (path,) if tensor is None else (path, tensor)
        return self.lines.get(key) or self.lines.get((path,)) or 1

    def section_sha256(self, path: str) -> str | None:
        """What the manifest pins for this file's table (None: the tables have no such section)."""
        rows = self.headers.get(path)
        return None if rows is None else table_sha256(rows, self.digests.get(path), self.offsets.get(path))


def render(
    model: str,
    headers: Mapping[str, Sequence[Row]],
    weight_maps: Mapping[str, Mapping[str, str]],
    digests: Mapping[str, Digests] | None = None,
    offsets: Mapping[str, Offsets] | None = None,
) -> str:
    """The sidecar's text: files by path, a file's tensors in offset order, a weight_map's by name."""
    sections: dict[str, list[str]] = {}
    for path, rows in headers.items():
        own, at = (digests or {}).get(path), (offsets or {}).get(path)
        sections[path] = [f"{_key(row[0])}: {_value(_canonical(row, own, at)[1:])}" for row in rows]
    for path, mapping in weight_maps.items():
        sections[path] = [f"{_key(t)}: {_value(shard)}" for t, shard in sorted(mapping.items())]
    out = ["{", f'  "model": {_value(model)},', '  "files": {']
    for i, path in enumerate(sorted(sections)):
        entries = sections[path]
        out.append(f"    {_key(path)}: {{")
        out += [f"      {e}{',' if j < len(entries) - 1 else ''}" for j, e in enumerate(entries)]
        out.append("    }" + ("," if i < len(sections) - 1 else ""))
    out += ["  }", "}"]
    return "\n".join(out) + "\n"


def _key(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _value(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def parse(text: str) -> TensorTables:
    """The tables of a sidecar's text; TableError (with a line where one is known) for anything else."""
    try:
        data = bounded.loads(text)
    except ValueError as exc:
        raise TableError(f"not JSON: {exc}", getattr(exc, "lineno", 0)) from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict) or not isinstance(data.get("model"), str):
        raise TableError('expected an object with "model" and "files"', 1)
    headers: dict[str, tuple[Row, ...]] = {}
    maps: dict[str, dict[str, str]] = {}
    digests: dict[str, dict[str, str]] = {}
    offsets: dict[str, dict[str, int]] = {}
    for path, section in data["files"].items():
        if not isinstance(section, dict):
            raise TableError(f"{path!r}: expected an object of tensors", _lines(text).get((path,), 0))
        if is_safetensors_index(path):
            maps[path] = {str(t): _shard(path, t, s, text) for t, s in section.items()}
            continue
        rows = []
        for tensor, value in section.items():
            rows.append(_row(path, tensor, value, text))
            if len(value) > 2:
                digests.setdefault(path, {})[tensor] = value[2]
            if len(value) > 3:
                offsets.setdefault(path, {})[tensor] = value[3]
        headers[path] = tuple(rows)
    return TensorTables(data["model"], headers, maps, digests, offsets, text)


def _shard(path: str, tensor: str, value: Any, text: str) -> str:
    if not isinstance(value, str):
        raise TableError(
            f"{path!r}: tensor {tensor!r} maps to {value!r}, expected a file name", _lines(text).get((path, tensor), 0)
        )
    return value


def _row(path: str, tensor: str, value: Any, text: str) -> Row:
    ok = (
        type(value) is list
        and 2 <= len(value) <= 4
        and type(value[0]) is str
        and type(value[1]) is list
        and all(type(d) is int and d >= 0 for d in value[1])
        and (len(value) < 3 or (type(value[2]) is str and _SHA256.fullmatch(value[2]) is not None))
        and (len(value) < 4 or (type(value[3]) is int and value[3] >= 0))
    )
    if not ok:
        raise TableError(
            f"{path!r}: tensor {tensor!r} is {value!r}, expected [dtype, shape] or [dtype, shape, sha256] "
            "or [dtype, shape, sha256, offset]",
            _lines(text).get((path, tensor), 0),
        )
    return (tensor, value[0], tuple(value[1]))


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each section and entry is, for a file laid out as `render` writes it (another layout parses
    the same, its problems are then reported at line 1)."""
    out: dict[tuple[str, ...], int] = {}
    section: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if (match := _SECTION.match(line)) is not None:
            section = _string(match.group(1))
            if section is not None:
                out.setdefault((section,), number)
        elif section is not None and (match := _ENTRY.match(line)) is not None:
            name = _string(match.group(1))
            if name is not None:
                out.setdefault((section, name), number)
    return out


def _string(literal: str) -> str | None:
    if "\\" not in literal:
        return literal[1:-1]  # nothing escaped: the text between the quotes (the common case, and fast)
    try:
        value = json.loads(literal)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


# -- the inventory `catalog show` prints --------------------------------------------------------------------
@dataclass(frozen=True)
class Inventory:
    """A model's tensors as its pinned headers count them."""

    files: int  # safetensors files with a pinned header
    tensors: int
    parameters: int
    bytes_by_dtype: Mapping[str, int]
    unpinned: tuple[str, ...]  # safetensors files without one (locked before headers were pinned)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "count": self.tensors,
            "parameters": self.parameters,
            "bytes_by_dtype": dict(self.bytes_by_dtype),
            "bytes": sum(self.bytes_by_dtype.values()),
            "unpinned": list(self.unpinned),
        }


def inventory(files: Sequence[FileEntry]) -> Inventory:
    pinned = [f.header for f in files if f.header is not None]
    by_dtype: dict[str, int] = {}
    for h in pinned:
        for dtype, count in h.bytes_by_dtype.items():
            by_dtype[dtype] = by_dtype.get(dtype, 0) + count
    unpinned = tuple(f.path for f in files if f.header is None and f.path.endswith(".safetensors"))
    return Inventory(
        len(pinned),
        sum(h.tensors for h in pinned),
        sum(h.parameters for h in pinned),
        dict(sorted(by_dtype.items())),
        unpinned,
    )
