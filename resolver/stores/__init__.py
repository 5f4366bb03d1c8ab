"""Stores, a registry by URL scheme: `open_store(url, settings)` picks the store that owns the scheme.

Each store owns its specifics through the `Store` interface (base.py: how it lists, opens ranges and puts;
which of its errors are worth a retry: `transient()`; what a streaming engine needs to reach it:
`stream_target()`; batched deletes, a content-addressed listing, binding a catalog's models), so code above
never asks which kind of store it holds. A new store is one module plus one `register()` line below.

    file:///dir/ or a plain folder    LocalStore  (the embedded default; no server, no credentials)
    s3://bucket/[base/]               S3Store     (any S3-compatible endpoint, boto3 imported on first use)
    s3://bucket/[base/]?endpoint=http://host:port&addressing=path&unsigned=1
                                      S3Store on an endpoint of its own (a mirror on another S3 server;
                                      the query overrides the settings' endpoint/addressing/unsigned)
    http(s)://host[:port]/base/       HttpStore   (read-only: unsigned ranged GETs; a mirror, e.g. nginx)
    oci://host[:port]/namespace/      OciStore    (an OCI registry: each model a ModelPack artifact, see oci.py)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from catalog import urls
from catalog.errors import UsageError
from catalog.settings import S3Options, Settings
from resolver.stores import local, s3
from resolver.stores.base import LOCAL, ObjectInfo, ObjectNotFound, ObjectStream, Store, StreamTarget, check_key
from resolver.stores.local import LocalStore
from resolver.stores.s3 import S3Store, make_s3_client

if TYPE_CHECKING:  # only for annotations: the catalog's loader (pydantic) is no import of the stores (warm_sync.py)
    from catalog.lookup import Catalog

StoreFactory = Callable[[str, Settings], Store]
_SCHEMES: dict[str, StoreFactory] = {}


def register(scheme: str, factory: StoreFactory) -> None:
    """Make `scheme://...` URLs open with `factory(url, settings)`."""
    _SCHEMES[scheme] = factory


def unregister(scheme: str) -> None:
    """Forget `scheme` (a test's own store)."""
    _SCHEMES.pop(scheme, None)


def schemes() -> list[str]:
    return sorted(_SCHEMES)


def open_store(url: str, settings: Settings | None = None) -> Store:
    """The store for `url` (a plain path is a folder). Creating it does no I/O.
    `settings` default to this process's (for library callers)."""
    settings = settings if settings is not None else Settings.from_process()
    scheme = urls.scheme_of(url)
    factory = _SCHEMES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in schemes())
        raise UsageError(
            f"unsupported store URL {urls.redact(url)!r}", hint=f"known schemes: {known}, or a folder path"
        )
    # Checked before a store parses it: a bad URL is one line, not the store's own error.
    if scheme in urls.SCHEMES and (problem := urls.check_store_url(url)) is not None:
        raise UsageError(f"bad store URL: {problem}", hint=urls.FORMS.get(scheme))
    return factory(url, settings)


def open_catalog_store(cat: Catalog, settings: Settings) -> Store:
    """A catalog's store: --store/CATALOG_STORE if given, else catalog.yaml's, told where the catalog's models are.
    Creating it does no I/O."""
    return bind_models(open_store(settings.store or cat.settings.store, settings), cat)


def bind_models(store: Store, cat: Catalog) -> Store:
    """`store`, told where the catalog's models' keys are (a store that addresses objects by model, an OCI registry,
    needs it; the others ignore it)."""
    store.bind_models({cat.store_key(m): m for m in cat})
    return store


def _imported_on_use(module: str, function: str) -> StoreFactory:
    """`module.function`, imported when its scheme is first opened: a resolve from S3 never loads the OCI client
    (four modules) or the HTTP mirror's."""

    def factory(url: str, settings: Settings) -> Store:
        made: Store = getattr(importlib.import_module(module), function)(url, settings)
        return made

    return factory


register("file", lambda url, settings: local.from_url(url))
register("s3", s3.from_url)
register("http", _imported_on_use("resolver.stores.http", "from_settings"))
register("https", _imported_on_use("resolver.stores.http", "from_settings"))
register("oci", _imported_on_use("resolver.stores.oci", "from_url"))

__all__ = [
    "LOCAL",
    "bind_models",
    "open_catalog_store",
    "LocalStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStream",
    "S3Options",
    "S3Store",
    "Store",
    "StoreFactory",
    "StreamTarget",
    "check_key",
    "make_s3_client",
    "open_store",
    "register",
    "schemes",
    "unregister",
]
