"""The trust options shared by the commands that check signatures (resolve, verify)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from catalog import front_door
from catalog_app.options import declared_by

F = TypeVar("F", bound=Callable[..., Any])


def trust_options(command: F) -> F:
    """--trusted-key, --trusted-root, --trusted-identity, --trusted-log-key (repeatable): any of them given replaces
    catalog.yaml's trust entirely and requires signatures (front_door.TRUST)."""
    return declared_by(front_door.TRUST)(command)
