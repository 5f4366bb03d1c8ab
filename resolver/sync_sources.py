"""Where sync's bytes come from besides a folder and the Hub: a Hugging Face cache, or the primary store.

- `catalog sync --from-hf-cache DIR` seeds the bucket from the bytes CI already has: each file is taken from
  the HF cache as a shared tier takes it (`resolver/tiers.py`: found by revision and path or by sha256, size
  and sha256 checked, never written there), then hashed again on its way to the bucket like every upload.
  A file the HF cache lacks (or holds corrupt) comes from `--from-dir` or the Hub as before, said on stderr.
- `catalog sync --replicate-to URL [NAME...]` copies pins from the primary store to a second one: the same
  plan and apply as any sync against the second store, with bytes read (verified) from the primary, never
  the Hub (whose copy may be gone: that is why one replicates), and the upstream audit's record copied along
  so the replica knows its last copies too. It never deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver.cache import Cache
from resolver.hf_tier import HfTier
from resolver.hub import HubOptions
from resolver.last_copy import copy_record
from resolver.stores import Store
from resolver.sync import ApplyReport, PlanItem, SourceOfBytes, SyncPlan, apply, make_plan
from resolver.tiers import take_from_tiers
from resolver.transfer import TransferConfig, Wanted, fetch

log = logging.getLogger(__name__)


class HfCacheBytes(SourceOfBytes):
    """Uploads read from an HF cache first (zero Hub requests when it holds every file)."""

    def __init__(
        self, cat: Catalog, cache: Cache, hub: HubOptions, from_dir: Path | None, config: TransferConfig, hf_cache: Path
    ) -> None:
        super().__init__(cat, cache, hub, from_dir, config)
        self.tier = HfTier(hf_cache.expanduser().absolute())

    def blob(self, item: PlanItem) -> Path:
        entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
        if not self.cache.has_blob(entry):
            take_from_tiers((self.tier,), self.cache, item.model, [entry], self.cat.get(item.model).source)
            if not self.cache.has_blob(entry):
                log.warning(
                    "%s/%s is not in the HF cache %s (or not with the pinned bytes); fetching it from %s",
                    item.model,
                    item.path,
                    self.tier.root,
                    "--from-dir or the Hub" if self.from_dir else "the Hub",
                )
        return super().blob(item)


class StoreBytes(SourceOfBytes):
    """Uploads read from another store (the primary, for a replica), verified on their way into the cache."""

    def __init__(self, cat: Catalog, cache: Cache, origin: Store, config: TransferConfig) -> None:
        super().__init__(cat, cache, HubOptions(), None, config)
        self.origin = origin

    def blob(self, item: PlanItem) -> Path:
        entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
        if not self.cache.has_blob(entry):
            key = self.cat.store_key(self.cat.get(item.model), item.path)
            fetch(self.origin, [Wanted(item.model, entry, key)], self.cache, self.config)
        return self.cache.blob_path(entry.sha256)


def replicate(
    cat: Catalog, names: Sequence[str], origin: Store, target: Store, cache: Cache, config: TransferConfig
) -> tuple[SyncPlan, ApplyReport]:
    """Make `target` hold the pins of `names` (all: ()) as verified copies of `origin`'s, and the upstream record
    with them (which pins are the last copy); nothing is deleted."""
    plan = make_plan(cat, names, target, prune=False, delete_orphans=False, deep=False, config=config, cache=cache)
    report = apply(
        plan, cat, target, StoreBytes(cat, cache, origin, config), max_delete=0, check_fresh=False, config=config
    )
    copy_record(origin, target)
    return plan, report
