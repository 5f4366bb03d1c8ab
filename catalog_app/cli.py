"""The `catalog` command group: global options, logging, and every command registered in one place."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping

import click

from catalog import __version__, front_door
from catalog_app import redaction
from catalog_app.options import declared_by

# Every command, by the module under catalog_app.commands that defines it (its COMMANDS; a test holds the two equal).
COMMAND_MODULES = {
    "validate": "catalog",
    "list": "catalog",
    "show": "catalog",
    "matrix": "catalog",
    "schema": "catalog",
    "resolve": "resolve",
    "verify": "resolve",
    "gc": "resolve",
    "lock": "pin",
    "add": "pin",
    "tensorize": "pin",
    "sync": "sync",
    "check-load": "check_load",
    "publish": "publish",
    "sign": "sign",
    "import": "adopt",
    "audit-upstream": "adopt",
    "derived": "derived",
}


class _LazyGroup(click.Group):
    """Imports a command's module when that command runs (or when help lists every command), not at start-up: what
    the other modules import (the Hub client, the OCI store, the loaders' checks) cost a sync or a cold resolve
    about 0.1 s of CPU before its first request."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            self.load(COMMAND_MODULES[cmd_name])
        return super().get_command(ctx, cmd_name)

    def load(self, module_name: str) -> None:
        module = importlib.import_module(f"catalog_app.commands.{module_name}")
        for command in module.COMMANDS:
            self.commands.setdefault(str(command.name), command)

    def load_all(self) -> Mapping[str, click.Command]:
        """Every command, loaded (what generates the docs walks them all)."""
        for module_name in sorted(set(COMMAND_MODULES.values())):
            self.load(module_name)
        return self.commands


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
# The package's own __version__, not the installed metadata (stale in an editable install until it is reinstalled).
@click.version_option(version=__version__, prog_name="catalog")
@declared_by(front_door.GROUP)
@click.pass_context
def cli(ctx: click.Context, catalog_dir: str | None, verbose: int) -> None:
    """Pinned, verified CI models: validate manifests, resolve, sync and check them."""
    # Only our own loggers get more verbose: botocore's and httpx's debug logs print request headers,
    # which carry signatures and session tokens.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines(with_logger=verbose > 0))
    handler.addFilter(_Said())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    redaction.install()
    for name in ("catalog", "resolver", "catalog_app"):
        logging.getLogger(name).setLevel(logging.WARNING - 10 * min(verbose, 2))
    root = ctx.ensure_object(dict)
    root["catalog_dir"] = catalog_dir
    root["verbose"] = verbose


class _Said(logging.Filter):
    """Counts the warnings this process printed: the warm path never records a call that said one (catalog_app/warm_sync.py),
    since its answer could not say it again."""

    count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            _Said.count += 1
        return True


def warnings_said() -> int:
    return _Said.count


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
