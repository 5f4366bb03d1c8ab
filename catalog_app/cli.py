"""The `catalog` command group: global options, logging, and every command registered in one place."""

from __future__ import annotations

import logging
import sys

import click

from catalog_app.commands import catalog as catalog_commands
from catalog_app.commands import adopt, check_load, pin, publish, resolve, sign, sync


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="model-catalog", prog_name="catalog")
@click.option("--catalog", "catalog_dir", metavar="DIR", help="The manifests folder (env CATALOG_DIR; default: nearest manifests/ upward).")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug and tracebacks).")
@click.pass_context
def cli(ctx: click.Context, catalog_dir: str | None, verbose: int) -> None:
    """Pinned, verified CI models: validate manifests, resolve, sync and check them."""
    # Only our own loggers get more verbose: botocore's and httpx's debug logs print request headers,
    # which carry signatures and session tokens.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in ("catalog", "resolver", "catalog_app"):
        logging.getLogger(name).setLevel(logging.WARNING - 10 * min(verbose, 2))
    root = ctx.ensure_object(dict)
    root["catalog_dir"] = catalog_dir
    root["verbose"] = verbose


for module in (catalog_commands, resolve, pin, sync, check_load, publish, sign, adopt):
    for command in module.COMMANDS:
        cli.add_command(command)
