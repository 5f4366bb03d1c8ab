"""A Hugging Face cache (an `HF_HUB_CACHE` folder) read as a shared tier: `--shared-cache hf:DIR`.

Engine CI already keeps such caches per runner pool (a network mount, a RAID disk, /dev/shm), filled by
huggingface_hub: `{models,datasets}--org--name/{blobs,snapshots,refs}`. A pinned file is found there by
the manifest's revision and path (`snapshots/<revision>/<path>`, a symlink to its blob, followed here), or
by its sha256, which is the name huggingface_hub gives an LFS file's blob (`blobs/<sha256>`). This module
only says where to look; `resolver/tiers.py` checks what it finds exactly as for any tier (size, then
sha256 once per file identity) and links or copies it. Nothing here writes, locks or chmods in the cache.
Standard library only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from catalog import naming
from catalog.bounded import outside
from catalog.schema import FileEntry, Source
from resolver.hf_layout import hf_repo_folder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HfTier:
    root: Path

    @property
    def url(self) -> str:
        """What `sources` and messages name."""
        return f"hf-cache:{self.root}"

    def repo_dir(self, source: Source) -> Path:
        return self.root / hf_repo_folder(source.hf_repo, source.repo_type)

    def candidates(self, entry: FileEntry, source: Source | None) -> list[Path]:
        """The snapshot file of the pinned revision (its symlink resolved to the blob), then the LFS blob named
        by the pin's sha256; none without the manifest's source or for a path or hash that is not well formed.
        Only what huggingface_hub makes is a candidate: a blob of the repo's own blobs/ (never a link leading out of
        it, whatever bytes it leads to), or a regular file in the snapshot itself (a cache made without symlinks)."""
        if (
            source is None
            or naming.check_relative_path(entry.path) is not None
            or naming.check_sha256(entry.sha256) is not None
            or naming.check_revision(source.revision) is not None
        ):
            return []
        repo = self.repo_dir(source)
        snapshot = repo / "snapshots" / source.revision
        try:
            blobs = repo.resolve() / "blobs"
        except (OSError, RuntimeError):
            return []
        found: list[Path] = []
        for path in (snapshot / entry.path, repo / "blobs" / entry.sha256):
            try:
                real = path.resolve(strict=True)
            except (OSError, RuntimeError):  # missing, a dangling link, a link loop
                continue
            if real.parent == blobs or (not path.is_symlink() and outside(path, snapshot) is None):
                if real not in found:
                    found.append(real)
            else:
                log.warning("%s: %s leads outside %s (to %s); not taken", self.url, path, blobs, real)
        return found
