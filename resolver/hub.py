"""The Hugging Face Hub as a source, through huggingface_hub (imported only here, only when used).

`HubStore` makes one repo (a model or a dataset) at one pinned revision look like a read-only store whose
keys are the repo's paths, so Hub downloads go through the same verify-while-downloading transfer as the
bucket (hashing, resume by range, retries). It honours HF_ENDPOINT and the standard token (HF_TOKEN or the
stored login). `list_repo_files` reads sizes, LFS sha256, git blob ids and Xet hashes from the Hub's tree
listing (no download).

Rate limits: a 429 (or 503) names when to come back, in `Retry-After` or in the IETF `RateLimit` header
the Hub sends (`RateLimit: "api";r=0;t=2`, with `RateLimit-Policy: "fixed window";"api";q=1000;w=300`).
A reset within `HubOptions.max_wait` (CATALOG_HUB_MAX_WAIT, default 60 s) is waited out; a later one fails
at once with `RateLimitedError` naming when to retry, rather than holding a CI job for minutes. The
listing is requested here, not through `HfApi.list_repo_tree`, whose own backoff would sleep through any
reset, however long.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from catalog import envparse
from catalog.errors import StoreUnavailableError, UsageError
from catalog.settings import Settings
from resolver import waits
from resolver.stores import ObjectInfo, ObjectNotFound, ObjectStream, Store
from resolver.stores.base import EmptyStream

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_MAX_WAIT = 60.0
# What to do when no answer came from the Hub (refused connection, DNS, timeout): where it was looked for.
UNREACHABLE_HINT = "check the network and HF_ENDPOINT (the Hub's address), or retry later"
REPO_TYPES = ("model", "dataset")
T = TypeVar("T")


@dataclass(frozen=True)
class HubOptions:
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = field(default=None, repr=False)  # None: huggingface_hub's own lookup (the stored login)
    attempts: int = 5
    max_wait: float = DEFAULT_MAX_WAIT  # longest rate-limit reset waited out; a later one fails at once

    @classmethod
    def from_settings(cls, settings: Settings) -> HubOptions:
        return cls(endpoint=settings.hub_endpoint, token=settings.hub_token, max_wait=float(settings.hub_max_wait))


# -- pure: what a 429/503 says about when to come back -------------------------------------------------
@dataclass(frozen=True)
class RateLimit:
    """When the Hub says to come back (`reset`, seconds from now) and what it said about the limit."""

    reset: float | None  # None: the answer named no time
    policy: str | None = None  # the limit's name ("api", "resolvers")
    remaining: int | None = None
    quota: int | None = None  # requests per window (RateLimit-Policy q)
    window: int | None = None  # seconds (RateLimit-Policy w)

    def describe(self) -> str:
        what = f"the Hub's {self.policy!r} rate limit" if self.policy else "the Hub's rate limit"
        if self.quota is not None and self.window is not None:
            what += f" ({self.quota} requests per {self.window}s)"
        return what


_RATELIMIT = re.compile(r'"?(?P<policy>[\w.-]+)"?\s*;(?P<params>.*)')
_PARAM = re.compile(r"(?P<key>[a-z]+)\s*=\s*(?P<value>[0-9]{1,1000})", re.ASCII)  # ASCII digits only; clamped below


def _header(headers: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return str(value)
    return None


def _params(text: str) -> dict[str, int]:
    return {m.group("key"): int(m.group("value")) for m in _PARAM.finditer(text)}


def parse_rate_limit(headers: Mapping[str, str], now: float | None = None) -> RateLimit:
    """`Retry-After` (seconds or an HTTP date) wins; else `RateLimit`'s `t` (seconds to the reset).

    `RateLimit: "api";r=0;t=2` and `RateLimit-Policy: "fixed window";"api";q=1000;w=300` are the Hub's
    spelling of the IETF draft (draft-ietf-httpapi-ratelimit-headers); several comma-separated limits
    may be listed: the one with nothing remaining (else the latest reset) is the one that bit.
    """
    policy = remaining = quota = window = None
    reset: float | None = None
    limits = []
    for item in (_header(headers, "RateLimit") or "").split(","):
        match = _RATELIMIT.match(item.strip())
        if match:
            params = _params(match.group("params"))
            if "t" in params:
                limits.append(
                    (match.group("policy"), params.get("r"), waits.clamp(float(min(params["t"], int(waits.MAX_HINT)))))
                )
    if limits:
        policy, remaining, reset = max(limits, key=lambda lim: (lim[1] == 0, lim[2]))
    items = [
        _params(i) | {"_named": int(policy is not None and f'"{policy}"' in i)}
        for i in (_header(headers, "RateLimit-Policy") or "").split(",")
    ]
    for params in sorted(items, key=lambda p: -p["_named"]):
        if "q" in params and "w" in params:
            quota, window = params["q"], params["w"]
            break
    asked = waits.parse_retry_after(_header(headers, "Retry-After"), now)
    if asked is not None:
        reset = asked
    return RateLimit(reset, policy, remaining, quota, window)


class RateLimitedError(StoreUnavailableError):
    """The Hub's rate limit resets later than we are willing to wait: final for this run, not transient."""

    def __init__(self, what: str, status: int, limit: RateLimit, max_wait: float, now: float | None = None) -> None:
        assert limit.reset is not None
        at = datetime.fromtimestamp((time.time() if now is None else now) + limit.reset, timezone.utc)
        self.retry_at = at
        self.reset = limit.reset
        super().__init__(
            f"{what}: the Hub answered {status}: {limit.describe()} resets in {limit.reset:g}s "
            f"(at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}); retry then",
            hint=f"waits up to {max_wait:g}s are taken; {envparse.max_wait_hint(limit.reset)}, "
            "or use the bucket (CATALOG_MODE=ci) instead of the Hub",
            transient=False,
        )


def retry_delay(what: str, status: int, headers: Mapping[str, str], max_wait: float) -> float | None:
    """Seconds to wait before retrying a 429/5xx (None: the server named no time, back off as usual);
    raises RateLimitedError when the named reset is beyond `max_wait`."""
    limit = parse_rate_limit(headers)
    if limit.reset is not None and limit.reset > max_wait:
        raise RateLimitedError(what, status, limit, max_wait)
    return limit.reset


class HubUnreachableError(StoreUnavailableError):
    """No answer came from the Hub at all (a refused connection, DNS, a timeout), after every attempt: the next
    request to it would wait as long for the same (a list of repos stops asking)."""


class RetryLater(Exception):
    """A 429/503 (or 5xx): transient; `retry_after` is what the server asked for, in seconds."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _HttpStream:
    def __init__(self, response: Any, total: int) -> None:
        self._response = response
        self._chunks: Iterator[bytes] = response.iter_raw()  # as received: a trickle is seen as it comes
        self._pending = b""
        self.total = total
        self.etag = str(response.headers.get("ETag") or "").strip('"').removeprefix('W/"') or None

    def readinto(self, buffer: memoryview) -> int:
        if not self._pending:
            self._pending = next(self._chunks, b"")
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def close(self) -> None:
        self._response.close()


class HubStore(Store):
    """One repo at one revision, read-only; keys are paths in the repo."""

    engine_streamable = False  # a model fetched from the Hub is fully local
    unreachable_hint = f"the Hub is unreachable or failing: {UNREACHABLE_HINT}"

    def __init__(self, repo: str, revision: str, options: HubOptions, repo_type: str = "model") -> None:
        self.repo = repo
        self.revision = revision
        self.options = options
        self.repo_type = repo_type
        kind = "" if repo_type == "model" else f"{repo_type}s/"
        self.url = f"hf://{kind}{repo}@{revision[:12]} ({options.endpoint})"
        self.requests: Counter[str] = Counter()

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        return _hub_headers(self.options, extra)

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        from huggingface_hub import get_session, hf_hub_url

        url = hf_hub_url(
            self.repo, key, revision=self.revision, endpoint=self.options.endpoint, repo_type=self.repo_type
        )
        extra = {"Range": f"bytes={start}-{'' if end is None else end - 1}"} if start or end is not None else {}
        session = get_session()
        self.requests["GET"] += 1
        response = session.send(
            session.build_request("GET", url, headers=self._headers(extra)), stream=True, follow_redirects=True
        )
        status = response.status_code
        if status in (200, 206):
            content_range = response.headers.get("Content-Range")
            total = (
                int(content_range.rsplit("/", 1)[1])
                if content_range
                else int(response.headers.get("Content-Length", -1))
            )
            return _HttpStream(response, total)
        response.close()
        if status == 416:
            total = int(response.headers.get("Content-Range", "*/0").rsplit("/", 1)[1])
            return EmptyStream(total)
        if status == 404:
            raise ObjectNotFound(key)
        if status in (401, 403):
            raise StoreUnavailableError(
                f"{self.url} refused access ({status})",
                hint="set HF_TOKEN (or `hf auth login`) for gated or private repos",
                transient=False,
            )
        if status == 429 or status >= 500:
            delay = retry_delay(f"fetching {key} from {self.url}", status, response.headers, self.options.max_wait)
            raise RetryLater(f"{self.url} answered {status}", delay)
        raise StoreUnavailableError(f"{self.url} answered {status} for {key}", transient=False)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for item in list_repo_files(self.repo, self.revision, self.options, self.repo_type):
            if item.path.startswith(prefix):
                yield ObjectInfo(item.path, item.size)

    def head(self, key: str) -> ObjectInfo | None:
        return next((o for o in self.list("") if o.key == key), None)

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        raise UsageError("the Hub is a read-only source here")

    def delete(self, key: str) -> None:
        raise UsageError("the Hub is a read-only source here")

    def stream_uri(self, prefix: str) -> str:
        raise UsageError("weights cannot be streamed from the Hub; resolve with --materialize-weights")

    def transient(self, exc: BaseException) -> bool:
        """The default, plus the transport failures of huggingface_hub's HTTP client while a body streams: httpx's
        (huggingface_hub 1.x) or httpx2's (2.x), told by the module that raised them (neither is imported for this)."""
        if super().transient(exc):
            return True
        return _is_transport_error(exc)


def _is_transport_error(exc: BaseException) -> bool:
    """No usable answer from huggingface_hub's HTTP client (a connection, timeout or protocol failure): an httpx
    RequestError, or httpx2's in huggingface_hub 2.x; told by class, so neither is imported for this."""
    return any(
        cls.__name__ == "RequestError" and cls.__module__.split(".", 1)[0] in ("httpx", "httpx2")
        for cls in type(exc).__mro__
    )


def _hub_headers(options: HubOptions, extra: Mapping[str, str]) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    headers = dict(build_hf_headers(token=options.token))
    headers["Accept-Encoding"] = "identity"  # sizes and hashes are of the raw bytes
    headers.update(extra)
    return headers


@dataclass(frozen=True)
class RemoteFile:
    """A file in a Hub repo at a revision: its size, its sha256 when the Hub knows it (LFS files), its git
    blob id, and its Xet hash when the Hub stores it in Xet."""

    path: str
    size: int
    sha256: str | None
    blob_id: str  # the git blob id (sha1 of the file, or of its LFS pointer)
    xet_hash: str | None = None


def with_retries(
    fn: Callable[[], T],
    what: str,
    options: HubOptions,
    sleep: Callable[[float], None] = time.sleep,
    hint: str = UNREACHABLE_HINT,
) -> T:
    """Call a huggingface_hub API, waiting out 429/503 when the reset is near (RateLimitedError when it is not) and
    trying again after a dropped connection; HubUnreachableError naming the endpoint (with `hint`) when no answer came
    after options.attempts."""
    from huggingface_hub.errors import HfHubHTTPError

    attempts, max_wait = options.attempts, options.max_wait
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except HfHubHTTPError as exc:
            response = exc.response
            status = response.status_code if response is not None else None
            if status is not None and (status == 429 or status >= 500) and attempt < attempts:
                delay = retry_delay(what, status, response.headers, max_wait) if response is not None else None
                _announce(what, status, delay)
                sleep(delay if delay is not None else 0.5 * 2 ** (attempt - 1))
                continue
            raise StoreUnavailableError(
                f"{what}: the Hub answered {status}: {str(exc).splitlines()[0][:200]}", hint=status_hint(status)
            ) from None
        except Exception as exc:
            if not isinstance(exc, OSError) and not _is_transport_error(exc):
                raise
            if attempt < attempts:
                sleep(0.5 * 2 ** (attempt - 1))
                continue
            raise HubUnreachableError(
                f"{what}: cannot reach the Hub at {options.endpoint}: {type(exc).__name__}", hint=hint
            ) from None
    raise AssertionError("unreachable")


def _announce(what: str, status: int, delay: float | None) -> None:
    """A wait the Hub asked for is said on stderr (a silent sleep looks like a hang in a CI log)."""
    if delay is not None and delay >= 1:
        log.warning("%s: the Hub answered %s and asked to retry in %.0fs; waiting", what, status, delay)
    else:
        log.info("%s: the Hub answered %s; retrying", what, status)


def _next_page(link_header: str | None) -> str | None:
    """The `rel="next"` URL of a Link header (the Hub paginates long tree listings)."""
    for part in (link_header or "").split(","):
        match = re.match(r'\s*<([^>]+)>\s*;.*rel="?next"?', part)
        if match:
            return match.group(1)
    return None


def api_get(
    url: str,
    params: Any,
    what: str,
    options: HubOptions,
    sleep: Callable[[float], None] = time.sleep,
    *,
    follow_redirects: bool = True,
    method: str = "GET",
) -> Any:
    """One GET (or `method`) of the Hub, again after a 429/5xx (waiting what its headers ask, within options.max_wait,
    and saying so; RateLimitedError past it) or a dropped connection, up to options.attempts: the last response (any
    status), or the name of the transport error when no response came."""
    from huggingface_hub import get_session

    session = get_session()
    error = ""
    for attempt in range(1, options.attempts + 1):
        try:
            response = session.request(
                method, url, params=params, headers=_hub_headers(options, {}), follow_redirects=follow_redirects
            )
        except OSError as exc:
            error = type(exc).__name__
        except Exception as exc:
            if not _is_transport_error(exc):
                raise
            error = type(exc).__name__
        else:
            status = response.status_code
            if not (status == 429 or status >= 500) or attempt == options.attempts:
                return response
            delay = retry_delay(what, status, response.headers, options.max_wait)
            _announce(what, status, delay)
            sleep(delay if delay is not None else 0.5 * 2 ** (attempt - 1))
            continue
        if attempt < options.attempts:
            sleep(0.5 * 2 ** (attempt - 1))
    return error


def _get_json(
    url: str,
    params: Mapping[str, str] | None,
    what: str,
    options: HubOptions,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Any, str | None]:
    """GET one JSON page of the Hub's API with our own rate-limit handling: (the body, the next page's URL)."""
    response = api_get(url, dict(params or {}), what, options, sleep)
    if isinstance(response, str):
        raise HubUnreachableError(
            f"{what}: cannot reach the Hub at {options.endpoint}: {response}", hint=UNREACHABLE_HINT
        )
    status = response.status_code
    if status == 200:
        return response.json(), _next_page(response.headers.get("Link"))
    if status == 429:
        retry_delay(what, status, response.headers, options.max_wait)  # a far reset names itself
    raise StoreUnavailableError(
        f"{what}: the Hub answered {status}: {response.text.strip()[:200]}",
        hint=status_hint(status),
        transient=status == 429 or status >= 500,
    )


def status_hint(status: int | None) -> str:
    """What to do about the Hub's final answer: a rate limit or an outage is no wrong repo id."""
    if status in (401, 403):
        return "set HF_TOKEN (or `hf auth login`) for gated or private repos"
    if status is not None and (status == 429 or status >= 500):
        what = "rate-limiting this client" if status == 429 else "failing"
        return f"the Hub is {what}: retry later, or use the bucket (CATALOG_MODE=ci) instead of the Hub"
    return "check the repo id and revision, HF_ENDPOINT and HF_TOKEN"


def list_repo_files(repo: str, revision: str, options: HubOptions, repo_type: str = "model") -> list[RemoteFile]:
    """Every file of `repo` at `revision`, with sizes, LFS sha256, blob ids and Xet hashes from the tree listing."""
    if repo_type not in REPO_TYPES:
        raise UsageError(f"repo type {repo_type!r} is not one of {', '.join(REPO_TYPES)}")
    url: str | None = f"{options.endpoint}/api/{repo_type}s/{repo}/tree/{quote(revision, safe='')}"
    params: Mapping[str, str] | None = {"recursive": "true", "expand": "false"}
    what = f"listing {'' if repo_type == 'model' else repo_type + 's/'}{repo}@{revision[:12]}"
    out = []
    while url is not None:
        page, url = _get_json(url, params, what, options)
        params = None  # the next-page URL carries them
        for item in page if isinstance(page, list) else ():
            if not isinstance(item, dict) or item.get("type") != "file":
                continue
            lfs = item.get("lfs") if isinstance(item.get("lfs"), dict) else None
            out.append(
                RemoteFile(
                    str(item["path"]),
                    int(item["size"]),
                    str(lfs["oid"]) if lfs else None,
                    str(item.get("oid", "")),
                    item.get("xetHash") or None,
                )
            )
    return out


def commit_of(repo: str, ref: str, options: HubOptions) -> str:
    """The commit a branch or tag points at now (used once, by `catalog add`)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=options.endpoint, token=options.token)
    info = with_retries(
        lambda: api.model_info(repo, revision=ref),
        f"resolving {repo}@{ref}",
        options,
        hint=f"{UNREACHABLE_HINT}; without the Hub, pin a folder holding the files: "
        f"catalog add {repo} --revision <its 40-hex commit> --from-dir DIR",
    )
    if not info.sha:
        raise StoreUnavailableError(f"the Hub gave no commit for {repo}@{ref}")
    return str(info.sha)
