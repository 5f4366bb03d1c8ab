"""The trust options shared by the commands that check signatures (resolve, verify)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def trust_options(command: F) -> F:
    """--trusted-key and --trusted-root (repeatable): given, they replace catalog.yaml's anchors."""
    for option in reversed([
        click.option("--trusted-key", "trusted_keys", multiple=True, metavar="PUB_PEM",
                     help="A public key (PEM) whose signatures are trusted (repeatable; env CATALOG_TRUSTED_KEYS, "
                          "':'-separated). Given, the keys and roots named here replace catalog.yaml's."),
        click.option("--trusted-root", "trusted_roots", multiple=True, metavar="CA_PEM",
                     help="A CA certificate (PEM) a signing certificate must chain to (repeatable; env "
                          "CATALOG_TRUSTED_ROOTS)."),
    ]):
        command = option(command)
    return command
