"""The Hugging Face Hub as a source, through huggingface_hub (imported only here, only when used).

`HubStore` makes one repo at one pinned revision look like a read-only store whose keys are the
repo's paths, so Hub downloads go through the same verify-while-downloading transfer as the bucket
(hashing, resume by range, retries). It honours HF_ENDPOINT and the standard token (HF_TOKEN or the
stored login) and answers 429/503 by waiting for Retry-After. `list_repo_files` reads sizes and LFS
sha256 from the Hub's metadata (no download).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from catalog.errors import StoreUnavailableError, UsageError
from catalog.settings import Settings
from resolver.stores import ObjectInfo, ObjectNotFound, ObjectStream

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
MAX_RETRY_AFTER = 120.0
T = TypeVar("T")


@dataclass(frozen=True)
class HubOptions:
    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = field(default=None, repr=False)  # None: huggingface_hub's own lookup (the stored login)
    attempts: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> HubOptions:
        return cls(endpoint=settings.hub_endpoint, token=settings.hub_token)


class RetryLater(Exception):
    """A 429/503 (or 5xx): transient; `retry_after` is what the server asked for, in seconds."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return min(float(value), MAX_RETRY_AFTER) if value is not None else None
    except ValueError:
        return None


class _HttpStream:
    def __init__(self, response: Any, total: int) -> None:
        self._response = response
        self._chunks: Iterator[bytes] = response.iter_raw(4 * 1024 * 1024)
        self._pending = b""
        self.total = total

    def readinto(self, buffer: memoryview) -> int:
        if not self._pending:
            self._pending = next(self._chunks, b"")
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def close(self) -> None:
        self._response.close()


class HubStore:
    """One repo at one revision, read-only; keys are paths in the repo."""

    def __init__(self, repo: str, revision: str, options: HubOptions) -> None:
        self.repo = repo
        self.revision = revision
        self.options = options
        self.url = f"hf://{repo}@{revision[:12]} ({options.endpoint})"
        self.requests: Counter[str] = Counter()

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        headers = dict(build_hf_headers(token=self.options.token))
        headers["Accept-Encoding"] = "identity"  # sizes and hashes are of the raw bytes
        headers.update(extra)
        return headers

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        from huggingface_hub import get_session, hf_hub_url

        url = hf_hub_url(self.repo, key, revision=self.revision, endpoint=self.options.endpoint)
        extra = {"Range": f"bytes={start}-{'' if end is None else end - 1}"} if start or end is not None else {}
        session = get_session()
        self.requests["GET"] += 1
        response = session.send(session.build_request("GET", url, headers=self._headers(extra)), stream=True, follow_redirects=True)
        status = response.status_code
        if status in (200, 206):
            content_range = response.headers.get("Content-Range")
            total = int(content_range.rsplit("/", 1)[1]) if content_range else int(response.headers.get("Content-Length", -1))
            return _HttpStream(response, total)
        response.close()
        if status == 416:
            total = int(response.headers.get("Content-Range", "*/0").rsplit("/", 1)[1])
            return _EmptyStream(total)
        if status == 404:
            raise ObjectNotFound(key)
        if status in (401, 403):
            raise StoreUnavailableError(f"{self.url} refused access ({status})",
                                        hint="set HF_TOKEN (or `hf auth login`) for gated or private repos", transient=False)
        if status == 429 or status >= 500:
            raise RetryLater(f"{self.url} answered {status}", _retry_after(response.headers))
        raise StoreUnavailableError(f"{self.url} answered {status} for {key}", transient=False)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for item in list_repo_files(self.repo, self.revision, self.options):
            if item.path.startswith(prefix):
                yield ObjectInfo(item.path, item.size)

    def head(self, key: str) -> ObjectInfo | None:
        return next((o for o in self.list("") if o.key == key), None)

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        raise UsageError("the Hub is a read-only source here")

    def delete(self, key: str) -> None:
        raise UsageError("the Hub is a read-only source here")

    def stream_env(self) -> dict[str, str]:
        return {}  # never streamed from: a model fetched from the Hub is fully local

    def stream_uri(self, prefix: str) -> str:
        raise UsageError("weights cannot be streamed from the Hub; resolve with --materialize-weights")


class _EmptyStream:
    def __init__(self, total: int) -> None:
        self.total = total

    def readinto(self, buffer: memoryview) -> int:
        return 0

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RemoteFile:
    """A file in a Hub repo at a revision: its size, and its sha256 when the Hub knows it (LFS files)."""

    path: str
    size: int
    sha256: str | None
    blob_id: str  # the git blob id


def with_retries(fn: Callable[[], T], what: str, attempts: int, sleep: Callable[[float], None] = time.sleep) -> T:
    """Call a huggingface_hub API, waiting out 429/503 (Retry-After when the Hub gives one)."""
    from huggingface_hub.errors import HfHubHTTPError

    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except HfHubHTTPError as exc:
            response = exc.response
            status = response.status_code if response is not None else None
            if status is not None and (status == 429 or status >= 500) and attempt < attempts:
                delay = _retry_after(response.headers) if response is not None else None
                delay = delay if delay is not None else 0.5 * 2 ** (attempt - 1)
                log.info("%s: the Hub answered %s; retrying in %.1fs", what, status, delay)
                sleep(delay)
                continue
            raise StoreUnavailableError(f"{what}: the Hub answered {status}: {str(exc).splitlines()[0][:200]}",
                                        hint="check the repo id and revision, HF_ENDPOINT and HF_TOKEN") from None
        except OSError as exc:
            if attempt < attempts:
                sleep(0.5 * 2 ** (attempt - 1))
                continue
            raise StoreUnavailableError(f"{what}: cannot reach the Hub: {type(exc).__name__}") from None
    raise AssertionError("unreachable")


def list_repo_files(repo: str, revision: str, options: HubOptions) -> list[RemoteFile]:
    """Every file of `repo` at `revision`, with sizes and LFS sha256 from the Hub's metadata."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(endpoint=options.endpoint, token=options.token)

    def listing() -> list[RemoteFile]:
        out = []
        for item in api.list_repo_tree(repo, revision=revision, recursive=True):
            if isinstance(item, RepoFile):
                lfs = item.lfs
                out.append(RemoteFile(item.path, int(item.size), lfs.sha256 if lfs is not None else None, item.blob_id))
        return out

    return with_retries(listing, f"listing {repo}@{revision[:12]}", options.attempts)


def commit_of(repo: str, ref: str, options: HubOptions) -> str:
    """The commit a branch or tag points at now (used once, by `catalog add`)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=options.endpoint, token=options.token)
    info = with_retries(lambda: api.model_info(repo, revision=ref), f"resolving {repo}@{ref}", options.attempts)
    if not info.sha:
        raise StoreUnavailableError(f"the Hub gave no commit for {repo}@{ref}")
    return str(info.sha)
