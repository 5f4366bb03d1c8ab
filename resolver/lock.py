"""`catalog lock` and `catalog add`: pin every file's size and sha256, and write them into the manifest.

Listing a Hub repo costs no download for LFS files: their sha256 is the LFS oid in the Hub's metadata.
Only small non-LFS files are downloaded (streamed and hashed, never stored), and weights indexes
(`*.safetensors.index.json`, ...): every file an index's weight_map names must be selected too, else lock
refuses, naming the missing shards and the pattern that dropped them; the shards are recorded on the
index's entry (`shards:`) so `catalog validate` can check them without the network. The Hub's git blob id
and Xet hash are recorded where it gives them (informational: sha256 stays the pin). The manifest is
edited as text: the `files:` block is replaced (or appended) and every other byte of the file stays as
the maintainer wrote it, comments and key order included.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from catalog import bounded, formats, naming, tensor_tables
from catalog.errors import CatalogError, IntegrityError, StoreUnavailableError, UsageError
from catalog.loading import load_tables
from catalog.rules import dropped_by
from catalog.safetensors_header import Header, HeaderError
from catalog.schema import FileEntry, HeaderPin, ModelManifest, TablePin, WeightMapPin
from resolver import hashing, tensor_pins, waits
from resolver.completeness import index_shards, missing_shards
from resolver.fsutil import atomic_write
from resolver.headers import read_file_header, read_range, read_store_header
from resolver.hub import HubOptions, HubStore, RetryLater, list_repo_files
from resolver.stores import ObjectNotFound, Store
from resolver.tensor_pins import TensorPinError


@dataclass
class Tensors:
    """What lock read of a model's checkpoints: each safetensors file's header, each safetensors index's weight_map
    (tensor -> repo path of its shard), and, where the bytes were read, each tensor's digest (plus, for a file with no
    safetensors header, its table: rows and offsets). Pinned on the files' entries; the tables go to
    `<name>.tensors.json`."""

    headers: dict[str, Header] = field(default_factory=dict)
    weight_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    digests: dict[str, dict[str, str]] = field(default_factory=dict)
    tables: dict[str, tuple[tuple[tensor_tables.Row, ...], dict[str, int]]] = field(default_factory=dict)

    def pin(self, entries: Sequence[FileEntry]) -> list[FileEntry]:
        return [
            e.model_copy(
                update={
                    "header": header_pin(self.headers[e.path], self.digests.get(e.path))
                    if e.path in self.headers
                    else None,
                    "weight_map": map_pin(self.weight_maps[e.path]) if e.path in self.weight_maps else None,
                    "table": self._table_pin(e.path) if e.path in self.tables else None,
                }
            )
            for e in entries
        ]

    def _table_pin(self, path: str) -> TablePin:
        rows, offsets = self.tables[path]
        return TablePin(tensors=len(rows), table_sha256=tensor_tables.table_sha256(rows, self.digests[path], offsets))

    def render(self, model: str) -> str | None:
        """The sidecar's text; None when there is nothing to write (no safetensors, no other table)."""
        if not self.headers and not self.weight_maps and not self.tables:
            return None
        rows = {path: tensor_tables.header_rows(h) for path, h in self.headers.items()}
        rows |= {path: table[0] for path, table in self.tables.items()}
        offsets = {path: table[1] for path, table in self.tables.items()}
        return tensor_tables.render(model, rows, self.weight_maps, self.digests, offsets)


def header_pin(header: Header, digests: Mapping[str, str] | None = None) -> HeaderPin:
    return HeaderPin(
        length=header.length,
        sha256=header.sha256,
        tensors=len(header.tensors),
        parameters=header.parameters,
        bytes_by_dtype=header.bytes_by_dtype(),
        table_sha256=tensor_tables.table_sha256(tensor_tables.header_rows(header), digests),
    )


def map_pin(mapping: Mapping[str, str]) -> WeightMapPin:
    return WeightMapPin(tensors=len(mapping), sha256=tensor_tables.weight_map_sha256(mapping))


def is_safetensors(path: str) -> bool:
    return path.endswith(".safetensors")


# -- pure: the files block as text ---------------------------------------------------------------
def yaml_scalar(value: str) -> str:
    """`value` as a YAML scalar that reads back as this exact string (quoted only when needed)."""
    if re.fullmatch(r"[A-Za-z0-9_./][A-Za-z0-9_./ -]*", value) and not value.endswith(" "):
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)  # a JSON string is a valid double-quoted YAML scalar


def render_files_block(entries: Sequence[FileEntry]) -> str:
    if not entries:
        return "files: []\n"
    lines = ["files:"]
    for e in sorted(entries, key=lambda e: e.path):
        lines += [f"  - path: {yaml_scalar(e.path)}", f"    size: {e.size}", f"    sha256: {yaml_scalar(e.sha256)}"]
        if e.blob_id is not None:
            lines.append(f"    blob_id: {yaml_scalar(e.blob_id)}")
        if e.xet_hash is not None:
            lines.append(f"    xet_hash: {yaml_scalar(e.xet_hash)}")
        if e.shards is not None:
            lines += ["    shards:" + (" []" if not e.shards else "")] + [f"      - {yaml_scalar(s)}" for s in e.shards]
        if e.header is not None:
            h = e.header
            dtypes = ", ".join(f"{yaml_scalar(d)}: {n}" for d, n in sorted(h.bytes_by_dtype.items()))
            lines += [
                "    header:",
                f"      length: {h.length}",
                f"      sha256: {yaml_scalar(h.sha256)}",
                f"      tensors: {h.tensors}",
                f"      parameters: {h.parameters}",
                f"      bytes_by_dtype: {{{dtypes}}}",
                f"      table_sha256: {yaml_scalar(h.table_sha256)}",
            ]
        if e.weight_map is not None:
            lines += [
                "    weight_map:",
                f"      tensors: {e.weight_map.tensors}",
                f"      sha256: {yaml_scalar(e.weight_map.sha256)}",
            ]
        if e.table is not None:
            lines += [
                "    table:",
                f"      tensors: {e.table.tensors}",
                f"      table_sha256: {yaml_scalar(e.table.table_sha256)}",
            ]
    return "\n".join(lines) + "\n"


def replace_files_block(text: str, entries: Sequence[FileEntry]) -> str:
    """The manifest text with its top-level `files:` block replaced by `entries` (appended if absent).

    The block runs from the `files:` key to the next top-level key; comments and blank lines right
    before that key belong to it and stay.
    """
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"files\s*:", line)), None)
    block = render_files_block(entries)
    if start is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        return text + sep + block
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line[0].isspace() and not line.startswith("#") and not line.startswith("-"):
            break
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1  # blank lines and column-0 comments before the next key belong to that key
    return "".join(lines[:start]) + block + "".join(lines[end:])


def diff_files(old: Sequence[FileEntry], new: Sequence[FileEntry]) -> list[str]:
    """Human-readable differences between two pinned file lists."""
    before = {e.path: e for e in old}
    after = {e.path: e for e in new}
    out = []
    for path in sorted(before.keys() | after.keys()):
        a, b = before.get(path), after.get(path)
        if a is None and b is not None:
            out.append(f"+ {path} ({b.size} bytes, sha256 {b.sha256})")
        elif b is None and a is not None:
            out.append(f"- {path}")
        elif a is not None and b is not None and (a.size, a.sha256) != (b.size, b.sha256):
            # Whole hashes: two pins that share their first 12 digits must not look equal.
            out.append(f"~ {path}: sha256 {a.sha256} ({a.size} bytes) -> {b.sha256} ({b.size} bytes)")
        elif a is not None and b is not None and a.shards != b.shards:
            out.append(
                f"~ {path}: shards {list(a.shards) if a.shards is not None else 'unrecorded'} -> "
                f"{list(b.shards) if b.shards is not None else 'unrecorded'}"
            )
        elif a is not None and b is not None and a.header is not None and b.header is not None and a.header != b.header:
            out.append(
                f"~ {path}: header sha256 {a.header.sha256} ({a.header.tensors} tensors) -> {b.header.sha256} "
                f"({b.header.tensors} tensors)"
            )
        elif (
            a is not None
            and b is not None
            and a.weight_map is not None
            and b.weight_map is not None
            and a.weight_map != b.weight_map
        ):
            out.append(
                f"~ {path}: weight_map sha256 {a.weight_map.sha256} ({a.weight_map.tensors} tensors) -> "
                f"{b.weight_map.sha256} ({b.weight_map.tensors} tensors)"
            )
    return out


def complete_selection(
    name: str,
    entries: Sequence[FileEntry],
    indexes: Mapping[str, bytes],
    available: Sequence[str],
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    where: str,
) -> list[FileEntry]:
    """`entries` with each index's shards recorded; UsageError naming every shard the selection leaves out
    (and the include/exclude that drops it), or that the source does not have."""
    shards = {path: index_shards(path, raw) for path, raw in indexes.items()}
    missing = missing_shards([e.path for e in entries], shards)
    if missing:
        have = set(available)
        lines = []
        for index, names in sorted(missing.items()):
            for shard in names:
                why = dropped_by(shard, include, exclude) if shard in have else f"{where} has no such file"
                lines.append(f"{index} names {shard} ({why})")
        raise UsageError(
            f"{name}: the selection is incomplete, a model missing a shard cannot load: {'; '.join(lines)}; "
            "nothing was written",
            hint="widen source.include / narrow source.exclude so every shard is selected, then lock again",
        )
    return [e.model_copy(update={"shards": shards[e.path]}) if e.path in shards else e for e in entries]


# -- I/O: what the source has ------------------------------------------------------------------------
def files_from_dir(
    folder: Path, include: tuple[str, ...], exclude: tuple[str, ...], name: str | None = None
) -> list[FileEntry]:
    """The selected files of `folder`, hashed, each safetensors header pinned."""
    entries, tensors = _from_dir(folder, include, exclude, name)
    return tensors.pin(entries)


def _from_dir(
    folder: Path, include: tuple[str, ...], exclude: tuple[str, ...], name: str | None
) -> tuple[list[FileEntry], Tensors]:
    if not folder.is_dir():
        raise UsageError(f"--from-dir {folder}: no such folder")
    paths = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache"))
        for filename in sorted(filenames):
            rel = (Path(dirpath) / filename).relative_to(folder).as_posix()
            if naming.check_relative_path(rel) is None:
                paths.append(rel)
    model = name or folder.name
    entries = []
    indexes = {}
    tensors = Tensors()
    unreadable: list[CatalogError] = []  # said after the selection is known complete: a missing shard comes first
    for rel in naming.select_files(paths, include, exclude):
        try:
            size, digest = _hash_pinning_tensors(folder / rel, model, rel, tensors)
        except (HeaderError, TensorPinError) as exc:
            unreadable.append(exc)
            size, digest = hashing.hash_file(folder / rel)
        entries.append(FileEntry(path=rel, size=size, sha256=digest))
        if formats.is_index_file(rel):
            indexes[rel] = bounded.read_file(folder / rel, bounded.MAX_RECORD)
    entries = complete_selection(model, entries, indexes, paths, include, exclude, f"--from-dir {folder}")
    if unreadable:
        raise unreadable[0]
    tensors.weight_maps = _weight_maps(indexes)
    return entries, tensors


def local_tensors(
    model: str,
    entries: Sequence[FileEntry],
    indexes: Mapping[str, bytes],
    file_of: Callable[[str], Path],
    *,
    digests: bool,
) -> tuple[Tensors, dict[str, tuple[int, str]]]:
    """The tensors of the pinned checkpoints, read from local files (`file_of(path)`: a folder's, an HF cache's blob),
    and each safetensors index's weight_map (from `indexes`, the indexes' bytes). With `digests`, as a lock from a
    folder reads them: each safetensors header or tensorizer table and each tensor's digest, in the one read that
    also hashes the file, with (size, sha256) of every file so read for the caller to hold against its pin (those
    bytes are what the digests describe). Without, only the safetensors headers (no weight byte read)."""
    tensors = Tensors(weight_maps=_weight_maps(indexes))
    if not digests:
        tensors.headers = {
            e.path: read_file_header(file_of(e.path), model=model, path=e.path, size=e.size)
            for e in entries
            if is_safetensors(e.path)
        }
        return tensors, {}
    read = {
        e.path: _hash_pinning_tensors(file_of(e.path), model, e.path, tensors)
        for e in entries
        if is_safetensors(e.path) or tensor_pins.is_tensorizer_file(e.path)
    }
    return tensors, read


def _hash_pinning_tensors(file: Path, model: str, path: str, tensors: Tensors) -> tuple[int, str]:
    """(size, sha256) of a file in one read; a safetensors or tensorizer file's tensors are pinned on the way (their
    header or table into `tensors`, each tensor's digest from the same bytes the file's sha256 is taken from)."""
    if is_safetensors(path):
        header = read_file_header(file, model=model, path=path, size=file.stat().st_size)
        pins = tensor_pins.hash_file_spans(file, tensor_pins.safetensors_spans(header))
        tensors.headers[path] = header
    elif tensor_pins.is_tensorizer_file(path):
        rows, offsets, spans = tensor_pins.tensorizer_table(file, f"{model}/{path}")
        pins = tensor_pins.hash_file_spans(file, spans)
        tensors.tables[path] = (rows, offsets)
    else:
        return hashing.hash_file(file)
    tensors.digests[path] = pins.digests
    return pins.size, pins.sha256


def _weight_maps(indexes: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    return {
        path: tensor_tables.weight_map(path, raw)
        for path, raw in indexes.items()
        if tensor_tables.is_safetensors_index(path)
    }


def files_from_hub(manifest: ModelManifest, options: HubOptions) -> list[FileEntry]:
    """The selected files of the repo at the pinned revision, from the Hub's metadata, each safetensors header
    pinned from ranged reads (no weight byte is downloaded)."""
    entries, tensors = _from_hub(manifest, options)
    return tensors.pin(entries)


def _from_hub(manifest: ModelManifest, options: HubOptions) -> tuple[list[FileEntry], Tensors]:
    repo, revision, repo_type = manifest.source.hf_repo, manifest.source.revision, manifest.source.repo_type
    listing = list_repo_files(repo, revision, options, repo_type)
    wanted = set(naming.select_files([f.path for f in listing], manifest.source.include, manifest.source.exclude))
    store = HubStore(repo, revision, options, repo_type)
    entries = []
    indexes = {}
    for item in listing:
        if item.path not in wanted:
            continue
        if formats.is_index_file(item.path):
            # The index itself is needed, not just its hash: read it (small), hash what was read.
            raw = _read_remote(store, manifest.name, item.path, item.size, options)
            digest = hashlib.sha256(raw).hexdigest()
            if item.sha256 and item.sha256 != digest:
                raise IntegrityError(
                    manifest.name, item.path, "sha256", item.sha256, digest, "the Hub's listing and its bytes disagree"
                )
            indexes[item.path] = raw
        else:
            digest = item.sha256 if item.sha256 else _hash_remote(store, manifest.name, item.path, item.size)
        entries.append(
            FileEntry(
                path=item.path,
                size=item.size,
                sha256=digest,
                blob_id=item.blob_id if re.fullmatch(r"[0-9a-f]{40}", item.blob_id) else None,
                xet_hash=item.xet_hash if item.xet_hash and re.fullmatch(r"[0-9a-f]{64}", item.xet_hash) else None,
            )
        )
    entries = complete_selection(
        manifest.name,
        entries,
        indexes,
        [f.path for f in listing],
        manifest.source.include,
        manifest.source.exclude,
        f"{repo}@{revision[:12]}",
    )
    headers = {
        e.path: read_store_header(
            store, e.path, model=manifest.name, path=e.path, size=e.size, attempts=options.attempts
        )
        for e in entries
        if is_safetensors(e.path)
    }
    return entries, Tensors(headers, _weight_maps(indexes))


def _from_store(manifest: ModelManifest, store: Store, prefix: str) -> tuple[list[FileEntry], Tensors]:
    """The pins the manifest has, with the headers and weight maps read from the store's copies of those bytes.

    Only objects proven to be the pinned ones are read: sync's record of each (sha256 equal to the pin, ETag
    equal to the listed one: one listing and one small GET), and each index is hashed as it is read.
    """
    from resolver.stream_check import verify_streamed

    if not manifest.files:
        raise UsageError(
            f"{manifest.name}: nothing is pinned yet, so there are no objects to read headers from",
            hint=f"lock it from the Hub or a folder first: catalog lock {manifest.name} [--from-dir DIR]",
        )
    wanted = [e for e in manifest.files if is_safetensors(e.path) or tensor_tables.is_safetensors_index(e.path)]
    verify_streamed(store, manifest.name, prefix, wanted)
    headers = {
        e.path: read_store_header(store, prefix + e.path, model=manifest.name, path=e.path, size=e.size)
        for e in wanted
        if is_safetensors(e.path)
    }
    indexes = {}
    for e in wanted:
        if tensor_tables.is_safetensors_index(e.path):
            raw = _read_whole(store, prefix + e.path, manifest.name, e.path, e.size)
            if hashlib.sha256(raw).hexdigest() != e.sha256:  # the record vouched for it; the bytes have the last word
                raise IntegrityError(
                    manifest.name,
                    e.path,
                    "sha256",
                    e.sha256,
                    hashlib.sha256(raw).hexdigest(),
                    f"the object in {store.url} changed since sync verified it",
                )
            index_shards(e.path, raw)  # a pinned index is still checked for what it names
            indexes[e.path] = raw
    return list(manifest.files), Tensors(headers, _weight_maps(indexes))


def _read_whole(store: Store, key: str, model: str, path: str, size: int) -> bytes:
    return read_range(store, key, 0, size, model=model, path=path, size=size) if size else b""


def _read_remote(
    store: HubStore, name: str, path: str, size: int, options: HubOptions, sleep: Callable[[float], None] = time.sleep
) -> bytes:
    """A small file's whole bytes (an index), with the store's retries; size checked, nothing written."""
    for attempt in range(1, options.attempts + 1):
        try:
            stream = store.open(path)
            try:
                chunks = bytearray()
                buffer = memoryview(bytearray(1024 * 1024))
                while count := stream.readinto(buffer):
                    chunks += buffer[:count]
            finally:
                stream.close()
        except ObjectNotFound:
            raise StoreUnavailableError(
                f"{name}: {path} is listed by the Hub but cannot be fetched", transient=False
            ) from None
        except (RetryLater, OSError) as exc:
            if attempt >= options.attempts:
                raise StoreUnavailableError(f"{name}: cannot fetch {path} from {store.url}: {exc}") from None
            sleep(waits.retry_pause(exc, attempt, options.max_wait, f"{store.url} ({name}/{path})"))
            continue
        if len(chunks) != size:
            raise IntegrityError(
                name, path, "size", str(size), str(len(chunks)), "the Hub's listing and its bytes disagree"
            )
        return bytes(chunks)
    raise AssertionError("unreachable")


def _hash_remote(store: HubStore, name: str, path: str, size: int) -> str:
    """Stream a small (non-LFS) file and hash it; nothing is written."""
    from resolver.transfer import TransferConfig, Wanted, fetch_digest

    return fetch_digest(store, Wanted(name, FileEntry(path=path, size=size, sha256="0" * 64), path), TransferConfig())


@dataclass(frozen=True)
class LockResult:
    name: str
    manifest_path: Path
    old: tuple[FileEntry, ...]
    new: tuple[FileEntry, ...]
    tables: str | None = None  # the tensor tables' text (None: no safetensors, no sidecar)

    @property
    def changed(self) -> bool:
        """The pins (path, size, sha256), an index's recorded shards, or a header / weight_map the manifest had
        recorded differ: drift, for `lock --check`."""
        return _pins(self.old) != _pins(self.new) or _tensor_drift(self.old, self.new)

    @property
    def records_changed(self) -> bool:
        """Only what lock adds where the manifest had nothing (blob ids, Xet hashes, headers and weight maps
        first recorded) differs: written, but not drift."""
        return not self.changed and _records(self.old) != _records(self.new)


def _pins(entries: Sequence[FileEntry]) -> list[tuple[str, int, str, tuple[str, ...] | None]]:
    return sorted((e.path, e.size, e.sha256, e.shards) for e in entries)


def _records(entries: Sequence[FileEntry]) -> list[tuple[str, str | None, str | None, str | None, bool, bool]]:
    return sorted(
        (
            e.path,
            e.blob_id,
            e.xet_hash,
            e.header.table_sha256 if e.header is not None else None,
            e.weight_map is not None,
            e.table is not None,
        )
        for e in entries
    )


def _tensor_drift(old: Sequence[FileEntry], new: Sequence[FileEntry]) -> bool:
    """A header or weight_map the manifest recorded that the source now gives otherwise (a first recording is no drift).
    A header's table digest is left out: it changes when tensor digests are first recorded, and the digests of the
    same bytes never change (the file's sha256 says whether the bytes did)."""
    after = {e.path: e for e in new}
    for a in old:
        b = after.get(a.path)
        if b is None:
            continue
        if (
            a.header is not None
            and b.header is not None
            and a.header.model_copy(update={"table_sha256": ""}) != b.header.model_copy(update={"table_sha256": ""})
        ):
            return True
        if a.weight_map is not None and b.weight_map is not None and a.weight_map != b.weight_map:
            return True
    return False


def _keep_tensor_pins(
    manifest: ModelManifest, manifest_path: Path, entries: Sequence[FileEntry], tensors: Tensors
) -> None:
    """A source that read no bytes (the Hub's metadata, headers from ranged reads) keeps the tensor digests (and a
    headerless file's table) already pinned for the same bytes: one sha256 is one set of tensors. Only digests the
    manifest pins are kept: the sidecar's are taken when its section still matches the manifest's pin."""
    pinned = {(e.path, e.size, e.sha256): e for e in manifest.files}
    old = load_tables(manifest_path, []).tables
    if old is None:
        return
    for entry in entries:
        was = pinned.get((entry.path, entry.size, entry.sha256))
        if was is None or entry.path in tensors.digests or entry.path not in old.digests:
            continue
        if (
            was.header is not None
            and entry.path in tensors.headers
            and old.section_sha256(entry.path) == was.header.table_sha256
        ):
            tensors.digests[entry.path] = dict(old.digests[entry.path])
        elif was.table is not None and old.section_sha256(entry.path) == was.table.table_sha256:
            tensors.digests[entry.path] = dict(old.digests[entry.path])
            tensors.tables[entry.path] = (old.headers[entry.path], dict(old.offsets.get(entry.path, {})))


def _keep_known(old: Sequence[FileEntry], new: Sequence[FileEntry]) -> list[FileEntry]:
    """A source that does not know a file's blob id or Xet hash (a folder) keeps what the manifest recorded
    for the same bytes: one sha256 is one blob."""
    before = {(e.path, e.size, e.sha256): e for e in old}
    out = []
    for e in new:
        was = before.get((e.path, e.size, e.sha256))
        if was is not None:
            e = e.model_copy(update={"blob_id": e.blob_id or was.blob_id, "xet_hash": e.xet_hash or was.xet_hash})
        out.append(e)
    return out


def lock_manifest(
    manifest: ModelManifest,
    manifest_path: Path,
    *,
    from_dir: Path | None,
    hub: HubOptions,
    write: bool,
    store: tuple[Store, str] | None = None,
) -> LockResult:
    """Compute the pinned files from the source (the Hub, `from_dir`, or with `store` (the store and the model's
    key prefix there) the pins the manifest has with headers read from the bucket's copies); write them, and
    the tensor tables beside the manifest, unless `write` is False."""
    if store is not None:
        entries, tensors = _from_store(manifest, *store)
    elif from_dir:
        entries, tensors = _from_dir(from_dir, manifest.source.include, manifest.source.exclude, manifest.name)
    else:
        entries, tensors = _from_hub(manifest, hub)
    if not entries:
        raise CatalogError(
            f"{manifest.name}: the source has no files matching source.include/exclude",
            hint="check the patterns and the revision",
        )
    _keep_tensor_pins(manifest, manifest_path, entries, tensors)
    entries = _keep_known(manifest.files, tensors.pin(entries))
    result = LockResult(
        manifest.name,
        manifest_path,
        manifest.files,
        tuple(sorted(entries, key=lambda e: e.path)),
        tensors.render(manifest.name),
    )
    spec = manifest.load_format.spec
    unmet = [n.what for n in spec.needs if not n.met_by([e.path for e in result.new])]
    if unmet:
        # A derived artifact (a tensorizer file, per-rank shards) is not on the Hub: locking it from there
        # would pin the wrong files and leave an invalid manifest.
        where = f"--from-dir {from_dir}" if from_dir else f"{manifest.source.hf_repo}@{manifest.source.revision[:12]}"
        raise UsageError(
            f"{manifest.name}: {where} has no {' and '.join(unmet)}, which load_format {manifest.load_format.value} "
            "needs; nothing was written",
            hint=f"lock it from the folder holding the artifacts: catalog lock {manifest.name} --from-dir DIR",
        )
    if write:
        write_tables(manifest_path, result.tables)  # first: a manifest never names tables that are not there
        if result.changed or result.records_changed:
            text = manifest_path.read_text(encoding="utf-8")
            atomic_text_write(manifest_path, replace_files_block(text, result.new))
    return result


def write_tables(manifest_path: Path, text: str | None) -> None:
    """Write (or, for a model with no safetensors left, remove) the tensor tables beside the manifest."""
    path = tensor_tables.sidecar_path(manifest_path)
    if text is None:
        path.unlink(missing_ok=True)
    elif not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_text_write(path, text)


def atomic_text_write(path: Path, text: str) -> None:
    """Never a half-written manifest: write beside it, then rename over it."""
    atomic_write(path, text.encode("utf-8"))
