"""`catalog lock`, `catalog add`, `catalog tensorize`: pinning models."""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from catalog.errors import InvalidCatalogError, UnknownModelError, UsageError
from catalog.loading import load_dir
from catalog.rules import LOCK_FIXES
from catalog.schema import ModelManifest
from catalog_app.context import Invocation, cache_option, invocation
from resolver.hub import HubOptions
from resolver.lock import LockResult, diff_files, lock_manifest
from resolver.stores import Store


def lockable(root: Path, names: list[str] | None) -> list[tuple[ModelManifest, Path]]:
    """Manifests to lock: parseable, with no problems other than those that locking fixes."""
    result = load_dir(root)
    docs = [d for d in result.docs if d.manifest is not None]
    by_name = {d.manifest.name: d for d in docs if d.manifest is not None}
    chosen = [by_name[n] for n in names if n in by_name] if names else docs
    unknown = [n for n in names or [] if n not in by_name]
    if unknown:
        raise UnknownModelError(unknown[0], difflib.get_close_matches(unknown[0], list(by_name), n=3, cutoff=0.5))
    blocking = [p for p in result.problems if p.rule not in LOCK_FIXES and any(p.path == d.display for d in chosen)]
    if blocking:
        raise InvalidCatalogError(blocking)
    return [(d.manifest, d.path) for d in chosen if d.manifest is not None]


@click.command("lock")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every manifest in the catalog.")
@click.option(
    "--from-dir", type=click.Path(path_type=Path, file_okay=False), help="Pin from a local folder instead of the Hub."
)
@click.option("--check", is_flag=True, help="Change nothing; exit 1 if the pinned files differ from the source.")
@click.option(
    "--from-store", is_flag=True, help="Keep the pins; read the safetensors headers from the store's verified copies."
)
@click.option("--store", metavar="URL", help="With --from-store: override catalog.yaml's store (env CATALOG_STORE).")
@click.option(
    "--tensor-digests",
    is_flag=True,
    help="Also pin every tensor's sha256 (what --load-format catalog checks): reads every weight byte, verified "
    "against the pins on the way, from the cache, the tiers, the store or the Hub as resolve would (a lock "
    "--from-dir always pins them).",
)
@click.option(
    "--cache", "cache_dir", metavar="DIR", help="With --tensor-digests: the cache the weights are verified into."
)
@click.pass_context
def lock_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    from_dir: Path | None,
    check: bool,
    from_store: bool,
    store: str | None,
    tensor_digests: bool,
    cache_dir: str | None,
) -> int:
    """Fill in `files` (path, size, sha256, safetensors headers) from the Hub at the pinned revision, or from a folder."""
    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    if from_store and from_dir is not None:
        raise UsageError("--from-store and --from-dir are two sources; pass one")
    if store is not None and not (from_store or tensor_digests):
        raise UsageError("--store names the store --from-store reads headers from; pass --from-store too")
    if tensor_digests and check:
        raise UsageError("--tensor-digests writes what it reads; --check changes nothing", hint="pass one of them")
    inv = invocation(ctx, store=store, cache_dir=cache_dir)
    hub = HubOptions.from_settings(inv.settings)
    bucket = _store(inv) if from_store else None
    drift = failed = False
    for manifest, path in lockable(inv.settings.find_catalog_dir(), list(names) or None):
        try:
            folder = _model_dir(from_dir, manifest.name, single=len(names) == 1)
            result: LockResult = lock_manifest(
                manifest,
                path,
                from_dir=folder,
                hub=hub,
                write=not check,
                store=(bucket[0], manifest.s3_prefix[len(bucket[1]) :]) if bucket else None,
            )
            if tensor_digests and folder is None:
                result = _with_tensor_digests(inv, manifest.name, path, result)
        except UsageError as exc:
            if not all_models:
                raise
            failed = True  # --all goes on and reports every manifest it could not lock
            click.echo(f"error: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else ""), err=True)
            continue
        if not result.changed:
            recorded = "; recorded headers and Hub ids it lacked" if result.records_changed and not check else ""
            click.echo(f"{result.name}: up to date ({len(result.new)} files{recorded})", err=True)
            continue
        drift = True
        verb = "differs from the source" if check else f"locked {len(result.new)} files into {path.name}"
        click.echo(f"{result.name}: {verb}", err=True)
        for line in diff_files(result.old, result.new):
            click.echo(f"  {line}")
    return 1 if failed or (check and drift) else 0


def _with_tensor_digests(inv: Invocation, name: str, path: Path, first: LockResult) -> LockResult:
    """Lock `name` again from a folder of its verified bytes: resolved with its weights (every byte hashed against the
    pins just written, from wherever resolve takes them), then pinned as `--from-dir` pins, tensor digests included.
    The pins cannot change on the way (the same bytes); `first` stays the answer about them."""
    from catalog.lookup import load
    from resolver.resolve import ResolveOptions, resolve
    from resolver.stores import open_catalog_store

    current = inv.settings
    # The manifest as the lock above just wrote it (not the invocation's catalog, read before): its store is bound
    # to that catalog, and the pre-flight (signatures, capacity) is the resolve's own, for this one model.
    cat = load(current.find_catalog_dir(), only=[name])
    options = ResolveOptions.from_settings(current, cat, materialize_weights=True)
    resolved = resolve(cat, name, cache=inv.cache, store=open_catalog_store(cat, current), options=options)
    again = lock_manifest(
        cat.get(name), path, from_dir=resolved.path, hub=HubOptions.from_settings(current), write=True
    )
    return LockResult(first.name, first.manifest_path, first.old, again.new, again.tables)


def _model_dir(from_dir: Path | None, name: str, *, single: bool) -> Path | None:
    """--from-dir means what it means for sync: DIR/<name>/ when present, else (one model) DIR itself."""
    if from_dir is None or (from_dir / name).is_dir():
        return from_dir / name if from_dir is not None else None
    if single:
        return from_dir
    raise UsageError(
        f"{name}: no folder {from_dir / name} to lock it from",
        hint="with several models, --from-dir DIR reads each one's files from DIR/<name>/",
    )


def _store(inv: Invocation) -> tuple[Store, str]:
    """The store and the root its prefixes are relative to (catalog.yaml's `store`); the catalog's manifests are what
    lock fills in, so only catalog.yaml is read."""
    from resolver.stores import open_store

    current = inv.settings
    catalog_settings = load_dir(current.find_catalog_dir()).settings
    if catalog_settings is None:
        raise UsageError(
            f"{current.find_catalog_dir()}/catalog.yaml is missing or invalid", hint="run `catalog validate`"
        )
    return open_store(current.store or catalog_settings.store, current), catalog_settings.store


@click.command("add")
@click.argument("repo")
@click.option(
    "--revision", default="main", show_default=True, help="A branch, tag or commit; turned into its commit now."
)
@click.option("--name", help="Logical name (default: from the repo name).")
@click.option("--load-format", help="Default: safetensors when the repo has safetensors weights.")
@click.option("--gpu", "gpu_class", metavar="CLASS", help="GPU class (default: the catalog's default).")
@click.option(
    "--from-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Pin the files of this folder (no Hub request; --revision must be the full commit they were taken from).",
)
@click.pass_context
def add_command(
    ctx: click.Context,
    repo: str,
    revision: str,
    name: str | None,
    load_format: str | None,
    gpu_class: str | None,
    from_dir: Path | None,
) -> int:
    """Scaffold and lock a manifest for a Hub repo (or a folder of its files): one command, one file for the PR."""
    from resolver.add import add_model

    inv = invocation(ctx)
    hub = HubOptions.from_settings(inv.settings)
    root = inv.settings.find_catalog_dir()
    catalog_settings = load_dir(root).settings
    if catalog_settings is None:
        raise UsageError(f"{root}/catalog.yaml is missing or invalid", hint="run `catalog validate`")
    new = add_model(
        repo,
        revision,
        name=name,
        load_format=load_format,
        gpu=gpu_class,
        settings=catalog_settings,
        catalog_dir=root,
        hub=hub,
        from_dir=from_dir,
    )
    problems = load_dir(root, [new.path]).problems
    for problem in problems:
        click.echo(f"{problem}  [{problem.rule}]")
    click.echo(f"added {new.path} ({repo}@{new.revision}); review it and open a PR", err=True)
    return 1 if problems else 0


@click.command("tensorize")
@click.argument("name")
@click.option(
    "--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Folder to write model.tensors into."
)
@click.option("--store", metavar="URL", help="Override the catalog's store.")
@cache_option
@click.pass_context
def tensorize_command(ctx: click.Context, name: str, out: Path, store: str | None, cache_dir: str | None) -> int:
    """Write a byte-deterministic model.tensors from a model's safetensors (needs the loaders extra)."""
    from resolver.tensorize import tensorize

    inv = invocation(ctx, store=store, cache_dir=cache_dir)  # the whole catalog: the safetensors and tensorizer
    # manifests of one repo and revision pair up
    target = tensorize(inv.catalog, name, out, cache=inv.cache, store=inv.store, options=inv.options())
    click.echo(str(target))
    return 0


COMMANDS = (lock_command, add_command, tensorize_command)
