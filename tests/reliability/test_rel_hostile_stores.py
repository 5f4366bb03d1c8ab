"""Hostile stores: odd keys, huge listings, nested prefixes, and servers that lie, fail, stall or reset.

Real components only: SeaweedFS as the S3 server (through tests/servers.py or the HTTP fault proxy in
faultproxy.py), LocalStore folders, and the resolver/sync code in process. After every scenario the
same invariants are checked from the outside: nothing was written outside the cache and store
folders, every blob in the cache hashes to its name, and no temp file of a finished resolve is left.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from catalog.errors import CatalogError, StoreUnavailableError
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, S3Options, S3Store, open_store
from resolver.sync import Action, SourceOfBytes, apply, make_plan
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

from .faultproxy import Fault, HttpFaultProxy
from .support import (
    BUNDLED,
    blob_mismatches,
    bucket_objects,
    cli_env,
    explain,
    leftover_temps,
    new_bucket,
    run_catalog,
    s3_client,
    sha256_file,
)

MODEL = "tiny-llama"
WEIGHTS = "model.safetensors"
FAST = TransferConfig(backoff=0.01, concurrency=4)


def fill(cat: Catalog, store_url: str, sources: dict[str, Path], name: str = MODEL) -> None:
    upload_from_dir(cat, name, sources[name], open_store(store_url))


def assert_sound(work: Path, cache: Cache, allowed: set[str]) -> None:
    """The invariants every scenario must leave behind."""
    assert {p.name for p in work.iterdir()} <= allowed, f"something was written outside {sorted(allowed)}"
    assert blob_mismatches(cache.root) == []
    assert leftover_temps(cache.root) == [], "a finished resolve left temp files behind"


def assert_view_is_the_model(result_path: Path, cat: Catalog, sources: dict[str, Path], name: str = MODEL) -> None:
    manifest = cat.get(name)
    on_disk = sorted(p.relative_to(result_path).as_posix() for p in result_path.rglob("*") if p.is_file())
    assert on_disk == sorted(f.path for f in manifest.files)
    for entry in manifest.files:
        assert (result_path / entry.path).read_bytes() == (sources[name] / entry.path).read_bytes()


def via(proxy_url: str, bucket: str, *, read_timeout: float = 5, max_attempts: int = 2) -> S3Store:
    return S3Store(
        bucket,
        "",
        S3Options(
            endpoint_url=proxy_url,
            addressing_style="path",
            max_attempts=max_attempts,
            read_timeout=read_timeout,
            connect_timeout=2,
        ),
    )


# -- odd keys ------------------------------------------------------------------------------------------
def hostile_keys(prefix: str) -> dict[str, bytes]:
    return {
        prefix + "../escape.json": b'{"escape": true}',
        prefix + "a/../../../etc/passwd": b"root:x:0:0",
        prefix + "./dot.json": b"dot",
        prefix + "double//slash.json": b"slash",
        prefix + "back\\slash.json": b"backslash",
        prefix + "CONFIG.JSON": b'{"not": "the pinned config"}',  # differs from config.json only in case
        prefix + "Model.safetensors": b"\0" * 64,
        prefix + "ctrl\x01char.json": b"ctrl",
    }


# moto here because SeaweedFS cannot hold these keys: it refuses keys with `.` or `..` segments
# (InvalidRequest) and rewrites `//`, a backslash and a leading `/` (it stores objects as filer paths).
# AWS S3 takes every one of them verbatim, so the odd-key tests plant them in moto (`moto_s3`).
def plant_odd_keys(bundled: Catalog, sources: dict[str, Path], server, bucket: str):  # type: ignore[no-untyped-def]
    """The model in the bucket, plus hostile keys under its prefix and two outside any prefix."""
    url = f"s3://{bucket}/"
    fill(bundled, url, sources)
    prefix = bundled.store_key(bundled.get(MODEL))
    odd = hostile_keys(prefix)
    outside = {"/absolute/key.json": b"abs", "../root-escape": b"up"}
    client = s3_client(server.url)
    for key, data in {**odd, **outside}.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    return url, prefix, odd, outside


def test_odd_keys_in_the_bucket_are_listed_verbatim_and_never_followed(
    bundled: Catalog,
    sources: dict[str, Path],
    moto_s3,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    bucket = new_bucket(moto_s3.url)  # moto here because SeaweedFS cannot hold these keys (see plant_odd_keys)
    url, prefix, odd, outside = plant_odd_keys(bundled, sources, moto_s3, bucket)

    store = open_store(url)
    listed = [o.key for o in store.list(prefix)]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(odd) | {prefix + f.path for f in bundled.get(MODEL).files}

    cache = Cache(tmp_path / "cache")
    result = resolve(bundled, MODEL, cache=cache, store=store, options=ResolveOptions(transfer=FAST))
    assert_view_is_the_model(result.path, bundled, sources)
    assert_sound(tmp_path, cache, {"cache"})

    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": url,
            "CATALOG_CACHE": str(tmp_path / "sync-cache"),
            "HOME": str(tmp_path / "home"),
        }
    )
    check = run_catalog(["sync", MODEL, "--check", "--format", "json"], env)
    assert check.returncode == 1, explain(check)
    assert "Traceback" not in check.stderr
    extras = {i["key"] for i in json.loads(check.stdout)["plan"]["items"] if i["action"] == "extra"}
    assert extras == set(odd)
    assert set(bucket_objects(moto_s3.url, bucket)) >= set(odd) | set(outside)  # --check changed nothing


def test_prune_deletes_odd_keys_under_a_prefix_or_reports_each_and_carries_on(
    bundled: Catalog,
    sources: dict[str, Path],
    moto_s3,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """Odd keys ('..', '//', backslash, control characters, case twins) under a model's prefix are extra
    objects. `sync --prune` must remove them (they are plain S3 keys; deleting one writes nothing local),
    or, if it refuses some on principle, name each refused key and still do the rest of the plan: delete
    the other extras, print its report, keep the pinned objects."""
    bucket = new_bucket(moto_s3.url)  # moto here because SeaweedFS cannot hold these keys (see plant_odd_keys)
    url, prefix, odd, outside = plant_odd_keys(bundled, sources, moto_s3, bucket)
    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": url,
            "CATALOG_CACHE": str(tmp_path / "sync-cache"),
            "HOME": str(tmp_path / "home"),
        }
    )
    pruned = run_catalog(["sync", MODEL, "--prune", "--format", "json"], env)
    assert "Traceback" not in pruned.stderr, explain(pruned)
    after = bucket_objects(moto_s3.url, bucket)
    for entry in bundled.get(MODEL).files:  # the pinned objects are untouched; nothing outside the prefix moved
        assert after[prefix + entry.path] == entry.size
    assert set(outside) <= set(after)
    body = s3_client(moto_s3.url).get_object(Bucket=bucket, Key=prefix + "config.json")["Body"].read()
    assert body == (sources[MODEL] / "config.json").read_bytes()
    left = set(odd) & set(after)
    if pruned.returncode == 0:
        assert not left, f"prune exited 0 but left {sorted(left)}"
        assert run_catalog(["sync", MODEL, "--check"], env).returncode == 0
        return
    assert pruned.stdout.strip(), f"a refused key cost the whole report: {explain(pruned)}"
    report = json.loads(pruned.stdout)
    refused = {e["key"] for e in report["errors"]}
    assert left == refused, f"left in the bucket: {sorted(left)}; reported as refused: {sorted(refused)}"
    assert prefix + "CONFIG.JSON" not in after, "one refused key stopped every other deletion"


def test_local_store_with_case_twins_and_links_out_of_the_store(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    fill(bundled, str(store_dir), sources)
    prefix = bundled.store_key(bundled.get(MODEL))
    model_dir = store_dir / prefix
    (model_dir / "CONFIG.JSON").write_text('{"not": "the pinned config"}')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("must survive")
    (model_dir / "linked-dir").symlink_to(outside, target_is_directory=True)
    (model_dir / "linked-file.json").symlink_to(outside / "precious.txt")
    before_outside = files_snapshot(outside)

    cache = Cache(tmp_path / "cache")
    result = resolve(bundled, MODEL, cache=cache, store=LocalStore(store_dir), options=ResolveOptions(transfer=FAST))
    assert_view_is_the_model(result.path, bundled, sources)
    assert_sound(tmp_path, cache, {"cache", "store", "outside"})

    listed = {o.key for o in LocalStore(store_dir).list(prefix)}
    assert prefix + "CONFIG.JSON" in listed and prefix + "config.json" in listed
    assert not any("linked" in k for k in listed), "a listing must not descend into links out of the store"

    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": str(store_dir),
            "CATALOG_CACHE": str(tmp_path / "sync-cache"),
            "HOME": str(tmp_path / "home"),
        }
    )
    pruned = run_catalog(["sync", MODEL, "--prune", "--from-dir", str(sources[MODEL]), "--format", "json"], env)
    assert pruned.returncode == 0, explain(pruned)
    assert json.loads(pruned.stdout)["deleted"] == [prefix + "CONFIG.JSON"]
    assert (model_dir / "config.json").read_bytes() == (sources[MODEL] / "config.json").read_bytes()
    assert files_snapshot(outside) == before_outside, "sync deleted or changed files outside the store"
    assert run_catalog(["sync", MODEL, "--check"], env).returncode == 0


def files_snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


# -- listings --------------------------------------------------------------------------------------------
def raw_listing(endpoint: str, bucket: str, prefix: str) -> dict[str, int]:
    """What S3 itself lists, page by page, through a plain boto3 client: the truth a store's listing must match."""
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def test_keys_with_characters_urls_escape_are_listed_verbatim_in_one_request(s3_server, bucket: str) -> None:  # type: ignore[no-untyped-def]
    keys = ["m/a%41.bin", "m/b#[1]~.bin", 'm/c{}^|`<>".bin', "m/\u00fc+&=;:@$,.bin", "m/with space/x.bin", "m/%2F.bin"]
    client = s3_client(s3_server.url)
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"12")
    store = S3Store(bucket, "", S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    listed = {o.key: o.size for o in store.list("m/")}
    assert listed == raw_listing(s3_server.url, bucket, "m/") == dict.fromkeys(keys, 2)
    assert store.requests["ListObjectsV2"] == 1


def test_folder_markers_and_empty_objects_are_listed_as_s3_holds_them(moto_s3) -> None:  # type: ignore[no-untyped-def]
    # moto here because SeaweedFS turns a key ending in '/' into a folder of its filer; AWS S3 keeps it as an object,
    # as the consoles' "create folder" makes it. object_store would list `m/empty-marker/` as `m/empty-marker`.
    bucket = new_bucket(moto_s3.url)
    client = s3_client(moto_s3.url)
    planted = {
        "m/empty-marker/": b"",
        "m/folder/": b"",
        "m/folder/x.bin": b"12",
        "m/empty.json": b"",
        "m/ok.bin": b"123",
    }
    for key, body in planted.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    store = S3Store(bucket, "", S3Options(endpoint_url=moto_s3.url, addressing_style="path"))
    listed = {o.key: o.size for o in store.list("m/")}
    assert listed == raw_listing(moto_s3.url, bucket, "m/") == {k: len(v) for k, v in planted.items()}


def test_a_listing_of_thousands_of_keys_returns_each_exactly_once(s3_server, bucket: str, long_run: bool) -> None:  # type: ignore[no-untyped-def]
    count = 10_000 if long_run else 2_100
    base = "base/"
    wanted = {f"{base}many/{i // 100:03d}/obj-{i:05d}.bin": i % 7 for i in range(count)}
    neighbours = {f"{base}many-more/x-{i}.bin": 1 for i in range(5)} | {f"{base}many": 2, "many/outside-base.bin": 3}
    client = s3_client(s3_server.url)
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=b"x" * kv[1]),
                {**wanted, **neighbours}.items(),
            )
        )
    store = S3Store(bucket, base, S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    listed = list(store.list("many/"))
    keys = [o.key for o in listed]
    assert len(keys) == count
    assert len(set(keys)) == count
    assert {base + k for k in keys} == set(wanted)
    assert all(o.size == wanted[base + o.key] for o in listed)
    assert store.requests["ListObjectsV2"] == -(-count // 1000)  # one request per 1,000 keys


# -- nested prefixes ---------------------------------------------------------------------------------------
def nested_catalog(bundled: Catalog) -> Catalog:
    """tiny-qwen2 moved *inside* tiny-llama's prefix: validation refuses this (prefix-overlap), so the
    Catalog is built directly, as a defence-in-depth check of the resolver and the sync planner."""
    outer = bundled.get(MODEL)
    inner = bundled.get("tiny-qwen2").model_copy(update={"s3_prefix": outer.s3_prefix + "v2/"})
    return Catalog(
        bundled.root,
        bundled.settings,
        {MODEL: outer, "tiny-qwen2": inner},
        {MODEL: bundled.sources[MODEL], "tiny-qwen2": bundled.sources["tiny-qwen2"]},
    )


def test_a_model_nested_in_another_models_prefix_is_not_seen_by_it(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server,
    bucket: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    cat = nested_catalog(bundled)
    url = f"s3://{bucket}/"
    store = open_store(url)
    fill(cat, url, sources, MODEL)
    fill(cat, url, sources, "tiny-qwen2")
    inner_prefix = cat.store_key(cat.get("tiny-qwen2"))
    inner_keys = {inner_prefix + f.path for f in cat.get("tiny-qwen2").files}
    assert inner_keys <= set(bucket_objects(s3_server.url, bucket))

    cache = Cache(tmp_path / "cache")
    outer = resolve(cat, MODEL, cache=cache, store=store, options=ResolveOptions(transfer=FAST))
    assert_view_is_the_model(outer.path, cat, sources)
    inner = resolve(
        cat, "tiny-qwen2", cache=cache, store=store, options=ResolveOptions(materialize_weights=True, transfer=FAST)
    )
    assert_view_is_the_model(inner.path, cat, sources, "tiny-qwen2")

    source = SourceOfBytes(cat, Cache(tmp_path / "sync-cache"), HubOptions(), None, FAST)
    # A sync (with --prune) of the outer model alone: it must neither plan for nor delete the inner one.
    named = make_plan(cat, [MODEL], store, prune=True, delete_orphans=False, deep=False, config=FAST)
    seen = sorted(f"{i.action.value} {i.key}" for i in named.items if i.key in inner_keys)
    report = apply(named, cat, store, source, max_delete=100, check_fresh=False, config=FAST)
    gone = sorted(inner_keys - set(bucket_objects(s3_server.url, bucket)))
    assert gone == [], f"`sync {MODEL} --prune` deleted the nested model's objects {gone} (it planned: {seen})"
    assert seen == [], f"a sync of {MODEL} plans actions on tiny-qwen2's objects: {seen}"
    assert report.errors == []
    # The whole catalog, with --prune --delete-orphans: every object belongs to exactly its own model.
    whole = make_plan(cat, [], store, prune=True, delete_orphans=True, deep=False, config=FAST)
    claimed = sorted(i.key for i in whole.items if i.key in inner_keys and i.model != "tiny-qwen2")
    assert claimed == [], f"tiny-qwen2's objects are claimed by another model: {claimed}"
    assert not [i for i in whole.items if i.action in (Action.EXTRA, Action.ORPHAN)]
    report = apply(whole, cat, store, source, max_delete=100, check_fresh=False, config=FAST)
    assert report.deleted == [] and report.errors == []
    assert inner_keys <= set(bucket_objects(s3_server.url, bucket)), "a prune deleted the nested model's objects"
    assert_sound(tmp_path, cache, {"cache", "sync-cache"})


# -- servers that misbehave -------------------------------------------------------------------------------
@pytest.fixture
def faulty(s3_server, bucket: str, bundled: Catalog, sources: dict[str, Path]):  # type: ignore[no-untyped-def]
    fill(bundled, f"s3://{bucket}/", sources)
    with HttpFaultProxy(s3_server.url) as proxy:
        yield proxy, bucket


def weights_key(cat: Catalog, name: str = MODEL, path: str = WEIGHTS) -> str:
    return cat.store_key(cat.get(name), path)


@pytest.mark.parametrize(
    ("kind", "after", "times"),
    [("short", 20_000, 3), ("short", 1, 4), ("reset", 30_000, 2), ("reset", 0, 2)],
    ids=["short-body-20k", "short-body-1-byte", "reset-after-30k", "reset-before-body"],
)
def test_bodies_cut_short_or_reset_are_resumed_to_the_verified_file(
    bundled: Catalog,
    sources: dict[str, Path],
    faulty,
    tmp_path: Path,
    kind: str,
    after: int,
    times: int,  # type: ignore[no-untyped-def]
) -> None:
    proxy, bucket = faulty
    fault = proxy.add(Fault(kind, times=times, after=after, path_contains=weights_key(bundled)))
    cache = Cache(tmp_path / "cache")
    result = resolve(bundled, MODEL, cache=cache, store=via(proxy.url, bucket), options=ResolveOptions(transfer=FAST))
    assert fault.served == times
    assert proxy.count("GET", weights_key(bundled)) > times
    assert_view_is_the_model(result.path, bundled, sources)
    assert_sound(tmp_path, cache, {"cache"})


def test_a_length_that_announces_more_than_the_body_never_publishes_wrong_bytes(
    bundled: Catalog,
    sources: dict[str, Path],
    faulty,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    proxy, bucket = faulty
    fault = proxy.add(Fault("inflate", times=2, after=100, path_contains=weights_key(bundled)))
    cache = Cache(tmp_path / "cache")
    try:
        result = resolve(
            bundled, MODEL, cache=cache, store=via(proxy.url, bucket), options=ResolveOptions(transfer=FAST)
        )
    except CatalogError as exc:  # a clean, named failure is acceptable; a traceback-class error is not
        print(f"inflated Content-Length: clean failure: {exc}")
        assert f"{MODEL}/{WEIGHTS}" in str(exc)
    else:
        print("inflated Content-Length: resolved")
        assert_view_is_the_model(result.path, bundled, sources)
    assert fault.served >= 1
    assert_sound(tmp_path, cache, {"cache"})
    # Once the server tells the truth again, the same cache resolves.
    fault.times = 0
    result = resolve(bundled, MODEL, cache=cache, store=via(proxy.url, bucket), options=ResolveOptions(transfer=FAST))
    assert_view_is_the_model(result.path, bundled, sources)


def test_500_then_200_resolves_and_lists(bundled: Catalog, sources: dict[str, Path], faulty, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proxy, bucket = faulty
    # More 500s than botocore's own attempts (2): the transfer layer's retries must carry it.
    fault = proxy.add(Fault("status", status=500, times=3, path_contains=weights_key(bundled)))
    cache = Cache(tmp_path / "cache")
    result = resolve(bundled, MODEL, cache=cache, store=via(proxy.url, bucket), options=ResolveOptions(transfer=FAST))
    assert fault.served == 3
    assert_view_is_the_model(result.path, bundled, sources)
    assert_sound(tmp_path, cache, {"cache"})

    listing = proxy.add(Fault("status", status=503, times=2, path_contains=f"/{bucket}", method="GET"))
    prefix = bundled.store_key(bundled.get(MODEL))
    keys = sorted(o.key for o in via(proxy.url, bucket, max_attempts=3).list(prefix))
    assert listing.served == 2
    assert keys == sorted(prefix + f.path for f in bundled.get(MODEL).files)


def test_a_stall_longer_than_the_read_timeout_is_cut_and_retried(
    bundled: Catalog,
    sources: dict[str, Path],
    faulty,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    proxy, bucket = faulty
    stall = 30.0
    before = proxy.add(Fault("stall", times=1, seconds=stall, path_contains=weights_key(bundled)))
    during = proxy.add(Fault("stall_body", times=1, after=10_000, seconds=stall, path_contains=weights_key(bundled)))
    cache = Cache(tmp_path / "cache")
    started = time.monotonic()
    result = resolve(
        bundled, MODEL, cache=cache, store=via(proxy.url, bucket, read_timeout=1), options=ResolveOptions(transfer=FAST)
    )
    elapsed = time.monotonic() - started
    assert before.served == 1 and during.served == 1
    assert elapsed < 12, f"read_timeout=1 was not honoured: {elapsed:.1f}s against {stall:.0f}s stalls"
    assert_view_is_the_model(result.path, bundled, sources)
    assert_sound(tmp_path, cache, {"cache"})


def test_a_store_that_always_stalls_fails_cleanly_and_in_bounded_time(
    bundled: Catalog,
    faulty,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    proxy, bucket = faulty
    proxy.add(Fault("stall", times=1000, seconds=60, path_contains=weights_key(bundled)))
    cache = Cache(tmp_path / "cache")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        resolve(
            bundled,
            MODEL,
            cache=cache,
            store=via(proxy.url, bucket, read_timeout=1, max_attempts=1),
            options=ResolveOptions(transfer=TransferConfig(attempts=3, backoff=0.01)),
        )
    elapsed = time.monotonic() - started
    assert elapsed < 20, f"gave up only after {elapsed:.1f}s"
    assert proxy.url in str(caught.value) and "Timeout" in str(caught.value)
    assert os.environ.get("AWS_SECRET_ACCESS_KEY", "unset") not in str(caught.value)
    entry = bundled.get(MODEL).file(WEIGHTS)
    assert entry is not None and not cache.blob_path(entry.sha256).exists()
    assert not (cache.markers / MODEL).exists()
    assert_sound(tmp_path, cache, {"cache"})
    shutil.rmtree(cache.root)
