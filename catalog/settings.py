"""Settings: read once at the entry point (flags over environment over defaults), then passed down.

No module reads os.environ at import time; library code receives a Settings value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/model-catalog, else ~/.cache/model-catalog (the user's cache dir)."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "model-catalog"


@dataclass(frozen=True)
class Settings:
    catalog_dir: Path | None = None  # None: the nearest manifests/ upward from the working directory
    store: str | None = None  # overrides catalog.yaml's store (a folder, file:// URL or s3:// URL)
    cache_dir: Path | None = None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        catalog_dir: str | None = None,
        store: str | None = None,
        cache_dir: str | None = None,
    ) -> Settings:
        env = os.environ if env is None else env
        catalog = catalog_dir or env.get("CATALOG_DIR")
        cache = cache_dir or env.get("CATALOG_CACHE")
        return cls(
            catalog_dir=Path(catalog) if catalog else None,
            store=store or env.get("CATALOG_STORE") or None,
            cache_dir=Path(cache) if cache else default_cache_dir(env),
        )
