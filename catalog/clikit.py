"""Helpers shared by the CLI modules (catalog.cli and resolver.cli): settings and the loaded catalog."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import click

from catalog.lookup import Catalog, find_catalog_dir, load
from catalog.settings import Settings


def current_settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.ensure_object(dict)["settings"]
    return settings


def settings_of(ctx: click.Context, *, store: str | None = None, cache_dir: str | None = None) -> Settings:
    """The group's settings with a command's own flags on top (flags beat the environment)."""
    settings = current_settings(ctx)
    if store is not None:
        settings = dataclasses.replace(settings, store=store)
    if cache_dir is not None:
        settings = dataclasses.replace(settings, cache_dir=Path(cache_dir))
    return settings


def catalog_dir(ctx: click.Context) -> Path:
    """--catalog / CATALOG_DIR, else the nearest manifests/ upward."""
    settings = current_settings(ctx)
    return settings.catalog_dir if settings.catalog_dir is not None else find_catalog_dir()


def load_catalog(ctx: click.Context, only: Sequence[str] | None = None) -> Catalog:
    """The validated catalog for commands that need one (just `only`'s manifests when given)."""
    return load(catalog_dir(ctx), only=only)


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
