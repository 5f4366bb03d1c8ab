"""`catalog import --from-hf-cache DIR [REPO[@REV]...]`: locked manifests for what a Hugging Face cache already
holds, with no Hub request.

An engine's CI that adopts the catalog already owns the bytes, in `HF_HUB_CACHE` folders:
`{models,datasets}--org--name/{blobs,snapshots/<commit>,refs,trees}`. Each snapshot (every cached revision of
every repo, or those named) becomes one manifest, decided as `catalog add` decides (name, prefix, load format
and its default excludes, GPU class: `resolver/add.py`):

- sha256 comes from the LFS blob's name (huggingface_hub names an LFS file's blob by its sha256), checked
  against the blob's size and huggingface_hub's cached tree listing (`trees/<commit>.json`) where there is
  one; `--deep` re-hashes those too. Other files are hashed here, and a file whose blob is named by its git
  blob id must hash to that id: a corrupt blob is refused, never pinned.
- A snapshot is refused, naming what is missing, and nothing is written for it when it is incomplete: a file
  whose blob is gone (a dangling link), a `blobs/*.incomplete` download of one of its files, or a weights
  index naming a shard the snapshot lacks.
- Only what huggingface_hub makes is taken, so nothing outside the cache is ever pinned (nor uploaded by
  `sync --from-hf-cache`): a snapshot file is a link into the repo's own `blobs/`, or a regular file in the
  snapshot itself (what huggingface_hub writes where symlinks are unavailable: Windows, HF_HUB_DISABLE_SYMLINKS),
  and its bytes are a regular file. A link leading anywhere else, a linked folder, a FIFO or device blob
  refuses the snapshot, naming it; nothing is read from it.
- Each safetensors header and weights index is pinned as `catalog lock` pins them (`header:`, `weight_map:` and
  `<name>.tensors.json`, from the same code), so validate's tensor rules check an imported model too.
- A repo cached at several revisions gets one manifest per revision: distinct names (the revision's first 12
  digits appended to all but the revision `refs/main` names, else the newest) and prefixes (the commit is in
  each), and `primary: true` on that one when the repo ends up pinned more than once.
- A pin the catalog already has is skipped, not repeated.

The cache is only read: nothing is written, locked or chmod-ed there.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from catalog import bounded, formats, naming
from catalog.errors import CatalogError, Problem, UsageError
from catalog.formats import LoadFormat
from catalog.loading import ManifestDoc, discover, load_manifest
from catalog.schema import CatalogSettings, FileEntry
from resolver.add import choose_load_format, derive_name, derive_prefix, manifest_head, refuse_collisions
from resolver.completeness import index_shards
from resolver.hashing import ANY_SIZE, CHUNK
from resolver.hf_layout import hf_revisions, lfs_pointer_blob_id
from resolver.hub import RemoteFile
from resolver.lock import (
    atomic_text_write,
    complete_selection,
    is_safetensors,
    local_tensors,
    render_files_block,
    write_tables,
)
from resolver.tensor_pins import is_tensorizer_file

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
INCOMPLETE = ".incomplete"
KINDS = {"models": "model", "datasets": "dataset"}


# -- reading the cache ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CachedRepo:
    repo: str
    repo_type: str
    folder: Path

    @property
    def label(self) -> str:
        return self.repo if self.repo_type == "model" else f"{self.repo_type}s/{self.repo}"

    def refs(self) -> dict[str, str]:
        """Branch and tag names (refs/main, refs/pr/1) -> the commit they held when the cache was filled."""
        out = {}
        base = self.folder / "refs"
        for path in sorted(base.rglob("*")) if base.is_dir() else ():
            try:
                raw = bounded.read_file(path, 4 * bounded.KiB, root=base) if path.is_file() else b""
                commit = raw.decode("ascii").strip()
            except (OSError, UnicodeDecodeError):
                continue
            if _COMMIT.fullmatch(commit):
                out[path.relative_to(base).as_posix()] = commit
        return out

    def revisions(self) -> list[str]:
        return hf_revisions(self.folder)


def cached_repos(root: Path) -> list[CachedRepo]:
    """Every model and dataset repo folder of an HF cache (space repos and odd names are not catalog pins)."""
    if not root.is_dir():
        raise UsageError(
            f"--from-hf-cache {root}: no such folder", hint="give the HF_HUB_CACHE folder (…/huggingface/hub)"
        )
    out = []
    for folder in sorted(root.iterdir()):
        kind, _, rest = folder.name.partition("--")
        repo = rest.replace("--", "/", 1)
        if kind in KINDS and folder.is_dir() and naming.check_hf_repo(repo) is None:
            out.append(CachedRepo(repo, KINDS[kind], folder))
    return out


@dataclass(frozen=True)
class SnapshotFile:
    path: str
    blob: Path  # where the bytes are: the blob a snapshot link resolves to, or the file itself
    blob_name: str | None  # its name under blobs/ (an LFS sha256 or a git blob id); None for a plain file
    root: Path  # the folder `blob` must stay in when it is opened: the repo's blobs/, or the snapshot

    def open(self) -> tuple[io.FileIO, int]:
        return bounded.open_regular(self.blob, ANY_SIZE, root=self.root)


@dataclass(frozen=True)
class Snapshot:
    repo: CachedRepo
    revision: str
    files: dict[str, SnapshotFile]
    gaps: tuple[str, ...]  # what makes it incomplete, one text per missing thing; () when complete
    foreign: tuple[str, ...]  # what huggingface_hub never makes (a link out of blobs/, a FIFO blob): () when none
    tree: Mapping[str, Mapping[str, Any]]  # huggingface_hub's trees/<revision>.json `files`; {} without one
    mtime: float

    @property
    def label(self) -> str:
        return f"{self.repo.label}@{self.revision[:12]}"


def read_tree(repo: CachedRepo, revision: str) -> dict[str, dict[str, Any]]:
    try:
        path = repo.folder / "trees" / f"{revision}.json"
        data = bounded.loads(bounded.read_file(path, bounded.MAX_RECORD, root=repo.folder))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return {str(p): v for p, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def read_snapshot(repo: CachedRepo, revision: str) -> Snapshot:
    """The snapshot's files (links followed) and every gap: dangling links, downloads of its files in flight; and
    what huggingface_hub never makes (see the module's docstring), which refuses it."""
    folder = repo.folder / "snapshots" / revision
    own_blobs = repo.folder.resolve() / "blobs"  # itself no link: a link into a linked blobs/ leaves the cache
    files: dict[str, SnapshotFile] = {}
    gaps: list[str] = []
    foreign: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        foreign += [
            f"{(Path(dirpath) / d).relative_to(folder).as_posix()}/ is a linked folder"
            for d in dirnames
            if (Path(dirpath) / d).is_symlink()
        ]
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            rel = path.relative_to(folder).as_posix()
            if naming.check_relative_path(rel) is not None:
                continue  # never a pin (a .git folder, an odd name): nothing to import
            name = Path(os.readlink(path)).name if path.is_symlink() else None
            try:
                blob = path.resolve(strict=True)
                mode = blob.stat().st_mode
            except (OSError, RuntimeError):
                gaps.append(
                    f"{rel}: its blob {name} is missing from blobs/" if name else f"{rel}: vanished while it was read"
                )
                continue
            root = own_blobs if name is not None else folder.resolve()
            if name is not None and blob.parent != own_blobs:
                foreign.append(f"{rel} links outside {repo.label}'s blobs/ (to {blob})")
            elif (kind := bounded.kind_of(mode)) is not None:
                foreign.append(f"{rel} is {kind}, not a regular file")
            else:
                files[rel] = SnapshotFile(rel, blob, name, root)
    tree = read_tree(repo, revision)
    have = {f.blob_name for f in files.values()}
    blobs = repo.folder / "blobs"
    for partial in sorted(blobs.glob(f"*{INCOMPLETE}")) if blobs.is_dir() else ():
        digest = partial.name[: -len(INCOMPLETE)]
        if digest in have:
            continue
        if tree:
            owners = [
                p
                for p, info in tree.items()
                if digest in (info.get("lfs_sha256"), info.get("blob_id")) and p not in files
            ]
            gaps += [f"{p}: its download is in flight or was interrupted (blobs/{partial.name})" for p in owners]
        else:
            gaps.append(
                f"blobs/{partial.name}: a download is in flight or was interrupted, and no tree listing "
                f"(trees/{revision}.json) tells which file it is"
            )
    return Snapshot(repo, revision, files, tuple(gaps), tuple(foreign), tree, folder.stat().st_mtime)


def find_snapshots(root: Path, wanted: Sequence[str]) -> tuple[list[Snapshot], list[tuple[str, str]]]:
    """The snapshots to import (every one, or those `wanted` names: `[datasets/]org/name[@rev]`, rev a commit or a
    ref the cache recorded) and (name, why) for each the cache does not hold."""
    repos = cached_repos(root)
    if not wanted:
        return [read_snapshot(r, rev) for r in repos for rev in r.revisions()], []
    found: dict[tuple[str, str, str], Snapshot] = {}
    errors: list[tuple[str, str]] = []
    for item in wanted:
        name, _, ref = item.partition("@")
        kind = "dataset" if name.startswith("datasets/") else None
        name = name.removeprefix("datasets/")
        matches = [r for r in repos if r.repo.casefold() == name.casefold() and kind in (None, r.repo_type)]
        if not matches:
            errors.append((item, f"the HF cache at {root} holds no such repo"))
            continue
        for repo in matches:
            revisions = repo.revisions()
            chosen = revisions if not ref else [repo.refs().get(ref, ref)]
            if not chosen or chosen[0] not in revisions:
                errors.append(
                    (
                        item,
                        f"the HF cache holds {repo.label} but not at {ref or 'any revision'!r} "
                        f"(cached: {', '.join(r[:12] for r in revisions) or 'no snapshot'})",
                    )
                )
                continue
            for rev in chosen:
                found.setdefault((repo.repo_type, repo.repo, rev), read_snapshot(repo, rev))
    return list(found.values()), errors


# -- deciding ---------------------------------------------------------------------------------------
class Outcome(str, Enum):
    WRITTEN = "written"
    SKIPPED = "skipped"  # the catalog already pins it
    REFUSED = "refused"  # incomplete, corrupt, or not a model the catalog can pin; nothing written


@dataclass(frozen=True)
class Imported:
    label: str
    outcome: Outcome
    message: str
    name: str | None = None
    path: Path | None = None
    files: int = 0


@dataclass
class Draft:
    """A snapshot the catalog can pin, before names are given out and files hashed."""

    snapshot: Snapshot
    fmt: LoadFormat
    exclude: tuple[str, ...]
    paths: list[str]
    name: str = ""
    primary: bool = False
    entries: list[FileEntry] = field(default_factory=list)
    tables: str | None = None  # `<name>.tensors.json` (None: no safetensors)


class Refused(CatalogError, ValueError):
    """One snapshot cannot be imported; nothing is written for it."""


def finish_download(snapshot: Snapshot) -> str:
    kind = " --repo-type dataset" if snapshot.repo.repo_type == "dataset" else ""
    return f"finish the download (hf download {snapshot.repo.repo} --revision {snapshot.revision}{kind}), then import again"


def draft(snapshot: Snapshot, settings: CatalogSettings, load_format: str | None) -> Draft:
    """Pure over what was read: the format, excludes and files of the manifest a snapshot becomes; Refused when
    the snapshot is incomplete or holds nothing the catalog can pin."""
    label = snapshot.label
    if snapshot.foreign:
        raise Refused(
            f"{label} holds what huggingface_hub never makes: {'; '.join(snapshot.foreign)}; nothing was read "
            "from it and nothing was written",
            hint="a cache edited by hand (or by someone else): download the repo again into a cache you trust",
        )
    if snapshot.gaps:
        raise Refused(
            f"{label} is incomplete: {'; '.join(snapshot.gaps)}; nothing was written", hint=finish_download(snapshot)
        )
    paths = sorted(snapshot.files)
    exclude: tuple[str, ...] = ()
    if snapshot.repo.repo_type == "dataset":
        fmt, exclude = LoadFormat.DATASET, ()
    else:
        try:
            fmt, exclude = choose_load_format([RemoteFile(p, 0, None, "") for p in paths], load_format)
        except UsageError as exc:
            raise Refused(f"{label}: {exc.message}; nothing was written", hint=exc.hint) from None
    selected = naming.select_files(paths, (), exclude)
    if not selected:
        raise Refused(f"{label}: no file of the snapshot is left after the default excludes; nothing was written")
    unmet = [n.what for n in fmt.spec.needs if not n.met_by(selected)]
    if unmet:
        raise Refused(
            f"{label}: the snapshot has no {' and '.join(unmet)}, which load_format {fmt.value} needs; nothing was written",
            hint="download the missing files into the cache, or `catalog add` the repo from the Hub",
        )
    return Draft(snapshot, fmt, exclude, selected)


def check_shards(d: Draft, read: Mapping[str, bytes]) -> None:
    """Refuse a snapshot whose selected index names a shard the cache lacks (read: index path -> bytes)."""
    missing = []
    for index, raw in sorted(read.items()):
        for shard in index_shards(index, raw):
            if shard not in d.snapshot.files:
                missing.append(f"{index} names {shard}, which the cached snapshot does not hold")
    if missing:
        raise Refused(
            f"{d.snapshot.label} is incomplete: {'; '.join(missing)}; nothing was written",
            hint=finish_download(d.snapshot),
        )


def give_names(drafts: Sequence[Draft], existing: Sequence[ManifestDoc], taken: set[str]) -> None:
    """Pure: a distinct name per draft and `primary` where a repo ends up pinned more than once (see module doc)."""
    by_repo: dict[tuple[str, str], list[Draft]] = {}
    for d in drafts:
        by_repo.setdefault((d.snapshot.repo.repo_type, d.snapshot.repo.repo.casefold()), []).append(d)
    for (_, repo), group in sorted(by_repo.items()):
        main = group[0].snapshot.repo.refs().get("main")
        group.sort(key=lambda d: (d.snapshot.revision != main, -d.snapshot.mtime, d.snapshot.revision))
        pinned = [
            doc.manifest
            for doc in existing
            if doc.manifest is not None and doc.manifest.source.hf_repo.casefold() == repo
        ]
        if len(pinned) + len(group) > 1 and not any(m.primary for m in pinned):
            group[0].primary = True
        org, _, base = group[0].snapshot.repo.repo.partition("/")
        bases = [derive_name(base), derive_name(f"{org}-{base}")]
        for index, d in enumerate(group):
            candidates = [b for b in bases if index == 0] + [f"{b}-{d.snapshot.revision[:12]}" for b in bases]
            d.name = next((c for c in candidates if c not in taken), f"{bases[-1]}-{d.snapshot.revision}")
            taken.add(d.name)


# -- hashing and writing ------------------------------------------------------------------------------
def _hash_both(file: SnapshotFile, size: int) -> tuple[int, str, str]:
    """(size, sha256, git blob id) of the file's bytes, in one read."""
    sha256 = hashlib.sha256()
    git = hashlib.sha1(b"blob %d\0" % size)
    count = 0
    view = memoryview(bytearray(CHUNK))
    with file.open()[0] as f:
        while n := f.readinto(view):
            sha256.update(view[:n])
            git.update(view[:n])
            count += n
    return count, sha256.hexdigest(), git.hexdigest()


def pin_file(snapshot: Snapshot, path: str, deep: bool) -> FileEntry:
    """One file's pin from the cache: an LFS blob's name is its sha256 (size checked; hashed with `deep`);
    anything else is hashed, and must match the git blob id it is named by."""
    f = snapshot.files[path]
    listed = snapshot.tree.get(path, {})
    opened, size = f.open()  # a regular file inside its root, or Refused below (UnsafeFileError)
    opened.close()
    where = f"{snapshot.label}: {path}"
    if isinstance(listed.get("size"), int) and listed["size"] != size:
        raise Refused(
            f"{where} has {size} bytes, the cache's tree listing says {listed['size']}; nothing was written",
            hint="the blob is truncated or was replaced: delete it and download it again",
        )
    name = f.blob_name or ""
    xet = (
        listed.get("xet_hash")
        if isinstance(listed.get("xet_hash"), str) and _SHA256.fullmatch(listed["xet_hash"])
        else None
    )
    if _SHA256.fullmatch(name):
        if listed.get("lfs_sha256") not in (None, name):
            raise Refused(
                f"{where}: its blob is named {name} but the cache's tree listing says sha256 {listed['lfs_sha256']}; "
                "nothing was written"
            )
        if deep:
            got, digest, _ = _hash_both(f, size)
            if (got, digest) != (size, name):
                raise Refused(
                    f"{where}: expected sha256 {name} (its blob's name) but got {digest}; the cached blob is corrupt; "
                    "nothing was written",
                    hint="delete the blob and download it again",
                )
        blob_id = (
            listed.get("blob_id")
            if isinstance(listed.get("blob_id"), str) and _COMMIT.fullmatch(listed["blob_id"])
            else None
        )
        return FileEntry(
            path=path, size=size, sha256=name, blob_id=blob_id or lfs_pointer_blob_id(name, size), xet_hash=xet
        )
    got, digest, git_id = _hash_both(f, size)
    if _COMMIT.fullmatch(name) and git_id != name:
        raise Refused(
            f"{where}: expected git blob id {name} (its blob's name) but got {git_id}; the cached blob is corrupt; "
            "nothing was written",
            hint="delete the blob and download it again",
        )
    return FileEntry(path=path, size=got, sha256=digest, blob_id=git_id, xet_hash=xet)


def _is_checkpoint(path: str) -> bool:
    return is_safetensors(path) or is_tensorizer_file(path)


def pin_draft(d: Draft, deep: bool) -> None:
    """The draft's entries, each index's shards recorded (completeness checked first: what the cache lacks), then
    the tensors pinned and the tensor tables made as `catalog lock` does: safetensors headers and weight_maps, and with
    `deep` (every byte read) each tensor's digest and each tensorizer table, as a lock from a folder pins them."""
    files = d.snapshot.files
    indexes = {
        p: bounded.read_file(files[p].blob, bounded.MAX_RECORD, root=files[p].root)
        for p in d.paths
        if formats.is_index_file(p)
    }
    check_shards(d, indexes)
    # Under `deep` a checkpoint's bytes are read once, below, for its tensors' digests; that read checks its blob name.
    entries = [pin_file(d.snapshot, p, deep and not _is_checkpoint(p)) for p in d.paths]
    try:
        entries = complete_selection(
            d.name, entries, indexes, sorted(files), (), d.exclude, f"the cached snapshot of {d.snapshot.label}"
        )
    except UsageError as exc:
        raise Refused(f"{d.snapshot.label}: {exc.message}", hint=exc.hint) from None
    tensors, read = local_tensors(d.name, entries, indexes, lambda path: files[path].blob, digests=deep)
    for e in entries:
        if e.path in read and read[e.path] != (e.size, e.sha256):
            raise Refused(
                f"{d.snapshot.label}: {e.path}: expected sha256 {e.sha256} (its blob's name) but got "
                f"{read[e.path][1]}; the cached blob is corrupt; nothing was written",
                hint="delete the blob and download it again",
            )
    d.entries = tensors.pin(entries)
    d.tables = tensors.render(d.name)


def manifest_text(d: Draft, settings: CatalogSettings, gpu: str | None) -> str:
    s = d.snapshot
    comment = (
        f"# Imported from a Hugging Face cache snapshot of {s.label} (`catalog import --from-hf-cache`); "
        "pins never move: a new revision is a new pin."
    )
    head = manifest_head(
        comment,
        d.name,
        s.repo.repo,
        s.revision,
        d.exclude,
        derive_prefix(settings, s.repo.repo, s.revision, s.repo.repo_type),
        d.fmt,
        None if s.repo.repo_type == "dataset" else gpu or settings.default_gpu,
        repo_type=s.repo.repo_type,
        primary=d.primary,
    )
    return head + render_files_block(d.entries)


def plan_import(
    snapshots: Sequence[Snapshot],
    settings: CatalogSettings,
    existing: Sequence[ManifestDoc],
    taken: set[str],
    load_format: str | None,
) -> tuple[list[Draft], list[Imported]]:
    """Drafts for the snapshots the catalog can pin, and the outcome of every other one (already pinned, refused)."""
    drafts: list[Draft] = []
    done: list[Imported] = []
    for snapshot in sorted(snapshots, key=lambda s: (s.repo.repo_type, s.repo.repo, s.revision)):
        try:
            d = draft(snapshot, settings, load_format)
            same = pinned_as(existing, snapshot.repo.repo, snapshot.revision, d.fmt)
            if same is not None:
                done.append(Imported(snapshot.label, Outcome.SKIPPED, f"already pinned as {same!r}", name=same))
                continue
            prefix = derive_prefix(settings, snapshot.repo.repo, snapshot.revision, snapshot.repo.repo_type)
            refuse_collisions(snapshot.repo.repo, snapshot.revision, d.fmt, prefix, list(existing))
        except CatalogError as exc:
            done.append(Imported(snapshot.label, Outcome.REFUSED, said(exc)))
            continue
        drafts.append(d)
    give_names(drafts, existing, taken)
    return drafts, done


def said(exc: CatalogError) -> str:
    return exc.message + (f" (hint: {exc.hint})" if exc.hint else "")


def pinned_as(existing: Sequence[ManifestDoc], repo: str, revision: str | None, fmt: LoadFormat | None) -> str | None:
    """The name of a manifest already pinning repo (at `revision`, with load format `fmt`, unless None)."""
    for doc in existing:
        m = doc.manifest
        if (
            m is not None
            and m.source.hf_repo.casefold() == repo.casefold()
            and revision in (None, m.source.revision)
            and fmt in (None, m.load_format)
        ):
            return m.name
    return None


def existing_docs(catalog_dir: Path) -> tuple[list[ManifestDoc], set[str]]:
    """The catalog's parseable manifests, and every name taken (by a manifest or a file's name)."""
    ignored: list[Problem] = []
    paths = discover(catalog_dir, ignored)
    docs = [doc for doc in (load_manifest(p, ignored, root=catalog_dir) for p in paths) if doc.manifest is not None]
    return docs, {p.stem for p in paths} | {d.manifest.name for d in docs if d.manifest is not None}


def import_from_cache(
    root: Path,
    wanted: Sequence[str],
    catalog_dir: Path,
    settings: CatalogSettings,
    *,
    gpu: str | None,
    load_format: str | None,
    deep: bool,
) -> list[Imported]:
    """Write a locked manifest per importable snapshot; the outcome of each, in order."""
    existing, taken = existing_docs(catalog_dir)
    snapshots, errors = find_snapshots(root, wanted)
    drafts, done = plan_import(snapshots, settings, existing, taken, load_format)
    done += [Imported(item, Outcome.REFUSED, message) for item, message in errors]
    for d in drafts:
        try:
            pin_draft(d, deep)
        except CatalogError as exc:  # Refused, an index that is not JSON (BadIndexError), a bad header (HeaderError)
            done.append(Imported(d.snapshot.label, Outcome.REFUSED, said(exc)))
            continue
        path = catalog_dir / f"{d.name}.yaml"
        write_tables(path, d.tables)  # first: a manifest never names tables that are not there
        atomic_text_write(path, manifest_text(d, settings, gpu))
        done.append(
            Imported(d.snapshot.label, Outcome.WRITTEN, f"{len(d.entries)} files", d.name, path, len(d.entries))
        )
    return done
