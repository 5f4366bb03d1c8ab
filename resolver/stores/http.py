"""A plain HTTP(S) prefix as a read-only store: `http://host:port/base/` + key, unsigned ranged GETs.

For mirrors: a pull-through cache (nginx `proxy_cache`), SeaweedFS's filer (`/buckets/<bucket>/`), any
static file server holding a copy of the store's keys. Nothing it serves is trusted: the transfer hashes
every byte against the pin. It cannot list, put or delete. Requests go through the one HTTP transport
(transport.py: a keep-alive pool per host, the deadline of every answer, redirects kept to their rules). A
server that answers a ranged GET with the whole object (200) is remembered as one that ignores Range
(`ranged` False): the transfer then fetches each file in one GET, instead of every part re-reading the
object from byte 0.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

from catalog import urls
from catalog.errors import StoreUnavailableError, UsageError
from catalog.settings import Settings
from resolver.stores.base import ObjectInfo, ObjectNotFound, ObjectStream, RangesIgnored, Store, check_key
from resolver.stores.transport import BadAnswer, Response, Transport
from resolver.waits import Bounds

_CONTENT_RANGE = re.compile(r"bytes\s+(?:([0-9]{1,19})-([0-9]{1,19})|\*)/([0-9]{1,19})", re.ASCII)


class HttpError(StoreUnavailableError):
    """A status worth retrying (5xx, 429): the transfer retries it (`retry_after` when the server said)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message, hint="the server is overloaded or failing; retry later", transient=True)
        self.retry_after = retry_after


class _Stream:
    """A GET's body (`total`: the whole object's size, from Content-Range or Content-Length)."""

    def __init__(self, response: Response | None, total: int, skip: int = 0) -> None:
        self._response = response
        self.total = total
        self.etag = (response.header("ETag") or "").strip('"') or None if response is not None else None
        self._skip = skip  # a server that ignored the Range header: bytes to drop before the wanted ones

    def readinto(self, buffer: memoryview) -> int:
        response = self._response
        if response is None:
            return 0
        while self._skip:
            count = response.readinto(buffer[: min(self._skip, len(buffer))])
            if not count:
                return 0
            self._skip -= count
        # At most one socket read per call: a trickling server's bytes come back as they arrive, so the transfer's
        # minimum-rate guard sees them.
        return response.readinto(buffer)

    def close(self) -> None:
        if self._response is not None:
            self._response.close()  # after the last byte this closes nothing: the connection is back in its pool
            self._response = None


class HttpStore(Store):
    """`http(s)://host[:port]/base/`, read-only."""

    def __init__(self, base_url: str, *, bounds: Bounds | None = None, pool_size: int = 16) -> None:
        problem = (
            urls.check_store_url(base_url)
            if urls.scheme_of(base_url) in ("http", "https")
            else f"{urls.redact(base_url)!r} is not http(s)://host[:port]/base/"
        )
        if problem is not None:
            raise UsageError(
                f"bad HTTP store URL: {problem}", hint="use http(s)://host[:port]/base/, read with unsigned GETs"
            )
        parsed = urllib.parse.urlsplit(base_url)
        assert parsed.hostname is not None  # checked above
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port
        self.base = parsed.path if parsed.path.endswith("/") else parsed.path + "/"
        netloc = self.host + (f":{self.port}" if self.port else "")
        self.url = f"{self.scheme}://{netloc}{self.base}"
        self.requests: Counter[str] = Counter()
        self.ranged = True  # False once the server answered a ranged GET with the whole object
        self.transport = Transport(bounds or Bounds(), pool_size=pool_size)
        self._count_lock = threading.Lock()

    def _request(self, method: str, key: str, headers: Mapping[str, str]) -> Response:
        with self._count_lock:
            self.requests[method] += 1
        return self.transport.request(method, self.url + urllib.parse.quote(check_key(key)), headers, follow=True)

    def _fail(self, response: Response, key: str) -> None:
        """Raise for a status that is not an answer."""
        status = response.status
        retry = response.retry_after()
        response.discard()
        if status == 404 or status == 410:
            raise ObjectNotFound(key)
        if status >= 500 or status == 429:
            raise HttpError(f"{self.url}{key} answered {status}", retry)
        raise StoreUnavailableError(
            f"{self.url} answered {status} for {key}",
            hint="an HTTP mirror is read with unsigned GETs; check the URL",
            transient=False,
        )

    # -- the Store interface ------------------------------------------------------------------
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        raise StoreUnavailableError(
            f"{self.url} is a plain HTTP store: it cannot list objects",
            hint="use it as a --mirror; the primary store must be one that lists (s3://, a folder)",
            transient=False,
        )

    def head(self, key: str) -> ObjectInfo | None:
        response = self._request("HEAD", key, {})
        if response.status != 200:
            try:
                self._fail(response, key)
            except ObjectNotFound:
                return None
        response.discard()
        etag = (response.header("ETag") or "").strip('"') or None
        return ObjectInfo(key, response.length() or 0, etag=etag)

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        headers = {"Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        response = self._request("GET", key, headers)
        if response.status == 416:  # asked past the end: the object is shorter than the pin
            match = _CONTENT_RANGE.fullmatch((response.header("Content-Range") or "").strip())
            response.discard()
            return _Stream(None, int(match.group(3)) if match else 0)
        if response.status == 206:
            match = _CONTENT_RANGE.fullmatch((response.header("Content-Range") or "").strip())
            if match is None or match.group(1) is None or int(match.group(1)) != start:
                response.close()
                raise HttpError(f"{self.url}{key}: a 206 answer with a Content-Range other than asked", None)
            return _Stream(response, int(match.group(3)))
        if response.status == 200:
            try:
                length = response.length()
            except BadAnswer:
                length = None
            if length is None:
                response.close()
                raise HttpError(f"{self.url}{key}: an answer without a readable Content-Length", None)
            if end is not None:  # a part was asked and the whole object came: never re-read it per part
                response.close()
                self.ranged = False
                raise RangesIgnored(f"{self.url} ignores Range requests")
            return _Stream(response, length, skip=start)  # a resume: skip what arrived before
        self._fail(response, key)
        raise AssertionError("unreachable")

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        raise UsageError(f"{self.url} is a read-only HTTP store", hint="sync and publish write to s3:// or a folder")

    def delete(self, key: str) -> None:
        raise UsageError(f"{self.url} is a read-only HTTP store")

    def stream_uri(self, prefix: str) -> str:
        return self.url + prefix


def from_url(url: str, *, bounds: Bounds | None = None, pool_size: int = 16) -> HttpStore:
    return HttpStore(url, bounds=bounds, pool_size=pool_size)


def from_settings(url: str, settings: Settings) -> HttpStore:
    """`http(s)://host[:port]/base/`, under the settings' bounds, with a connection per transfer thread kept."""
    return from_url(url, bounds=Bounds.from_settings(settings), pool_size=max(16, settings.concurrency or 0))
