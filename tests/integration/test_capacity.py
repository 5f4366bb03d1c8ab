"""Capacity: a download that cannot fit fails at once; eviction goes least recently resolved first, whole views,
never one a running resolve uses; CATALOG_CACHE_MAX_SIZE evicts before fetching."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest

from catalog.errors import CacheWriteError
from catalog.lookup import Catalog
from resolver import capacity
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout, Marker

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["tiny-llama", "tiny-llama-sharded", "all-minilm-l6-v2"]
Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def store_dir(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    for name in MODELS:
        upload_from_dir(bundled, name, sources[name], open_store(str(folder)))
    return folder


def test_a_download_that_cannot_fit_fails_before_any_byte(
    bundled: Catalog, store_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1000, 1000))
    store = open_store(str(store_dir))
    cache = Cache(tmp_path / "cache")
    with pytest.raises(CacheWriteError) as caught:
        resolve(bundled, "all-minilm-l6-v2", cache=cache, store=store)
    needed = capacity.human(sum({e.sha256: e.size for e in bundled.get("all-minilm-l6-v2").files}.values()))
    assert f"needs {needed}" in str(caught.value) and "has 1000 B free" in str(caught.value)
    assert store.requests["GetObject"] == 0
    assert not cache.blobs.exists()


def _marker(cache: Cache, name: str) -> tuple[Path, Marker]:
    [(path, marker)] = [(p, m) for p, m in cache.markers_all() if m is not None and m.name == name]
    return path, marker


def _age(path: Path, marker: Marker, seconds: float) -> None:
    """Pretend the view was last resolved `seconds` ago."""
    from dataclasses import replace

    old = time.time() - seconds
    path.write_bytes(replace(marker, resolved_at=old, verified_at=old).to_json())


def test_eviction_goes_least_recently_resolved_first_and_spares_views_in_use(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    store = open_store(str(store_dir))
    cache = Cache(tmp_path / "cache")
    options = ResolveOptions(materialize_weights=True)
    for name in MODELS:
        resolve(bundled, name, cache=cache, store=store, options=options)
    for age, name in ((3 * 3600, "all-minilm-l6-v2"), (2 * 3600, "tiny-llama"), (1 * 3600, "tiny-llama-sharded")):
        _age(*_marker(cache, name), age)
    # A warm resolve of the oldest records its use (its resolved_at was older than an hour).
    resolve(bundled, "all-minilm-l6-v2", cache=cache, store=store, options=options)
    assert time.time() - _marker(cache, "all-minilm-l6-v2")[1].resolved_at < 60
    size = capacity.cache_size(cache)
    minilm = sum(e.size for e in bundled.get("all-minilm-l6-v2").files)
    # tiny-llama is "in use" by a running resolve: its activity record names it.
    with capacity.active(cache, ["tiny-llama"], [e.sha256 for e in bundled.get("tiny-llama").files]):
        result = capacity.evict(cache, max_size=size - 1)
    assert [v.split()[0] for v in result.views] == ["tiny-llama-sharded"]  # the oldest not in use
    assert result.kept_in_use and result.kept_in_use[0].startswith("tiny-llama ")
    shared = {e.sha256 for e in bundled.get("tiny-llama").files}
    for entry in bundled.get("tiny-llama-sharded").files:  # its own blobs went, the ones tiny-llama shares stayed
        assert cache.blob_path(entry.sha256).exists() == (entry.sha256 in shared)
    assert capacity.cache_size(cache) == size - result.bytes
    # Without the record, down to the newest: all-minilm stays, the rest goes.
    result = capacity.evict(cache, max_size=minilm)
    assert [v.split()[0] for v in result.views] == ["tiny-llama"]
    assert capacity.cache_size(cache) <= minilm
    again = resolve(bundled, "all-minilm-l6-v2", cache=cache, store=store, options=options)
    assert again.source == "cache"


def _gc_keep_free_dry_run(
    base: list[str], env: dict[str, str], cache_dir: Path, slack: int
) -> subprocess.CompletedProcess[str]:
    """`gc --keep-free` asking `slack` bytes more than the disk has free. The disk is shared with whatever else runs
    (the suite's other worker): a call during which its free space moved by more than the slack says nothing about
    gc, so it is made again."""
    for _ in range(5):
        before = capacity.free_bytes(cache_dir)
        done = subprocess.run(
            [*base, "gc", "--keep-free", str(before + slack), "--dry-run"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if abs(capacity.free_bytes(cache_dir) - before) < slack:
            return done
    pytest.fail("the disk's free space moved by more than the slack during each of 5 gc calls")


def test_resolve_evicts_under_cache_max_size_and_gc_keep_free(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "CATALOG_CACHE": str(cache_dir), "CATALOG_CACHE_MAX_SIZE": "4MiB"}
    base = [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests")]
    for name in ("tiny-llama", "tiny-llama-sharded"):
        done = subprocess.run(
            [*base, "resolve", name, "--store", str(store_dir), "--materialize-weights"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    cache = Cache(cache_dir)
    assert {m.name for _, m in cache.markers_all() if m} == {"tiny-llama", "tiny-llama-sharded"}  # both fit in 4 MiB
    _age(*_marker(cache, "tiny-llama"), 7200)
    minilm = sum({e.sha256: e.size for e in bundled.get("all-minilm-l6-v2").files}.values())
    limit = minilm + capacity.cache_size(cache) - 1  # one byte short: the oldest view must go, only it
    done = subprocess.run(
        [*base, "resolve", "all-minilm-l6-v2", "--store", str(store_dir)],
        env={**env, "CATALOG_CACHE_MAX_SIZE": str(limit)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "evicted 1 view(s) (tiny-llama)" in done.stderr
    assert {m.name for _, m in cache.markers_all() if m} == {"tiny-llama-sharded", "all-minilm-l6-v2"}
    done = _gc_keep_free_dry_run(base, env, cache_dir, slack=10 * 1024 * 1024)
    assert done.returncode == 0, done.stderr
    assert "would remove" in done.stdout and {m.name for _, m in cache.markers_all() if m} == {
        "tiny-llama-sharded",
        "all-minilm-l6-v2",
    }
    done = subprocess.run([*base, "gc", "--max-size", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(cache.markers_all()) == [] and capacity.cache_size(cache) == 0
    # It says which models went, and leaves no empty folder behind.
    assert "evicted 2 views, least recently resolved first: " in done.stderr
    assert all(name in done.stderr for name in ("tiny-llama-sharded", "all-minilm-l6-v2"))
    assert [p for p in (cache.models, cache.markers) if p.is_dir() and any(p.iterdir())] == []


def _empty_folders(cache: Cache) -> list[str]:
    """Folders below the cache's own top-level ones (blobs/, hub/, ...) that hold nothing."""
    return sorted(
        str(Path(d).relative_to(cache.root))
        for d, dirs, files in os.walk(cache.root)
        if not dirs and not files and Path(d).parent != cache.root
    )


def test_evicting_an_hf_cache_snapshot_leaves_nothing_of_it(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    """Its tree listing, refs/main, its repo's blobs and folders go with it, also the blobs a dir view of another model
    still uses (tiny-llama-sharded shares four); evicting the rest leaves no empty folder (blobs/<aa>/,
    blob-stamps/<aa>/) and no stamp record."""
    store = open_store(str(store_dir))
    cache = Cache(tmp_path / "cache")
    snapshot = resolve(
        bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE)
    ).path
    resolve(bundled, "tiny-llama-sharded", cache=cache, store=store, options=ResolveOptions(materialize_weights=True))
    repo = snapshot.parent.parent
    assert {p.name for p in repo.iterdir()} == {"blobs", "refs", "snapshots", "trees"}
    _age(*_marker(cache, "tiny-llama"), 3600)  # the least recently resolved: it goes first
    shared = {e.sha256 for e in bundled.get("tiny-llama-sharded").files}
    own = sum(e.size for e in bundled.get("tiny-llama").files if e.sha256 not in shared)
    size = capacity.cache_size(cache)
    result = capacity.evict(cache, max_size=size - own)
    assert [v.split()[0] for v in result.views] == ["tiny-llama"]
    assert result.bytes >= own and capacity.cache_size(cache) == size - result.bytes
    assert not repo.exists(), sorted(str(p.relative_to(repo)) for p in repo.rglob("*"))
    assert _empty_folders(cache) == []
    again = resolve(
        bundled, "tiny-llama-sharded", cache=cache, store=store, options=ResolveOptions(materialize_weights=True)
    )
    assert again.source == "cache"
    capacity.evict(cache, max_size=0)
    assert list(cache.markers_all()) == [] and capacity.cache_size(cache) == 0
    assert _empty_folders(cache) == []
    assert [p.name for p in cache.blob_stamps.rglob("*")] == []
