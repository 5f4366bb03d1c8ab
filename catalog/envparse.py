"""One strict parser for every setting's text (environment variables and command-line values).

`str.isdigit` accepts superscript and other Unicode digits that `int` refuses, `float` turns 400 digits into
infinity, and an integer of any length goes through `int` only to overflow a socket timeout or a thread pool
later. Each parser here takes ASCII digits only, bounds the length and the value, and raises one UsageError
naming the setting (exit 2, one line) for anything else. Pure, standard library only (the warm path builds
its Settings with it).
"""

from __future__ import annotations

import re
from typing import Any

from catalog.errors import UsageError

MAX_DIGITS = 20  # more is no size, count or number of seconds anything here can use
MAX_SIZE = 1 << 60  # 1 EiB
MAX_COUNT = 1_000_000
MAX_SECONDS = 10**7  # about four months
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")

_WHOLE = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}", re.ASCII)
_SIZE = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})(?:\.([0-9]{{1,9}}))?\s*([kmgtpe]?)(?:i?b)?", re.ASCII | re.IGNORECASE)
_UNITS = " kmgtpe"


def whole(value: Any, name: str, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """A whole number in [minimum, maximum] written in ASCII digits."""
    text = str(value).strip()
    if not _WHOLE.fullmatch(text) or not minimum <= int(text) <= maximum:
        raise UsageError(f"{name}={_shown(value)} is not a whole number from {minimum} to {maximum}")
    return int(text)


def size(value: Any, name: str, maximum: int = MAX_SIZE) -> int:
    """'64MiB', '8M', '1.5GiB', '1048576' -> bytes (binary units), at most `maximum`."""
    text = str(value).strip()
    match = _SIZE.fullmatch(text)
    if match is None:
        raise UsageError(f"bad {name} {_shown(value)}", hint="use bytes or a unit: 16MiB, 1GiB")
    scale = 1 << (10 * _UNITS.index(match.group(3).lower() or " "))
    fraction = match.group(2) or "0"
    count = int(match.group(1)) * scale + int(fraction) * scale // int(10 ** len(fraction))
    if count > maximum:
        raise UsageError(
            f"{name} {_shown(value)} is larger than {maximum} bytes", hint="use a real size: 16MiB, 200GiB"
        )
    return count


def flag(value: Any, name: str) -> bool:
    """1/true/yes/on or 0/false/no/off (any case); anything else is an error, never a silent false."""
    text = str(value).strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise UsageError(f"{name}={_shown(value)} is neither true nor false", hint="use 1 or 0")


def max_wait_hint(seconds: float) -> str:
    """How to wait out a remote's hint of `seconds`: a value CATALOG_HUB_MAX_WAIT takes, or that none does."""
    if seconds + 1 > MAX_SECONDS:
        return f"it is longer than any wait CATALOG_HUB_MAX_WAIT allows (at most {MAX_SECONDS} s)"
    return f"set CATALOG_HUB_MAX_WAIT={int(seconds) + 1} to wait this one out"


def _shown(value: Any) -> str:
    """The value as typed, cut short (a 400-digit number or a 3 MB string stays one line)."""
    text = repr(str(value))
    return text if len(text) <= 40 else text[:37] + "...'"
