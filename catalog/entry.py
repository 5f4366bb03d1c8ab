"""The library's front door to a catalog: `catalog.load()` for tests and tools. Without a path it finds the catalog
as the CLI does, $CATALOG_DIR first (read through the Settings, here at the entry point), else the nearest manifests/
upward; everything below it (catalog/lookup.py's `load`) is handed the folder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from catalog import lookup
from catalog.settings import Settings


def load(path: str | os.PathLike[str] | None = None, *, only: Sequence[str] | None = None) -> lookup.Catalog:
    """Load and validate a catalog: `path`, else $CATALOG_DIR, else the nearest manifests/ upward.

    `only` reads just those models' manifests (fast in a catalog of thousands); the Catalog then
    holds just them, and an unknown name falls back to a full load so the error can suggest names.
    """
    root = Path(path) if path is not None else Settings.from_process().find_catalog_dir()
    return lookup.load(root, only=only)


__all__ = ["load"]
