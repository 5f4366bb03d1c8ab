"""The one HTTP transport of the HTTP store and the OCI client: urllib3, per-host keep-alive pools, and the rules
every request they make follows.

    Transport(bounds).request(method, url, headers, body, follow=...) -> Response (status, headers, a body stream)

- **Pools**: one urllib3 PoolManager per transport (one per store), a pool per scheme://host:port holding up to
  `pool_size` idle connections (the transfer's threads at once); a body read to its end gives its connection back.
- **Bounds** (resolver/waits.py `Bounds`): connect within `connect` seconds; the answer's status line and headers
  within the request's deadline (`answer` seconds, plus the body's size at the minimum rate when one is sent),
  enforced by one watchdog thread that shuts the socket of a request past its deadline, so a server trickling
  its headers a byte at a time cannot hold a caller forever (a per-read timeout never fires on a trickle);
  every read waits at most `answer` seconds; a body read whole (`read_all`: manifests, token answers, error
  bodies) keeps `min_rate` bytes/s over every `window` and stops at a size limit. A body streamed by the
  transfer (`readinto`, one socket read per call) is guarded by the transfer's own rate check.
- **Redirects** (`follow`, GET and HEAD only): the method is kept (a HEAD stays a HEAD and reads no body), at most
  MAX_REDIRECTS; `Authorization` (and cookies) are dropped when the next hop is another origin (scheme, host or
  port); https to plain http is refused; only http(s) targets.
- **Failures**: one line naming the origin (scheme://host:port, never a path's query, which may hold a signed
  URL's signature), as `StoreUnavailableError`s: `Unreachable` (no answer: transient), `NoAnswer` (past the
  deadline or below the minimum rate: final for the source, which a caller then skips for the next),
  `RedirectRefused`, `BadAnswer` (a header or body that cannot be read: a Content-Length of `²` or 400 digits).
  `Response.retry_after` reads Retry-After in both forms through waits.parse_retry_after.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError as Urllib3Error

from catalog.errors import StoreUnavailableError
from resolver.waits import Bounds, RateGuard, parse_retry_after

MAX_REDIRECTS = 5
SEND_BLOCK = 1024 * 1024  # bytes per socket write of an upload body (http.client's default is 8 KiB)
_SIZE = re.compile(r"[0-9]{1,19}", re.ASCII)  # a size header: ASCII digits only (`²` passes str.isdigit), < 2**63
_DROPPED_OFF_ORIGIN = ("authorization", "proxy-authorization", "cookie")


class Unreachable(StoreUnavailableError):
    """No answer at all (refused, reset, a read timeout): worth a retry."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="check the URL and the network", transient=True)


class NoAnswer(StoreUnavailableError):
    """The server took longer than the deadline to answer, or sent a body below the minimum rate: it is up but
    failing, so the caller goes to its next source (final for this one)."""

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            hint="the server is overloaded or hostile; the next source serves where there is one "
            "(the bounds: CATALOG_S3_READ_TIMEOUT for an answer)",
            transient=False,
        )


class RedirectRefused(StoreUnavailableError):
    def __init__(self, message: str) -> None:
        super().__init__(
            message, hint="a redirect may go to another http(s) host, never from https to plain http", transient=False
        )


class BadAnswer(StoreUnavailableError):
    """A header or body that cannot be what the protocol says (a size of `²`, of 400 digits, a body too large)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="the server is not speaking the protocol; check the URL", transient=False)


def origin(url: str) -> str:
    """`scheme://host:port` of a URL: what messages name (never a path or a query)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _same_origin(a: urllib.parse.SplitResult, b: urllib.parse.SplitResult) -> bool:
    def key(p: urllib.parse.SplitResult) -> tuple[str, str, int | None]:
        return p.scheme, (p.hostname or "").lower(), p.port or (443 if p.scheme == "https" else 80)

    return key(a) == key(b)


def next_hop(current: str, location: str | None, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """Pure: where a redirect from `current` to `location` goes, and the headers sent there (credentials only to the
    same origin). Raises RedirectRefused for no Location, a scheme other than http(s), or https to plain http."""
    if not location:
        raise RedirectRefused(f"{origin(current)} redirected without a Location")
    here = urllib.parse.urlsplit(current)
    target = urllib.parse.urljoin(current, location.strip())
    there = urllib.parse.urlsplit(target)
    if there.scheme not in ("http", "https") or not there.hostname:
        raise RedirectRefused(f"{origin(current)} redirected to a URL that is not http(s)")
    if here.scheme == "https" and there.scheme == "http":
        raise RedirectRefused(f"{origin(current)} redirected from https to plain http ({origin(target)}); refused")
    if _same_origin(here, there):
        return target, dict(headers)
    return target, {k: v for k, v in headers.items() if k.lower() not in _DROPPED_OFF_ORIGIN}


def size_header(value: str | None, what: str) -> int | None:
    """A Content-Length (or another size) header: None when absent, else ASCII digits below 2**63; anything else is
    a BadAnswer naming `what` (never a traceback from int())."""
    if value is None:
        return None
    text = value.strip()
    if not _SIZE.fullmatch(text):
        shown = text[:20] + ("..." if len(text) > 20 else "")
        raise BadAnswer(f"{what}: a size header that is not a number ({shown!r})")
    return int(text)


@dataclass(frozen=True)
class Body:
    """An upload body that can be sent again (after a 401, a dropped keep-alive): bytes, or a slice of a file."""

    data: bytes | None = None
    path: Path | None = None
    offset: int = 0
    length: int = 0

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.length

    def open(self) -> bytes | _Slice:
        if self.data is not None:
            return self.data
        assert self.path is not None
        return _Slice(self.path, self.offset, self.length)


class _Slice:
    """`length` bytes of a file from `offset`, as a readable body (sent in SEND_BLOCK blocks)."""

    def __init__(self, path: Path, offset: int, length: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed when the last byte is read (or by close)
        self._file.seek(offset)
        self._left = length

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            self._file.close()
            return b""
        data = self._file.read(self._left if size < 0 else min(size, self._left))
        self._left -= len(data)
        if not data:
            self._file.close()
        return data

    def close(self) -> None:
        self._file.close()


# -- the deadline of an answer ------------------------------------------------------------------------------------
class _Watchdog:
    """One daemon thread for every transport: shuts the socket of a request whose answer is past its deadline.
    Arming costs a heap push under a lock; a disarmed entry is dropped when it reaches the top."""

    def __init__(self) -> None:
        self._heap: list[list[Any]] = []  # [deadline, sequence, connection or None (disarmed), fired]
        self._cond = threading.Condition()
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, conn: HTTPConnection) -> list[Any]:
        entry = [time.monotonic() + seconds, next(self._sequence), conn, False]
        with self._cond:
            while self._heap and self._heap[0][2] is None:
                heapq.heappop(self._heap)
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="catalog-http-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0] is entry:
                self._cond.notify()
        return entry

    def disarm(self, entry: list[Any]) -> None:
        with self._cond:  # under the lock: an answer that came in time is never cut by a deadline read just before
            entry[2] = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2] is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                entry = heapq.heappop(self._heap)
                sock = getattr(entry[2], "sock", None) if entry[2] is not None else None
                if sock is not None:
                    entry[3] = True
                    try:  # the base class's shutdown: on a TLS socket too, without touching its TLS state from here
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    except OSError:
                        pass


_WATCHDOG = _Watchdog()
_deadline = threading.local()  # the seconds the calling thread's request may take to its answer


class _Guarded:
    """Mixed into urllib3's connections: the answer of each request is under the calling thread's deadline."""

    _armed: list[Any] | None = None
    sock: Any

    def request(self, *args: Any, **kwargs: Any) -> None:
        seconds = getattr(_deadline, "seconds", None)
        if seconds is not None:
            _deadline.entry = self._armed = _WATCHDOG.arm(seconds, self)  # type: ignore[arg-type]
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self) -> Any:
        try:
            return super().getresponse()  # type: ignore[misc]
        finally:
            if self._armed is not None:
                _WATCHDOG.disarm(self._armed)
                self._armed = None


class _GuardedHTTP(_Guarded, HTTPConnection):
    pass


class _GuardedHTTPS(_Guarded, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTP


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPS


# -- responses ---------------------------------------------------------------------------------------------------
class Response:
    """An answer whose body is read by the caller: `readinto` (one socket read per call, into the caller's buffer)
    or `read_all`; read to its end, the connection goes back to its pool; `close` drops it otherwise."""

    def __init__(self, raw: urllib3.BaseHTTPResponse, url: str, bounds: Bounds) -> None:
        self._raw: urllib3.BaseHTTPResponse | None = raw
        self.status = raw.status
        self.headers = raw.headers
        self.url = url  # the last hop's (after redirects)
        self._bounds = bounds
        fp = getattr(raw, "_fp", None)
        # urllib3's own readinto reads into a temporary bytes object, then copies; http.client's readinto1 fills
        # the caller's buffer from one socket read: a trickle is seen as it comes, and nothing is copied twice.
        self._fp: http.client.HTTPResponse | None = fp if isinstance(fp, http.client.HTTPResponse) else None

    @property
    def where(self) -> str:
        return origin(self.url)

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else str(value)

    def length(self) -> int | None:
        """The Content-Length (None when absent); a BadAnswer when it is not a number."""
        return size_header(self.header("Content-Length"), f"{self.where} answered {self.status}")

    def retry_after(self) -> float | None:
        """The seconds a Retry-After asks for (delta-seconds or an HTTP date), clamped; None when absent or unreadable."""
        return parse_retry_after(self.header("Retry-After"))

    def readinto(self, buffer: memoryview) -> int:
        raw = self._raw
        if raw is None:
            return 0
        try:
            if self._fp is not None:
                count = self._fp.readinto1(buffer)
            else:
                data = raw.read1(len(buffer))
                count = len(data)
                buffer[:count] = data
        except (OSError, http.client.HTTPException, Urllib3Error) as exc:
            self.close()
            raise Unreachable(f"{self.where}: the answer broke off ({type(exc).__name__})") from None
        if count == 0 or (self._fp is not None and self._fp.length == 0):
            if self._fp is not None:
                self._fp.close()  # as http.client's own read does at the end: the connection takes a next request
            self._finish(clean=True)  # the whole body (a body cut short raises IncompleteRead above)
        return count

    def read_all(self, limit: int, what: str) -> bytes:
        """The whole body, at most `limit` bytes (a BadAnswer beyond), under the minimum rate (a NoAnswer below)."""
        if self._raw is None:
            return b""
        # What is left to read (http.client knows a HEAD's or a 204's body is empty, whatever Content-Length says).
        declared = self._fp.length if self._fp is not None else self.length()
        if declared is not None and declared > limit:
            self.close()
            raise BadAnswer(f"{self.where} announced {declared} bytes for {what}, more than the {limit} accepted")
        chunks = bytearray()
        buffer = memoryview(bytearray(min(limit + 1, 256 * 1024)))
        guard = RateGuard(self._bounds.min_rate, self._bounds.window)
        while count := self.readinto(buffer):
            chunks += buffer[:count]
            if len(chunks) > limit:
                self.close()
                raise BadAnswer(f"{self.where} sent more than {limit} bytes for {what}")
            if not guard.add(count):
                self.close()
                raise NoAnswer(f"{self.where} sent {guard.describe()} for {what}; abandoned")
        return bytes(chunks)

    def discard(self) -> None:
        """Done with the answer: a short body is read off (the connection stays pooled), a long one dropped."""
        raw = self._raw
        if raw is None:
            return
        length = self._fp.length if self._fp is not None else None
        if length is not None and length <= 64 * 1024:
            try:
                self.read_all(64 * 1024, "an answer not used")
                return
            except StoreUnavailableError:
                return
        self.close()

    def _finish(self, clean: bool) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        if not clean:
            raw.close()
        raw.release_conn()

    def close(self) -> None:
        """Not read to its end: the connection cannot be reused."""
        self._finish(clean=False)


# -- the transport ------------------------------------------------------------------------------------------------
class Transport:
    """HTTP(S) requests under `bounds`, through per-host pools of `pool_size` connections."""

    def __init__(self, bounds: Bounds, *, pool_size: int = 16) -> None:
        self.bounds = bounds
        self._pools = urllib3.PoolManager(
            num_pools=32,
            maxsize=max(1, pool_size),
            block=False,
            retries=False,
            timeout=urllib3.Timeout(connect=bounds.connect, read=bounds.answer),
            blocksize=SEND_BLOCK,
        )
        self._pools.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        self._by_origin: dict[str, HTTPConnectionPool] = {}  # skips the manager's URL parsing and key per request

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: Body | None = None,
        *,
        follow: bool = False,
    ) -> Response:
        """One request (following redirects when `follow`, for GET and HEAD); the answer's body is the caller's to
        read. Raises Unreachable, NoAnswer, RedirectRefused."""
        sent = dict(headers or {})
        response = self._send(method, url, sent, body)
        hops = 0
        while follow and method in ("GET", "HEAD") and response.status in (301, 302, 303, 307, 308):
            if hops == MAX_REDIRECTS:
                response.close()
                raise RedirectRefused(f"{origin(url)} redirected more than {MAX_REDIRECTS} times")
            hops += 1
            location = response.header("Location")
            response.discard()
            url, sent = next_hop(url, location, sent)
            response = self._send(method, url, sent, None)
        return response

    def _send(self, method: str, url: str, headers: dict[str, str], body: Body | None) -> Response:
        if body is not None:
            headers = {**headers, "Content-Length": str(body.size)}
        for attempt in (0, 1):
            payload: Any = body.open() if body is not None else None  # bytes, or a file slice urllib3 reads in blocks
            _deadline.seconds = self.bounds.request_deadline(body.size if body is not None else 0)
            _deadline.entry = None
            try:
                pool, target = self._pool(url)
                raw = pool.urlopen(
                    method,
                    target,
                    body=payload,
                    headers=headers,
                    redirect=False,
                    retries=False,
                    preload_content=False,
                    decode_content=False,
                    assert_same_host=False,
                )
                return Response(raw, url, self.bounds)
            except Urllib3Error as exc:
                entry = getattr(_deadline, "entry", None)
                if entry is not None and entry[3]:
                    raise NoAnswer(f"{origin(url)} did not answer {method} within {_deadline.seconds:.0f}s") from None
                dropped = isinstance(exc, urllib3.exceptions.ProtocolError) and any(
                    isinstance(a, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError))
                    for a in exc.args
                )
                if dropped and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more on a fresh one
                raise Unreachable(f"cannot reach {origin(url)}: {_reason(exc)}") from None
            finally:
                _deadline.seconds = None
                if isinstance(payload, _Slice):
                    payload.close()
        raise AssertionError("unreachable")

    def _pool(self, url: str) -> tuple[HTTPConnectionPool, str]:
        """The pool of `url`'s origin (the manager's, looked up once per origin) and the request target."""
        slash = url.find("/", url.find("//") + 2)
        base, target = (url, "/") if slash < 0 else (url[:slash], url[slash:])
        pool = self._by_origin.get(base)
        if pool is None:
            pool = self._by_origin[base] = self._pools.connection_from_url(base)
        return pool, target

    def clear(self) -> None:
        """Close every pooled connection."""
        self._by_origin.clear()
        self._pools.clear()


def _reason(exc: BaseException) -> str:
    """A urllib3 failure in a few words, by the types along its chain (never a URL's query). The chain is read
    whole before a timeout is named: urllib3's NewConnectionError, a refused connection among others, is a
    ConnectTimeoutError too."""
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(chain) < 16:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for kind, said in (
        (ConnectionRefusedError, "connection refused"),
        (urllib3.exceptions.NameResolutionError, "the host name does not resolve"),
        (urllib3.exceptions.SSLError, "TLS error (check the certificate; SSL_CERT_FILE for a private CA)"),
        (ConnectionResetError, "connection reset"),
    ):
        if any(isinstance(c, kind) for c in chain):
            return said
    if any(
        isinstance(c, (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ConnectTimeoutError, TimeoutError))
        and not isinstance(c, urllib3.exceptions.NewConnectionError)
        for c in chain
    ):
        return "timed out"
    return type(exc).__name__
