"""`catalog publish`: fill a shared cache tier from the store, in the cache's `blobs/<aa>/<sha256>` layout.

Only a publisher job writes a tier; runners read it (`resolver/tiers.py`). Each blob is downloaded into
`<tier>/tmp/<pid>-<token>.part` (the same filesystem as its final name), hashed while it streams, and
renamed to `blobs/<aa>/<sha256>` only when size and sha256 match: a reader sees a whole verified blob or
none. No lock is taken: two publishers racing on one blob each rename a verified copy of the same bytes,
and the last rename wins harmlessly. A blob already in the tier with the pinned size is kept (`deep`
re-hashes it first and replaces it when it is wrong).

Before the first byte moves, the bytes to publish are compared with the tier's free space. Publishing marks
the folder as a tier (`.catalog-tier`): `catalog gc` refuses it (a tier's blobs are every catalog's, and gc
knows only its own), and `clean` (`publish --clean --to DIR`) removes only what publishers leave: temp files
in `tmp/` that no publisher holds a lock on (and, for one whose lock cannot be seen, older than an hour).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from catalog.errors import CacheWriteError, UsageError
from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver import capacity, load_safety
from resolver.cache import Cache, idle_file, write_hint
from resolver.fsutil import atomic_write
from resolver.hashing import hash_file
from resolver.stores import Store
from resolver.transfer import Progress, TransferConfig, Wanted, fetch

log = logging.getLogger(__name__)

NO_LOCK = 1 << 62  # publishers never lock: temp + rename is all a tier needs
TIER_MARK = ".catalog-tier"  # at a tier's root: gc refuses the folder
TIER_HINT = (
    "free space on the tier's disk (`catalog publish --clean --to DIR` removes killed publishers' temp files), "
    "or publish --to a folder on a larger disk"
)


@dataclass
class PublishReport:
    published: list[str] = field(default_factory=list)  # model/path fetched into the tier
    present: list[str] = field(default_factory=list)  # already there
    bytes: int = 0


@dataclass
class TierCheck:
    checked: int = 0
    problems: list[str] = field(default_factory=list)


def publish(
    cat: Catalog,
    names: Sequence[str],
    store: Store,
    tier: Path,
    *,
    config: TransferConfig = TransferConfig(),
    deep: bool = False,
    progress: Progress | None = None,
) -> PublishReport:
    """Every file of `names` (weights included) into the tier `tier`, verified, atomically per blob."""
    target = Cache(tier)
    report = PublishReport()
    config = dataclasses.replace(config, lock_threshold=NO_LOCK)
    plan: list[list[Wanted]] = []
    for name in names:
        manifest = cat.get(name)
        wanted: list[Wanted] = []
        for entry in manifest.files:
            label = f"{manifest.name}/{entry.path}"
            if target.has_blob(entry) and not (deep and not _blob_ok(target, entry)):
                report.present.append(label)
                continue
            wanted.append(Wanted(manifest.name, entry, cat.store_key(manifest, entry.path)))
        plan.append(wanted)
    needed = sum({w.entry.sha256: w.entry.size for wanted in plan for w in wanted}.values())
    capacity.check_space(target, needed, f"publishing {sum(map(len, plan))} file(s)", where="the tier", hint=TIER_HINT)
    mark_tier(target)
    for wanted in plan:
        if deep:
            for item in wanted:  # a wrong blob already there: replaced by the verified rename below
                log.warning("tier %s: %s is not the pinned bytes; publishing it again", tier, item.label)
        try:
            fetch(store, wanted, _Replacing(target) if deep else target, config, progress)
        except (
            CacheWriteError
        ) as exc:  # a full disk gets the tier's hint; anything else (a folder at a blob) keeps its own
            hint = TIER_HINT if exc.hint in (None, write_hint(errno.ENOSPC)) else exc.hint
            raise CacheWriteError(f"publishing to the tier {target.root}: {exc.message}", hint=hint) from None
        for item in wanted:
            report.published.append(item.label)
            report.bytes += item.entry.size
    for name in names:  # one scan verdict per pickle's sha256, for every runner reading the tier
        if cat.get(name).allow_code is not None:
            load_safety.publish_verdicts(tier, cat.get(name).files)
    _remove_empty_tmp(target)
    return report


def mark_tier(tier: Cache) -> None:
    """Say at the tier's root that it is one (gc then refuses it)."""
    mark = tier.root / TIER_MARK
    if not mark.exists():
        tier.make_dirs(tier.root)
        atomic_write(
            mark,
            b"a shared cache tier written by `catalog publish`; clean it with `catalog publish --clean --to DIR`\n",
        )


def refuse_tier(cache: Cache) -> None:
    """gc works on a runner's own cache; a tier holds blobs every catalog published (UsageError)."""
    if (cache.root / TIER_MARK).exists():
        raise UsageError(
            f"{cache.root} is a shared tier (`catalog publish` fills it), not a cache: gc would remove blobs "
            "other catalogs published",
            hint="clean a tier with `catalog publish --clean --to DIR` (only temp files of killed publishers)",
        )


def clean_tier(tier: Path, dry_run: bool = False) -> list[Path]:
    """Temp files killed publishers left in `tier/tmp/` (none a running publisher holds); nothing else."""
    cache = Cache(tier)
    removed = cache.clean_stale_temps(dry_run=dry_run)
    if not dry_run:
        _remove_empty_tmp(cache)
    return removed


def _blob_ok(cache: Cache, entry: FileEntry) -> bool:
    size, digest = hash_file(cache.blob_path(entry.sha256))
    return (size, digest) == (entry.size, entry.sha256)


class _Replacing(Cache):
    """The tier as a cache whose `has_blob` ignores what is there (a --deep publish replaces wrong blobs)."""

    def __init__(self, cache: Cache) -> None:
        super().__init__(cache.root)

    def has_blob(self, entry: FileEntry) -> bool:
        return False


def _remove_empty_tmp(cache: Cache) -> None:
    try:
        os.rmdir(cache.tmp)  # only when empty: another publisher's temp files stay
    except OSError:
        pass


def verify_tier(cat: Catalog, names: Sequence[str], tier: Path) -> TierCheck:
    """`catalog verify --deep` for a tier: every blob of `names` present, of the pinned size and sha256."""
    check = TierCheck()
    cache = Cache(tier)
    for name in names:
        for entry in cat.get(name).files:
            check.checked += 1
            path = cache.blob_path(entry.sha256)
            if not path.is_file():
                check.problems.append(f"{name}/{entry.path}: missing from the tier ({path})")
                continue
            size, digest = hash_file(path)
            if (size, digest) != (entry.size, entry.sha256):
                check.problems.append(
                    f"{name}/{entry.path}: expected sha256 {entry.sha256} ({entry.size} bytes) "
                    f"but got {digest} ({size} bytes) at {path}"
                )
    leftovers = sorted(p for p in cache.tmp.iterdir() if idle_file(p)) if cache.tmp.is_dir() else []
    for path in leftovers:  # a running publisher's (locked) temp file is no problem
        check.problems.append(
            f"temp file left in the tier by a killed publisher: {path} (`catalog publish --clean "
            f"--to {tier}` removes it)"
        )
    return check
