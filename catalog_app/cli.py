"""The `catalog` command group: global options, logging, and every command registered in one place."""

from __future__ import annotations

import logging
import sys

import click

from catalog_app import redaction
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines(with_logger=verbose > 0))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    redaction.install()
    for name in ("catalog", "resolver", "catalog_app"):
        logging.getLogger(name).setLevel(logging.WARNING - 10 * min(verbose, 2))
    root = ctx.ensure_object(dict)
    root["catalog_dir"] = catalog_dir
    root["verbose"] = verbose


class _Lines(logging.Formatter):
    """Log lines in the CLI's own voice, beside its `error:` and `hint:` lines: `warning: ...`; with -v the logger
    that said it too (`info resolver.resolve: ...`)."""

    def __init__(self, with_logger: bool) -> None:
        super().__init__()
        self.with_logger = with_logger

    def format(self, record: logging.LogRecord) -> str:
        where = f" {record.name}" if self.with_logger else ""
        text = f"{record.levelname.lower()}{where}: {record.getMessage()}"
        return text + ("\n" + self.formatException(record.exc_info) if record.exc_info else "")


for module in (catalog_commands, resolve, pin, sync, check_load, publish, sign, adopt):
    for command in module.COMMANDS:
        cli.add_command(command)
