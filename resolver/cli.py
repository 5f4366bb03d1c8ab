"""The resolver's commands (`resolve`, `verify`, `gc`), registered on the `catalog` group.

Heavy imports (boto3) happen inside the store, only when bytes must move.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from catalog import fast
from catalog.clikit import human_bytes, load_catalog, settings_of
from catalog.errors import UsageError
from resolver.cache import Cache, Layout
from resolver.hub import HubOptions
from resolver.resolve import Resolution, ResolveOptions, Source, engine_args, engine_env, open_catalog_store, resolve
from resolver.transfer import MiB, TransferConfig

log = logging.getLogger("catalog.resolve")

FORMATS = ("path", "json", "env", "vllm-args", "redirect")


def parse_size(text: str) -> int:
    """'64MiB', '8M', '1GiB', '1048576' -> bytes (binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if match is None:
        raise UsageError(f"bad size {text!r}", hint="use bytes or a unit: 16MiB, 1GiB")
    return int(float(match.group(1)) * 1024 ** " kmg".index(match.group(2).lower() or " "))


def transfer_config(part_size: str | None, concurrency: int | None) -> TransferConfig:
    """Flags over CATALOG_PART_SIZE / CATALOG_CONCURRENCY over the defaults (read at the entry point)."""
    env = os.environ
    size = parse_size(part_size or env.get("CATALOG_PART_SIZE") or "64MiB")
    try:
        workers = concurrency or int(env.get("CATALOG_CONCURRENCY") or 8)
    except ValueError:
        raise UsageError(f"CATALOG_CONCURRENCY={env['CATALOG_CONCURRENCY']!r} is not a whole number") from None
    if size < MiB or workers < 1:
        raise UsageError("--part-size must be at least 1MiB and --concurrency at least 1")
    return TransferConfig(part_size=size, concurrency=workers)


class _Progress:
    """A one-line byte counter on stderr, drawn only on a terminal and at most 10 times a second."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.lock = threading.Lock()
        self.last = 0.0
        self.enabled = sys.stderr.isatty()

    def __call__(self, label: str, count: int) -> None:
        with self.lock:
            self.done += count
            now = time.monotonic()
            if self.enabled and now - self.last > 0.1:
                self.last = now
                click.echo(f"\r{human_bytes(self.done)} / {human_bytes(self.total)}  {label[:60]:<60}", err=True, nl=False)

    def finish(self) -> None:
        if self.enabled and self.done:
            click.echo("\r" + " " * 100 + "\r", err=True, nl=False)


F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """--store, --cache, --part-size, --concurrency: shared by every command that moves bytes."""
    for option in reversed([
        click.option("--store", metavar="URL", help="Override catalog.yaml's store: s3://bucket/, file:///dir/ or a folder (env CATALOG_STORE)."),
        click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE; default ~/.cache/model-catalog)."),
        click.option("--part-size", metavar="SIZE", help="Part size of ranged GETs and multipart uploads (env CATALOG_PART_SIZE; default 64MiB)."),
        click.option("--concurrency", type=int, help="Parallel requests (env CATALOG_CONCURRENCY; default 8)."),
    ]):
        command = option(command)
    return command


@click.command("resolve")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every model in the catalog.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="path", show_default=True)
@click.option("--layout", type=click.Choice([layout.value for layout in Layout]), default="dir", show_default=True)
@click.option("--materialize-weights", is_flag=True, help="Streaming formats: download the weights too.")
@click.option("--offline", is_flag=True, help="Use the cache only; fail fast naming what is missing.")
@click.option("--source", type=click.Choice([x.value for x in Source]),
              help="Where bytes come from: store (the bucket only), hf (the Hub at the pinned revision), fallback "
                   "(the bucket, then the Hub). Default from CATALOG_MODE: ci -> store, dev -> fallback, offline -> --offline.")
@store_options
@click.pass_context
def resolve_command(
    ctx: click.Context, names: tuple[str, ...], all_models: bool, fmt: str, layout: str, materialize_weights: bool,
    offline: bool, source: str | None, store: str | None, cache_dir: str | None, part_size: str | None,
    concurrency: int | None,
) -> int:
    """Materialize verified models and print where they are."""
    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    if fmt in ("path", "vllm-args") and len(names) > 1:
        raise UsageError(f"--format {fmt} prints one model; use --format json for several")
    settings = settings_of(ctx, store=store, cache_dir=cache_dir)
    cat = load_catalog(ctx, only=None if all_models else names)
    assert settings.cache_dir is not None
    cache = Cache(settings.cache_dir)
    the_store = open_catalog_store(cat, settings.store, os.environ)
    chosen, mode_offline = source_for_mode(source, os.environ.get("CATALOG_MODE"))
    options = ResolveOptions(Layout(layout), materialize_weights, offline or mode_offline, chosen,
                             transfer_config(part_size, concurrency), HubOptions.from_env(os.environ))
    selected = [m.name for m in cat.filter()] if all_models else list(names)
    for name in selected:
        cat.get(name)  # unknown names fail before any download
    total = sum(m.total_bytes for m in (cat.get(n) for n in selected))
    progress = _Progress(total)
    results: list[Resolution] = []
    try:
        for name in selected:
            started = time.perf_counter()
            result = resolve(cat, name, cache=cache, store=the_store, options=options, progress=progress)
            log.info("resolved %s from %s in %.3fs", name, result.source, time.perf_counter() - started)
            results.append(result)
    finally:
        progress.finish()
    output = render(results, fmt) + "\n"
    click.echo(output, nl=False)
    argv = ctx.find_root().obj.get("argv")
    if argv is not None and not all_models:
        inputs = [cat.root / "catalog.yaml", *(cat.sources[m.name] for m in cat)]
        fast.record(argv, os.environ, os.getcwd(), inputs, [m for r in results for m in r.markers], output)
    return 0


MODES = {"ci": (Source.STORE, False), "dev": (Source.FALLBACK, False), "offline": (Source.STORE, True)}


def source_for_mode(flag: str | None, mode: str | None) -> tuple[Source, bool]:
    """--source wins; else CATALOG_MODE (ci: bucket only, dev: bucket then Hub, offline: cache only); else ci."""
    if mode is not None and mode not in MODES:
        raise UsageError(f"CATALOG_MODE={mode!r} is not one of {', '.join(MODES)}")
    default, offline = MODES[mode or "ci"]
    return (Source(flag) if flag else default), offline


def render(results: list[Resolution], fmt: str) -> str:
    if fmt == "path":
        return results[0].model if len(results) == 1 else "\n".join(r.model for r in results)
    if fmt == "json":
        data = [r.to_json() for r in results]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2)
    if fmt == "vllm-args":
        return shlex.join(engine_args(results[0]))
    if fmt == "env":
        merged: dict[str, str] = {}
        for r in results:
            merged |= engine_env(r)
        if len(results) == 1:
            merged |= {"CATALOG_MODEL": results[0].model, "CATALOG_MODEL_PATH": str(results[0].path)}
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(merged.items()))
    # redirect: the engine's model-redirect file (VLLM_MODEL_REDIRECT_PATH): repo id -> local folder or stream URI
    return json.dumps({r.hf_repo: r.model for r in results}, indent=2, sort_keys=True)


@click.command("verify")
@click.argument("names", nargs=-1)
@click.option("--deep", is_flag=True, help="Re-hash every file instead of trusting unchanged stats.")
@click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE).")
@click.pass_context
def verify_command(ctx: click.Context, names: tuple[str, ...], deep: bool, cache_dir: str | None) -> int:
    """Check the cache's views against the manifests (stat check; --deep re-hashes)."""
    from resolver.maintenance import verify

    settings = settings_of(ctx, cache_dir=cache_dir)
    cat = load_catalog(ctx)
    assert settings.cache_dir is not None
    report = verify(cat, Cache(settings.cache_dir), list(names) or None, deep=deep)
    for line in report.problems:
        click.echo(line)
    click.echo(f"{report.checked} view(s), {report.files} file(s) checked{' (deep)' if deep else ''}: "
               f"{len(report.problems)} problem(s)", err=True)
    return 1 if report.problems else 0


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Print what would be removed.")
@click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE).")
@click.pass_context
def gc_command(ctx: click.Context, dry_run: bool, cache_dir: str | None) -> int:
    """Remove blobs, views and temp files that no manifest references."""
    from resolver.maintenance import gc

    settings = settings_of(ctx, cache_dir=cache_dir)
    cat = load_catalog(ctx)
    assert settings.cache_dir is not None
    result = gc(cat, Cache(settings.cache_dir), dry_run=dry_run)
    for path in result.removed:
        click.echo(f"{'would remove' if dry_run else 'removed'} {path}")
    click.echo(f"{len(result.removed)} item(s), {human_bytes(result.bytes)}{' (dry run)' if dry_run else ''}", err=True)
    return 0


def register(group: click.Group) -> None:
    for command in (resolve_command, verify_command, gc_command):
        group.add_command(command)

