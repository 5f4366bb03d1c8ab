"""Real infrastructure: a replicated SeaweedFS cluster losing a volume server mid-download, a second bucket as a
mirror, and nginx as a pull-through cache in front of the filer's HTTP serving a second runner with zero
requests to the store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from servers import FaultProxy, SeaweedCluster, new_bucket

from catalog.errors import CatalogError
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

NAME = "all-minilm-l6-v2"  # 87 MiB: enough bytes to be mid-download when a volume server dies
SMALL = "tiny-llama"
SMALL_PARTS = TransferConfig(part_size=1024 * 1024, concurrency=2)


@pytest.fixture(scope="module")
def loaded(cluster: SeaweedCluster, bundled: Catalog, sources: dict[str, Path]) -> dict[str, str]:
    """Two buckets on the cluster holding both models: the primary and a mirror."""
    buckets = {}
    for role in ("primary", "mirror"):
        bucket = new_bucket(cluster.url)
        store = open_store(f"s3://{bucket}/?endpoint={cluster.url}")
        for name in (NAME, SMALL):
            upload_from_dir(bundled, name, sources[name], store)
        buckets[role] = bucket
    return buckets


class KillAfter:
    """A Progress that SIGKILLs a volume server once `limit` bytes have arrived."""

    def __init__(self, cluster: SeaweedCluster, limit: int) -> None:
        self.cluster, self.limit, self.seen, self.killed = cluster, limit, 0, False
        self.lock = threading.Lock()

    def __call__(self, label: str, count: int) -> None:
        with self.lock:
            self.seen += count
            if self.seen >= self.limit and not self.killed:
                self.killed = True
                self.cluster.kill_volume(0)

    def file_done(self, label: str, size: int) -> None:
        pass


def test_a_volume_server_killed_mid_download(
    cluster: SeaweedCluster, loaded: dict[str, str], bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = open_store(f"s3://{loaded['primary']}/?endpoint={cluster.url}")
    cache = Cache(tmp_path / "cache")
    options = ResolveOptions(transfer=SMALL_PARTS)
    killer = KillAfter(cluster, 8 * 1024 * 1024)
    try:
        result = resolve(bundled, NAME, cache=cache, store=store, options=options, progress=killer)
        outcome = "verified"
    except CatalogError as exc:  # a clean failure: one of ours, naming the store
        outcome = f"failed: {exc}"
        assert store.url in str(exc) or NAME in str(exc)
        assert list(cache.root.glob("tmp/*.part")) == []  # no partial download left behind
        result = resolve(bundled, NAME, cache=cache, store=store, options=options)  # the rerun succeeds
    assert killer.killed, outcome
    for entry in bundled.get(NAME).files:
        assert (result.path / entry.path).read_bytes() == (sources[NAME] / entry.path).read_bytes()
    # A cold resolve now, with one volume server gone, is served by the other replica.
    again = resolve(bundled, NAME, cache=Cache(tmp_path / "cold"), store=store, options=options)
    assert again.source == store.url


def test_a_second_bucket_as_mirror(
    cluster: SeaweedCluster, loaded: dict[str, str], bundled: Catalog, tmp_path: Path
) -> None:
    primary = open_store(f"s3://{loaded['primary']}/?endpoint={cluster.url}")
    mirror = open_store(f"s3://{loaded['mirror']}/?endpoint={cluster.url}&addressing=path")
    result = resolve(
        bundled, SMALL, cache=Cache(tmp_path / "cache"), store=primary, options=ResolveOptions(mirrors=(mirror,))
    )
    assert set(result.sources.values()) == {mirror.url}
    assert primary.requests["GetObject"] == 0 and mirror.requests["GetObject"] == len(bundled.get(SMALL).files)


def test_nginx_pull_through_cache_serves_a_second_runner_without_the_store(
    cluster: SeaweedCluster,
    loaded: dict[str, str],
    bundled: Catalog,
    nginx: Any,
    filer_proxy: FaultProxy,
    tmp_path: Path,
) -> None:
    primary = open_store(f"s3://{loaded['primary']}/?endpoint={cluster.url}")
    options = ResolveOptions(transfer=SMALL_PARTS, mirrors=(open_store(f"{nginx.url}/buckets/{loaded['primary']}/"),))
    first = resolve(bundled, SMALL, cache=Cache(tmp_path / "runner1"), store=primary, options=options)
    assert set(first.sources.values()) == {options.mirrors[0].url}
    reached = sum(filer_proxy.requests.values())
    assert reached >= len(bundled.get(SMALL).files)  # the first runner's misses went through to the filer
    second_mirror = open_store(f"{nginx.url}/buckets/{loaded['primary']}/")
    second = resolve(
        bundled,
        SMALL,
        cache=Cache(tmp_path / "runner2"),
        store=primary,
        options=ResolveOptions(transfer=SMALL_PARTS, mirrors=(second_mirror,)),
    )
    assert set(second.sources.values()) == {second_mirror.url}
    assert sum(filer_proxy.requests.values()) == reached  # zero requests reached the store
    assert primary.requests["GetObject"] == 0
    log = nginx.access_log.read_text()
    assert log.count("GET /buckets/") >= 2 * len(bundled.get(SMALL).files)
