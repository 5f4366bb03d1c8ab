"""Ordered mirrors: tried per file before the primary store; one that lacks a file, fails or serves other bytes is
skipped for that file. Real stores: a second SeaweedFS bucket over S3, the filer's plain HTTP, a folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from servers import SeaweedServer, free_port, new_bucket

from catalog.lookup import Catalog, load
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.stores.http import HttpStore
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-llama"


def corrupt_copy(source: Path, tmp: Path) -> Path:
    """The same size, one byte flipped."""
    data = bytearray(source.read_bytes())
    data[len(data) // 2] ^= 0xFF
    out = tmp / f"bad-{source.name}"
    out.write_bytes(bytes(data))
    return out


def test_mirrors_are_tried_in_order_per_file(
    bundled: Catalog, sources: dict[str, Path], s3_server: SeaweedServer, tmp_path: Path
) -> None:
    manifest = bundled.get(NAME)
    primary_bucket, mirror_bucket = new_bucket(s3_server.url), new_bucket(s3_server.url)
    upload_from_dir(bundled, NAME, sources[NAME], open_store(f"s3://{primary_bucket}/"))
    mirror = open_store(f"s3://{mirror_bucket}/")
    upload_from_dir(bundled, NAME, sources[NAME], mirror)
    # The mirror bucket: tokenizer.json missing, model.safetensors rewritten with other bytes of the same size.
    mirror.delete(bundled.store_key(manifest, "tokenizer.json"))
    mirror.put(
        bundled.store_key(manifest, "model.safetensors"), corrupt_copy(sources[NAME] / "model.safetensors", tmp_path)
    )
    # First in line: a dead HTTP mirror (nothing listens), then the filer's plain HTTP view of the mirror bucket,
    # then the same bucket over S3, then the primary.
    dead = open_store(f"http://127.0.0.1:{free_port()}/nothing/")
    http = open_store(f"{s3_server.filer_url}/buckets/{mirror_bucket}/")
    s3_mirror = open_store(f"s3://{mirror_bucket}/?endpoint={s3_server.url}&addressing=path")
    primary = open_store(f"s3://{primary_bucket}/")
    cache = Cache(tmp_path / "cache")
    options = ResolveOptions(mirrors=(dead, http, s3_mirror))
    result = resolve(bundled, NAME, cache=cache, store=primary, options=options)
    expected = {e.path: http.url for e in manifest.files} | {
        "tokenizer.json": primary.url,
        "model.safetensors": primary.url,
    }
    assert result.sources == expected
    assert isinstance(http, HttpStore) and http.requests["GET"] >= len(manifest.files)
    assert s3_mirror.requests["GetObject"] == 2  # only what the HTTP mirror could not give, and both fail there too
    assert primary.requests["GetObject"] == 2
    for entry in manifest.files:  # every byte the pinned one: the corrupt mirror copy was never published
        assert (result.path / entry.path).read_bytes() == (sources[NAME] / entry.path).read_bytes()
    assert list((cache.root / "tmp").iterdir()) == []


def test_a_mirror_with_the_primarys_url_is_named_apart(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server: SeaweedServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same bucket name on another endpoint has the primary's URL: before, warnings and `sources` could not tell
    the mirror that failed (or served) from the primary."""
    bucket = new_bucket(s3_server.url)
    upload_from_dir(bundled, NAME, sources[NAME], open_store(f"s3://{bucket}/"))
    dead = open_store(f"s3://{bucket}/?endpoint=http://127.0.0.1:{free_port()}")
    same = open_store(f"s3://{bucket}/?endpoint={s3_server.url}&addressing=path")
    primary = open_store(f"s3://{bucket}/")
    assert dead.url == same.url == primary.url
    options = ResolveOptions(mirrors=(dead, same), transfer=TransferConfig(attempts=1))
    with caplog.at_level("WARNING", logger="resolver"):
        result = resolve(bundled, NAME, cache=Cache(tmp_path / "cache"), store=primary, options=options)
    assert set(result.sources.values()) == {f"s3://{bucket}/ (mirror 2)"}
    assert f"mirror s3://{bucket}/ (mirror 1): " in caplog.text


def test_a_mirror_in_catalog_yaml_and_the_cli_json(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    catalog_dir = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", catalog_dir)
    mirror_dir, primary_dir = tmp_path / "mirror", tmp_path / "primary"
    with open(catalog_dir / "catalog.yaml", "a") as f:
        f.write(f"mirrors: ['{mirror_dir.as_uri()}/']\n")
    cat = load(catalog_dir)
    assert cat.settings.mirrors == (f"{mirror_dir.as_uri()}/",)
    upload_from_dir(cat, NAME, sources[NAME], open_store(str(primary_dir)))
    mirror = open_store(str(mirror_dir))
    upload_from_dir(cat, NAME, sources[NAME], mirror)
    mirror.delete(cat.store_key(cat.get(NAME), "config.json"))
    env = {**os.environ, "CATALOG_CACHE": str(tmp_path / "cache")}
    env.pop("CATALOG_MIRRORS", None)
    command = [
        sys.executable,
        "-m",
        "catalog",
        "--catalog",
        str(catalog_dir),
        "resolve",
        NAME,
        "--store",
        str(primary_dir),
        "--format",
        "json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sources_seen = json.loads(done.stdout)["sources"]
    assert sources_seen.pop("config.json") == f"{primary_dir.resolve().as_uri()}/"
    assert set(sources_seen.values()) == {f"{mirror_dir.resolve().as_uri()}/"}
    # --mirror replaces catalog.yaml's list: a folder holding nothing sends every file to the primary.
    env["CATALOG_CACHE"] = str(tmp_path / "cache2")
    done = subprocess.run(
        [*command, "--mirror", str(tmp_path / "empty")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["sources"].values()) == {f"{primary_dir.resolve().as_uri()}/"}


@pytest.mark.parametrize(
    "url", ["http://user:pw@127.0.0.1/x/", "s3://bucket/?endpoint=ftp://x", "s3://bucket/?colour=blue"]
)
def test_bad_mirror_urls_are_usage_errors(url: str) -> None:
    from catalog.errors import UsageError

    with pytest.raises(UsageError) as caught:
        open_store(url)
    assert "pw" not in str(caught.value)


def test_the_http_store_reads_ranges_and_cannot_write(s3_server: SeaweedServer, bucket: str, tmp_path: Path) -> None:
    payload = os.urandom(300_000)
    (tmp_path / "blob").write_bytes(payload)
    open_store(f"s3://{bucket}/").put("a/blob", tmp_path / "blob")
    store = open_store(f"{s3_server.filer_url}/buckets/{bucket}/")
    info = store.head("a/blob")
    assert info is not None and info.size == len(payload)
    assert store.head("a/none") is None
    stream = store.open("a/blob", 1000, 5000)
    buffer = memoryview(bytearray(10_000))
    got = b""
    while count := stream.readinto(buffer):
        got += bytes(buffer[:count])
    stream.close()
    assert stream.total == len(payload) and got == payload[1000:5000]
    from catalog.errors import UsageError

    with pytest.raises(UsageError):
        store.put("a/other", tmp_path / "blob")
