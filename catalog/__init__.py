"""model-catalog, the declarative half: manifests pinning CI models, validated without any network.

    import catalog
    cat = catalog.load()                 # nearest manifests/ (or $CATALOG_DIR)
    model = cat.get("all-minilm-l6-v2")  # UnknownModelError suggests close names
    catalog.example_model("LlamaForCausalLM")  # by the manifests' arch: tags
    catalog.model_for_repo("sentence-transformers/all-MiniLM-L6-v2")

Importing this package never imports boto3, huggingface_hub or torch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve (catalog_app/warm.py)

# The version, as a literal: the warm path keys its index on it (catalog_app/warm.py), and importlib.metadata would
# cost it tens of milliseconds (its import and a lookup, 60 ms on a busy machine) and, in an editable install,
# answer the version installed then, not the one here.
# pyproject.toml's `version` says the same (tests/unit/test_version.py holds them and CHANGELOG.md equal).
__version__ = "0.7.0"

# Exports load on first use (PEP 562), so the warm resolve can import catalog modules without pydantic.
_EXPORTS = {
    "Catalog": "catalog.lookup",
    "find_catalog_dir": "catalog.settings",
    "load": "catalog.entry",
    "CatalogError": "catalog.errors",
    "InvalidCatalogError": "catalog.errors",
    "Problem": "catalog.errors",
    "UnknownModelError": "catalog.errors",
    "NoCatalogModelError": "catalog.registry",
    "example_model": "catalog.registry",
    "model_for_repo": "catalog.registry",
    "CatalogSettings": "catalog.schema",
    "FileEntry": "catalog.schema",
    "LoadFormat": "catalog.formats",
    "Settings": "catalog.settings",
    "ModelManifest": "catalog.schema",
}

if TYPE_CHECKING:
    from catalog.entry import load
    from catalog.errors import CatalogError, InvalidCatalogError, Problem, UnknownModelError
    from catalog.formats import LoadFormat
    from catalog.lookup import Catalog
    from catalog.registry import NoCatalogModelError, example_model, model_for_repo
    from catalog.schema import CatalogSettings, FileEntry, ModelManifest
    from catalog.settings import Settings, find_catalog_dir


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:  # also asked first by `from catalog import locations`, before the submodule is imported
        raise AttributeError(f"module 'catalog' has no attribute {name!r}")
    import importlib  # only here: importlib (and warnings, which it imports) is half a millisecond of a warm answer

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*_EXPORTS, "__version__"])


__all__ = [  # spelled out for type checkers; equal to sorted(_EXPORTS) plus __version__
    "Catalog",
    "CatalogError",
    "CatalogSettings",
    "FileEntry",
    "InvalidCatalogError",
    "LoadFormat",
    "ModelManifest",
    "NoCatalogModelError",
    "Problem",
    "Settings",
    "UnknownModelError",
    "__version__",
    "example_model",
    "find_catalog_dir",
    "load",
    "model_for_repo",
]
