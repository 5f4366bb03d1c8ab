"""What every command shares: the one Settings of this invocation, the loaded catalog, the store, the shared
options. Click-specific; the values it builds are passed down to resolver/ and catalog/."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from catalog import front_door
from catalog.lookup import Catalog, load
from catalog.settings import Settings
from catalog_app.options import declared_by

log = logging.getLogger("catalog")

F = TypeVar("F", bound=Callable[..., Any])


def settings(ctx: click.Context, **flags: Any) -> Settings:
    """This invocation's Settings: the group's --catalog and the command's own flags over the environment.
    Built once per command; warnings for set-but-ignored variables are printed here."""
    root = ctx.find_root().ensure_object(dict)
    if "settings" not in root:
        built = Settings.from_process(catalog_dir=root.get("catalog_dir"), **flags)
        for what in built.ignored:
            log.warning("ignoring %s", what)
        root["settings"] = built
    value: Settings = root["settings"]
    return value


def catalog_dir(ctx: click.Context) -> Path:
    return settings(ctx).find_catalog_dir()


def load_catalog(ctx: click.Context, only: Sequence[str] | None = None) -> Catalog:
    """The validated catalog for commands that need one (just `only`'s manifests when given)."""
    cat = load(catalog_dir(ctx), only=only)
    if ctx.find_root().ensure_object(dict).pop("collect_after_start", False):
        # The start-up is over (catalog_app/main.py turned the collector off for it): what it made lives until exit,
        # frozen so that no collection walks it again, and the command's own work is collected as usual.
        gc.freeze()
        gc.enable()
    return cat


def store_options(command: F) -> F:
    """--store, --cache, --part-size, --concurrency: shared by every command that moves bytes (front_door.STORE)."""
    return declared_by(front_door.STORE)(command)


def cache_option(command: F) -> F:
    return click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE).")(command)
