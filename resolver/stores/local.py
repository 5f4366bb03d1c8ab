"""A folder as the bucket: the embedded default store (no server, no credentials).

An object's ETag names its bytes, as S3's does, where the store has read them whole: `put` records the sha256 it
copied and the file identity it left (resolver/identity.py: device, inode, size, mtime, ctime) beside the object's
metadata, and while the identity holds the ETag is that sha256. Anything else gets the identity itself as ETag,
so sync's records (which name ETags) hold only for unchanged bytes:

- a rewrite in place (same inode, its ctime moved, even with the mtime put back) is no longer the recorded file:
  its ETag is its identity, and sync verifies it again;
- a faithful copy of the folder (`cp -a`, `rsync -a`: every file with its size and mtime, on another inode) is
  hashed once by the first listing that meets it (where the store is writable, so the new identity is recorded
  and later listings only stat): the same bytes keep their ETag, so the copy keeps every sync record and stream
  proof. A replacement of the file with other bytes and the mtime put back looks like a copy until hashed: it
  gets its identity as ETag;
- an object without a record (put by an older version, or by another tool) has its identity as ETag, as before.

Objects are written readable by everyone the umask allows (0644 under the usual 022): a store folder is shared
by the users who resolve from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from catalog import bounded, naming
from catalog.errors import StoreUnavailableError, UnsafePathError
from resolver.hashing import CHUNK, hash_file
from resolver.identity import FileIdentity
from resolver.stores.base import ObjectInfo, ObjectNotFound, ObjectStream, Store, check_key

CONTENT = "x-catalog-content"  # in an object's metadata file: {"sha256", "identity"} of the bytes `put` wrote


class _FileStream:
    def __init__(self, path: Path, start: int, end: int | None, etag_of: Callable[[os.stat_result], str]) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        st = os.fstat(self._file.fileno())
        self.total = st.st_size
        self.etag: str | None = etag_of(st)  # of the very file this read
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

    def _etag(
        self, key: str, st: os.stat_result, *, sidecar: dict[str, object] | None = None, prove: bool = False
    ) -> str:
        """The object's ETag (see the module's docstring): its recorded sha256 while its identity is the recorded
        one; with `prove`, after hashing a faithful copy of it; else its identity."""
        identity = FileIdentity.of(st)
        data = self._sidecar(key) if sidecar is None else sidecar
        content = data.get(CONTENT)
        known = FileIdentity.from_list(content.get("identity")) if isinstance(content, dict) else None
        sha256 = content.get("sha256") if isinstance(content, dict) else None
        if known is None or not isinstance(sha256, str):
            return identity.etag()
        if known == identity:
            return f"sha256-{sha256}"
        copied = (known.size, known.mtime_ns) == (identity.size, identity.mtime_ns) and known.ino != identity.ino
        if prove and copied and os.access(self.root / self.META_DIR, os.W_OK):
            path = self.root / key
            if hash_file(path)[1] == sha256 and FileIdentity.of_path(path) == identity:
                self._write_sidecar(key, {**data, CONTENT: {"sha256": sha256, "identity": identity.as_list()}})
                return f"sha256-{sha256}"
        return identity.etag()

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
                    yield ObjectInfo(key, st.st_size, etag=self._etag(key, st, prove=True))

    def head(self, key: str) -> ObjectInfo | None:
        self.requests["HeadObject"] += 1
        path = self._path(key)
        if not path.is_file():
            return None
        st = path.stat()
        sidecar = self._sidecar(key)
        metadata = {str(k): str(v) for k, v in sidecar.items() if k != CONTENT}
        return ObjectInfo(key, st.st_size, etag=self._etag(key, st, sidecar=sidecar, prove=True), metadata=metadata)

    def _sidecar_path(self, key: str) -> Path:
        return Path(self._sidecar_name(key))

    def _sidecar_name(self, key: str) -> str:
        return os.path.join(self.root, self.META_DIR, key + ".json")  # a string: a listing makes one per object

    def _sidecar(self, key: str) -> dict[str, object]:
        """The object's metadata file: its metadata (the local stand-in for x-amz-meta-*) and the CONTENT record."""
        try:
            data = bounded.loads(bounded.read_file(self._sidecar_name(key), bounded.MAX_RECORD))
        except (OSError, ValueError):
            return {}
        return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}

    def _write_sidecar(self, key: str, data: dict[str, object]) -> None:
        meta = self._sidecar_path(key)
        meta.parent.mkdir(parents=True, exist_ok=True)
        temps = self.root / self.TMP_DIR
        temps.mkdir(exist_ok=True)
        staged = temps / f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}.meta"
        staged.write_text(json.dumps(data, sort_keys=True))
        os.replace(staged, meta)

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        self.requests["GetObject"] += 1
        path = self._path(key)
        try:
            return _FileStream(path, start, end, lambda st: self._etag(key, st))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except PermissionError:
            raise StoreUnavailableError(
                f"{self.url}: {key} is not readable by this user",
                transient=False,
                hint="the folder store's owner must make its files readable (objects are written 0644 under the usual "
                "umask; `chmod -R a+rX` fixes older ones)",
            ) from None

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        self.requests["PutObject"] += 1
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temps = self.root / self.TMP_DIR
        temps.mkdir(exist_ok=True)
        import tempfile  # only here: listing a folder store (the warm sync) never needs it

        fd, tmp = tempfile.mkstemp(dir=temps, prefix=f"{os.getpid()}-", suffix=".part")
        digest = hashlib.sha256()
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600: other users resolve from this folder too
            view = memoryview(bytearray(CHUNK))
            with os.fdopen(fd, "wb") as out, open(source, "rb", buffering=0) as src:
                while count := src.readinto(view):
                    digest.update(view[:count])
                    out.write(view[:count])
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        st = target.stat()
        record = {"sha256": digest.hexdigest(), "identity": FileIdentity.of(st).as_list()}  # what these bytes are, now
        self._write_sidecar(key, {**dict(metadata or {}), CONTENT: record})
        return ObjectInfo(key, st.st_size, etag=f"sha256-{record['sha256']}", metadata=dict(metadata or {}))

    def delete(self, key: str) -> None:
        self.requests["DeleteObject"] += 1
        path = self._path(key)
        if path.is_dir() and not path.is_symlink():  # no object is a folder: refused, never a traceback
            raise UnsafePathError(f"refusing to delete {key!r} from {self.url}: it is a folder, not an object")
        path.unlink(missing_ok=True)
        self._sidecar_path(key).unlink(missing_ok=True)

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
