"""Where sync's bytes come from besides a folder and the Hub: a Hugging Face cache.

- `catalog sync --from-hf-cache DIR` seeds the bucket from the bytes CI already has: each file is taken from
  the HF cache as a shared tier takes it (`resolver/tiers.py`: found by revision and path or by sha256, size
  and sha256 checked, never written there), then hashed again on its way to the bucket like every upload.
  A file the HF cache lacks (or holds corrupt) comes from `--from-dir` or the Hub as before, said on stderr.
"""

from __future__ import annotations

import logging
from pathlib import Path

from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver.cache import Cache
from resolver.hf_tier import HfTier
from resolver.hub import HubOptions
from resolver.sync import PlanItem, SourceOfBytes
from resolver.tiers import take_from_tiers
from resolver.transfer import TransferConfig

log = logging.getLogger(__name__)


class HfCacheBytes(SourceOfBytes):
    """Uploads read from an HF cache first (zero Hub requests when it holds every file)."""

    def __init__(self, cat: Catalog, cache: Cache, hub: HubOptions, from_dir: Path | None, config: TransferConfig,
                 hf_cache: Path) -> None:
        super().__init__(cat, cache, hub, from_dir, config)
        self.tier = HfTier(hf_cache.expanduser().absolute())

    def blob(self, item: PlanItem) -> Path:
        entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
        if not self.cache.has_blob(entry):
            take_from_tiers((self.tier,), self.cache, item.model, [entry], self.cat.get(item.model).source)
            if not self.cache.has_blob(entry):
                log.warning("%s/%s is not in the HF cache %s (or not with the pinned bytes); fetching it from %s",
                            item.model, item.path, self.tier.root, "--from-dir or the Hub" if self.from_dir else "the Hub")
        return super().blob(item)
