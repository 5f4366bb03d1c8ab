"""A folder as the bucket: the embedded default store (no server, no credentials).

An object's ETag is its file identity (resolver/identity.py: inode, size, mtime and ctime), so a same-size
rewrite that put the mtime back still gets a new ETag. Objects are written readable by everyone the umask
allows (0644 under the usual 022): a store folder is shared by the users who resolve from it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

from catalog import bounded, naming
from catalog.errors import StoreUnavailableError, UnsafePathError
from resolver.identity import FileIdentity
from resolver.stores.base import ObjectInfo, ObjectNotFound, ObjectStream, Store, check_key


class _FileStream:
    def __init__(self, path: Path, start: int, end: int | None) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        st = os.fstat(self._file.fileno())
        self.total = st.st_size
        self.etag: str | None = FileIdentity.of(st).etag()  # of the very file this read
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


class LocalStore(Store):
    """A folder as the bucket. Writes go to a temp file in TMP_DIR (at the root), renamed into place."""

    META_DIR = ".catalog-meta"  # sidecar metadata, the local stand-in for x-amz-meta-*
    TMP_DIR = naming.FOLDER_STORE_TMP  # writes in flight: a folder no pinned path may use (validate refuses it)

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.url = self.root.as_uri() + "/"
        self.requests: Counter[str] = Counter()

    def _path(self, key: str) -> Path:
        path = self.root / check_key(key)
        reserved = {self.META_DIR, self.TMP_DIR} & set(Path(key).parts)
        if reserved:
            raise UnsafePathError(f"refusing store key {key!r}: reserved folder {reserved.pop()}")
        return path

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        """Changes whenever the file is rewritten (its ctime too): the local stand-in for an S3 ETag."""
        return FileIdentity.of(st).etag()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.requests["ListObjectsV2"] += 1
        base = self.root / prefix if prefix else self.root
        if prefix and not prefix.endswith("/"):
            base = base.parent  # a key prefix, not a folder: filter below
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in (self.META_DIR, self.TMP_DIR))
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                if path.is_symlink():  # temp files live in TMP_DIR: a pinned `*.part` is an object like any other
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
        meta = self.root / self.META_DIR / (key + ".json")
        try:
            data = bounded.loads(bounded.read_file(meta, bounded.MAX_RECORD))
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
        except PermissionError:
            raise StoreUnavailableError(
                f"{self.url}: {key} is not readable by this user", transient=False,
                hint="the folder store's owner must make its files readable (objects are written 0644 under the usual "
                     "umask; `chmod -R a+rX` fixes older ones)") from None

    def put(self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None) -> ObjectInfo:
        self.requests["PutObject"] += 1
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temps = self.root / self.TMP_DIR
        temps.mkdir(exist_ok=True)
        import tempfile  # only here: listing a folder store (the warm sync) never needs it

        fd, tmp = tempfile.mkstemp(dir=temps, prefix=f"{os.getpid()}-", suffix=".part")
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600: other users resolve from this folder too
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out, 8 * 1024 * 1024)
            if metadata:
                meta = self.root / self.META_DIR / (key + ".json")
                meta.parent.mkdir(parents=True, exist_ok=True)
                meta_tmp = temps / f"{Path(tmp).name}.meta"
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
        path = self._path(key)
        if path.is_dir() and not path.is_symlink():  # no object is a folder: refused, never a traceback
            raise UnsafePathError(f"refusing to delete {key!r} from {self.url}: it is a folder, not an object")
        path.unlink(missing_ok=True)
        (self.root / self.META_DIR / (key + ".json")).unlink(missing_ok=True)

    def stream_uri(self, prefix: str) -> str:
        return str(self.root / prefix) + "/"  # engines read the folder directly (the default stream target)


def from_url(url: str) -> LocalStore:
    """`file:///path/` or a plain folder path."""
    if url.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return LocalStore(Path(unquote(urlparse(url).path)))
    return LocalStore(Path(url))


_UMASK: list[int] = []
_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """This process's umask (read once: setting it to read it is not thread-safe, so under a lock, once)."""
    with _UMASK_LOCK:
        if not _UMASK:
            mask = os.umask(0o022)
            os.umask(mask)
            _UMASK.append(mask)
        return _UMASK[0]
