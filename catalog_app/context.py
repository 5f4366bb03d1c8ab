"""What every command shares: one `Invocation` per command (per pytest session in the plugin) that builds the
Settings, the catalog, the cache, the catalog's store and mirrors and the trust anchors, each once and only when first
asked for; and the shared click options. Click-specific; the values it builds are passed down to resolver/ and
catalog/, which never read the process environment nor build these themselves."""

from __future__ import annotations

import collections
import gc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from catalog import front_door
from catalog.lookup import Catalog, load
from catalog.settings import Settings
from catalog_app.options import declared_by

# The resolver's modules are imported by the properties that need them: a command opens no store it does not use.
if TYPE_CHECKING:
    from catalog.signing import Policy
    from resolver.cache import Cache
    from resolver.resolve import Cleared, ResolveOptions
    from resolver.signatures import Anchors
    from resolver.stores import Store

log = logging.getLogger("catalog")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Invocation:
    """One command's objects, each built on first use and then kept: `settings`, `catalog` (just `only`'s manifests
    when given), `cache`, `store` (the catalog's, told where its models are), `mirrors` (the same), `policy` and
    `anchors` (the trust anchors, read once). A lock makes concurrent first uses (the pytest plugin's prefetch
    threads) build each once. `built` counts the constructions, and each is logged at debug level (-vv): what the
    tests hold to "once per command"."""

    def __init__(
        self,
        settings: Settings | Callable[[], Settings],
        *,
        only: Sequence[str] | None = None,
        after_load: Callable[[], None] | None = None,
    ) -> None:
        self._make_settings = settings if callable(settings) else (lambda: settings)
        self.only = tuple(only) if only else None
        self._after_load = after_load
        self._lock = threading.RLock()
        self._made: dict[str, object] = {}
        self.built: collections.Counter[str] = collections.Counter()

    def _once(self, what: str, make: Callable[[], T]) -> T:
        with self._lock:
            if what not in self._made:
                self._made[what] = make()
                self.built[what] += 1
                log.debug("invocation: built the %s", what)
            value: T = self._made[what]  # type: ignore[assignment]  # stored by the same key, of the same type
            return value

    @property
    def settings(self) -> Settings:
        def make() -> Settings:
            built = self._make_settings()
            for what in built.ignored:
                log.warning("ignoring %s", what)
            return built

        return self._once("settings", make)

    @property
    def catalog(self) -> Catalog:
        def make() -> Catalog:
            cat = load(self.settings.find_catalog_dir(), only=self.only)
            if self._after_load is not None:
                self._after_load()
            return cat

        return self._once("catalog", make)

    @property
    def cache(self) -> Cache:
        from resolver.cache import Cache

        return self._once("cache", lambda: Cache(self.settings.cache_dir))

    @property
    def store(self) -> Store:
        """The catalog's store: --store/CATALOG_STORE, else catalog.yaml's. Opening it does no I/O."""
        from resolver.stores import open_catalog_store

        return self._once("store", lambda: open_catalog_store(self.catalog, self.settings))

    @property
    def mirrors(self) -> tuple[Store, ...]:
        """--mirror/CATALOG_MIRRORS, else catalog.yaml's, in order, each told where the catalog's models are."""
        from resolver.stores import bind_models, open_store

        def make() -> tuple[Store, ...]:
            urls = self.settings.mirrors or self.catalog.settings.mirrors
            return tuple(bind_models(open_store(url, self.settings), self.catalog) for url in urls)

        return self._once("mirrors", make)

    @property
    def policy(self) -> Policy:
        from catalog.signing import policy_of

        return self._once("policy", lambda: policy_of(self.catalog.settings, self.catalog.root, self.settings))

    @property
    def anchors(self) -> Anchors:
        """The policy's keys, roots and log keys, read once (TrustConfigError when there are none or one is unusable)."""
        from resolver.signatures import load_anchors

        return self._once("anchors", lambda: load_anchors(self.policy))

    def open(self, url: str) -> Store:
        """Another store than the catalog's (`sync --replicate-to`), told where the catalog's models are."""
        from resolver.stores import bind_models, open_store

        return bind_models(open_store(url, self.settings), self.catalog)

    def options(self, **overrides: Any) -> ResolveOptions:
        """The resolve options the settings imply, with this invocation's mirrors; `overrides` are the command's own."""
        from resolver.resolve import ResolveOptions

        return ResolveOptions.from_settings(self.settings, mirrors=self.mirrors, **overrides)

    def preflight(self, names: Sequence[str], options: ResolveOptions) -> Cleared:
        """The command's one pre-flight for all of `names`: the signature gate, then the capacity check."""
        from resolver.resolve import preflight

        anchors = self.anchors if self.policy.required else None
        self.built["preflight"] += 1
        return preflight(self.catalog, names, options, anchors=anchors)


def invocation(ctx: click.Context, *, only: Sequence[str] | None = None, **flags: Any) -> Invocation:
    """This command's Invocation: the group's --catalog and the command's own flags over the environment (the one
    read of it, here at the entry point). Made on the first call; later calls get the same one."""
    root = ctx.find_root().ensure_object(dict)
    if "invocation" not in root:

        def after_load() -> None:
            if root.pop("collect_after_start", False):
                # The start-up is over (catalog_app/main.py turned the collector off for it): what it made lives until
                # exit, frozen so that no collection walks it again, and the command's own work is collected as usual.
                gc.freeze()
                gc.enable()

        root["invocation"] = Invocation(
            lambda: Settings.from_process(catalog_dir=root.get("catalog_dir"), **flags),
            only=only,
            after_load=after_load,
        )
    made: Invocation = root["invocation"]
    return made


def store_options(command: F) -> F:
    """--store, --cache, --part-size, --concurrency: shared by every command that moves bytes (front_door.STORE)."""
    return declared_by(front_door.STORE)(command)


def cache_option(command: F) -> F:
    return click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE).")(command)
