"""The catalog's side of `--load-format catalog`: from the engine's loader config to verified tensors.

An entry point of its own (the engine's process has no CLI): the settings are built here, once per load, from
the loader's config (`model`, and the `catalog`, `store` and `cache` that `catalog resolve` printed beside it)
over this process's environment, exactly as a command builds them from its flags. Nothing here knows vLLM:
catalog_app/vllm_plugin.py adapts it to vLLM's loader interface, and tests drive it directly.

Keys of the loader config (vLLM: `--model-loader-extra-config.KEY=VALUE`):
- `model`: the logical name (required);
- `catalog`, `store`, `cache`: as `--catalog`, `--store`, `--cache` (else CATALOG_DIR, CATALOG_STORE, CATALOG_CACHE,
  catalog.yaml);
- `window`: bytes of tensors in flight (default 128 MiB), the bound on the memory a load adds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog import load_plan
from catalog.errors import UsageError
from catalog.load_plan import FileLoad
from catalog.lookup import Catalog, load
from catalog.schema import ModelManifest
from catalog.settings import Settings

if TYPE_CHECKING:
    import torch

    from resolver.verified_load import LoadRecord

KEYS = ("model", "catalog", "store", "cache", "window")


@dataclass(frozen=True)
class LoadRequest:
    model: str
    catalog: str | None = None
    store: str | None = None
    cache: str | None = None
    window: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LoadRequest:
        """The loader config as the engine parsed it; UsageError naming what is wrong."""
        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            raise UsageError(
                f"--load-format catalog: unknown loader config key(s) {', '.join(unknown)}",
                hint=f"the keys are {', '.join(KEYS)}; print them with `catalog resolve NAME --format vllm-args`",
            )
        model = config.get("model")
        if not isinstance(model, str) or not model:
            raise UsageError(
                "--load-format catalog needs the model's logical name in its loader config",
                hint="--model-loader-extra-config.model=NAME (as `catalog resolve NAME --format vllm-args` prints it)",
            )
        window = config.get("window")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1024 * 1024):
            raise UsageError(f"--load-format catalog: window={window!r} is not a byte count of at least 1 MiB")
        named = {k: str(config[k]) if config.get(k) is not None else None for k in ("catalog", "store", "cache")}
        return cls(model, named["catalog"], named["store"], named["cache"], window)


@dataclass
class LoadSession:
    """One model's verified load in this process: the catalog, the pins, the places bytes come from."""

    request: LoadRequest
    settings: Settings
    cat: Catalog
    manifest: ModelManifest
    records: list[LoadRecord] = field(default_factory=list)

    @classmethod
    def open(cls, request: LoadRequest) -> LoadSession:
        settings = Settings.from_process(catalog_dir=request.catalog, store=request.store, cache_dir=request.cache)
        cat = load(settings.find_catalog_dir(), only=[request.model])
        manifest = cat.get(request.model)
        from resolver import signatures

        signatures.require(cat, [manifest.name], cache_root=settings.cache_dir, settings=settings)
        return cls(request, settings, cat, manifest)

    @property
    def per_rank(self) -> bool:
        return self.manifest.load_format.spec.tensor_parallel_files is not None

    def plan(self, rank: int | None) -> list[FileLoad]:
        from resolver.loaders.common import pinned_tables

        return load_plan.plan(self.manifest, pinned_tables(self.cat, self.manifest), rank if self.per_rank else None)

    def tensors(self, rank: int | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor `rank` loads, verified; the load's record is kept (and appended to CATALOG_LOAD_RECORD)."""
        from resolver.cache import Cache
        from resolver.resolve import ResolveOptions, mirror_stores
        from resolver.stores import open_catalog_store
        from resolver.tiers import tiers_of
        from resolver.verified_load import DEFAULT_WINDOW, FileRecord, LoadRecord, sources_for, verified_tensors

        loads = self.plan(rank)
        options = ResolveOptions.from_settings(self.settings, self.cat)
        stores = (*mirror_stores(self.cat, options), open_catalog_store(self.cat, self.settings))
        cache = Cache(self.settings.cache_dir)
        tiers = tiers_of(options.tiers)
        window = self.request.window or DEFAULT_WINDOW
        record = LoadRecord(self.manifest.name, rank if self.per_rank else None)
        self.records.append(record)
        started = time.perf_counter()
        try:
            for file in loads:
                entry = file.entry
                sources = sources_for(
                    self.manifest,
                    entry,
                    self.cat.store_key(self.manifest, entry.path),
                    cache=cache,
                    tiers=tiers,
                    stores=stores,
                    window=window,
                    min_rate=options.transfer.min_rate,
                    rate_window=options.transfer.rate_window,
                    max_wait=options.transfer.max_wait,
                )
                file_record = FileRecord(entry.path, entry.sha256, len(file.tensors))
                record.files.append(file_record)
                yield from verified_tensors(self.manifest.name, file, sources, file_record, window=window)
            record.ok = True
        except Exception as exc:
            record.error = str(exc)
            raise
        finally:
            record.seconds = time.perf_counter() - started
            if self.settings.load_record is not None:
                record.append_to(self.settings.load_record)
