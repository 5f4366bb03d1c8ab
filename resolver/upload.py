"""Bare-bones upload of a model's files from a local folder into the store, verified first.

Each file is copied to a temp file while it is hashed; only a copy whose size and sha256 match the
manifest is uploaded (so a file changing under us cannot slip through). Objects that are already
there with the recorded sha256 are skipped. What was uploaded is recorded in the model's state object, the
same record `catalog sync` writes (size, sha256, ETag), so a streamed resolve can prove the object is the one
whose bytes were verified. The full sync job (plans, drift, pruning) builds on this.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from catalog.errors import IntegrityError, MissingObjectError
from catalog.lookup import Catalog
from catalog.schema import FileEntry, ModelManifest
from resolver import hashing
from resolver.fsutil import safe_join
from resolver.stores import Store
from resolver.stream_check import record, write_state

log = logging.getLogger(__name__)

SHA256_META = "sha256"
# S3 metadata travels in HTTP headers: ASCII only, and edge spaces are trimmed. Printable ASCII but '%' and
# space stays as is; anything else is percent-encoded as UTF-8 (urllib.parse.unquote gives the path back).
_META_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def metadata_text(value: str) -> str:
    """`value` as an S3 metadata value can carry it (see _META_SAFE); ASCII paths without '%' or spaces are unchanged."""
    return quote(value, safe=_META_SAFE)


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bytes: int = 0


def provenance(manifest: ModelManifest, entry: FileEntry) -> dict[str, str]:
    """Object metadata: the hash the object must have, and where its bytes came from."""
    return {
        SHA256_META: entry.sha256,
        "hf-repo": manifest.source.hf_repo,
        "revision": manifest.source.revision,
        "path": metadata_text(entry.path),
    }


def upload_from_dir(cat: Catalog, name: str, source: Path, store: Store) -> UploadReport:
    manifest = cat.get(name)
    report = UploadReport()
    recorded: dict[str, dict[str, object]] = {}
    try:
        for entry in manifest.files:
            key = cat.store_key(manifest, entry.path)
            existing = store.head(key)
            if (
                existing is not None
                and existing.size == entry.size
                and existing.metadata.get(SHA256_META) == entry.sha256
            ):
                report.skipped.append(entry.path)
                continue
            path = safe_join(source, entry.path)
            if not path.is_file():
                raise MissingObjectError(name, entry.path, str(source))
            fd, temp = tempfile.mkstemp(prefix=".catalog-upload-", suffix=".part")
            try:
                size, digest = hashing.copy_hashing(path, fd)  # the bytes sent are the bytes hashed here
                if size != entry.size:
                    raise IntegrityError(
                        name,
                        entry.path,
                        "size",
                        str(entry.size),
                        str(size),
                        f"the file in {source} differs; nothing was uploaded",
                    )
                if digest != entry.sha256:
                    raise IntegrityError(
                        name,
                        entry.path,
                        "sha256",
                        entry.sha256,
                        digest,
                        f"the file in {source} differs; nothing was uploaded",
                    )
                info = store.put(key, Path(temp), provenance(manifest, entry), sha256=entry.sha256)
            finally:
                Path(temp).unlink(missing_ok=True)
            recorded[entry.path] = record(entry, info)
            report.uploaded.append(entry.path)
            report.bytes += entry.size
            log.info("uploaded %s/%s (%d bytes)", name, entry.path, entry.size)
    finally:
        if recorded:  # what was uploaded before a failure is verified too
            write_state(store, name, recorded, None)
    return report
