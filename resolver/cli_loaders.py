"""`catalog check-load`: load models per their load format from the store and check every tensor.

Registered on the `catalog` group by `register(group)`. torch and the loaders are imported only when a
model is actually loaded, so `catalog --help` stays fast.
"""

from __future__ import annotations

import json
import logging
import os

import click

from catalog.clikit import human_bytes, load_catalog, settings_of
from catalog.errors import CatalogError, UsageError
from resolver.cache import Cache
from resolver.cli import source_for_mode, transfer_config
from resolver.hub import HubOptions
from resolver.loaders import LoadReport, check_load
from resolver.resolve import ResolveOptions, open_catalog_store


@click.command("check-load")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every model in the catalog.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--store", metavar="URL", help="Override catalog.yaml's store: s3://bucket/, file:///dir/ or a folder (env CATALOG_STORE).")
@click.option("--cache", "cache_dir", metavar="DIR", help="Cache folder (env CATALOG_CACHE; default ~/.cache/model-catalog).")
@click.pass_context
def check_load_command(ctx: click.Context, names: tuple[str, ...], all_models: bool, fmt: str, store: str | None,
                       cache_dir: str | None) -> int:
    """Load models the way their load format says (streamed from the store where it streams) and check every
    tensor: dtype and shape against the file header, bytes against the pin, tensorizer against safetensors."""
    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    # runai logs every load at INFO from Python and C++: follow -v instead, never below INFO (its debug log
    # names credentials); RUNAI_STREAMER_LOG_LEVEL set by the user still wins.
    level = max(logging.getLogger("resolver").getEffectiveLevel(), logging.INFO)
    os.environ.setdefault("RUNAI_STREAMER_LOG_LEVEL", logging.getLevelName(level))
    settings = settings_of(ctx, store=store, cache_dir=cache_dir)
    # The whole catalog, not just NAMES: a tensorizer model is compared with the safetensors model that
    # pins the same repo and revision.
    cat = load_catalog(ctx)
    selected = [m.name for m in cat.filter()] if all_models else list(names)
    for name in selected:
        cat.get(name)  # unknown names fail before anything loads
    assert settings.cache_dir is not None
    cache = Cache(settings.cache_dir)
    the_store = open_catalog_store(cat, settings.store, os.environ)
    source, offline = source_for_mode(None, os.environ.get("CATALOG_MODE"))
    options = ResolveOptions(offline=offline, source=source, transfer=transfer_config(None, None),
                             hub=HubOptions.from_env(os.environ))
    reports: list[LoadReport] = []
    for name in selected:
        try:
            reports.append(check_load(cat, name, store=the_store, cache=cache, env=os.environ, options=options))
        except CatalogError as exc:
            # One model's failure is that model's problem: --all goes on and reports every model.
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            reports.append(LoadReport(name, cat.get(name).load_format, problems=[exc.message + hint]))
    if fmt == "json":
        data = [r.to_json() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        for report in reports:
            click.echo(render_line(report))
            for problem in report.problems:
                click.echo(f"  - {problem}")
    failed = sum(1 for r in reports if not r.ok)
    click.echo(f"{len(reports)} model(s) loaded: {failed} with problems", err=True)
    return 1 if failed else 0


def render_line(report: LoadReport) -> str:
    status = "ok  " if report.ok else "FAIL"
    if not report.tensors:
        return f"{status} {report.name} ({report.load_format.value})"
    compared = f", equal to {report.compared_with}" if report.compared_with and report.ok else ""
    return (f"{status} {report.name} ({report.load_format.value}): {report.tensors} tensors, {human_bytes(report.bytes)} "
            f"in {report.seconds:.3f} s ({report.throughput_mib_s:.1f} MiB/s) from {report.uri}{compared}")


def register(group: click.Group) -> None:
    group.add_command(check_load_command)
