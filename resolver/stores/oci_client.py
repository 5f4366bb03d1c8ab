"""The OCI distribution API over http.client (standard library): requests, auth challenges, redirects.

One keep-alive connection per thread to the registry. A 401 is answered once per scope (`oci_auth`): Basic
with the host's credentials, or the token flow (the realm the registry names, asked for exactly the scopes
needed, tokens cached until they expire). A redirect (blob GETs are often sent to a CDN or a bucket) is
followed without the Authorization header when it leaves the registry's host. Failures become one-line
`StoreUnavailableError`s naming the registry and repository, never a credential; 429 and 5xx are transient
(`RegistryBusy`, with the server's Retry-After, capped) and retried a few times for metadata calls; blob GETs
leave retries to the transfer, which resumes from the last byte.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from catalog.errors import StoreUnavailableError
from resolver.stores.oci_auth import Challenge, Credentials, CredentialProgram, parse_challenge

log = logging.getLogger(__name__)

MAX_RETRY_AFTER = 30.0  # seconds of a registry's Retry-After worth waiting out in a metadata call; said when waited
METADATA_ATTEMPTS = 4
MAX_REDIRECTS = 5
SEND_BLOCK = 1024 * 1024  # bytes per socket write of an upload body (http.client's default is 8 KiB)


class RegistryBusy(StoreUnavailableError):
    """429 or 5xx: worth retrying (`retry_after` when the registry said)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message, hint="the registry is overloaded or failing; retry later", transient=True)
        self.retry_after = retry_after


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Body:
    """An upload body that can be sent again (after a 401 or a dropped keep-alive): bytes, or a file slice."""

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
    """`length` bytes of a file from `offset`, as a readable body (http.client reads it in blocks)."""

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


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


class RegistryClient:
    """Requests to one registry (`scheme://host[:port]`). `credentials` is asked only when a 401 says so."""

    def __init__(self, scheme: str, netloc: str, credentials: Callable[[], Credentials | CredentialProgram | None], *,
                 plain_http_ok: Callable[[str], bool], connect_timeout: float = 10.0, read_timeout: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.requests: Counter[str] = Counter()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._credentials = credentials
        self._plain_http_ok = plain_http_ok
        self._sleep = sleep
        self._local = threading.local()
        self._lock = threading.Lock()
        self._found: Credentials | CredentialProgram | None = None
        self._looked = False
        self._basic: str | None = None  # once the registry asked for Basic: sent with every request
        self._bearer: Challenge | None = None  # once the registry named its token server
        self._tokens: dict[str, tuple[str, float]] = {}  # scopes -> (Authorization header, expiry)

    @property
    def where(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    # -- connections ---------------------------------------------------------------------------
    def _new_connection(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=self.connect_timeout, blocksize=SEND_BLOCK)
        return http.client.HTTPConnection(netloc, timeout=self.connect_timeout, blocksize=SEND_BLOCK)

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        return conn if conn is not None else self._new_connection(self.scheme, self.netloc)

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        """A connection whose last response was read to its end: the next request of this thread reuses it."""
        if not self._ours(conn):  # a redirect's connection to another host: not pooled
            conn.close()
            return
        old = getattr(self._local, "conn", None)
        if old is not None and old is not conn:
            old.close()
        self._local.conn = conn

    def _ours(self, conn: http.client.HTTPConnection) -> bool:
        target = urllib.parse.urlsplit(f"//{self.netloc}")
        return (conn.host, conn.port) == (target.hostname, target.port or (443 if self.scheme == "https" else 80))

    # -- auth ----------------------------------------------------------------------------------
    def _creds(self) -> Credentials | CredentialProgram | None:
        with self._lock:
            if not self._looked:
                self._found = self._credentials()
                self._looked = True
            return self._found

    def _authorization(self, scopes: Sequence[str]) -> tuple[str | None, bool]:
        """The header to send before any challenge of this request, and whether it is fresh (just fetched)."""
        if self._basic is not None:
            return self._basic, False
        if self._bearer is None:
            return None, False
        with self._lock:
            cached = self._tokens.get(" ".join(sorted(scopes)))
        if cached is not None and cached[1] > time.monotonic():
            return cached[0], False
        return self._fetch_token(self._bearer, scopes), True

    def _answer(self, challenge: Challenge | None, scopes: Sequence[str], repo: str) -> str:
        """The Authorization header that answers a 401's challenge, or a one-line error saying why there is none."""
        creds = self._creds()
        if isinstance(creds, CredentialProgram):
            raise StoreUnavailableError(
                f"{self.where} asks for credentials for {repo}; {creds.origin} names the credential program {creds.name}, "
                "which model-catalog does not run",
                hint="set CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD (and CATALOG_OCI_REGISTRY), or an `auths` entry for this registry",
                transient=False)
        if challenge is None or challenge.scheme not in ("basic", "bearer"):
            raise StoreUnavailableError(f"{self.where} refused {repo} (401) with no challenge this client answers",
                                        hint="the registry needs an auth scheme other than Basic or a bearer token", transient=False)
        if challenge.scheme == "basic":
            if not isinstance(creds, Credentials) or not creds.username:
                raise self._no_credentials(repo)
            with self._lock:
                self._basic = creds.basic
            return creds.basic
        with self._lock:
            self._bearer = challenge
        return self._fetch_token(challenge, scopes)

    def _refused(self, repo: str) -> StoreUnavailableError:
        creds = self._creds()
        if not isinstance(creds, Credentials):
            return self._no_credentials(repo)
        return StoreUnavailableError(f"{self.where} refused the credentials from {creds.origin} for {repo} (401)",
                                     hint="check the user, password or token and its rights on this repository", transient=False)

    def _no_credentials(self, repo: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self.where} needs credentials for {repo} and none were found for {self.netloc}",
            hint="set CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD, or log in so that $DOCKER_CONFIG/config.json "
                 "(~/.docker/config.json) has an `auths` entry for this registry", transient=False)

    def _fetch_token(self, challenge: Challenge, scopes: Sequence[str]) -> str:
        """The token flow: GET realm?service=...&scope=... (Basic with the host's credentials when there are)."""
        creds = self._creds()
        if isinstance(creds, Credentials) and creds.registry_token:
            return f"Bearer {creds.registry_token}"
        wanted = sorted({*scopes, *challenge.params.get("scope", "").split()} - {""})
        query = urllib.parse.urlencode([("service", challenge.params.get("service", ""))] + [("scope", s) for s in wanted])
        realm = urllib.parse.urlsplit(challenge.realm)
        if realm.scheme not in ("http", "https") or not realm.hostname:
            raise StoreUnavailableError(f"{self.where} named a token server that is not an http(s) URL", transient=False)
        headers = {"Accept": "application/json"}
        if isinstance(creds, Credentials) and creds.username:
            if realm.scheme != "https" and not (is_loopback(realm.hostname) or self._plain_http_ok(realm.netloc)):
                raise StoreUnavailableError(f"{self.where} names a token server on plain http:// ({realm.netloc}); "
                                            "refusing to send credentials there",
                                            hint="add it to CATALOG_OCI_PLAIN_HTTP if that is really intended", transient=False)
            headers["Authorization"] = creds.basic
        joined = "&".join(q for q in (realm.query, query) if q)
        path = (realm.path or "/") + (f"?{joined}" if joined else "")
        with self._lock:
            self.requests["GetToken"] += 1
        conn = self._new_connection(realm.scheme, realm.netloc)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise StoreUnavailableError(f"cannot reach the token server of {self.where} ({realm.netloc}): {type(exc).__name__}") from None
        finally:
            conn.close()
        if response.status != 200:
            who = f"the credentials from {creds.origin}" if isinstance(creds, Credentials) else "anonymous access"
            raise StoreUnavailableError(f"the token server of {self.where} ({realm.netloc}) answered {response.status} to {who}",
                                        hint="check the credentials (CATALOG_OCI_USERNAME/PASSWORD or docker's config.json)",
                                        transient=response.status >= 500 or response.status == 429)
        try:
            answer = json.loads(data)
            token = answer.get("token") or answer.get("access_token")
            lifetime = float(answer.get("expires_in") or 60)
        except (ValueError, AttributeError, TypeError):
            token, lifetime = None, 0.0
        if not isinstance(token, str) or not token:
            raise StoreUnavailableError(f"the token server of {self.where} ({realm.netloc}) answered no token", transient=False)
        header = f"Bearer {token}"
        with self._lock:
            self._tokens[" ".join(sorted(scopes))] = (header, time.monotonic() + max(1.0, lifetime - 10))
        return header

    # -- requests ------------------------------------------------------------------------------
    def send(self, op: str, method: str, path: str, *, scopes: Sequence[str], repo: str,
             headers: Mapping[str, str] | None = None, body: Body | None = None,
             follow: bool = False) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """One request with its auth (answering one 401), following redirects when `follow`. Returns the open
        response: the caller reads it and gives the connection back (`give_back`) or closes it."""
        with self._lock:
            self.requests[op] += 1
        sent_auth, fresh = self._authorization(scopes)
        for _ in range(3):
            conn, response = self._exchange(method, path, headers or {}, body, sent_auth)
            if response.status != 401:
                break
            challenge = parse_challenge(response.getheader("WWW-Authenticate"))
            response.read()
            self.give_back(conn)
            if sent_auth is not None and fresh:  # what was just fetched for this very request was refused
                raise self._refused(repo)
            if sent_auth is not None:  # a cached token that expired early or lacks a scope: ask once more
                with self._lock:
                    self._tokens.pop(" ".join(sorted(scopes)), None)
            sent_auth, fresh = self._answer(challenge, scopes, repo), True
        else:
            raise self._refused(repo)
        redirects = 0
        while follow and response.status in (301, 302, 303, 307, 308) and redirects < MAX_REDIRECTS:
            redirects += 1
            location = response.getheader("Location") or ""
            response.read()
            self.give_back(conn)
            conn, response = self._redirect(location, headers or {}, sent_auth)
        return conn, response

    def _exchange(self, method: str, path: str, headers: Mapping[str, str], body: Body | None,
                  auth: str | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        sent = {**headers, **({"Authorization": auth} if auth else {})}
        if body is not None:
            sent["Content-Length"] = str(body.size)
        for attempt in (0, 1):
            conn = self._connection()
            payload = body.open() if body is not None else None
            try:
                conn.request(method, path, body=payload, headers=sent)
                if conn.sock is not None:
                    conn.sock.settimeout(self.read_timeout)
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if attempt:
                    raise StoreUnavailableError(f"cannot reach {self.where}: {type(exc).__name__}",
                                                hint="check the oci:// URL and the network") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise StoreUnavailableError(f"cannot reach {self.where}: {type(exc).__name__}: {str(exc)[:120]}",
                                            hint="check the oci:// URL and the network") from None
            finally:
                if isinstance(payload, _Slice):
                    payload.close()
        raise AssertionError("unreachable")

    def _redirect(self, location: str, headers: Mapping[str, str],
                  auth: str | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        target = urllib.parse.urlsplit(urllib.parse.urljoin(f"{self.where}/", location))
        if target.scheme not in ("http", "https") or not target.hostname:
            raise StoreUnavailableError(f"{self.where} redirected to a URL that is not http(s)", transient=False)
        if target.scheme == "http" and self.scheme == "https" and not is_loopback(target.hostname):
            raise StoreUnavailableError(f"{self.where} redirected from https to plain http ({target.netloc}); refused",
                                        transient=False)
        same = target.scheme == self.scheme and target.netloc == self.netloc
        path = target.path + (f"?{target.query}" if target.query else "")
        if same:
            return self._exchange("GET", path, headers, None, auth)
        conn = self._new_connection(target.scheme, target.netloc)  # another host: never our Authorization
        try:
            conn.request("GET", path, headers=dict(headers))
            if conn.sock is not None:
                conn.sock.settimeout(self.read_timeout)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise StoreUnavailableError(f"cannot reach {target.netloc} (a redirect of {self.where}): {type(exc).__name__}") from None

    def call(self, op: str, method: str, path: str, *, scopes: Sequence[str], repo: str,
             headers: Mapping[str, str] | None = None, body: Body | None = None, limit: int = 8 * 1024 * 1024) -> Reply:
        """A metadata request read whole (at most `limit` bytes): retried on 429/5xx and dropped connections,
        waiting what the registry asks (capped at MAX_RETRY_AFTER, said on stderr)."""
        for attempt in range(METADATA_ATTEMPTS):
            try:
                conn, response = self.send(op, method, path, scopes=scopes, repo=repo, headers=headers, body=body,
                                           follow=method in ("GET", "HEAD"))
                data = response.read(limit + 1)  # a HEAD's is b"", and reading it frees the connection for the next request
                if len(data) > limit:
                    conn.close()
                    raise StoreUnavailableError(f"{self.where} answered more than {limit} bytes for {repo} ({op})", transient=False)
                self.give_back(conn)
                self.check_status(response.status, response.getheader("Retry-After"), repo, op)
                return Reply(response.status, response.headers, data)
            except StoreUnavailableError as exc:
                if not exc.transient or attempt + 1 >= METADATA_ATTEMPTS:
                    raise
                asked = getattr(exc, "retry_after", None)
                delay = min(MAX_RETRY_AFTER, asked) if asked is not None else 0.25 * 2 ** attempt
                if asked is not None and asked > 1:
                    log.warning("%s; waiting %.0fs as it asked (at most %.0fs)", exc, delay, MAX_RETRY_AFTER)
                self._sleep(delay)
        raise AssertionError("unreachable")

    def check_status(self, status: int, retry_after: str | None, repo: str, op: str) -> None:
        """Raise for a status that is not an answer (404 and 2xx/3xx are the caller's)."""
        if status < 400 or status == 404:
            return
        if status == 429 or status >= 500:
            wait = float(retry_after) if retry_after and retry_after.strip().isdigit() else None
            raise RegistryBusy(f"{self.where} answered {status} for {repo} ({op})", wait)
        if status == 403:
            raise StoreUnavailableError(f"{self.where} denied {op} on {repo} (403)",
                                        hint="the credentials lack the rights on this repository", transient=False)
        raise StoreUnavailableError(f"{self.where} answered {status} for {repo} ({op})", transient=False)
