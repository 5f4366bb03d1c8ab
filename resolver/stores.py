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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

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

    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream: ...

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None) -> ObjectInfo: ...

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

    def _path(self, key: str) -> Path:
        path = self.root / check_key(key)
        if self.META_DIR in Path(key).parts:
            raise UnsafePathError(f"refusing store key {key!r}: reserved folder {self.META_DIR}")
        return path

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = self.root / prefix if prefix else self.root
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != self.META_DIR)
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                if filename.endswith(".part") or path.is_symlink():
                    continue
                key = path.relative_to(self.root).as_posix()
                yield ObjectInfo(key, path.stat().st_size, metadata=self._metadata(key))

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        if not path.is_file():
            return None
        return ObjectInfo(key, path.stat().st_size, metadata=self._metadata(key))

    def _metadata(self, key: str) -> dict[str, str]:
        import json

        meta = self.root / self.META_DIR / (key + ".json")
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        path = self._path(key)
        try:
            return _FileStream(path, start, end)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None) -> ObjectInfo:
        import json

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
        return ObjectInfo(key, target.stat().st_size, metadata=dict(metadata or {}))

    def delete(self, key: str) -> None:
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
            max_attempts=int(env.get("AWS_MAX_ATTEMPTS") or 5),
        )

    def describe(self) -> str:
        return self.endpoint_url or "the default AWS endpoint"


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

    def __init__(self, bucket: str, base: str, options: S3Options, client_factory: Callable[[S3Options], Any] = make_s3_client) -> None:
        self.bucket = bucket
        self.base = base
        self.options = options
        self.url = f"s3://{bucket}/{base}"
        self._client_factory = client_factory
        self._client: Any = None
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        """One client for all threads (botocore clients are thread-safe; building one costs ~100 ms)."""
        with self._client_lock:
            if self._client is None:
                self._client = self._client_factory(self.options)
            return self._client

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

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None) -> ObjectInfo:
        with open(source, "rb") as body:
            self._call(self.client.put_object, Bucket=self.bucket, Key=self.base + check_key(key), Body=body,
                       Metadata=dict(metadata or {}))
        info = self.head(key)
        assert info is not None
        return info

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, Bucket=self.bucket, Key=self.base + check_key(key))

    def stream_uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{self.base}{prefix}"


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
