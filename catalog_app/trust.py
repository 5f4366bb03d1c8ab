"""The trust options shared by the commands that check signatures (resolve, verify)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def trust_options(command: F) -> F:
    """--trusted-key, --trusted-root, --trusted-identity, --trusted-log-key (repeatable): any of them given replaces
    catalog.yaml's trust entirely and requires signatures."""
    for option in reversed([
        click.option("--trusted-key", "trusted_keys", multiple=True, metavar="PUB_PEM",
                     help="A PEM file of public keys whose signatures are trusted, every key in it (repeatable; env "
                          "CATALOG_TRUSTED_KEYS, ':'-separated). Any --trusted-* given replaces catalog.yaml's trust and "
                          "requires signatures."),
        click.option("--trusted-root", "trusted_roots", multiple=True, metavar="CA_PEM",
                     help="A CA certificate (PEM) a signing certificate must chain to (repeatable; env "
                          "CATALOG_TRUSTED_ROOTS)."),
        click.option("--trusted-identity", "trusted_identities", multiple=True, metavar="IDENTITY|ISSUER",
                     help="Who may sign with a certificate: a name it carries (subject DN, email, URI) and its OIDC "
                          "issuer (repeatable; env CATALOG_TRUSTED_IDENTITIES, one per line)."),
        click.option("--trusted-log-key", "trusted_log_keys", multiple=True, metavar="PUB_PEM",
                     help="A transparency log's public key (PEM): a bundle's log entries are checked with it "
                          "(repeatable; env CATALOG_TRUSTED_LOG_KEYS)."),
    ]):
        command = option(command)
    return command
