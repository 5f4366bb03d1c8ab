"""The OCI distribution API's requests: registry auth and the protocol's statuses, over the one HTTP transport.

The transport (transport.py) owns connections (a keep-alive pool per host), the deadline of every answer and
the minimum rate of every body read whole, and redirects (blob GETs and HEADs are often sent to a CDN or a
bucket: followed with the method kept and without the Authorization header off the registry's origin, never
from https to plain http). Here: a 401 is answered once per scope (`oci_auth`): Basic with the host's
credentials, or the token flow (the realm the registry names, asked for exactly the scopes needed, tokens
cached until they expire). Failures become one-line `StoreUnavailableError`s naming the registry and
repository, never a credential; 429 and 5xx are transient (`RegistryBusy`, with the server's Retry-After, read
in both forms and waited out up to CATALOG_HUB_MAX_WAIT, said on stderr; a longer one fails at once) and
retried a few times for metadata calls; blob GETs leave retries to the transfer, which resumes from the last
byte. JSON from a registry or token server is parsed by `bounded_json` (nesting that exhausts the parser is an
answer refused, not a traceback).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from catalog.errors import StoreUnavailableError
from resolver import waits
from resolver.stores.modelpack import bounded_json
from resolver.stores.oci_auth import Challenge, CredentialProgram, Credentials, parse_challenge
from resolver.stores.transport import Body, Response, Transport, Unreachable, size_header
from resolver.waits import Bounds

log = logging.getLogger(__name__)

METADATA_ATTEMPTS = 4
METADATA_LIMIT = 8 * 1024 * 1024  # bytes of a metadata answer read at most
TOKEN_LIMIT = 1024 * 1024  # bytes of a token server's answer read at most
MAX_TOKEN_LIFETIME = 24 * 3600  # seconds a token is kept at most, whatever `expires_in` says
DEFAULT_TOKEN_LIFETIME = 60  # the distribution spec's default when `expires_in` is absent


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


def token_lifetime(value: object, where: str) -> float:
    """Pure: the seconds a token answer's `expires_in` gives it: a JSON number of seconds (absent: the spec's 60),
    at most a day; anything else (a string, `1e400`, a bool, a negative) is a one-line error."""
    if value is None:
        return float(DEFAULT_TOKEN_LIFETIME)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or value < 0
    ):
        shown = repr(value)[:30]
        raise StoreUnavailableError(
            f"the token server of {where} answered an expires_in that is not a number of seconds ({shown})",
            hint="the token server is not speaking the registry token protocol",
            transient=False,
        )
    return float(min(value, MAX_TOKEN_LIFETIME))


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return None if value is None else str(value)


class RegistryClient:
    """Requests to one registry (`scheme://host[:port]`). `credentials` is asked only when a 401 says so."""

    def __init__(
        self,
        scheme: str,
        netloc: str,
        credentials: Callable[[], Credentials | CredentialProgram | None],
        *,
        plain_http_ok: Callable[[str], bool],
        bounds: Bounds | None = None,
        pool_size: int = 16,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.requests: Counter[str] = Counter()
        self.bounds = bounds or Bounds()
        self.transport = Transport(self.bounds, pool_size=pool_size)
        self._credentials = credentials
        self._plain_http_ok = plain_http_ok
        self._sleep = sleep
        self._lock = threading.Lock()
        self._found: Credentials | CredentialProgram | None = None
        self._looked = False
        self._basic: str | None = None  # once the registry asked for Basic: sent with every request
        self._bearer: Challenge | None = None  # once the registry named its token server
        self._tokens: dict[str, tuple[str, float]] = {}  # scopes -> (Authorization header, expiry)

    @property
    def where(self) -> str:
        return f"{self.scheme}://{self.netloc}"

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
                transient=False,
            )
        if challenge is None or challenge.scheme not in ("basic", "bearer"):
            raise StoreUnavailableError(
                f"{self.where} refused {repo} (401) with no challenge this client answers",
                hint="the registry needs an auth scheme other than Basic or a bearer token",
                transient=False,
            )
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
        return StoreUnavailableError(
            f"{self.where} refused the credentials from {creds.origin} for {repo} (401)",
            hint="check the user, password or token and its rights on this repository",
            transient=False,
        )

    def _no_credentials(self, repo: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self.where} needs credentials for {repo} and none were found for {self.netloc}",
            hint="set CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD, or log in so that $DOCKER_CONFIG/config.json "
            "(~/.docker/config.json) has an `auths` entry for this registry",
            transient=False,
        )

    def credentials_may_go_to(self, realm: urllib.parse.SplitResult) -> bool:
        """Whether the registry's credentials may be sent to the token server at `realm`: over https always; over
        plain http only to a host listed in CATALOG_OCI_PLAIN_HTTP, or to a loopback one when the registry itself is
        reached over plain http (a registry reached over https never has its credentials downgraded)."""
        if realm.scheme == "https":
            return True
        if self._plain_http_ok(realm.netloc):
            return True
        return self.scheme == "http" and is_loopback(realm.hostname or "")

    def _fetch_token(self, challenge: Challenge, scopes: Sequence[str]) -> str:
        """The token flow: GET realm?service=...&scope=... (Basic with the host's credentials when there are)."""
        creds = self._creds()
        if isinstance(creds, Credentials) and creds.registry_token:
            return f"Bearer {creds.registry_token}"
        wanted = sorted({*scopes, *challenge.params.get("scope", "").split()} - {""})
        query = urllib.parse.urlencode(
            [("service", challenge.params.get("service", ""))] + [("scope", s) for s in wanted]
        )
        realm = urllib.parse.urlsplit(challenge.realm)
        if realm.scheme not in ("http", "https") or not realm.hostname:
            raise StoreUnavailableError(
                f"{self.where} named a token server that is not an http(s) URL", transient=False
            )
        headers = {"Accept": "application/json"}
        if isinstance(creds, Credentials) and creds.username:
            if not self.credentials_may_go_to(realm):
                raise StoreUnavailableError(
                    f"{self.where} names a token server on plain http:// ({realm.netloc}); "
                    "refusing to send credentials there",
                    hint="add it to CATALOG_OCI_PLAIN_HTTP if that is really intended",
                    transient=False,
                )
            headers["Authorization"] = creds.basic
        joined = "&".join(q for q in (realm.query, query) if q)
        url = urllib.parse.urlunsplit((realm.scheme, realm.netloc, realm.path or "/", joined, ""))
        with self._lock:
            self.requests["GetToken"] += 1
        where = f"the token server of {self.where} ({realm.netloc})"
        response = self.transport.request("GET", url, headers)  # no redirect: credentials go where the realm says
        data = response.read_all(TOKEN_LIMIT, "a token")
        if response.status != 200:
            who = f"the credentials from {creds.origin}" if isinstance(creds, Credentials) else "anonymous access"
            raise StoreUnavailableError(
                f"{where} answered {response.status} to {who}",
                hint="check the credentials (CATALOG_OCI_USERNAME/PASSWORD or docker's config.json)",
                transient=response.status >= 500 or response.status == 429,
            )
        try:
            answer = bounded_json(data, "its answer")
        except ValueError as exc:
            raise StoreUnavailableError(f"{where}: {exc}", transient=False) from None
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise StoreUnavailableError(f"{where} answered no token", transient=False)
        lifetime = token_lifetime(answer.get("expires_in"), self.where)
        header = f"Bearer {token}"
        with self._lock:
            self._tokens[" ".join(sorted(scopes))] = (header, time.monotonic() + max(1.0, lifetime - 10))
        return header

    # -- requests ------------------------------------------------------------------------------
    def url(self, path: str) -> str:
        return f"{self.where}{path}"

    def send(
        self,
        op: str,
        method: str,
        path: str,
        *,
        scopes: Sequence[str],
        repo: str,
        headers: Mapping[str, str] | None = None,
        body: Body | None = None,
        follow: bool = False,
    ) -> Response:
        """One request with its auth (answering one 401), following redirects when `follow` (the transport keeps
        the method and drops the Authorization header off the registry's origin). The caller reads the answer."""
        with self._lock:
            self.requests[op] += 1
        sent_auth, fresh = self._authorization(scopes)
        for _ in range(3):
            sent = {**(headers or {}), **({"Authorization": sent_auth} if sent_auth else {})}
            response = self.transport.request(method, self.url(path), sent, body, follow=follow)
            if response.status != 401:
                return response
            challenge = parse_challenge(response.header("WWW-Authenticate"))
            response.discard()
            if sent_auth is not None and fresh:  # what was just fetched for this very request was refused
                raise self._refused(repo)
            if sent_auth is not None:  # a cached token that expired early or lacks a scope: ask once more
                with self._lock:
                    self._tokens.pop(" ".join(sorted(scopes)), None)
            sent_auth, fresh = self._answer(challenge, scopes, repo), True
        raise self._refused(repo)

    def call(
        self,
        op: str,
        method: str,
        path: str,
        *,
        scopes: Sequence[str],
        repo: str,
        headers: Mapping[str, str] | None = None,
        body: Body | None = None,
        limit: int = METADATA_LIMIT,
    ) -> Reply:
        """A metadata request read whole (at most `limit` bytes, at the minimum rate): retried on 429/5xx and on no
        answer, waiting what the registry asks (up to the bounds' max_wait, said on stderr; a longer wait is a
        WaitTooLongError at once)."""
        for attempt in range(METADATA_ATTEMPTS):
            try:
                response = self.send(
                    op,
                    method,
                    path,
                    scopes=scopes,
                    repo=repo,
                    headers=headers,
                    body=body,
                    follow=method in ("GET", "HEAD"),
                )
                retry = response.retry_after()
                data = response.read_all(limit, f"{repo} ({op})")
                self.check_status(response.status, retry, repo, op)
                return Reply(response.status, response.headers, data)
            except (RegistryBusy, Unreachable) as exc:
                if attempt + 1 >= METADATA_ATTEMPTS:
                    raise
                self._sleep(waits.retry_pause(exc, attempt + 1, self.bounds.max_wait, f"{self.where} ({repo}, {op})"))
        raise AssertionError("unreachable")

    def check_status(self, status: int, retry_after: float | None, repo: str, op: str) -> None:
        """Raise for a status that is not an answer (404 and 2xx/3xx are the caller's)."""
        if status < 400 or status == 404:
            return
        if status == 429 or status >= 500:
            raise RegistryBusy(f"{self.where} answered {status} for {repo} ({op})", retry_after)
        if status == 403:
            raise StoreUnavailableError(
                f"{self.where} denied {op} on {repo} (403)",
                hint="the credentials lack the rights on this repository",
                transient=False,
            )
        raise StoreUnavailableError(f"{self.where} answered {status} for {repo} ({op})", transient=False)

    def size_of(self, reply: Reply | Response, what: str) -> int | None:
        """A strict Content-Length (None when absent); a one-line BadAnswer for `²` or 400 digits."""
        return size_header(reply.header("Content-Length"), f"{self.where}: {what}")
