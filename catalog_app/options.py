"""Click options declared from the front door's flag tables (catalog/front_door.py): the full CLI and the warm paths
read one table, so a flag cannot be added to one and missed by the other."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from catalog.front_door import COUNT, MULTI, SWITCH, Flag

F = TypeVar("F", bound=Callable[..., Any])

_TYPES: dict[str, Any] = {
    "int": int,
    "dir": click.Path(path_type=Path, file_okay=False, exists=True),
    "file": click.Path(path_type=Path, dir_okay=False, exists=True),
    "new-file": click.Path(path_type=Path, dir_okay=False),
}


def option_from(flag: Flag, choices: Iterable[str] | None = None) -> Callable[[F], F]:
    """The click option of one table row; `choices`: the accepted values the code keeps (`flag.choices_from`)."""
    kwargs: dict[str, Any] = {"help": flag.help or None, "metavar": flag.metavar or None}
    if flag.kind == SWITCH:
        kwargs["is_flag"] = True
    elif flag.kind == COUNT:
        kwargs["count"] = True
    elif flag.kind == MULTI:
        kwargs["multiple"] = True
    listed = list(choices) if choices is not None else list(flag.choices)
    if listed:
        kwargs["type"] = click.Choice(listed)
    elif flag.type:
        kwargs["type"] = _TYPES[flag.type]
    if flag.default is not None:
        kwargs["default"] = flag.default
        kwargs["show_default"] = True
    decorator: Callable[[F], F] = click.option(*flag.names, flag.dest, **kwargs)
    return decorator


def declared_by(table: Sequence[Flag], choices: Mapping[str, Iterable[str]] | None = None) -> Callable[[F], F]:
    """Every option of `table`, in its order; `choices` by flag name, for each row whose `choices_from` names where
    the code keeps them (one missing, or one given for another row, is an error at import)."""
    given = dict(choices or {})
    wanted = {flag.names[-1] for flag in table if flag.choices_from}
    if set(given) != wanted:
        raise TypeError(f"choices given for {sorted(given)}, needed for {sorted(wanted)}")

    def declare(command: F) -> F:
        for flag in reversed(table):
            command = option_from(flag, given.get(flag.names[-1]))(command)
        return command

    return declare
