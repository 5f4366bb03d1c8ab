"""Bad bytes, missing objects, dropped connections, concurrency and hostile paths: nothing unverified is published."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from servers import FaultProxy, SeaweedServer

from catalog.errors import IntegrityError, MissingObjectError, NotCachedError, StoreUnavailableError, UnsafePathError
from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import S3Options, S3Store, open_store
from resolver.transfer import MiB, TransferConfig
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny-llama"
WEIGHTS = "model.safetensors"


def fill(cat: Catalog, store_url: str, sources: dict[str, Path], name: str = MODEL) -> None:
    upload_from_dir(cat, name, sources[name], open_store(store_url))


def replace_object(cat: Catalog, store_url: str, tmp_path: Path, data: bytes, path: str = WEIGHTS) -> None:
    bad = tmp_path / "bad-object"
    bad.write_bytes(data)
    open_store(store_url).put(cat.store_key(cat.get(MODEL), path), bad)


def assert_no_trace(cache: Cache, sha256: str) -> None:
    assert not cache.blob_path(sha256).exists()
    assert not any(cache.tmp.glob("*")) if cache.tmp.exists() else True
    assert not any(cache.markers.glob(f"{MODEL}/*.json")) if cache.markers.exists() else True


def original(sources: dict[str, Path]) -> bytes:
    return (sources[MODEL] / WEIGHTS).read_bytes()


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda d: flip(d, len(d) // 2), "sha256"),  # same size, one byte flipped
        (lambda d: d[: len(d) - 100], "size"),  # truncated
        (lambda d: d + b"\0" * 100, "size"),  # wrong size, larger
    ],
    ids=["flipped-byte", "truncated", "larger"],
)
def test_damaged_object_fails_cleanly_and_recovers_after_repair(
    bundled: Catalog,
    sources: dict[str, Path],
    store_url: str,
    tmp_path: Path,
    damage,
    what: str,  # type: ignore[no-untyped-def]
) -> None:
    fill(bundled, store_url, sources)
    replace_object(bundled, store_url, tmp_path, damage(original(sources)))
    cache = Cache(tmp_path / "cache")
    entry = bundled.get(MODEL).file(WEIGHTS)
    assert entry is not None
    with pytest.raises(IntegrityError) as caught:
        resolve(bundled, MODEL, cache=cache, store=open_store(store_url))
    err = caught.value
    assert (err.model, err.path, err.what) == (MODEL, WEIGHTS, what)
    assert err.expected == (entry.sha256 if what == "sha256" else str(entry.size))
    assert f"{MODEL}/{WEIGHTS}" in str(err) and err.expected in str(err) and err.got in str(err)
    assert "tmp" not in str(err) and ".part" not in str(err)  # names the model's file, never a temp path
    assert_no_trace(cache, entry.sha256)
    replace_object(bundled, store_url, tmp_path, original(sources))  # repair the bucket
    fixed = resolve(bundled, MODEL, cache=cache, store=open_store(store_url))
    assert (fixed.path / WEIGHTS).read_bytes() == original(sources)


def test_missing_object_names_model_file_and_store(
    bundled: Catalog, sources: dict[str, Path], store_url: str, tmp_path: Path
) -> None:
    fill(bundled, store_url, sources)
    open_store(store_url).delete(bundled.store_key(bundled.get(MODEL), WEIGHTS))
    cache = Cache(tmp_path / "cache")
    with pytest.raises(MissingObjectError) as caught:
        resolve(bundled, MODEL, cache=cache, store=open_store(store_url))
    assert caught.value.path == WEIGHTS and f"{MODEL}/{WEIGHTS} is missing" in str(caught.value)
    assert_no_trace(cache, bundled.get(MODEL).files[2].sha256)


def test_cli_reports_a_corrupt_object_in_one_line_with_exit_1(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources)
    replace_object(bundled, store_url, tmp_path, flip(original(sources), 10))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            "resolve",
            MODEL,
            "--store",
            store_url,
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    # Progress lines (one per fetched file, in logs) aside, the failure is one error line and one hint.
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith(("fetched ", "... "))]
    assert lines[0].startswith(f"error: expected sha256 {bundled.get(MODEL).file(WEIGHTS).sha256} but got ")  # type: ignore[union-attr]
    assert f"for {MODEL}/{WEIGHTS}; deleted the download; the object in the store is corrupt" in lines[0]
    assert lines[1].startswith("hint: ") and len(lines) == 2
    assert done.stdout == ""


@pytest.fixture
def proxied(s3_server: SeaweedServer) -> tuple[FaultProxy, str]:
    from servers import new_bucket

    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    yield proxy, f"s3://{new_bucket(s3_server.url)}/"  # type: ignore[misc]
    proxy.close()


def proxied_store(proxy: FaultProxy, url: str) -> S3Store:
    store = open_store(url)
    assert isinstance(store, S3Store)
    store.options = S3Options(endpoint_url=proxy.url, addressing_style="path", max_attempts=2, read_timeout=5)
    return store


def test_dropped_connection_resumes_from_the_last_byte(
    bundled: Catalog, sources: dict[str, Path], proxied: tuple[FaultProxy, str], tmp_path: Path
) -> None:
    proxy, url = proxied
    fill(bundled, url, sources, "all-minilm-l6-v2")
    store = proxied_store(proxy, url)
    proxy.cut_next(after_bytes=20 * MiB, times=2, path_contains="model.safetensors")
    cache = Cache(tmp_path / "cache")
    config = TransferConfig(part_size=32 * MiB, concurrency=4, backoff=0.01)
    result = resolve(bundled, "all-minilm-l6-v2", cache=cache, store=store, options=ResolveOptions(transfer=config))
    assert proxy.cuts_done == 2
    key = bundled.store_key(bundled.get("all-minilm-l6-v2"), "model.safetensors")
    gets = proxy.requests[f"GET /{url[5:]}{key}"]
    assert gets > 3  # 3 parts plus the resumed requests
    assert (result.path / "model.safetensors").read_bytes() == (
        sources["all-minilm-l6-v2"] / "model.safetensors"
    ).read_bytes()


def test_server_down_then_back_is_retried(
    bundled: Catalog, sources: dict[str, Path], proxied: tuple[FaultProxy, str], tmp_path: Path
) -> None:
    proxy, url = proxied
    fill(bundled, url, sources)
    store = proxied_store(proxy, url)
    proxy.refuse_next(3)  # down for the first connections, whenever they come; then back
    config = TransferConfig(concurrency=2, backoff=0.2, attempts=6)
    result = resolve(
        bundled, MODEL, cache=Cache(tmp_path / "cache"), store=store, options=ResolveOptions(transfer=config)
    )
    assert (result.path / WEIGHTS).read_bytes() == original(sources)
    assert proxy.refused == 3  # the outage was real: connections were refused, then retried


def test_server_that_stays_down_fails_cleanly(
    bundled: Catalog, sources: dict[str, Path], proxied: tuple[FaultProxy, str], tmp_path: Path
) -> None:
    proxy, url = proxied
    fill(bundled, url, sources)
    store = proxied_store(proxy, url)
    proxy.go_down(60)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(StoreUnavailableError) as caught:
        resolve(
            bundled,
            MODEL,
            cache=cache,
            store=store,
            options=ResolveOptions(transfer=TransferConfig(backoff=0.01, attempts=3)),
        )
    assert proxy.url in str(caught.value)
    assert "testing-secret-key" not in str(caught.value)
    assert not list(cache.blobs.glob("*/*")) and not list(cache.tmp.glob("*"))


def test_offline_fails_fast_naming_what_is_missing(bundled: Catalog, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    with pytest.raises(NotCachedError) as caught:
        resolve(
            bundled,
            MODEL,
            cache=cache,
            store=open_store("s3://unreachable-bucket/"),
            options=ResolveOptions(offline=True),
        )
    assert "model.safetensors" in str(caught.value) and str(cache.root) in str(caught.value)


def test_concurrent_processes_resolve_once_with_identical_results(
    bundled: Catalog, sources: dict[str, Path], s3_server: SeaweedServer, tmp_path: Path
) -> None:
    from servers import new_bucket

    url = f"s3://{new_bucket(s3_server.url)}/"
    fill(bundled, url, sources, "all-minilm-l6-v2")
    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    env = {**os.environ, "AWS_ENDPOINT_URL": proxy.url, "CATALOG_CACHE": str(tmp_path / "cache")}
    command = [
        sys.executable,
        "-m",
        "catalog",
        "--catalog",
        str(ROOT / "manifests"),
        "resolve",
        "all-minilm-l6-v2",
        "--store",
        url,
        "--format",
        "json",
    ]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    proxy.close()
    assert [p.returncode for p in procs] == [0] * 6, [o[1] for o in outputs]
    results = [json.loads(out) for out, _ in outputs]
    assert all(r["path"] == results[0]["path"] for r in results)
    key = bundled.store_key(bundled.get("all-minilm-l6-v2"), "model.safetensors")
    assert proxy.requests[f"GET /{url[5:]}{key}"] <= 2  # about once, not six times
    cache = Cache(tmp_path / "cache")
    for entry in bundled.get("all-minilm-l6-v2").files:
        assert (Path(results[0]["path"]) / entry.path).stat().st_size == entry.size
    assert not list(cache.tmp.glob("*"))


def test_paths_escaping_the_target_are_refused_before_any_write(bundled: Catalog, tmp_path: Path) -> None:
    manifest = bundled.get(MODEL)
    evil = manifest.model_copy(
        update={"files": (*manifest.files, FileEntry(path="../escape.json", size=1, sha256="a" * 64))}
    )
    cat = Catalog(bundled.root, bundled.settings, {**bundled.models, MODEL: evil}, bundled.sources)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(UnsafePathError):
        resolve(cat, MODEL, cache=cache, store=open_store(str(tmp_path / "store")))
    assert not (tmp_path / "cache").exists()
    absolute = manifest.model_copy(update={"files": (FileEntry(path="/etc/x", size=1, sha256="a" * 64),)})
    cat = Catalog(bundled.root, bundled.settings, {**bundled.models, MODEL: absolute}, bundled.sources)
    with pytest.raises(UnsafePathError):
        resolve(cat, MODEL, cache=cache, store=open_store(str(tmp_path / "store")))
    assert not (tmp_path / "cache").exists()


def test_store_keys_that_escape_are_refused(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    for key in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(UnsafePathError):
            store.open(key)


@pytest.mark.parametrize("planted", ["models", "blobs", "tmp"])
def test_a_symlink_planted_in_the_cache_cannot_redirect_writes(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path, planted: str
) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources)
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = Cache(tmp_path / "cache")
    cache.root.mkdir(parents=True)
    if planted == "models":
        cache.models.mkdir()
        (cache.models / MODEL).symlink_to(outside, target_is_directory=True)
    elif planted == "blobs":
        cache.blobs.mkdir()
        entry = bundled.get(MODEL).file(WEIGHTS)
        assert entry is not None
        (cache.blobs / entry.sha256[:2]).symlink_to(outside, target_is_directory=True)
    else:
        cache.tmp.symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError):
        resolve(bundled, MODEL, cache=cache, store=open_store(store_url))
    assert list(outside.iterdir()) == []
