"""A new store needs its own module and one registration line, nothing else: the store below (a dict in memory, with
its own error type) is written as a new store would be, registered once, and then `catalog sync --from-dir`,
`catalog resolve` (a local and a streamed model) and the transfer's retries work through the Store interface alone.

Its transient error is a class of its own that no other code knows (not an OSError, not a ConnectionError), so a
retry of it can only come from the store's own `transient()`; its stream target is its own, so the streamed
resolution can only carry it through `stream_target()`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from catalog.errors import StoreUnavailableError, UsageError
from catalog.lookup import Catalog
from catalog.settings import Settings
from catalog_app.main import run
from resolver.cache import Cache
from resolver.stores import (
    ObjectInfo,
    ObjectNotFound,
    ObjectStream,
    Store,
    StreamTarget,
    check_key,
    register,
    unregister,
)
from resolver.stores.base import ViewStream
from resolver.transfer import TransferConfig, Wanted, fetch, fetch_digest_etag

ROOT = Path(__file__).resolve().parents[2]


# ---- the new store: what its module would hold ------------------------------------------------------------------


class Hiccup(Exception):
    """The store's own "try again" (its client library's error, say)."""


class Refused(Exception):
    """The store's own final refusal."""


class _Stream:
    def __init__(self, data: bytes, start: int, end: int | None, etag: str) -> None:
        self._data = memoryview(data)[start:end]
        self.total = len(data)
        self.etag: str | None = etag

    def readinto(self, buffer: memoryview) -> int:
        count = min(len(buffer), len(self._data))
        buffer[:count] = self._data[:count]
        self._data = self._data[count:]
        return count

    def close(self) -> None:
        pass


class MemoryStore(Store):
    """`mem://NAME/`: objects in a dict shared by every store of that name in the process."""

    buckets: dict[str, dict[str, bytes]] = {}
    meta: dict[str, dict[str, dict[str, str]]] = {}
    hiccups: Counter[str] = Counter()  # key -> how many opens still fail with Hiccup
    refused: set[str] = set()  # keys whose opens fail with Refused

    def __init__(self, name: str) -> None:
        self.url = f"mem://{name}/"
        self.objects = self.buckets.setdefault(name, {})
        self.metadata = self.meta.setdefault(name, {})
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.requests["List"] += 1
        for key in sorted(k for k in self.objects if k.startswith(prefix)):
            yield ObjectInfo(key, len(self.objects[key]), etag=_etag(self.objects[key]))

    def head(self, key: str) -> ObjectInfo | None:
        self.requests["Head"] += 1
        data = self.objects.get(check_key(key))
        return (
            None if data is None else ObjectInfo(key, len(data), etag=_etag(data), metadata=self.metadata.get(key, {}))
        )

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        with self._lock:
            self.requests["Get"] += 1
            if key in self.refused:
                raise Refused(f"{key}: not for you")
            if self.hiccups[key] > 0:
                self.hiccups[key] -= 1
                raise Hiccup(f"{key}: busy")
        data = self.objects.get(check_key(key))
        if data is None:
            raise ObjectNotFound(key)
        return _Stream(data, start, end, _etag(data))

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        self.requests["Put"] += 1
        data = source.read_bytes()
        self.objects[check_key(key)] = data
        self.metadata[key] = dict(metadata or {})
        return ObjectInfo(key, len(data), etag=_etag(data), metadata=self.metadata[key])

    def delete(self, key: str) -> None:
        self.requests["Delete"] += 1
        self.objects.pop(check_key(key), None)

    def stream_uri(self, prefix: str) -> str:
        return self.url + prefix

    def stream_target(self) -> StreamTarget:
        return StreamTarget("mem", "mem://endpoint", env={"MEM_ENDPOINT": "mem://endpoint"})

    def transient(self, exc: BaseException) -> bool:
        return isinstance(exc, Hiccup) or super().transient(exc)


def _etag(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def from_url(url: str, settings: Settings) -> MemoryStore:
    return MemoryStore(url.split("://", 1)[1].strip("/"))


# ---- the tests ---------------------------------------------------------------------------------------------------


@pytest.fixture
def mem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    register("mem", from_url)  # the one registration line
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CATALOG_CACHE", str(tmp_path / "cache"))
    name = f"t{id(tmp_path)}"
    yield f"mem://{name}/"
    unregister("mem")
    MemoryStore.buckets.pop(name, None)
    MemoryStore.meta.pop(name, None)
    MemoryStore.hiccups.clear()
    MemoryStore.refused.clear()


def catalog(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_new_store_syncs_resolves_and_streams_through_the_interface_alone(
    mem: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--catalog", str(ROOT / "manifests")]
    for name in ("tiny-llama", "tiny-qwen2"):
        code, _, err = catalog(*base, "sync", name, "--store", mem, "--from-dir", str(sources[name]), capsys=capsys)
        assert code == 0, err
    objects = MemoryStore.buckets[mem.split("://")[1].strip("/")]
    for name in ("tiny-llama", "tiny-qwen2"):
        m = bundled.get(name)
        for entry in m.files:
            data = objects[bundled.store_key(m, entry.path)]
            assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.path
    # A second sync finds nothing to do (the state objects sync wrote through put are read back through list/open).
    code, out, err = catalog(*base, "sync", "tiny-llama", "--store", mem, "--format", "json", capsys=capsys)
    assert code == 0, err
    noop = json.loads(out)
    assert noop["uploaded"] == [] and noop["verified"] == [] and set(noop["requests"]) == {"List"}  # listings only

    # A runner with an empty cache (sync's cache holds the files it hashed): every GET of the local model's files fails
    # once with the store's own Hiccup, is retried, then verified.
    runner = ["--cache", str(tmp_path / "runner")]
    llama = bundled.get("tiny-llama")
    for entry in llama.files:
        MemoryStore.hiccups[bundled.store_key(llama, entry.path)] = 1
    code, out, err = catalog(*base, "resolve", *runner, "tiny-llama", "--store", mem, "--format", "json", capsys=capsys)
    assert code == 0, err
    resolved = json.loads(out)
    for entry in llama.files:
        assert hashlib.sha256((Path(resolved["path"]) / entry.path).read_bytes()).hexdigest() == entry.sha256
    assert sum(MemoryStore.hiccups.values()) == 0  # each hiccup was met, and got past

    # A streamed model: the engine is handed the store's URI and the store's own stream target.
    code, out, err = catalog(*base, "resolve", *runner, "tiny-qwen2", "--store", mem, "--format", "json", capsys=capsys)
    assert code == 0, err
    streamed = json.loads(out)
    qwen = bundled.get("tiny-qwen2")
    assert streamed["weights_uri"] == mem + bundled.store_key(
        qwen
    )  # the engine's loader (plain or verified) streams it
    code, out, err = catalog(*base, "resolve", *runner, "tiny-qwen2", "--store", mem, "--format", "env", capsys=capsys)
    assert code == 0, err
    assert "MEM_ENDPOINT=mem://endpoint" in out


def test_the_transfer_retries_what_the_store_calls_transient_and_nothing_else(
    mem: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = from_url(mem, Settings.build({}))
    manifest = bundled.get("tiny-llama")
    entry = max(manifest.files, key=lambda e: e.size)
    key = bundled.store_key(manifest, entry.path)
    store.put(key, sources["tiny-llama"] / entry.path)
    config = TransferConfig(attempts=3)
    waits: list[float] = []

    MemoryStore.hiccups[key] = 2  # two hiccups, three attempts: fetched
    assert fetch(store, [Wanted("tiny-llama", entry, key)], Cache(tmp_path / "c1"), config, sleep=waits.append) == {
        entry.sha256
    }
    assert len(waits) == 2 and store.requests["Get"] == 3

    MemoryStore.hiccups[key] = 3  # three hiccups: the last attempt spent, said as the store being unavailable
    with pytest.raises(StoreUnavailableError, match="after 3 attempts: Hiccup"):
        fetch(store, [Wanted("tiny-llama", entry, key)], Cache(tmp_path / "c2"), config, sleep=waits.append)

    MemoryStore.hiccups.clear()
    MemoryStore.refused.add(key)  # the store's final refusal: one GET, no retry, no wait
    before, waited = store.requests["Get"], len(waits)
    with pytest.raises(StoreUnavailableError, match="after 1 attempts: Refused"):
        fetch(store, [Wanted("tiny-llama", entry, key)], Cache(tmp_path / "c3"), config, sleep=waits.append)
    assert store.requests["Get"] == before + 1 and len(waits) == waited


def test_a_store_gets_every_default_it_does_not_override(mem: str) -> None:
    store = from_url(mem, Settings.build({}))
    assert store.engine_streamable and store.ranged and not store.content_addressed
    assert store.listed_sha256([ObjectInfo("a", 1, etag="x")]) == {}
    store.objects["a"] = b"1"
    assert store.delete_many(["a", "../b"]).keys() == {"../b"} and "a" not in store.objects
    assert (
        not store.transient(UsageError("no"))
        and store.transient(ConnectionResetError())
        and not store.transient(Refused())
    )


def test_sync_from_dir_uploads_a_verified_copy_and_keeps_it_in_the_cache(
    mem: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    base = ["--catalog", str(ROOT / "manifests")]
    folder = tmp_path / "tiny-llama"
    shutil.copytree(sources["tiny-llama"], folder)
    (folder / "config.json").write_text((folder / "config.json").read_text().replace("{", "{ ", 1))  # one byte more
    code, _, err = catalog(*base, "sync", "tiny-llama", "--store", mem, "--from-dir", str(folder), capsys=capsys)
    assert (
        code != 0
        and "tiny-llama/config.json" in err
        and "differs; nothing was uploaded" in err
        and "Traceback" not in err
    )
    llama = bundled.get("tiny-llama")
    objects = MemoryStore.buckets[mem.split("://")[1].strip("/")]
    assert bundled.store_key(llama, "config.json") not in objects
    cache = Cache(tmp_path / "cache")
    assert not cache.has_blob(llama.file("config.json"))  # type: ignore[arg-type]

    shutil.copy2(sources["tiny-llama"] / "config.json", folder / "config.json")
    code, _, err = catalog(*base, "sync", "tiny-llama", "--store", mem, "--from-dir", str(folder), capsys=capsys)
    assert code == 0, err
    for entry in llama.files:  # each file read once from the folder: uploaded, and the verified copy kept as the blob
        assert hashlib.sha256(objects[bundled.store_key(llama, entry.path)]).hexdigest() == entry.sha256
        assert (
            cache.has_blob(entry)
            and hashlib.sha256(cache.blob_path(entry.sha256).read_bytes()).hexdigest() == entry.sha256
        )


class _ViewOnly(ViewStream):
    """A stream with buffers of its own, handed over in uneven pieces; its `readinto` (a copy) must not be used."""

    def __init__(self, data: bytes, start: int, end: int | None) -> None:
        self._data = memoryview(data)[start:end]
        self.total = len(data)
        self.etag: str | None = _etag(data)
        self.views = 0

    def read_view(self, limit: int) -> memoryview:
        view = self._data[: min(limit, 777)]
        self._data = self._data[len(view) :]
        self.views += 1
        return view

    def readinto(self, buffer: memoryview) -> int:
        raise AssertionError("the transfer copied from a stream that hands over its own buffers")


class ViewStore(MemoryStore):
    opened: list[_ViewOnly] = []

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        self.requests["Get"] += 1
        stream = _ViewOnly(self.objects[check_key(key)], start, end)
        self.opened.append(stream)
        return stream


def test_the_transfer_writes_and_hashes_a_view_streams_own_buffers(
    mem: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = ViewStore(mem.split("://", 1)[1].strip("/"))
    manifest = bundled.get("tiny-llama")
    entry = max(manifest.files, key=lambda e: e.size)
    key = bundled.store_key(manifest, entry.path)
    store.put(key, sources["tiny-llama"] / entry.path)
    wanted = [Wanted("tiny-llama", entry, key)]
    # One GET, then the same file cut into parts of 4 KiB (each part's views pwritten at their offsets, hashed behind).
    for cache, config in (
        (Cache(tmp_path / "whole"), TransferConfig()),
        (Cache(tmp_path / "parts"), TransferConfig(part_size=4096)),
    ):
        assert fetch(store, wanted, cache, config) == {entry.sha256}
        assert hashlib.sha256(cache.blob_path(entry.sha256).read_bytes()).hexdigest() == entry.sha256
    assert len(ViewStore.opened) == 1 + -(-entry.size // 4096) and all(s.views for s in ViewStore.opened)
    assert fetch_digest_etag(store, wanted[0], TransferConfig()) == (entry.sha256, _etag(store.objects[key]))
