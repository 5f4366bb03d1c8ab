"""model-catalog, the declarative half: manifests pinning CI models, validated without any network.

    import catalog
    cat = catalog.load()                 # nearest manifests/ (or $CATALOG_DIR)
    model = cat.get("all-minilm-l6-v2")  # UnknownModelError suggests close names

Importing this package never imports boto3, huggingface_hub or torch.
"""

from __future__ import annotations

from catalog.errors import CatalogError, InvalidCatalogError, Problem, UnknownModelError
from catalog.lookup import Catalog, find_catalog_dir, load
from catalog.schema import CatalogSettings, FileEntry, LoadFormat, ModelManifest

__version__ = "0.1.0"

__all__ = [
    "Catalog",
    "CatalogError",
    "CatalogSettings",
    "FileEntry",
    "InvalidCatalogError",
    "LoadFormat",
    "ModelManifest",
    "Problem",
    "UnknownModelError",
    "__version__",
    "find_catalog_dir",
    "load",
]
