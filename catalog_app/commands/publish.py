"""`catalog publish`: fill a read-only shared cache tier from the store (for a publisher job, not runners)."""

from __future__ import annotations

from pathlib import Path

import click

from catalog.errors import UsageError
from catalog_app.context import invocation, store_options
from catalog_app.progress import for_terminal, human_bytes, plural
from resolver.publish import clean_tier, publish, verify_tier
from resolver.transfer import TransferConfig


@click.command("publish")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every model in the catalog.")
@click.option(
    "--to",
    "tier",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The tier folder (blobs/<aa>/<sha256>, as a cache); runners read it with --shared-cache DIR.",
)
@click.option("--deep", is_flag=True, help="Re-hash blobs already in the tier and replace wrong ones.")
@click.option(
    "--check",
    is_flag=True,
    help="Afterwards re-hash every blob of the selected models in the tier; exit 1 on a problem.",
)
@click.option(
    "--clean",
    is_flag=True,
    help="First remove temp files killed publishers left in the tier (none a running "
    "publisher holds; never a blob). Alone, only that.",
)
@store_options
@click.pass_context
def publish_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    tier: Path,
    deep: bool,
    check: bool,
    clean: bool,
    store: str | None,
    cache_dir: str | None,
    part_size: str | None,
    concurrency: int | None,
) -> int:
    """Copy the selected models' files from the store into a shared tier, verified, each blob atomically
    (temp + rename in the tier; no lock, so concurrent publishers are safe)."""
    if names and all_models:
        raise UsageError("name one or more models, or pass --all")
    if clean:
        removed = clean_tier(tier)
        for path in removed:
            click.echo(f"removed {path}")
        # Said also when nothing was left: silence would not tell a clean tier from a clean that did not run.
        click.echo(
            f"cleaned {tier}: removed {plural(len(removed), 'temp file')} that killed publishers left"
            if tier.is_dir()
            else f"nothing to clean: {tier} is no folder",
            err=True,
        )
        if not names and not all_models:
            return 0
    if not names and not all_models:
        raise UsageError("name one or more models, or pass --all")
    inv = invocation(
        ctx,
        only=None if all_models else names,
        store=store,
        cache_dir=cache_dir,
        part_size=part_size,
        concurrency=concurrency,
    )
    current, cat = inv.settings, inv.catalog
    selected = [m.name for m in cat.filter()] if all_models else list(names)
    for name in selected:
        cat.get(name)
    progress = for_terminal(sum(cat.get(n).total_bytes for n in selected))
    try:
        report = publish(
            cat, selected, inv.store, tier, config=TransferConfig.from_settings(current), deep=deep, progress=progress
        )
    finally:
        progress.finish()
    click.echo(
        f"published {len(report.published)} file(s), {human_bytes(report.bytes)}; "
        f"{len(report.present)} already in {tier}",
        err=True,
    )
    if check:
        result = verify_tier(cat, selected, tier)
        for line in result.problems:
            click.echo(line)
        click.echo(f"{result.checked} blob(s) checked in {tier}: {len(result.problems)} problem(s)", err=True)
        return 1 if result.problems else 0
    return 0


COMMANDS = (publish_command,)
