"""`catalog sync`: plan, show, save, apply (registered on the `catalog` group)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from catalog.clikit import human_bytes, load_catalog, settings_of
from catalog.errors import UsageError
from resolver.cache import Cache
from resolver.cli import store_options, transfer_config
from resolver.hub import HubOptions
from resolver.resolve import open_catalog_store
from resolver.stores import S3Store
from resolver.sync import ApplyReport, SourceOfBytes, SyncPlan, apply, make_plan, render_text

DEFAULT_MAX_DELETE = 10


@click.command("sync")
@click.argument("names", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Show the plan; change nothing.")
@click.option("--out", "out_path", type=click.Path(path_type=Path, dir_okay=False), help="Save the plan as JSON; change nothing.")
@click.option("--apply", "apply_path", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Execute exactly a saved plan; refused if the bucket changed since it was made.")
@click.option("--prune", is_flag=True, help="Delete objects under a model's prefix that its manifest does not pin.")
@click.option("--delete-orphans", is_flag=True, help="With --prune: also delete objects under no manifest's prefix.")
@click.option("--max-delete", type=int, default=DEFAULT_MAX_DELETE, show_default=True, help="Abort, deleting nothing, above this many deletions.")
@click.option("--check", is_flag=True, help="Exit 1 on any drift (for a scheduled job); change nothing.")
@click.option("--deep", is_flag=True, help="Download and re-hash what is already in the bucket.")
@click.option("--from-dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Upload from this folder (DIR/<name>/ when present) instead of the Hub.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@store_options
@click.pass_context
def sync_command(
    ctx: click.Context, names: tuple[str, ...], dry_run: bool, out_path: Path | None, apply_path: Path | None, prune: bool,
    delete_orphans: bool, max_delete: int, check: bool, deep: bool, from_dir: Path | None, fmt: str, store: str | None,
    cache_dir: str | None, part_size: str | None, concurrency: int | None,
) -> int:
    """Make the bucket hold exactly what the manifests pin, with a plan you can read first."""
    if delete_orphans and not prune:
        raise UsageError("--delete-orphans needs --prune")
    if apply_path is not None and (names or out_path or dry_run or check):
        raise UsageError("--apply executes a saved plan as it is; give it alone")
    settings = settings_of(ctx, store=store, cache_dir=cache_dir)
    cat = load_catalog(ctx)
    config = transfer_config(part_size, concurrency)
    the_store = open_catalog_store(cat, settings.store, os.environ)
    if isinstance(the_store, S3Store):
        the_store.part_size, the_store.concurrency = config.part_size, config.concurrency
    if apply_path is not None:
        try:
            plan = SyncPlan.from_json(json.loads(apply_path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{apply_path} is not a sync plan: {exc}") from None
        fresh = True
    else:
        for name in names:
            cat.get(name)
        assert settings.cache_dir is not None
        plan = make_plan(cat, names, the_store, prune=prune, delete_orphans=delete_orphans, deep=deep, config=config,
                         cache=Cache(settings.cache_dir))
        fresh = False
    planning_requests = dict(the_store.requests)
    if out_path is not None:
        out_path.write_text(json.dumps(plan.to_json(), indent=2))
    if fmt == "text":
        click.echo(render_text(plan))
    if dry_run or check or out_path is not None:
        if fmt == "json":
            click.echo(json.dumps({"plan": plan.to_json(), "requests": planning_requests}, indent=2))
        return 1 if check and plan.drift else 0
    assert settings.cache_dir is not None
    source = SourceOfBytes(cat, Cache(settings.cache_dir), HubOptions.from_env(os.environ), from_dir, config)
    report = apply(plan, cat, the_store, source, max_delete=max_delete, check_fresh=fresh, config=config)
    _print_report(report, fmt, plan, dict(the_store.requests))
    return 1 if report.errors else 0


def _print_report(report: ApplyReport, fmt: str, plan: SyncPlan, requests: dict[str, int]) -> None:
    if fmt == "json":
        click.echo(json.dumps({
            "plan": plan.to_json(),
            "uploaded": [i.key for i in report.uploaded], "verified": [i.key for i in report.verified],
            "deleted": [i.key for i in report.deleted], "bytes_uploaded": report.bytes,
            "errors": [{"key": i.key, "model": i.model, "path": i.path, "error": str(e)} for i, e in report.errors],
            "requests": requests, "requests_total": sum(requests.values()),
        }, indent=2))
    else:
        click.echo(f"uploaded {len(report.uploaded)} ({human_bytes(report.bytes)}), verified {len(report.verified)}, "
                   f"deleted {len(report.deleted)}, {len(report.errors)} error(s); {sum(requests.values())} requests", err=True)
    for item, error in report.errors:
        click.echo(f"error: {error}", err=True)


def register(group: click.Group) -> None:
    group.add_command(sync_command)
