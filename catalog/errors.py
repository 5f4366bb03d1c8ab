"""One root error for everything the catalog raises on purpose.

The CLI turns any `CatalogError` into a single `error:` line plus a hint and an exit code; anything else
is a bug and keeps its traceback. Subclasses also inherit the builtin they resemble, so callers that
catch `KeyError` or `ValueError` keep working.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class CatalogError(Exception):
    """Base of every expected failure. `hint` says what the user can do about it."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(CatalogError, ValueError):
    """The command line or settings are wrong (exit code 2)."""

    exit_code = 2


class CatalogNotFoundError(CatalogError, FileNotFoundError):
    """No manifests directory could be found."""

    exit_code = 2


class UnknownModelError(CatalogError, KeyError):
    """A logical name that no manifest defines; carries close matches."""

    def __init__(self, name: str, suggestions: Sequence[str]) -> None:
        hint = f"did you mean {', '.join(suggestions)}?" if suggestions else "run `catalog list` to see every model"
        super().__init__(f"no model named {name!r} in the catalog", hint=hint)
        self.name = name
        self.suggestions = list(suggestions)

    def __str__(self) -> str:  # KeyError would quote the message otherwise; the suggestions belong in it too
        return f"{self.message}; {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class Problem:
    """One thing wrong in one manifest: `path:line: field: message`."""

    path: str
    line: int
    field: str
    message: str
    rule: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class InvalidCatalogError(CatalogError, ValueError):
    """The manifests have problems; all of them are carried, not just the first."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        first = problems[0] if problems else None
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            f"invalid catalog: {first}{more}" if first else "invalid catalog",
            hint="run `catalog validate` to see every problem",
        )
        self.problems = list(problems)


class IntegrityError(CatalogError, ValueError):
    """Bytes that do not match the manifest. The download was deleted; nothing was published."""

    def __init__(self, model: str, path: str, what: str, expected: str, got: str, cause: str) -> None:
        super().__init__(
            f"expected {what} {expected} but got {got} for {model}/{path}; deleted the download; {cause}",
            hint="repair the object (`catalog sync` re-uploads it) or fix the manifest, then resolve again",
        )
        self.model = model
        self.path = path
        self.what = what
        self.expected = expected
        self.got = got


class MissingObjectError(CatalogError, FileNotFoundError):
    """A pinned file is not in the store."""

    def __init__(self, model: str, path: str, where: str) -> None:
        super().__init__(
            f"{model}/{path} is missing from the store at {where}",
            hint=f"upload it: `catalog sync {model}` (from the Hub at the pin) or `catalog sync {model} --from-dir DIR` "
            "(from a folder holding its files); or check --store / CATALOG_STORE",
        )
        self.model = model
        self.path = path


class StoreUnavailableError(CatalogError, ConnectionError):
    """The store could not be reached, or refused access. `transient`: worth retrying (a dead
    connection, a 5xx) as opposed to final (no credentials, access denied, no such bucket)."""

    def __init__(self, message: str, *, hint: str | None = None, transient: bool = True) -> None:
        super().__init__(message, hint=hint)
        self.transient = transient


class UnsafePathError(CatalogError, ValueError):
    """A path or key that would land outside its target directory; refused before any byte is written."""


class CacheWriteError(CatalogError, OSError):
    """The local cache cannot be written (disk full, read-only, file size limit): not the store's fault."""


class NotCachedError(CatalogError, LookupError):
    """--offline and something is not in the cache."""


class SnapshotOwnerError(UsageError):
    """An hf-cache snapshot would hold the files of a manifest that does not answer for its repo id."""
