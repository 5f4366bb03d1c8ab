"""The lookup API for tests and tools: a validated Catalog, models by logical name. `load` takes the catalog's folder;
`catalog.load()` without one (catalog/entry.py) finds it, $CATALOG_DIR first, at the library's entry point."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import CatalogNotFoundError, InvalidCatalogError, UnknownModelError, UsageError
from catalog.formats import LoadFormat
from catalog.loading import LoadResult, load_dir, load_named
from catalog.schema import CatalogSettings, ModelManifest
from catalog.settings import find_catalog_dir


@dataclass(frozen=True)
class Catalog:
    """A validated catalog: immutable values, no I/O."""

    root: Path
    settings: CatalogSettings
    models: Mapping[str, ModelManifest]
    sources: Mapping[str, Path]  # name -> the manifest file, for messages and `catalog lock`

    def get(self, name: str) -> ModelManifest:
        """The manifest named `name`, or UnknownModelError listing close names."""
        try:
            return self.models[name]
        except KeyError:
            raise UnknownModelError(name, difflib.get_close_matches(name, list(self.models), n=3, cutoff=0.5)) from None

    def __contains__(self, name: object) -> bool:
        return name in self.models

    def __iter__(self) -> Iterator[ModelManifest]:
        return iter(self.models.values())

    def __len__(self) -> int:
        return len(self.models)

    def gpu_class(self, model: ModelManifest) -> str:
        return model.gpu.gpu_class or self.settings.default_gpu

    def filter(
        self, *, gpu: str | None = None, tag: str | None = None, load_format: LoadFormat | str | None = None
    ) -> list[ModelManifest]:
        """Models matching every given criterion, sorted by name. An unknown GPU class or load format is a
        UsageError listing the known ones (a typo must not look like "no models")."""
        if gpu is not None and gpu not in self.settings.gpu_classes:
            raise UsageError(
                f"unknown GPU class {gpu!r}", hint=f"known: {', '.join(sorted(self.settings.gpu_classes))}"
            )
        try:
            fmt = LoadFormat(load_format) if load_format is not None else None
        except ValueError:
            raise UsageError(
                f"unknown load format {load_format!r}", hint=f"known: {', '.join(f.value for f in LoadFormat)}"
            ) from None
        return [
            m
            for m in sorted(self.models.values(), key=lambda m: m.name)
            if (gpu is None or self.gpu_class(m) == gpu)
            and (tag is None or tag in m.tags)
            and (fmt is None or m.load_format is fmt)
        ]

    def by_repo(self, repo_id: str) -> list[ModelManifest]:
        """Every manifest pinning the Hub repo `repo_id` (case-insensitive, like the Hub)."""
        folded = repo_id.casefold()
        return sorted((m for m in self.models.values() if m.source.hf_repo.casefold() == folded), key=lambda m: m.name)

    def store_key(self, manifest: ModelManifest, path: str = "") -> str:
        """The key of `path` of `manifest` relative to the store root (its prefix minus catalog.yaml's store)."""
        return manifest.s3_prefix[len(self.settings.store) :] + path

    def repo_owner(
        self, repo_id: str, revision: str | None = None, *, repo_type: str = "model"
    ) -> ModelManifest | None:
        """The manifest that answers for a repo id (at `revision`, if given) where one id must mean one model's files:
        the redirect file, an hf-cache snapshot. The only manifest pinning it, else the one marked `primary: true`
        (when it pins that revision); None when nothing pins it or several do and none answers."""
        group = [
            m
            for m in self.by_repo(repo_id)
            if m.source.repo_type == repo_type and (revision is None or m.source.revision == revision)
        ]
        if len(group) == 1:
            return group[0]
        primaries = [m for m in group if m.primary]
        return primaries[0] if len(primaries) == 1 else None


def from_result(result: LoadResult) -> Catalog:
    """A Catalog from a load with no problems; InvalidCatalogError carrying all problems otherwise."""
    if not result.ok or result.settings is None:
        raise InvalidCatalogError(result.problems)
    models: dict[str, ModelManifest] = {}
    sources: dict[str, Path] = {}
    for doc in result.docs:
        assert doc.manifest is not None
        models[doc.manifest.name] = doc.manifest
        sources[doc.manifest.name] = doc.path
    return Catalog(result.root, result.settings, models, sources)


def load(path: str | os.PathLike[str], *, only: Sequence[str] | None = None) -> Catalog:
    """Load and validate the catalog in `path` (a manifests/ folder holding catalog.yaml).

    `only` reads just those models' manifests (fast in a catalog of thousands); the Catalog then
    holds just them, and an unknown name falls back to a full load so the error can suggest names.
    """
    root = Path(path)
    if not (root / "catalog.yaml").is_file():
        raise CatalogNotFoundError(
            f"{root} has no catalog.yaml", hint="point --catalog / CATALOG_DIR at a manifests/ folder"
        )
    if only:
        partial = load_named(root, only)
        if partial is not None:
            return from_result(partial)
    return from_result(load_dir(root))


__all__ = ["Catalog", "find_catalog_dir", "from_result", "load"]
