"""The S3 store's data plane: GETs and listings through obstore (the Python binding of the Rust `object_store`
crate), while boto3 keeps the other control calls (head, put, delete) and every credential source but the
environment (aws_env.py).

Why: a botocore GET costs about 3 ms of CPU here (building, signing, sending it, then parsing every response header
into Python objects, dateutil's Last-Modified alone about 1 ms), which made 1,000 small files take 3.2 CPU-s of GETs
alone, and a listing of 600 keys 0.3 CPU-s (0.25 of it dateutil); the same 1,000 GETs through obstore take 0.4
CPU-s (bench/resolve_cold.py small and the profile in docs/benchmarks.md), with the request and the headers
handled in Rust outside the GIL. A body streams as it arrives
(`min_chunk_size=1`), so the transfer's minimum-rate guard still sees a trickle.

obstore retries nothing here (the transfer retries and resumes, and says why); a failure is mapped to what the
transfer understands: FileNotFoundError (no such object), a final StoreUnavailableError (403, other 4xx), None for
416 (the object is shorter than asked: the caller reports the size), or a one-line `GetFailed` naming the endpoint
and what went wrong (a status, a Timeout, a refused connection), worth a retry for 5xx, 429 and no answer at all.
The mapping goes by obstore's exception types (`PermissionDeniedError`, `UnauthenticatedError`, `InvalidPathError`,
`NotSupportedError`, the precondition errors; a missing object is the builtin FileNotFoundError); only its catch-all
`GenericError` carries every other HTTP status, and the binding gives it no status attribute, so there alone the
status is read from the first line of its text.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from catalog.errors import StoreUnavailableError
from resolver.stores.aws_env import EnvironmentKeys
from resolver.stores.base import ViewStream

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import ClientConfig, S3Credential

_STATUS = re.compile(r"status code: ([0-9]{3})")
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_OS_MESSAGE = re.compile(r'message: "([^"]{1,80})"')

Credentials = Callable[[], "S3Credential"]


def available() -> bool:
    try:
        import obstore  # noqa: F401 - only whether it is installed
    except ImportError:
        return False
    return True


class GetFailed(Exception):
    """A GET that brought no usable answer, in one line; `transient`: worth a retry from where it stopped."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def failure(exc: BaseException, where: str) -> GetFailed:
    """obstore's error (a multi-line debug dump) as one line: the endpoint, then the status or the kind of failure."""
    status = status_of(exc)
    if status is not None:
        return GetFailed(f"{where} answered {status}", status >= 500 or status == 429)
    text = str(exc)
    kind = _KIND.search(text)
    detail = _OS_MESSAGE.search(text)
    reason = (kind.group(1) if kind else type(exc).__name__) + (f" ({detail.group(1)})" if detail else "")
    return GetFailed(f"{where}: {reason}", True)  # no answer at all: a connection, a timeout, a body cut short


class Stream(ViewStream):
    """A GET's body as obstore streams it: each chunk as it arrives, handed over as a view of obstore's own buffer."""

    def __init__(self, chunks: Iterator[bytes] | None, total: int, etag: str | None, where: str = "") -> None:
        self._chunks = chunks
        self._where = where
        self._pending = memoryview(b"")
        self.total = total
        self.etag = etag

    def read_view(self, limit: int) -> memoryview:
        if not self._pending:
            if self._chunks is None:
                return self._pending
            try:
                chunk = next(self._chunks, None)
            except Exception as exc:  # noqa: BLE001 - the body broke off (a stall past the read timeout, a reset)
                self._chunks = None
                raise failure(exc, self._where) from None
            if chunk is None:
                self._chunks = None
                return self._pending
            self._pending = memoryview(chunk)
        view = self._pending[:limit]
        self._pending = self._pending[len(view) :]
        return view

    def close(self) -> None:
        self._chunks = None  # dropping the stream drops the request
        self._pending = memoryview(b"")


class DataPlane:
    """One obstore store for a bucket; thread-safe (its requests run on obstore's own runtime)."""

    def __init__(
        self,
        bucket: str,
        endpoint: str | None,
        addressing: str,
        region: str,
        credentials: Credentials | None,
        *,
        connect_timeout: float,
        read_timeout: float,
        root_certificate: bytes | None = None,
    ) -> None:
        import obstore
        from obstore.store import S3Store as ObjectStore

        options: ClientConfig = {
            "allow_http": True,  # the endpoint the user named, http or https; AWS itself is https
            "connect_timeout": datetime.timedelta(seconds=connect_timeout),
            "read_timeout": datetime.timedelta(seconds=read_timeout),  # no byte for this long: the transfer resumes
            "timeout": datetime.timedelta(hours=24),  # whole GETs of large parts; a trickle is the rate guard's
        }
        if root_certificate:
            options["root_certificate"] = (
                root_certificate  # added to the system's roots, as botocore's ca_bundle is used
            )
        config: dict[str, Any] = {"region": region, "virtual_hosted_style_request": addressing == "virtual"}
        if endpoint is not None:
            # object_store wants the bucket in a virtual-hosted endpoint's host name itself.
            config["endpoint"] = _with_bucket(endpoint, bucket) if addressing == "virtual" else endpoint.rstrip("/")
        if credentials is None:
            config["skip_signature"] = True
        # What another process needs to reach the same bucket the same way (catalog_app/warm_sync.py), credentials aside.
        self.access: dict[str, Any] = {
            "bucket": bucket,
            "endpoint": endpoint,
            "addressing": addressing,
            "region": region,
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
        }
        self.has_root_certificate = bool(root_certificate)
        self._get = obstore.get  # looked up once: a resolve of many small files calls it for each
        self._store = ObjectStore(
            bucket, client_options=options, retry_config={"max_retries": 0}, credential_provider=credentials, **config
        )

    def list(self, prefix: str) -> tuple[list[tuple[str, int, str | None]], int] | None:
        """Every object under `prefix` (a full key prefix; "" for the whole bucket) as (key, size, ETag), and the
        requests that took (S3 pages listings by 1,000 keys). None: botocore is to list it, with its retries and its
        messages. object_store refuses keys it cannot represent (`a//b`, `..`: an error here) and shows a folder
        marker `a/b/` as `a/b`, so any listing that could hold one is botocore's too: an object of size 0 (what
        markers are, and how SeaweedFS lists its folders), a key listed twice, a key that is also a folder of
        another. Left: a marker with bytes in it and nothing under it reads as `a/b`, an object that is not there
        (a sync then uploads `a/b` if a manifest wants it, and reports it deleted if it is pruned)."""
        import obstore

        objects: list[tuple[str, int, str | None]] = []
        try:
            for page in obstore.list(self._store, prefix or None, chunk_size=1000):
                objects.extend(
                    (str(meta["path"]), int(meta["size"]), str(meta.get("e_tag") or "").strip('"') or None)
                    for meta in page
                )
        except Exception:  # noqa: BLE001 - a refusal, a 5xx, a key object_store cannot represent: botocore's to handle
            return None
        keys = {key for key, _, _ in objects}
        folders = {key[:i] for key in keys for i, c in enumerate(key) if c == "/"}
        if len(keys) < len(objects) or keys & folders or any(size == 0 for _, size, _ in objects):
            return None
        return objects, max(1, -(-len(objects) // 1000))

    def open(self, key: str, start: int, end: int | None, where: str) -> Stream | None:
        """GET `key` (a full key in the bucket) from `start` to `end` (None: the end of the object). None: the object
        is shorter than `start` (416); FileNotFoundError: there is no such object."""
        options: GetOptions | None = None
        if start or end is not None:
            options = {"range": {"offset": start} if end is None else (start, end)}
        try:
            result = self._get(self._store, key, options=options)
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped just below
            if status_of(exc) == 416:
                return None
            raise _get_error(exc, where) from None
        meta = result.meta
        etag = str(meta.get("e_tag") or "").strip('"') or None
        return Stream(iter(result.stream(min_chunk_size=1)), int(meta["size"]), etag, where)


def _get_error(exc: BaseException, where: str) -> Exception:
    """What a failed GET means to the transfer, by obstore's type: a refusal or a request the store cannot serve
    (final), another 4xx (final), else a GetFailed."""
    from obstore.exceptions import (
        AlreadyExistsError,
        InvalidPathError,
        NotModifiedError,
        NotSupportedError,
        PermissionDeniedError,
        PreconditionError,
        UnauthenticatedError,
    )

    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):  # object_store's types for 403 and 401
        refusal = 403 if isinstance(exc, PermissionDeniedError) else 401
        return StoreUnavailableError(
            f"{where} refused the GET ({refusal})",
            transient=False,
            hint="check the bucket name, endpoint and credentials (the standard AWS chain: "
            "env, profile, instance role)",
        )
    if isinstance(exc, (InvalidPathError, NotSupportedError, PreconditionError, NotModifiedError, AlreadyExistsError)):
        return StoreUnavailableError(
            f"{where} cannot serve the GET ({type(exc).__name__})",
            transient=False,
            hint="check the bucket name and endpoint",
        )
    status = status_of(exc)
    if status is not None and 400 <= status < 500 and status != 429:
        return StoreUnavailableError(
            f"{where} answered {status}", transient=False, hint="check the bucket name, endpoint and credentials"
        )
    return failure(exc, where)


def static_credentials(keys: EnvironmentKeys) -> Credentials:
    """What obstore signs with, for a key pair that never expires (the environment's: aws_env.py)."""
    static: S3Credential = {
        "access_key_id": keys.access_key_id,
        "secret_access_key": keys.secret_access_key,
        "token": keys.token,
        "expires_at": None,
    }
    return lambda: static


def listing_digest(objects: list[tuple[str, int, str | None]]) -> str:
    """One value for a listing (keys, sizes, ETags, in the order listed): equal only for the same objects."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(objects).encode()).hexdigest()


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of obstore's catch-all GenericError (None for any other type, and for no answer at all: a
    connection or timeout failure). The binding exposes no status attribute: its text's first line names it."""
    from obstore.exceptions import GenericError

    if not isinstance(exc, GenericError):
        return None
    match = _STATUS.search(str(exc).split("\n", 1)[0])
    return int(match.group(1)) if match else None


def transient(exc: BaseException) -> bool:
    """A GET failure worth a retry: 5xx, 429, or no answer (connection, timeout, a body cut short)."""
    return isinstance(exc, GetFailed) and exc.transient


def _with_bucket(endpoint: str, bucket: str) -> str:
    scheme, _, rest = endpoint.rstrip("/").partition("://")
    return f"{scheme}://{bucket}.{rest}"
