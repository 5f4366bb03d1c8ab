"""`catalog derived restore|publish|key`: derived artifacts (vLLM's compile cache) keyed, stored and verified like pins.

    eval "$(catalog derived restore tiny-llama --engine-cache DIR --format env -- --dtype float32 --max-model-len 64)"
    vllm serve ... (the same engine arguments; the exported VLLM_CACHE_ROOT and the rest in its environment)
    catalog derived publish tiny-llama --engine-cache DIR

The engine arguments after `--` are those the engine gets (`resolve --format vllm-args` and your own); the key keeps
the ones that can change the artifact (docs/derived.md).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from catalog import derived as derived_core
from catalog_app.context import invocation, store_options
from catalog_app.progress import human_bytes
from resolver import derived
from resolver.transfer import TransferConfig

KIND_OPTION = click.option(
    "--kind",
    "kind_name",
    type=click.Choice(sorted(derived_core.KINDS)),
    default="vllm-compile",
    show_default=True,
    help="What kind of derived artifact.",
)
ENGINE_CACHE_OPTION = click.option(
    "--engine-cache",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The engine's cache folder (VLLM_CACHE_ROOT for vllm-compile): restore writes verified files there and "
    "exports it; publish reads what the engine left there.",
)


@click.group("derived")
def derived_group() -> None:
    """Derived artifacts (an engine's compile cache): restore a verified copy before a run, publish one after."""


@derived_group.command("restore")
@click.argument("name")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
@KIND_OPTION
@ENGINE_CACHE_OPTION
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "env"]),
    default="text",
    show_default=True,
    help="env: `export` lines of the engine's environment (its cache folders) and CATALOG_DERIVED_KEY/_HIT.",
)
@click.option("--offline", is_flag=True, help="The cache and the shared tiers only.")
@click.option(
    "--shared-cache",
    "shared_caches",
    multiple=True,
    metavar="DIR",
    help="A read-only shared cache tier consulted by sha256 first (repeatable; env CATALOG_SHARED_CACHE).",
)
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="URL",
    help="A store tried for the files' bytes before the primary (repeatable; env CATALOG_MIRRORS); the record "
    "itself is read from the primary store only.",
)
@store_options
@click.pass_context
def restore_command(
    ctx: click.Context,
    name: str,
    engine_args: tuple[str, ...],
    kind_name: str,
    engine_cache: Path,
    fmt: str,
    offline: bool,
    shared_caches: tuple[str, ...],
    mirrors: tuple[str, ...],
    store: str | None,
    cache_dir: str | None,
    part_size: str | None,
    concurrency: int | None,
) -> int:
    """Before a run: restore the verified entry for NAME served with ENGINE_ARGS (after `--`) into the engine's cache
    folder. Nothing stored under the key is a plain miss (exit 0): the engine compiles and `publish` stores it."""
    inv = invocation(
        ctx,
        only=[name],
        store=store,
        cache_dir=cache_dir,
        part_size=part_size,
        concurrency=concurrency,
        offline=offline or None,
        shared_caches=shared_caches or None,
        mirrors=mirrors or None,
    )
    the_kind = derived_core.kind(kind_name)
    report = derived.restore(
        inv.catalog,
        name,
        the_kind,
        engine_args,
        engine_cache,
        cache=inv.cache,
        store=inv.store,
        options=inv.options(),
        env=inv.settings.engine_env,
        probe=derived.Probe.here(the_kind),
    )
    said = (
        f"{name} ({kind_name}): restored {report.restored} file(s), {human_bytes(report.bytes)}"
        f"{f' ({report.present} already there)' if report.present else ''} from {report.source} into {engine_cache}"
        if report.hit
        else f"{name} ({kind_name}): no entry restored ({report.reason}); the engine compiles"
    )
    click.echo(f"{said} [key {report.key[:16]}]", err=True)
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    elif fmt == "env":
        exported = {**report.env, "CATALOG_DERIVED_KEY": report.key, "CATALOG_DERIVED_HIT": "1" if report.hit else "0"}
        click.echo("\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(exported.items())))
    else:
        click.echo(str(report.engine_cache))
    return 0


@derived_group.command("publish")
@click.argument("name")
@KIND_OPTION
@ENGINE_CACHE_OPTION
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@store_options
@click.pass_context
def publish_command(
    ctx: click.Context,
    name: str,
    kind_name: str,
    engine_cache: Path,
    fmt: str,
    store: str | None,
    cache_dir: str | None,
    part_size: str | None,
    concurrency: int | None,
) -> int:
    """After a run: store what the engine left in its cache folder as the entry for the key `restore` prepared the
    folder for (its engine arguments are read from there). Content-addressed blobs first, the record last."""
    inv = invocation(ctx, only=[name], store=store, cache_dir=cache_dir, part_size=part_size, concurrency=concurrency)
    the_kind = derived_core.kind(kind_name)
    report = derived.publish(
        inv.catalog,
        name,
        the_kind,
        engine_cache,
        cache=inv.cache,
        store=inv.store,
        env=inv.settings.engine_env,
        probe=derived.Probe.here(the_kind),
        config=TransferConfig.from_settings(inv.settings),
    )
    said = (
        f"{name} ({kind_name}): published {report.files} file(s), {human_bytes(report.bytes)} "
        f"({report.uploaded} uploaded, the rest stored already)"
        if report.published
        else f"{name} ({kind_name}): nothing published: {report.reason}"
    )
    click.echo(f"{said} [key {report.key[:16]}]", err=True)
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    return 0


@derived_group.command("key")
@click.argument("name")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
@KIND_OPTION
@click.pass_context
def key_command(ctx: click.Context, name: str, engine_args: tuple[str, ...], kind_name: str) -> int:
    """Print the key of NAME served with ENGINE_ARGS on this machine, and every input it is computed from (JSON)."""
    inv = invocation(ctx, only=[name])
    current, cat = inv.settings, inv.catalog
    the_kind = derived_core.kind(kind_name)
    inputs = derived.key_inputs(cat.get(name), the_kind, engine_args, current.engine_env, derived.Probe.here(the_kind))
    click.echo(json.dumps({"key": inputs.key(), "inputs": inputs.to_json()}, indent=2))
    return 0


COMMANDS = (derived_group,)
