"""Streamed weights are verified too: `catalog resolve` proves each streamed object is the one whose bytes were
verified (listing + sync's state record), or hashes it (`--verify-stream deep`), before handing out a URI.

Against the folder store and a bucket on the S3 server, through the real entry point (exit codes), each call
with its own cache so the warm index never answers in place of the full CLI.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from catalog.lookup import Catalog
from catalog.settings import S3Options
from resolver.stores import LocalStore, make_s3_client, open_store
from resolver.stream_check import state_key
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
# The streamed weight file each test tampers with: a shard of a runai_streamer model, a tensorizer file.
MODELS = {"tiny-qwen2": "model-00002-of-00002.safetensors", "tiny-llama-tensorizer": "model.tensors"}


class Bucketish:
    """One store under test, with the raw writes another tool would make (no state record, new ETag)."""

    def __init__(self, url: str, put: Callable[[str, bytes], None], delete: Callable[[str], None]) -> None:
        self.url = url
        self.put = put
        self.delete = delete


@pytest.fixture(params=["folder", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bucketish]:
    if request.param == "folder":
        root = tmp_path / "store"

        def put_file(key: str, data: bytes) -> None:  # a new file renamed over the old one: a new inode, a new ETag
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(path.name + ".tmp")
            temp.write_bytes(data)
            os.replace(temp, path)

        yield Bucketish(str(root), put_file, lambda key: (root / key).unlink())
        return
    bucket: str = request.getfixturevalue("bucket")
    client = make_s3_client(S3Options(endpoint_url=os.environ["AWS_ENDPOINT_URL"], addressing_style="path"))
    yield Bucketish(
        f"s3://{bucket}/",
        lambda key, data: client.put_object(Bucket=bucket, Key=key, Body=data),
        lambda key: client.delete_object(Bucket=bucket, Key=key),
    )


_caches = itertools.count()


def resolve_cli(store: str, name: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """vllm-args for the format's own streamer (which reads the URI unverified: what the proof is for)."""
    cache = tmp_path / f"cache-{next(_caches)}"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            "resolve",
            name,
            "--format",
            "vllm-args",
            "--store",
            store,
            "--cache",
            str(cache),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CATALOG_ENGINE_LOADER": "plain"},
    )


def uploaded(bundled: Catalog, sources: dict[str, Path], target: Bucketish, name: str) -> str:
    """Upload `name` verified (which records its state) and return its prefix key."""
    upload_from_dir(bundled, name, sources[name], open_store(target.url))
    return bundled.store_key(bundled.get(name))


def flipped(sources: dict[str, Path], name: str) -> bytes:
    data = bytearray((sources[name] / MODELS[name]).read_bytes())
    data[-1] ^= 0xFF  # same size: only the ETag (or the hash) can tell
    return bytes(data)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_clean_then_rewritten_then_missing(
    bundled: Catalog, sources: dict[str, Path], target: Bucketish, tmp_path: Path, name: str
) -> None:
    prefix = uploaded(bundled, sources, target, name)
    clean = resolve_cli(target.url, name, tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert open_store(target.url).stream_uri(prefix) in clean.stdout

    target.put(prefix + MODELS[name], flipped(sources, name))
    rewritten = resolve_cli(target.url, name, tmp_path)
    assert rewritten.returncode == 1, rewritten.stdout
    assert f"{name}/{MODELS[name]}" in rewritten.stderr and "rewritten since sync verified it" in rewritten.stderr
    assert "expected ETag" in rewritten.stderr and rewritten.stdout == ""

    target.delete(prefix + MODELS[name])
    missing = resolve_cli(target.url, name, tmp_path)
    assert missing.returncode == 1, missing.stdout
    assert f"{name}/{MODELS[name]} is missing from the store" in missing.stderr


@pytest.mark.parametrize("name", sorted(MODELS))
def test_resized_object_names_expected_and_got_size(
    bundled: Catalog, sources: dict[str, Path], target: Bucketish, tmp_path: Path, name: str
) -> None:
    prefix = uploaded(bundled, sources, target, name)
    target.put(prefix + MODELS[name], flipped(sources, name) + b"\0")
    done = resolve_cli(target.url, name, tmp_path)
    size = bundled.get(name).file(MODELS[name]).size  # type: ignore[union-attr]
    assert done.returncode == 1
    assert f"expected size {size} but got {size + 1} for {name}/{MODELS[name]}" in done.stderr


@pytest.mark.parametrize("name", sorted(MODELS))
def test_objects_put_by_another_tool_are_never_verified_unless_hashed(
    bundled: Catalog,
    sources: dict[str, Path],
    target: Bucketish,
    tmp_path: Path,
    name: str,
) -> None:
    prefix = uploaded(bundled, sources, target, name)
    target.delete(state_key(name))  # the same bytes, but nothing records that sync verified them
    unverified = resolve_cli(target.url, name, tmp_path)
    assert unverified.returncode == 1
    assert f"{name}/" in unverified.stderr and "never verified" in unverified.stderr
    assert "--verify-stream deep" in unverified.stderr  # the hint

    deep = resolve_cli(target.url, name, tmp_path, "--verify-stream", "deep")
    assert deep.returncode == 0, deep.stderr
    assert open_store(target.url).stream_uri(prefix) in deep.stdout

    target.put(prefix + MODELS[name], flipped(sources, name))
    wrong = resolve_cli(target.url, name, tmp_path, "--verify-stream", "deep")
    pin = bundled.get(name).file(MODELS[name]).sha256  # type: ignore[union-attr]
    assert wrong.returncode == 1
    assert f"expected sha256 {pin} but got" in wrong.stderr and f"{name}/{MODELS[name]}" in wrong.stderr


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_empty_or_absent_store_folder_fails(tmp_path: Path, name: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for store in (empty, tmp_path / "no-such-folder"):
        done = resolve_cli(str(store), name, tmp_path)
        assert done.returncode == 1, done.stdout
        assert f"{name}/" in done.stderr and done.stdout == ""


def test_sync_records_what_a_streamed_resolve_checks(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """An object sync verified (not uploaded by upload_from_dir) passes the listing check."""
    store = LocalStore(tmp_path / "store")
    name = "tiny-qwen2"
    prefix = uploaded(bundled, sources, Bucketish(str(store.root), lambda k, d: None, lambda k: None), name)
    (store.root / state_key(name)).unlink()
    sync = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            "sync",
            name,
            "--store",
            str(store.root),
            "--cache",
            str(tmp_path / "sync-cache"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sync.returncode == 0, sync.stderr
    done = resolve_cli(str(store.root), name, tmp_path)
    assert done.returncode == 0, done.stderr
    assert store.stream_uri(prefix) in done.stdout
