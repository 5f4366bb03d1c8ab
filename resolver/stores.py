"""Stores: where pinned objects live. One small interface, two implementations.

- `LocalStore`: a folder acting as the bucket (the embedded default; no server, no credentials).
- `S3Store`: any S3-compatible endpoint through boto3 (imported only when an S3 store is used).

Keys are relative to the store's root and always checked with `naming.check_relative_path`, so a
listing cannot make us read or write outside it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from catalog import naming
from catalog.errors import StoreUnavailableError, UnsafePathError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store root
    size: int
    etag: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class ObjectStream(Protocol):
    """An open GET: `total` is the whole object's size (not the range's)."""

    total: int

    def readinto(self, buffer: memoryview) -> int: ...

    def close(self) -> None: ...


class Store(Protocol):
    url: str  # what messages show; never carries credentials
    requests: Counter[str]  # requests made, by operation (botocore's names for S3)

    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream: ...

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        """Store `source` under `key` so that it appears whole or not at all; `sha256` (hex) lets the
        server check the bytes where it can."""
        ...

    def delete(self, key: str) -> None: ...

    def stream_uri(self, prefix: str) -> str: ...


class ObjectNotFound(LookupError):
    """Internal: the key is not in the store (the caller names the model and file)."""


def check_key(key: str) -> str:
    if (message := naming.check_relative_path(key)) is not None:
        raise UnsafePathError(f"refusing store key {key!r}: {message}")
    return key


class _FileStream:
    def __init__(self, path: Path, start: int, end: int | None) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.total = os.fstat(self._file.fileno()).st_size
        self._file.seek(start)
        self._left = (self.total if end is None else min(end, self.total)) - start

    def readinto(self, buffer: memoryview) -> int:
        if self._left <= 0:
            return 0
        count = self._file.readinto(buffer[: self._left])
        self._left -= count
        return count

    def close(self) -> None:
        self._file.close()


class LocalStore:
    """A folder as the bucket. Writes go to a temp file beside the target, renamed into place."""

    META_DIR = ".catalog-meta"  # sidecar metadata, the local stand-in for x-amz-meta-*

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = self.root.as_uri() + "/"
        self.requests: Counter[str] = Counter()

    def _path(self, key: str) -> Path:
        path = self.root / check_key(key)
        if self.META_DIR in Path(key).parts:
            raise UnsafePathError(f"refusing store key {key!r}: reserved folder {self.META_DIR}")
        return path

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        """Changes whenever the file is rewritten: the local stand-in for an S3 ETag."""
        return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.requests["ListObjectsV2"] += 1
        base = self.root / prefix if prefix else self.root
        if prefix and not prefix.endswith("/"):
            base = base.parent  # a key prefix, not a folder: filter below
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != self.META_DIR)
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                if filename.endswith(".part") or path.is_symlink():
                    continue
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    st = path.stat()
                    yield ObjectInfo(key, st.st_size, etag=self._etag(st))

    def head(self, key: str) -> ObjectInfo | None:
        self.requests["HeadObject"] += 1
        path = self._path(key)
        if not path.is_file():
            return None
        st = path.stat()
        return ObjectInfo(key, st.st_size, etag=self._etag(st), metadata=self._metadata(key))

    def _metadata(self, key: str) -> dict[str, str]:
        import json

        meta = self.root / self.META_DIR / (key + ".json")
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        self.requests["GetObject"] += 1
        path = self._path(key)
        try:
            return _FileStream(path, start, end)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        import json

        self.requests["PutObject"] += 1
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out, 8 * 1024 * 1024)
            if metadata:
                meta = self.root / self.META_DIR / (key + ".json")
                meta.parent.mkdir(parents=True, exist_ok=True)
                meta_tmp = meta.with_name(meta.name + f".{os.getpid()}.part")
                meta_tmp.write_text(json.dumps(dict(metadata), sort_keys=True))
                os.replace(meta_tmp, meta)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        st = target.stat()
        return ObjectInfo(key, st.st_size, etag=self._etag(st), metadata=dict(metadata or {}))

    def delete(self, key: str) -> None:
        self.requests["DeleteObject"] += 1
        self._path(key).unlink(missing_ok=True)
        (self.root / self.META_DIR / (key + ".json")).unlink(missing_ok=True)

    def stream_uri(self, prefix: str) -> str:
        return str(self.root / prefix) + "/"


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible endpoint. Credentials are never here: boto3's standard chain finds them."""

    endpoint_url: str | None = None  # None: boto3 reads AWS_ENDPOINT_URL / config itself
    region: str | None = None
    profile: str | None = None
    addressing_style: str = "auto"  # "path" for most S3-compatible servers
    unsigned: bool = False  # public buckets
    retry_mode: str = "standard"  # or "adaptive"
    max_attempts: int = 5
    max_pool_connections: int = 32
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> S3Options:
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        style = env.get("CATALOG_S3_ADDRESSING") or ("path" if endpoint else "auto")
        return cls(
            endpoint_url=endpoint,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            profile=env.get("AWS_PROFILE") or None,
            addressing_style=style,
            unsigned=env.get("CATALOG_S3_UNSIGNED", "") in ("1", "true", "yes"),
            retry_mode=env.get("AWS_RETRY_MODE") or "standard",
            max_attempts=_number(env, "AWS_MAX_ATTEMPTS", 5),
            read_timeout=_number(env, "CATALOG_S3_READ_TIMEOUT", 60),
        )

    def describe(self) -> str:
        return self.endpoint_url or "the default AWS endpoint"


def _number(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name) or default)
    except ValueError:
        raise UsageError(f"{name}={env[name]!r} is not a whole number") from None


def make_s3_client(options: S3Options) -> Any:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(
        signature_version=UNSIGNED if options.unsigned else None,
        s3={"addressing_style": options.addressing_style},
        retries={"mode": options.retry_mode, "max_attempts": options.max_attempts},
        max_pool_connections=options.max_pool_connections,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        # Checksums only where we ask for them: some S3-compatible servers reject the new defaults.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session(profile_name=options.profile, region_name=options.region or "us-east-1")
    return session.client("s3", endpoint_url=options.endpoint_url, config=config)


class _S3Stream:
    def __init__(self, body: Any, total: int) -> None:
        self._body = body
        self.total = total

    def readinto(self, buffer: memoryview) -> int:
        return int(self._body.readinto(buffer)) if self._body is not None else 0

    def close(self) -> None:
        if self._body is not None:
            self._body.close()


class S3Store:
    """A bucket (and optional base prefix) on any S3-compatible endpoint."""

    def __init__(self, bucket: str, base: str, options: S3Options, client_factory: Callable[[S3Options], Any] = make_s3_client,
                 *, part_size: int = 64 * 1024 * 1024, concurrency: int = 8) -> None:
        self.bucket = bucket
        self.base = base
        self.options = options
        self.url = f"s3://{bucket}/{base}"
        self.part_size = part_size  # uploads larger than this go multipart
        self.concurrency = concurrency
        self.requests: Counter[str] = Counter()
        self._client_factory = client_factory
        self._client: Any = None
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        """One client for all threads (botocore clients are thread-safe; building one costs ~100 ms)."""
        with self._client_lock:
            if self._client is None:
                client = self._client_factory(self.options)
                client.meta.events.register("before-call.s3", self._count)
                self._client = client
            return self._client

    def _count(self, model: Any, **_: Any) -> None:
        self.requests[str(model.name)] += 1

    def _where(self) -> str:
        return f"{self.url} (endpoint {self.options.describe()})"

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one request; turn botocore's failures into one-line errors naming the store, never secrets."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            return fn(*args, **kwargs)
        except NoCredentialsError:
            raise StoreUnavailableError(
                f"no credentials for {self._where()}",
                hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (the standard chain), or CATALOG_S3_UNSIGNED=1 for a public bucket",
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
            raise StoreUnavailableError(f"cannot reach {self._where()}: {type(exc).__name__}",
                                        hint="check AWS_ENDPOINT_URL / --store and the network") from None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (which ends in '/', so the listing stops at the boundary), paginated."""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = iter(paginator.paginate(Bucket=self.bucket, Prefix=self.base + prefix))
        while (page := self._call(next, pages, None)) is not None:
            for item in page.get("Contents", []):
                key = item["Key"][len(self.base):]
                yield ObjectInfo(key, int(item["Size"]), etag=str(item.get("ETag", "")).strip('"') or None)

    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        try:
            out = self._call(self.client.head_object, Bucket=self.bucket, Key=self.base + check_key(key))
        except ClientError:
            return None
        return ObjectInfo(key, int(out["ContentLength"]), etag=str(out.get("ETag", "")).strip('"') or None,
                          metadata=dict(out.get("Metadata", {})))

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
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
        return _S3Stream(out["Body"], total)

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        """One PUT with the whole-object ChecksumSHA256, or a multipart upload (part checksums) for large
        files; either way S3 makes the object visible only once it is complete."""
        full_key = self.base + check_key(key)
        size = source.stat().st_size
        if size <= self.part_size:
            extra: dict[str, Any] = {"ChecksumSHA256": _b64(sha256)} if sha256 else {}
            with open(source, "rb") as body:
                out = self._call(self.client.put_object, Bucket=self.bucket, Key=full_key, Body=body,
                                 Metadata=dict(metadata or {}), **extra)
            return ObjectInfo(key, size, etag=str(out.get("ETag", "")).strip('"') or None, metadata=dict(metadata or {}))
        return self._put_multipart(key, full_key, source, size, metadata)

    def _put_multipart(self, key: str, full_key: str, source: Path, size: int, metadata: Mapping[str, str] | None) -> ObjectInfo:
        import hashlib
        from concurrent.futures import ThreadPoolExecutor

        upload = self._call(self.client.create_multipart_upload, Bucket=self.bucket, Key=full_key,
                            Metadata=dict(metadata or {}), ChecksumAlgorithm="SHA256")
        upload_id = upload["UploadId"]

        def send(number: int) -> dict[str, Any]:
            with open(source, "rb") as f:
                f.seek((number - 1) * self.part_size)
                data = f.read(self.part_size)
            digest = _b64(hashlib.sha256(data).hexdigest())
            out = self._call(self.client.upload_part, Bucket=self.bucket, Key=full_key, UploadId=upload_id,
                             PartNumber=number, Body=data, ChecksumSHA256=digest)
            return {"PartNumber": number, "ETag": out["ETag"], "ChecksumSHA256": digest}

        count = (size + self.part_size - 1) // self.part_size
        try:
            with ThreadPoolExecutor(max(1, self.concurrency), thread_name_prefix="catalog-upload") as pool:
                parts = list(pool.map(send, range(1, count + 1)))
            out = self._call(self.client.complete_multipart_upload, Bucket=self.bucket, Key=full_key, UploadId=upload_id,
                             MultipartUpload={"Parts": parts})
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

    def stream_uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{self.base}{prefix}"


def _b64(sha256_hex: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def open_store(url: str, env: Mapping[str, str] | None = None) -> Store:
    """A store from a URL: `s3://bucket/[base/]`, `file:///path/`, or a plain folder path."""
    env = os.environ if env is None else env
    if url.startswith("s3://"):
        if (message := naming.check_s3_prefix(url if url.endswith("/") else url + "/", allow_root=True)) is not None:
            raise UsageError(f"bad store URL: {message}")
        parsed = naming.parse_s3_url(url if url.endswith("/") else url + "/")
        return S3Store(parsed.bucket, parsed.key, S3Options.from_env(env))
    if url.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return LocalStore(Path(unquote(urlparse(url).path)))
    if "://" in url:
        raise UsageError(f"unsupported store URL {url!r}", hint="use s3://bucket/, file:///path/ or a folder path")
    return LocalStore(Path(url))
