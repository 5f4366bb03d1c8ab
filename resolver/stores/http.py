"""A plain HTTP(S) prefix as a read-only store: `http://host:port/base/` + key, unsigned ranged GETs.

For mirrors: a pull-through cache (nginx `proxy_cache`), SeaweedFS's filer (`/buckets/<bucket>/`), any
static file server holding a copy of the store's keys. Nothing it serves is trusted: the transfer hashes
every byte against the pin. It cannot list, put or delete. Standard library only (http.client), one
keep-alive connection per thread. A server that answers a ranged GET with the whole object (200) is
remembered as one that ignores Range (`ranged` False): the transfer then fetches each file in one GET,
instead of every part re-reading the object from byte 0.
"""

from __future__ import annotations

import http.client
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
from resolver.waits import parse_retry_after

_CONTENT_RANGE = re.compile(r"bytes\s+(?:([0-9]{1,20})-([0-9]{1,20})|\*)/([0-9]{1,20})", re.ASCII)


class HttpError(Exception):
    """A status worth retrying (5xx, 429): the transfer retries it (`retry_after` when the server said)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Stream:
    def __init__(self, store: HttpStore, conn: http.client.HTTPConnection, response: http.client.HTTPResponse | None,
                 total: int, skip: int = 0) -> None:
        self._store = store
        self._conn = conn
        self._response = response
        self.total = total
        self.etag = (response.getheader("ETag") or "").strip('"') or None if response is not None else None
        self._skip = skip  # a server that ignored the Range header: bytes to drop before the wanted ones

    def readinto(self, buffer: memoryview) -> int:
        response = self._response
        if response is None:
            return 0
        while self._skip:
            drop = response.read(min(self._skip, 1024 * 1024))
            if not drop:
                return 0
            self._skip -= len(drop)
        # At most one read from the socket per call (readinto would wait to fill the whole buffer): a trickling
        # server's bytes come back as they arrive, so the transfer's minimum-rate guard sees them.
        count = response.readinto1(buffer)
        if response.length == 0:  # every byte read: the connection is clean, reuse it
            self._response = None
            self._store._give_back(self._conn)
        elif count == 0:  # closed early: the transfer resumes from here on a new connection
            self._response = None
            self._conn.close()
        return count

    def close(self) -> None:
        if self._response is not None:
            self._response = None
            self._conn.close()  # not read to its end: the connection cannot be reused


class HttpStore(Store):
    """`http(s)://host[:port]/base/`, read-only."""

    def __init__(self, base_url: str, *, connect_timeout: float = 10.0, read_timeout: float = 60.0) -> None:
        problem = urls.check_store_url(base_url) if urls.scheme_of(base_url) in ("http", "https") else \
            f"{urls.redact(base_url)!r} is not http(s)://host[:port]/base/"
        if problem is not None:
            raise UsageError(f"bad HTTP store URL: {problem}", hint="use http(s)://host[:port]/base/, read with unsigned GETs")
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
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._local = threading.local()
        self._count_lock = threading.Lock()

    # -- connections --------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            return conn
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout)
        return conn

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        old = getattr(self._local, "conn", None)
        if old is not None and old is not conn:
            old.close()
        self._local.conn = conn

    def _request(self, method: str, key: str, headers: Mapping[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        path = self.base + urllib.parse.quote(check_key(key))
        with self._count_lock:
            self.requests[method] += 1
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, path, headers=dict(headers))
                if conn.sock is not None:
                    conn.sock.settimeout(self.read_timeout)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                if attempt:  # a fresh connection failed too: the transfer's retries take over
                    raise
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def _fail(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, key: str) -> None:
        """Raise for a status that is not an answer."""
        status = response.status
        retry = response.getheader("Retry-After")
        response.read()
        self._give_back(conn)
        if status == 404 or status == 410:
            raise ObjectNotFound(key)
        if status >= 500 or status == 429:
            raise HttpError(f"{self.url}{key} answered {status}", parse_retry_after(retry))
        raise StoreUnavailableError(f"{self.url} answered {status} for {key}",
                                    hint="an HTTP mirror is read with unsigned GETs; check the URL", transient=False)

    # -- the Store interface ------------------------------------------------------------------
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        raise StoreUnavailableError(f"{self.url} is a plain HTTP store: it cannot list objects",
                                    hint="use it as a --mirror; the primary store must be one that lists (s3://, a folder)",
                                    transient=False)

    def head(self, key: str) -> ObjectInfo | None:
        conn, response = self._request("HEAD", key, {})
        if response.status != 200:
            try:
                self._fail(conn, response, key)
            except ObjectNotFound:
                return None
        response.read()
        self._give_back(conn)
        length = response.getheader("Content-Length")
        etag = (response.getheader("ETag") or "").strip('"') or None
        return ObjectInfo(key, int(length) if length and re.fullmatch(r"[0-9]{1,20}", length, re.ASCII) else 0, etag=etag)

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        headers = {"Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        conn, response = self._request("GET", key, headers)
        if response.status == 416:  # asked past the end: the object is shorter than the pin
            match = _CONTENT_RANGE.match(response.getheader("Content-Range") or "")
            response.read()
            self._give_back(conn)
            return _Stream(self, conn, None, int(match.group(3)) if match else 0)
        if response.status == 206:
            match = _CONTENT_RANGE.match(response.getheader("Content-Range") or "")
            if match is None or match.group(1) is None or int(match.group(1)) != start:
                response.close()
                conn.close()
                raise HttpError(f"{self.url}{key}: a 206 answer with a Content-Range other than asked", None)
            return _Stream(self, conn, response, int(match.group(3)))
        if response.status == 200:
            length = response.getheader("Content-Length")
            if length is None or not re.fullmatch(r"[0-9]{1,20}", length, re.ASCII):
                response.close()
                conn.close()
                raise HttpError(f"{self.url}{key}: an answer without Content-Length", None)
            if end is not None:  # a part was asked and the whole object came: never re-read it per part
                response.close()
                conn.close()
                self.ranged = False
                raise RangesIgnored(f"{self.url} ignores Range requests")
            return _Stream(self, conn, response, int(length), skip=start)  # a resume: skip what arrived before
        self._fail(conn, response, key)
        raise AssertionError("unreachable")

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        raise UsageError(f"{self.url} is a read-only HTTP store", hint="sync and publish write to s3:// or a folder")

    def delete(self, key: str) -> None:
        raise UsageError(f"{self.url} is a read-only HTTP store")

    def stream_uri(self, prefix: str) -> str:
        return self.url + prefix


def from_url(url: str, *, connect_timeout: float = 10.0, read_timeout: float = 60.0) -> HttpStore:
    return HttpStore(url, connect_timeout=connect_timeout, read_timeout=read_timeout)


def from_settings(url: str, settings: Settings) -> HttpStore:
    """`http(s)://host[:port]/base/`, with the settings' timeouts."""
    return from_url(url, connect_timeout=settings.s3.connect_timeout, read_timeout=settings.s3.read_timeout)
