"""Waiting on a remote's hint (`Retry-After`, the Hub's `RateLimit` reset): read safely, capped, announced.

A mirror answering `503 Retry-After: 100000` must not put every runner to sleep for a day in silence, and a
header of `1e400`, `²` or a date in the year 10000 must not crash anything. `parse_retry_after` reads any
value into finite seconds within [0, MAX_HINT] (None when it names nothing readable); `hinted_delay` turns a
hint into the wait actually taken: up to `cap` seconds, said on stderr, or, beyond the cap, a
`WaitTooLongError` at once naming when to come back (a mirror is then skipped for the next source; the
primary store or the Hub fails with one line). `Bounds` are the limits of every network call (connect, the answer,
a minimum rate while a body comes, the longest hint waited out) and `RateGuard` the minimum-rate check, used by
the one HTTP transport (resolver/stores/transport.py) for every call it makes.
"""

from __future__ import annotations

import email.utils
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from catalog import envparse
from catalog.errors import StoreUnavailableError

if TYPE_CHECKING:
    from catalog.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_MAX_WAIT = 60.0  # CATALOG_HUB_MAX_WAIT's default, for callers without settings
MAX_HINT = 1e9  # seconds (about 31 years): anything larger is clamped here, so arithmetic on it cannot overflow
_SECONDS = re.compile(r"[0-9]{1,1000}(?:\.[0-9]{1,1000})?", re.ASCII)  # 400 digits are a very long wait, not an error


def clamp(seconds: float) -> float:
    """Finite, within [0, MAX_HINT]; NaN counts as nothing to wait."""
    if math.isnan(seconds):
        return 0.0
    return min(max(0.0, seconds), MAX_HINT)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` value asks for: delta-seconds (ASCII digits) or an HTTP date; None for anything
    else (the caller backs off as usual)."""
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return clamp(float(text))
    if len(text) > 64:
        return None  # no HTTP date is this long
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        stamp = when.timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    return clamp(stamp - (time.time() if now is None else now))


class WaitTooLongError(StoreUnavailableError):
    """The remote asked to come back later than we wait: final for this source in this run (not transient)."""

    def __init__(self, what: str, asked: float, cap: float) -> None:
        at = datetime.fromtimestamp(time.time() + clamp(asked), timezone.utc)
        self.asked = asked
        self.retry_at = at
        super().__init__(
            f"{what} asked to retry in {asked:.0f}s (at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}), longer than "
            f"the {cap:g}s waited for a remote's hint",
            hint=f"retry then; or {envparse.max_wait_hint(asked)}",
            transient=False,
        )


def hinted_delay(asked: float | None, cap: float, what: str) -> float | None:
    """The seconds to wait on a hint of `asked` seconds from `what` (None: no hint; back off as usual): said on
    stderr when there is one; a hint beyond `cap` raises WaitTooLongError instead of sleeping."""
    if asked is None:
        return None
    asked = clamp(asked)
    if asked > cap:
        raise WaitTooLongError(what, asked, cap)
    if asked >= 1:
        log.warning("%s asked to retry in %.0fs; waiting (at most %gs is ever waited on such a hint)", what, asked, cap)
    return asked


def retry_pause(exc: BaseException, attempt: int, cap: float, what: str) -> float:
    """Seconds before retry number `attempt` (from 1) after `exc`: the remote's hint when it gave one (capped and
    said, see `hinted_delay`), else an exponential backoff from half a second."""
    asked = hinted_delay(getattr(exc, "retry_after", None), cap, what)
    return asked if asked is not None else 0.5 * 2 ** (attempt - 1)


MIN_RATE = 32 * 1024  # bytes/s a body must average over each window, else it is abandoned (a trickle)
RATE_WINDOW = 30.0  # seconds


@dataclass(frozen=True)
class Bounds:
    """Every network call's bounds, one set per invocation: `connect` seconds to connect; the answer (status and
    headers) within `answer` seconds of sending (a deadline, not a per-read timeout: a server that trickles its
    headers is cut off too), plus `body_size / min_rate` for a request that sends a body; a body read whole
    (metadata: a manifest, a token) at `min_rate` bytes/s over every `window` seconds, and no read waiting more than
    `answer` seconds; a server's Retry-After waited out up to `max_wait` seconds (CATALOG_HUB_MAX_WAIT)."""

    connect: float = 10.0
    answer: float = 60.0
    min_rate: int = MIN_RATE
    window: float = RATE_WINDOW
    max_wait: float = DEFAULT_MAX_WAIT

    @classmethod
    def from_settings(cls, settings: Settings) -> Bounds:
        return cls(
            connect=settings.s3.connect_timeout, answer=settings.s3.read_timeout, max_wait=float(settings.hub_max_wait)
        )

    def request_deadline(self, body_size: int = 0) -> float:
        """Seconds from sending a request to its answer's last header."""
        return self.answer + body_size / max(1, self.min_rate)


class RateGuard:
    """The minimum-rate check of one body: `add` each read; False once a whole window went by with less than
    `min_rate` bytes a second (then `describe` says what came)."""

    def __init__(self, min_rate: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.floor = min_rate * window
        self.window = window
        self._clock = clock
        self.began = clock()
        self.count = 0
        self.elapsed = 0.0

    def add(self, count: int) -> bool:
        self.count += count
        self.elapsed = self._clock() - self.began
        if self.elapsed < self.window:
            return True
        if self.count < self.floor:
            return False
        self.began, self.count = self._clock(), 0
        return True

    def describe(self) -> str:
        return f"{self.count} bytes in {self.elapsed:.0f}s, below {int(self.floor / self.window)} bytes/s"
