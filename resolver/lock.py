"""`catalog lock` and `catalog add`: pin every file's size and sha256, and write them into the manifest.

Listing a Hub repo costs no download for LFS files: their sha256 is the LFS oid in the Hub's metadata.
Only small non-LFS files are downloaded (streamed and hashed, never stored). The manifest is edited as
text: the `files:` block is replaced (or appended) and every other byte of the file stays as the
maintainer wrote it, comments and key order included.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from catalog import naming
from catalog.errors import CatalogError, UsageError
from catalog.schema import FileEntry, ModelManifest
from resolver import hashing
from resolver.fsutil import atomic_write
from resolver.hub import HubOptions, HubStore, list_repo_files

# Rules whose findings depend on the pinned files: a manifest with only these problems can be locked.
FILE_RULES = frozenset({"unlocked", "load-format", "file-selection", "pickle", "gpu-memory", "duplicate-path", "file-path", "sha256", "size"})


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
    return out


# -- I/O: what the source has ------------------------------------------------------------------------
def files_from_dir(folder: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> list[FileEntry]:
    if not folder.is_dir():
        raise UsageError(f"--from-dir {folder}: no such folder")
    paths = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache"))
        for filename in sorted(filenames):
            rel = (Path(dirpath) / filename).relative_to(folder).as_posix()
            if naming.check_relative_path(rel) is None:
                paths.append(rel)
    entries = []
    for rel in naming.select_files(paths, include, exclude):
        size, digest = hashing.hash_file(folder / rel)
        entries.append(FileEntry(path=rel, size=size, sha256=digest))
    return entries


def files_from_hub(manifest: ModelManifest, options: HubOptions) -> list[FileEntry]:
    repo, revision = manifest.source.hf_repo, manifest.source.revision
    listing = list_repo_files(repo, revision, options)
    wanted = set(naming.select_files([f.path for f in listing], manifest.source.include, manifest.source.exclude))
    store = HubStore(repo, revision, options)
    entries = []
    for item in listing:
        if item.path not in wanted:
            continue
        digest = item.sha256 if item.sha256 else _hash_remote(store, manifest.name, item.path, item.size)
        entries.append(FileEntry(path=item.path, size=item.size, sha256=digest))
    return entries


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

    @property
    def changed(self) -> bool:
        return _pins(self.old) != _pins(self.new)


def _pins(entries: Sequence[FileEntry]) -> list[tuple[str, int, str]]:
    return sorted((e.path, e.size, e.sha256) for e in entries)


def lock_manifest(manifest: ModelManifest, manifest_path: Path, *, from_dir: Path | None, hub: HubOptions,
                  write: bool) -> LockResult:
    """Compute the pinned files from the source; write them into the file unless `write` is False."""
    entries = files_from_dir(from_dir, manifest.source.include, manifest.source.exclude) if from_dir else files_from_hub(manifest, hub)
    if not entries:
        raise CatalogError(f"{manifest.name}: the source has no files matching source.include/exclude",
                           hint="check the patterns and the revision")
    result = LockResult(manifest.name, manifest_path, manifest.files, tuple(sorted(entries, key=lambda e: e.path)))
    spec = manifest.load_format.spec
    unmet = [n.what for n in spec.needs if not n.met_by([e.path for e in result.new])]
    if unmet:
        # A derived artifact (a tensorizer file, per-rank shards) is not on the Hub: locking it from there
        # would pin the wrong files and leave an invalid manifest.
        where = f"--from-dir {from_dir}" if from_dir else f"{manifest.source.hf_repo}@{manifest.source.revision[:12]}"
        raise UsageError(f"{manifest.name}: {where} has no {' and '.join(unmet)}, which load_format {manifest.load_format.value} "
                         "needs; nothing was written",
                         hint=f"lock it from the folder holding the artifacts: catalog lock {manifest.name} --from-dir DIR")
    if write and result.changed:
        text = manifest_path.read_text(encoding="utf-8")
        atomic_text_write(manifest_path, replace_files_block(text, result.new))
    return result


def atomic_text_write(path: Path, text: str) -> None:
    """Never a half-written manifest: write beside it, then rename over it."""
    atomic_write(path, text.encode("utf-8"))
