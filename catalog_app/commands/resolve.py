"""`catalog resolve`, `verify`, `gc`: the cache side. Heavy imports (boto3) happen inside the store, only when
bytes must move."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import click

from catalog import front_door
from catalog.errors import UsageError
from catalog.settings import PREFER
from catalog_app import outputs, warm
from catalog_app.context import cache_option, invocation
from catalog_app.machine import detect_machine
from catalog_app.options import declared_by
from catalog_app.progress import for_terminal, human_bytes, plural
from catalog_app.trust import trust_options
from resolver.cache import cache_error
from resolver.profiles import with_profile
from resolver.resolution import Resolution
from resolver.resolve import Source, command_in_use, resolve, snapshot_owners
from resolver.views import Layout

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.settings import Settings

log = logging.getLogger("catalog.resolve")


@click.command("resolve")
@click.argument("names", nargs=-1)
@declared_by(
    front_door.RESOLVE,
    choices={
        "--format": outputs.FORMATS,
        "--layout": [layout.value for layout in Layout],
        "--prefer": PREFER,
        "--source": [x.value for x in Source],
    },
)
@click.pass_context
def resolve_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    fmt: str,
    layout: str,
    materialize_weights: bool,
    offline: bool,
    prefer: str | None,
    source: str | None,
    verify_stream: str,
    shared_caches: tuple[str, ...],
    mirrors: tuple[str, ...],
    require_signature: bool,
    trusted_keys: tuple[str, ...],
    trusted_roots: tuple[str, ...],
    trusted_identities: tuple[str, ...],
    trusted_log_keys: tuple[str, ...],
    store: str | None,
    cache_dir: str | None,
    part_size: str | None,
    concurrency: int | None,
) -> int:
    """Materialize verified models and print where they are."""
    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    if fmt in outputs.ONE_MODEL_FORMATS and len(names) > 1:
        raise UsageError(f"--format {fmt} prints one model; use --format path or json for several")
    # The hf-cache layout decides which manifest answers for a repo id from every manifest pinning it.
    inv = invocation(
        ctx,
        only=None if all_models or layout == Layout.HF_CACHE.value else names,
        store=store,
        cache_dir=cache_dir,
        part_size=part_size,
        concurrency=concurrency,
        source=source,
        offline=offline or None,
        shared_caches=shared_caches or None,
        mirrors=mirrors or None,
        require_signature=require_signature or None,
        trusted_keys=trusted_keys or None,
        trusted_roots=trusted_roots or None,
        trusted_identities=trusted_identities or None,
        trusted_log_keys=trusted_log_keys or None,
        prefer=prefer,
    )
    current, cat, cache = inv.settings, inv.catalog, inv.cache
    options = inv.options(layout=Layout(layout), materialize_weights=materialize_weights, verify_stream=verify_stream)
    selected = [m.name for m in cat.filter()] if all_models else list(names)
    for name in selected:
        cat.get(name)  # unknown names fail before any download
    if fmt == "vllm-args" and not cat.get(selected[0]).load_format.spec.engine:
        name = selected[0]
        raise UsageError(
            f"--format vllm-args: {name} is a {cat.get(name).load_format.value}: no engine loads it, so it "
            "has no engine arguments; use --format path or json"
        )
    if all_models and layout == Layout.HF_CACHE.value:
        selected, others = snapshot_owners(cat, selected)
        if others:
            log.warning(
                "not in the hf-cache layout (their repo ids load another manifest's files; resolve them by "
                "name with --layout dir): %s",
                ", ".join(others),
            )
    # The engine profile of this runner's class (CATALOG_GPU_CLASS, else detected), asked only when one could apply.
    gpu_class = detect_machine(cat.settings, current).gpu_class if any(cat.get(n).profiles for n in selected) else None
    # ... and unsigned ones, or ones that cannot fit together: the signature gate and the capacity check, once for all
    cleared = inv.preflight(selected, options)
    progress = for_terminal(sum(m.total_bytes for m in (cat.get(n) for n in selected)))
    began = time.time()  # no proof of a streamed object made below is older (the warm index bounds its age)
    results: list[Resolution] = []
    try:
        with command_in_use(cat, cleared, cache):  # resolving the next never evicts the ones before
            for name in selected:
                started = time.perf_counter()
                result = with_profile(
                    resolve(
                        cat, name, cache=cache, store=inv.store, options=options, progress=progress, cleared=cleared
                    ),
                    cat.get(name),
                    gpu_class,
                )
                log.info("resolved %s from %s in %.3fs", name, result.source, time.perf_counter() - started)
                results.append(result)
    finally:
        progress.finish()
    try:
        several = all_models or len(selected) > 1
        text = (
            outputs.render(results, fmt, several=several)
            if fmt in outputs.OUTPUTS
            else _bill(
                fmt,
                cat,
                results,
                current,
                {
                    "names": selected,
                    "all": all_models,
                    "layout": layout,
                    "materialize_weights": materialize_weights,
                    "source": current.source,
                    "offline": current.offline,
                },
            )
        )
    except outputs.OutputError as exc:
        raise UsageError(str(exc)) from None
    click.echo(text, nl=False)
    if not all_models:
        inputs = [
            cat.root / "catalog.yaml",
            *cat.sources.values(),
            *cleared.relied,
        ]  # the warm answer re-hashes them all
        streamed_weights = [
            cache.blob_path(e.sha256) for r in results if r.streams for e in cat.get(r.name).weight_files
        ]
        argv = ctx.find_root().ensure_object(dict).get("argv")
        if argv is not None:  # the call as typed: the warm path keys its answer by exactly that
            warm.record(argv, current, inputs, results, local_when=streamed_weights, proved_at=began)
    return 0


def _bill(fmt: str, cat: Catalog, results: list[Resolution], current: Settings, request: dict[str, object]) -> str:
    from catalog_app import bom

    return bom.render(fmt, bom.facts(cat, results, current), request)


@click.command("verify")
@click.argument("names", nargs=-1)
@click.option("--deep", is_flag=True, help="Re-hash every file instead of trusting unchanged stats.")
@click.option(
    "--signatures",
    "check_signatures",
    is_flag=True,
    help="Also check each view against its model's signature: signed by a trusted key or root, naming "
    "exactly the pins, and the view's files are the signed ones.",
)
@trust_options
@cache_option
@click.pass_context
def verify_command(
    ctx: click.Context,
    names: tuple[str, ...],
    deep: bool,
    check_signatures: bool,
    trusted_keys: tuple[str, ...],
    trusted_roots: tuple[str, ...],
    trusted_identities: tuple[str, ...],
    trusted_log_keys: tuple[str, ...],
    cache_dir: str | None,
) -> int:
    """Check the cache's views against the manifests (stat check; --deep re-hashes; --signatures against the
    models' signatures)."""
    from resolver.maintenance import verify

    inv = invocation(
        ctx,
        cache_dir=cache_dir,
        trusted_keys=trusted_keys or None,
        trusted_roots=trusted_roots or None,
        trusted_identities=trusted_identities or None,
        trusted_log_keys=trusted_log_keys or None,
    )
    cat, cache = inv.catalog, inv.cache
    anchors = inv.anchors if check_signatures else None
    try:
        report = verify(cat, cache, list(names) or None, deep=deep, anchors=anchors)
    except OSError as exc:
        raise cache_error(cache, exc) from None
    for line in report.problems:
        click.echo(line)
    click.echo(
        f"{report.checked} view(s), {report.files} file(s) checked{' (deep)' if deep else ''}"
        f"{' against signatures' if check_signatures else ''}: "
        f"{len(report.problems)} problem(s)",
        err=True,
    )
    return 1 if report.problems else 0


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="Print what would be removed.")
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Then evict whole views, least recently resolved first, and the blobs "
    "they alone use, until the cache holds at most SIZE (e.g. 200GiB).",
)
@click.option("--keep-free", metavar="SIZE", help="Then evict the same way until the cache's disk has SIZE free.")
@click.option(
    "--all-catalogs",
    is_flag=True,
    help="Also remove views that other catalogs (other checkouts sharing this "
    "cache) made and this catalog does not reference.",
)
@cache_option
@click.pass_context
def gc_command(
    ctx: click.Context,
    dry_run: bool,
    max_size: str | None,
    keep_free: str | None,
    all_catalogs: bool,
    cache_dir: str | None,
) -> int:
    """Remove what no manifest references (blobs, views, markers), what dead writers left (temp and staging
    files, idle locks), and stale warm-index and sync-state entries; with --max-size / --keep-free, then evict
    least recently resolved views (never one a running resolve uses). Views another catalog made are kept
    (the default cache is shared by every checkout) unless --all-catalogs."""
    from catalog.settings import parse_size
    from resolver.capacity import evict
    from resolver.maintenance import gc
    from resolver.publish import refuse_tier

    limit = parse_size(max_size, "--max-size") if max_size is not None else None
    free = parse_size(keep_free, "--keep-free") if keep_free is not None else None
    inv = invocation(ctx, cache_dir=cache_dir)
    cat, cache = inv.catalog, inv.cache
    refuse_tier(cache)
    unmet = ""
    evicted: list[str] = []
    try:
        result = gc(cat, cache, dry_run=dry_run, all_catalogs=all_catalogs)
        removed, freed = list(result.removed), result.bytes
        if limit is not None or free is not None:
            eviction = evict(cache, max_size=limit, keep_free=free, dry_run=dry_run)
            removed += eviction.removed
            freed += eviction.bytes
            unmet = eviction.unmet
            evicted = [v.split(" ")[0] for v in eviction.views]
            for view in eviction.kept_in_use:
                log.warning("kept %s: a running resolve uses it", view)
    except OSError as exc:
        raise cache_error(cache, exc) from None
    for path in removed:
        click.echo(f"{'would remove' if dry_run else 'removed'} {path}")
    if evicted:
        click.echo(
            f"{'would evict' if dry_run else 'evicted'} {plural(len(evicted), 'view')}, least recently resolved "
            f"first: {', '.join(evicted)}",
            err=True,
        )
    click.echo(f"{plural(len(removed), 'item')}, {human_bytes(freed)}{' (dry run)' if dry_run else ''}", err=True)
    if unmet:
        click.echo(f"error: {unmet}", err=True)
        return 1
    return 0


COMMANDS = (resolve_command, verify_command, gc_command)
