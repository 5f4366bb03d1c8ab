"""Any S3-compatible endpoint: obstore for GETs and listings (s3_gets.py says why), boto3 for the other control
calls (head, put, delete) and for credentials but the environment's (aws_env.py says why); each imported only
when it is used, so a resolve or a no-op sync handed its keys in the environment never imports boto3."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog import naming, urls
from catalog.errors import CatalogError, StoreUnavailableError, UsageError
from catalog.settings import S3Options, Settings
from resolver.stores.aws_env import ca_bundle_known, environment_keys
from resolver.stores.base import ObjectInfo, ObjectNotFound, ObjectStream, Store, StreamTarget, check_key
from resolver.stores.s3_gets import Credentials, DataPlane, listing_digest, static_credentials
from resolver.stores.s3_gets import available as gets_available
from resolver.stores.s3_gets import transient as get_transient

if TYPE_CHECKING:
    from http.client import HTTPResponse

    from obstore.store import S3Credential

log = logging.getLogger(__name__)

DELETE_BATCH = 1000  # the most keys S3's DeleteObjects takes in one request


CREDENTIAL_CHAIN = (
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the AWS config files, the instance role "
    "(the AWS chain), then S3_ACCESS_KEY_ID/S3_SECRET_ACCESS_KEY, then ~/.s3cfg"
)


def make_s3_client(options: S3Options, fallback_keys: tuple[str, str] | None = None, fallbacks: bool = True) -> Any:
    """A client for `options`, with the credentials of `make_s3_session`."""
    return s3_client(make_s3_session(options, fallback_keys, fallbacks), options)


def make_s3_session(options: S3Options, fallback_keys: tuple[str, str] | None = None, fallbacks: bool = True) -> Any:
    """A boto3 session for `options`. Credentials: the AWS chain; when it finds none, `fallback_keys` (the s3cmd
    spelling S3_ACCESS_KEY_ID/S3_SECRET_ACCESS_KEY), then ~/.s3cfg's access_key/secret_key (as tensorizer);
    with `fallbacks` False, neither (a mirror's own profile: nothing meant for the primary store)."""
    import boto3

    region = options.region or "us-east-1"
    try:
        session = boto3.session.Session(profile_name=options.profile, region_name=region)
    except Exception as exc:  # noqa: BLE001 - botocore's ProfileNotFound and config parse errors
        raise UsageError(
            f"AWS_PROFILE={options.profile!r}: {exc}", hint="name a profile of the AWS config file"
        ) from None
    if not options.unsigned and session.get_credentials() is None and fallbacks:
        keys = fallback_keys or s3cfg_keys()
        if keys is not None:
            session = boto3.session.Session(
                aws_access_key_id=keys[0], aws_secret_access_key=keys[1], region_name=region
            )
    elif fallback_keys is not None:
        log.warning("ignoring S3_ACCESS_KEY_ID/S3_SECRET_ACCESS_KEY: the AWS credential chain found credentials")
    return session


def s3_client(session: Any, options: S3Options) -> Any:
    """The S3 client of `session` for `options`."""
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(
        signature_version=UNSIGNED if options.unsigned else None,
        # "auto" is left to botocore, so a profile's own `s3 = addressing_style = ...` still applies.
        s3={"addressing_style": options.addressing_style} if options.addressing_style != "auto" else None,
        retries={
            "mode": options.retry_mode,
            "total_max_attempts": options.max_attempts,
        },  # AWS_MAX_ATTEMPTS counts the first try
        max_pool_connections=options.max_pool_connections,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        # Checksums only where we ask for them: some S3-compatible servers reject the new defaults.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", endpoint_url=options.endpoint_url, config=config)


def s3cfg_keys(path: Path | None = None) -> tuple[str, str] | None:
    """~/.s3cfg's [default] access_key and secret_key, as s3cmd and tensorizer read them (None: no such file)."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    home = Path.home()
    if path is None and not home.is_absolute():
        return None  # HOME empty or relative: no ~/.s3cfg (never a .s3cfg of the working directory)
    try:
        if not parser.read(path or home / ".s3cfg"):
            return None
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    section = parser["default"] if parser.has_section("default") else None
    if section is None or not section.get("access_key") or not section.get("secret_key"):
        return None
    return section["access_key"], section["secret_key"]


class _S3Stream:
    """A GET's body. Reads go straight from the socket into the caller's buffer when botocore's body is
    urllib3 over http.client (urllib3's own readinto reads into a temporary bytes object, then copies);
    a body read to its end hands its connection back to the pool, so the next GET reuses it."""

    def __init__(self, body: Any, total: int, etag: str | None = None) -> None:
        self._body = body
        self.total = total
        self.etag = etag  # of the object this GET read
        import http.client  # botocore's bodies only (loaded with it): a store that never uses botocore never imports it

        raw = getattr(body, "_raw_stream", None)
        fp = getattr(raw, "_fp", None)
        # Only botocore's plain body: a subclass (a checksum-validating body) must see every byte itself.
        direct = (
            type(body).__name__ == "StreamingBody"
            and isinstance(fp, http.client.HTTPResponse)
            and callable(getattr(raw, "release_conn", None))
            and fp.length is not None
            and not fp.chunked
        )
        self._raw = raw if direct else None
        self._fp: HTTPResponse | None = fp if direct else None

    def readinto(self, buffer: memoryview) -> int:
        if self._body is None:
            return 0
        fp = self._fp
        if fp is None:
            return int(self._body.readinto(buffer))
        count = fp.readinto1(buffer)  # one socket read at most: a trickle is seen as it comes (the rate guard)
        if fp.length == 0 and self._raw is not None:  # every byte read: the connection is clean, reuse it
            self._raw.release_conn()
            self._raw = None
        return count

    def close(self) -> None:
        if self._body is not None:
            self._body.close()  # after release_conn this closes no pooled connection


class S3Store(Store):
    """A bucket (and optional base prefix) on any S3-compatible endpoint."""

    unreachable_hint = "the store is unreachable or failing; retry later or check --store / AWS_ENDPOINT_URL"

    def __init__(
        self,
        bucket: str,
        base: str,
        options: S3Options,
        *,
        fallback_keys: tuple[str, str] | None = None,
        fallbacks: bool = True,
        part_size: int = 64 * 1024 * 1024,
        concurrency: int = 8,
        fast_gets: bool = True,
    ) -> None:
        self.bucket = bucket
        self.base = base
        self.options = options
        self.url = f"s3://{bucket}/{base}"
        self._where_said: tuple[S3Options, str] | None = None  # every GET names the store, for its messages
        self.part_size = part_size  # uploads larger than this go multipart
        self.concurrency = concurrency
        self.requests: Counter[str] = Counter()
        self._fallback_keys = fallback_keys  # make_s3_session's: S3_ACCESS_KEY_ID/S3_SECRET_ACCESS_KEY, ~/.s3cfg
        self._fallbacks = fallbacks
        self._session: Any = None
        self._client: Any = None
        self._plane: DataPlane | None = None
        self._fast_gets = fast_gets  # False: every GET through botocore (no obstore, or a test of that path)
        self.credentials_source = ""  # "unsigned", "environment" (aws_env.py) or "boto3", once the data plane is made
        self.listed: list[tuple[str, str | None]] = []  # (full prefix, digest of its listing; None: botocore listed it)
        self._lock = threading.RLock()

    @property
    def session(self) -> Any:
        """The boto3 session: the credentials (boto3's import and the chain: ~0.4 s here)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._session = make_s3_session(self.options, self._fallback_keys, self._fallbacks)
        return self._session

    @property
    def client(self) -> Any:
        """One client for all threads (botocore clients are thread-safe; building one costs ~100 ms)."""
        if self._client is None:  # read without the lock once built: 16 threads asking at once contended on it
            with self._lock:
                if self._client is None:
                    client = s3_client(self.session, self.options)
                    client.meta.events.register("before-call.s3", self._count)
                    self._client = client
        return self._client

    def _gets(self) -> DataPlane | None:
        """The GET data plane, built on first use (None: GETs go through botocore)."""
        if self._plane is None and self._fast_gets:
            with self._lock:
                if self._plane is None and self._fast_gets:
                    self._plane = self._make_plane()
                    self._fast_gets = self._plane is not None
        return self._plane

    def _make_plane(self) -> DataPlane | None:
        options = self.options
        if not gets_available():
            return None
        if options.endpoint_url is not None and options.profile is None:
            endpoint: str | None = options.endpoint_url
            style = "path" if options.addressing_style == "auto" else options.addressing_style
        elif options.endpoint_url is None and options.region is None:
            return None  # AWS itself in a region not named: botocore follows the bucket's region, obstore would not
        else:
            endpoint, style = self.endpoint()  # a profile's endpoint_url and addressing, as the client sees them
        return DataPlane(
            self.bucket,
            endpoint,
            "path" if style == "path" else "virtual",
            options.region or "us-east-1",
            self._credentials(),
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            root_certificate=self._ca_bundle() if endpoint is None or endpoint.startswith("https:") else None,
        )

    def _ca_bundle(self) -> bytes | None:
        """The CA bundle botocore verifies TLS with (AWS_CA_BUNDLE, a profile's ca_bundle), for the GETs to trust too."""
        known, path = ca_bundle_known() if self.options.profile is None else (False, None)
        if not known:
            path = self.session._session.get_config_variable("ca_bundle")  # noqa: SLF001 - boto3 exposes no other way
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError:
            return None  # botocore says what is wrong with it on its first request

    def _credentials(self) -> Credentials | None:
        """What obstore signs with: the environment's keys where botocore would take those (aws_env.py), else the
        session's credentials (refreshed by botocore when they are temporary)."""
        if self.options.unsigned:
            self.credentials_source = "unsigned"
            return None
        keys = environment_keys() if self.options.profile is None else None
        if keys is not None:  # what botocore would sign with, without its import (aws_env.py)
            self.credentials_source = "environment"
            if self._fallback_keys is not None:
                log.warning(
                    "ignoring S3_ACCESS_KEY_ID/S3_SECRET_ACCESS_KEY: the AWS credential chain found credentials"
                )
                self._fallback_keys = None  # said once; the chain finds the same keys if boto3 is needed later
            return static_credentials(keys)
        self.credentials_source = "boto3"
        found = self.session.get_credentials()
        if found is None:
            raise StoreUnavailableError(
                f"no credentials for {self._where()}; tried {CREDENTIAL_CHAIN}",
                hint="set one of those, or CATALOG_S3_UNSIGNED=1 for a public bucket",
                transient=False,
            )
        refreshable = hasattr(found, "refresh_needed")

        def provide() -> S3Credential:
            frozen = found.get_frozen_credentials()
            return {
                "access_key_id": frozen.access_key,
                "secret_access_key": frozen.secret_key,
                "token": frozen.token,
                "expires_at": datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
                if refreshable
                else None,
            }

        return provide

    def warm_listings(self) -> tuple[dict[str, Any], Sequence[tuple[str, str]]] | None:
        """The data plane's parameters and this process's listings, when every listing went through it, signed with
        the environment's keys or not at all, trusting the system's roots: what boto3 is not needed to repeat."""
        plane = self._plane
        if plane is None or plane.has_root_certificate or self.credentials_source not in ("environment", "unsigned"):
            return None
        listed = [(prefix, digest) for prefix, digest in self.listed if digest is not None]
        if not listed or len(listed) < len(self.listed):
            return None
        return {**plane.access, "unsigned": self.credentials_source == "unsigned"}, listed

    def prepare(self) -> None:
        """Build what the first request needs now (boto3's import and the credentials, the GET data plane or the
        client: ~0.3 s), e.g. in a background thread while the caller sets up, rather than on the first request
        while other threads wait."""
        if self._gets() is None:
            _ = self.client

    def _count(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.requests[str(model.name)] += 1

    def _where(self) -> str:
        said = self._where_said
        if said is None or said[0] is not self.options:
            said = self._where_said = (self.options, f"{self.url} (endpoint {self.options.describe()})")
        return said[1]

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one request; turn botocore's failures into one-line errors naming the store, never secrets."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return fn(*args, **kwargs)
        except NoCredentialsError:
            raise StoreUnavailableError(
                f"no credentials for {self._where()}; tried {CREDENTIAL_CHAIN}",
                hint="set one of those, or CATALOG_S3_UNSIGNED=1 for a public bucket",
                transient=False,
            ) from None
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound", "InvalidRange"):
                raise
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            raise StoreUnavailableError(
                f"{self._where()} answered {code or status}",
                hint="check the bucket name, endpoint and credentials (the standard AWS chain: env, profile, instance role)",
                transient=isinstance(status, int) and (status >= 500 or status == 429),
            ) from None
        except BotoCoreError as exc:
            raise StoreUnavailableError(
                f"cannot reach {self._where()}: {type(exc).__name__}",
                hint="check AWS_ENDPOINT_URL / --store and the network",
            ) from None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (which ends in '/', so the listing stops at the boundary), paginated: through
        obstore when it can list it exactly (DataPlane.list), else botocore."""
        plane = self._gets()
        listed = plane.list(self.base + prefix) if plane is not None else None
        if listed is not None:
            objects, requests = listed
            with self._lock:
                self.requests["ListObjectsV2"] += requests
                self.listed.append((self.base + prefix, listing_digest(objects)))
            for key, size, etag in objects:
                yield ObjectInfo(key[len(self.base) :], size, etag=etag)
            return
        with self._lock:
            self.listed.append((self.base + prefix, None))
        paginator = self.client.get_paginator("list_objects_v2")
        pages = iter(paginator.paginate(Bucket=self.bucket, Prefix=self.base + prefix))
        while (page := self._call(next, pages, None)) is not None:
            for item in page.get("Contents", []):
                key = item["Key"][len(self.base) :]
                yield ObjectInfo(key, int(item["Size"]), etag=str(item.get("ETag", "")).strip('"') or None)

    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        try:
            out = self._call(self.client.head_object, Bucket=self.bucket, Key=self.base + check_key(key))
        except ClientError:
            return None
        return ObjectInfo(
            key,
            int(out["ContentLength"]),
            etag=str(out.get("ETag", "")).strip('"') or None,
            metadata=dict(out.get("Metadata", {})),
        )

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        plane = self._gets()
        if plane is None:
            return self._open_botocore(key, start, end)
        full_key = self.base + check_key(key)
        with self._lock:
            self.requests["GetObject"] += 1
        try:
            stream = plane.open(full_key, start, end, self._where())
        except FileNotFoundError:
            raise ObjectNotFound(key) from None
        if stream is None:  # shorter than we asked for
            info = self.head(key)
            return _S3Stream(None, info.size if info else 0)
        return stream

    def _open_botocore(self, key: str, start: int, end: int | None) -> ObjectStream:
        from botocore.exceptions import ClientError

        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self.base + check_key(key)}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            out = self._call(self.client.get_object, **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":  # shorter than we asked for
                info = self.head(key)
                return _S3Stream(None, info.size if info else 0)
            raise ObjectNotFound(key) from None
        content_range = out.get("ContentRange")
        total = int(content_range.rsplit("/", 1)[1]) if content_range else int(out["ContentLength"])
        return _S3Stream(out["Body"], total, str(out.get("ETag", "")).strip('"') or None)

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        """One PUT with the whole-object ChecksumSHA256, or a multipart upload (part checksums) for large
        files; either way S3 makes the object visible only once it is complete."""
        full_key = self.base + check_key(key)
        size = source.stat().st_size
        if size <= self.part_size:
            extra: dict[str, Any] = {"ChecksumSHA256": _b64(sha256)} if sha256 else {}
            with open(source, "rb") as body:
                out = self._call(
                    self.client.put_object,
                    Bucket=self.bucket,
                    Key=full_key,
                    Body=body,
                    Metadata=dict(metadata or {}),
                    **extra,
                )
            return ObjectInfo(
                key, size, etag=str(out.get("ETag", "")).strip('"') or None, metadata=dict(metadata or {})
            )
        return self._put_multipart(key, full_key, source, size, metadata)

    def _put_multipart(
        self, key: str, full_key: str, source: Path, size: int, metadata: Mapping[str, str] | None
    ) -> ObjectInfo:
        """Parts read from the file as they are sent, never held whole in memory (8 parts of 64 MiB in flight once
        made a 1 GiB upload peak at 329 MiB): each is hashed for its ChecksumSHA256, then streamed."""
        from concurrent.futures import ThreadPoolExecutor

        from resolver.hashing import hash_range

        upload = self._call(
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=full_key,
            Metadata=dict(metadata or {}),
            ChecksumAlgorithm="SHA256",
        )
        upload_id = upload["UploadId"]

        def send(number: int) -> dict[str, Any]:
            offset = (number - 1) * self.part_size
            length = min(self.part_size, size - offset)
            digest = _b64(hash_range(source, offset, length))
            with _FileSlice(source, offset, length) as body:
                out = self._call(
                    self.client.upload_part,
                    Bucket=self.bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                    ChecksumSHA256=digest,
                )
            return {"PartNumber": number, "ETag": out["ETag"], "ChecksumSHA256": digest}

        count = (size + self.part_size - 1) // self.part_size
        try:
            with ThreadPoolExecutor(max(1, self.concurrency), thread_name_prefix="catalog-upload") as pool:
                parts = list(pool.map(send, range(1, count + 1)))
            out = self._call(
                self.client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=full_key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            )
        except BaseException:
            # Nothing was visible under the key; free the parts instead of leaving them billed.
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full_key, UploadId=upload_id)
            except Exception:  # noqa: BLE001 - the original error is the one to report
                log.warning("could not abort the multipart upload of %s", key)
            raise
        return ObjectInfo(key, size, etag=str(out.get("ETag", "")).strip('"') or None, metadata=dict(metadata or {}))

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, Bucket=self.bucket, Key=self.base + check_key(key))

    def delete_many(self, keys: Sequence[str]) -> dict[str, CatalogError]:
        """DeleteObjects, 1,000 keys a request (a prune of 5,000 objects is 5 requests, not 5,000). Returns the
        keys not deleted, with why: refused keys, the errors S3 lists, every key of a batch that failed whole."""
        failed: dict[str, CatalogError] = {}
        full: list[str] = []
        for key in keys:
            try:
                full.append(self.base + check_key(key))
            except CatalogError as exc:
                failed[key] = exc
        for start in range(0, len(full), DELETE_BATCH):
            batch = full[start : start + DELETE_BATCH]
            try:
                out = self._call(
                    self.client.delete_objects,
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except CatalogError as exc:
                failed |= {k[len(self.base) :]: exc for k in batch}
                continue
            for error in out.get("Errors", []):
                key = str(error.get("Key", ""))[len(self.base) :]
                failed[key] = StoreUnavailableError(
                    f"{self._where()} did not delete {key}: {error.get('Code', '')} {error.get('Message', '')}".rstrip(),
                    transient=False,
                )
        return failed

    def stream_uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{self.base}{prefix}"

    def endpoint(self) -> tuple[str | None, str]:
        """The endpoint and addressing style the client really uses: the settings', else the AWS profile's
        own `endpoint_url` (which boto3 reads itself, and an engine does not)."""
        endpoint, style = self.options.endpoint_url, self.options.addressing_style
        if endpoint is None:
            used = str(self.client.meta.endpoint_url or "")
            if used and not used.split("://", 1)[-1].split("/", 1)[0].endswith("amazonaws.com"):
                endpoint = used
        if style == "auto":
            style = str((self.client.meta.config.s3 or {}).get("addressing_style") or "auto")
            if style == "auto" and endpoint is not None:
                style = "path"  # an S3-compatible endpoint named by a host rarely serves virtual-host buckets
        return endpoint, style

    def stream_target(self) -> StreamTarget:
        """The endpoint and addressing the resolver used; `env` spells them in the variables runai and tensorizer read."""
        env: dict[str, str] = {}
        endpoint, style = self.endpoint()
        if endpoint:
            env["AWS_ENDPOINT_URL"] = endpoint
        if self.options.region:
            env["AWS_REGION"] = self.options.region
        if style in ("path", "virtual"):
            env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] = "1" if style == "virtual" else "0"
        if self.options.unsigned:
            env["RUNAI_STREAMER_S3_UNSIGNED"] = "1"  # a public bucket: the streamer must not sign either
        return StreamTarget(
            "s3",
            endpoint,
            style if style in ("path", "virtual") else None,
            self.options.region,
            self.options.unsigned,
            env,
        )

    def transient(self, exc: BaseException) -> bool:
        """The default, plus obstore's failures without an answer or with a 5xx/429, and botocore's and urllib3's own
        while a body streams (a reset, a read timeout, an incomplete read); a refused request arrives here as a
        StoreUnavailableError that says whether to retry."""
        if super().transient(exc):
            return True
        if isinstance(exc, CatalogError):
            return False
        if get_transient(exc):
            return True
        # Only a library that is loaded can have raised: classifying never imports botocore (0.3 s) for nothing.
        botocore, urllib3 = sys.modules.get("botocore.exceptions"), sys.modules.get("urllib3.exceptions")
        return (botocore is not None and isinstance(exc, botocore.BotoCoreError)) or (
            urllib3 is not None and isinstance(exc, urllib3.HTTPError)
        )


class _FileSlice:
    """`length` bytes of a file from `offset` as a seekable body: botocore reads it to sign the payload, then to send
    it (and again on a retry), in blocks, so a part never sits whole in memory."""

    def __init__(self, path: Path, offset: int, length: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close() / the with block
        self._start = offset
        self._length = length
        self._position = 0
        self._file.seek(offset)

    def __len__(self) -> int:
        return self._length

    def __enter__(self) -> _FileSlice:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self, size: int = -1) -> bytes:
        left = self._length - self._position
        data = self._file.read(left if size is None or size < 0 else min(size, left)) if left > 0 else b""
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self._length}[whence]
        self._position = max(0, min(self._length, base + offset))
        self._file.seek(self._start + self._position)
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._file.close()


def _b64(sha256_hex: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def from_url(url: str, settings: Settings) -> S3Store:
    """`s3://bucket/[base/]` with the settings' S3 options, or `...?endpoint=...&addressing=...&unsigned=1&profile=P`
    on top (a mirror on another S3 server).

    Credentials go only where they belong: a store on another endpoint than the settings' own is unsigned
    unless `profile=NAME` names the AWS profile whose credentials it takes (the primary's keys, session token
    included, never reach another host). `unsigned=0` without a profile is refused: there is nothing to sign
    with that is meant for that endpoint."""
    if (problem := urls.check_store_url(url)) is not None:
        raise UsageError(
            f"bad store URL: {problem}",
            hint="s3://bucket/[base/][?endpoint=http(s)://host:port&addressing=path|virtual|auto&unsigned=1"
            "&profile=NAME]; credentials come from the AWS chain or a profile, never the URL",
        )
    options = settings.s3
    base, _, query = url.partition("?")
    given = urls.s3_query(query) if query else {}
    if "endpoint" in given:
        options = dataclasses.replace(
            options,
            endpoint_url=given["endpoint"],
            addressing_style="path" if "addressing" not in given else options.addressing_style,
        )
    if "addressing" in given:
        options = dataclasses.replace(options, addressing_style=given["addressing"])
    if "unsigned" in given:
        options = dataclasses.replace(options, unsigned=given["unsigned"].lower() in ("1", "true", "yes"))
    fallbacks = True
    if "profile" in given:  # that profile's credentials, and nothing meant for the primary store
        options = dataclasses.replace(options, profile=given["profile"], unsigned=False)
        fallbacks = False
    elif "endpoint" in given and not urls.same_endpoint(given["endpoint"], settings.s3.endpoint_url):
        if "unsigned" in given and not options.unsigned:
            raise UsageError(
                f"bad store URL: {urls.redact(url)!r} asks for signed requests to another endpoint "
                "without credentials for it",
                hint="add profile=NAME (an AWS profile holding its credentials), or drop unsigned=0",
            )
        options = dataclasses.replace(options, unsigned=True)
    parsed = naming.parse_s3_url(base if base.endswith("/") else base + "/")
    return S3Store(
        parsed.bucket,
        parsed.key,
        options,
        fallback_keys=settings.s3_keys if fallbacks else None,
        fallbacks=fallbacks,
        part_size=settings.part_size or 64 * 1024 * 1024,
        concurrency=settings.concurrency or 8,
    )
