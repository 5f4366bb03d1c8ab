"""The verified load (`--load-format catalog` without the engine): every tensor of every bundled streamed model comes
from SeaweedFS through runai's reader, hashed against its pin before it is delivered; a tensor whose bytes differ is
never delivered (fetched again from the next source when one has the pinned bytes); a truncated object and a stalled
server end in one clear error within the capped wait. The engine tier (tests/engine/) runs the same loader in vLLM.

The loader is driven as vLLM drives it (catalog_app/verified_loader.py: a loader config, this process's environment),
each test with a bucket of its own and an empty cache, so every byte comes from the store under test.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog.errors import CatalogError
from catalog.lookup import Catalog
from catalog.settings import S3Options
from catalog_app.verified_loader import LoadRequest, LoadSession
from resolver.stores import make_s3_client, open_store
from resolver.upload import upload_from_dir
from resolver.verified_load import LoadIncomplete, TensorRefused

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from faultproxy import Fault, HttpFaultProxy

ROOT = Path(__file__).resolve().parents[2]
STREAMED = ("tiny-qwen2", "tiny-llama-tensorizer", "tiny-llama-sharded")


def reference(sources: dict[str, Path], name: str) -> dict[str, dict[str, object]]:
    """The tensors of each weights file as the format's own library reads them from the source folder."""
    import torch
    from safetensors.torch import load_file

    out: dict[str, dict[str, object]] = {}
    for path in sorted(p for p in os.listdir(sources[name]) if p.endswith((".safetensors", ".tensors"))):
        file = sources[name] / path
        if path.endswith(".safetensors"):
            out[path] = dict(load_file(str(file)))
        else:
            from tensorizer import TensorDeserializer

            with TensorDeserializer(str(file), device="cpu") as d:
                out[path] = {str(k): torch.clone(v) for k, v in d.items()}
    return out


@pytest.fixture
def store_env(bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A fresh bucket as the store, an empty cache, the bundled catalog: the environment a CI job's engine has."""
    store = f"s3://{bucket}/"
    monkeypatch.setenv("CATALOG_STORE", store)
    monkeypatch.setenv("CATALOG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CATALOG_DIR", str(ROOT / "manifests"))
    monkeypatch.setenv("RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "0")
    return store


def upload(bundled: Catalog, sources: dict[str, Path], name: str, store: str) -> None:
    upload_from_dir(bundled, name, sources[name], open_store(store))


def loaded(name: str, rank: int | None = None) -> tuple[dict[str, object], LoadSession]:
    session = LoadSession.open(LoadRequest.from_config({"model": name}))
    return dict(session.tensors(rank)), session


@pytest.mark.parametrize("name", STREAMED)
def test_every_streamed_model_arrives_tensor_by_tensor_equal_to_its_source(
    bundled: Catalog, sources: dict[str, Path], store_env: str, name: str
) -> None:
    import torch

    upload(bundled, sources, name, store_env)
    want = reference(sources, name)
    ranks = [0, 1] if name == "tiny-llama-sharded" else [None]
    for rank in ranks:
        got, session = loaded(name, rank)
        files = [f for f in want if rank is None or f.startswith(f"model-rank-{rank}-")]
        expected = {k: v for f in files for k, v in want[f].items()}
        assert sorted(got) == sorted(expected)
        assert all(torch.equal(got[k], expected[k]) for k in expected)  # dtype, shape and every element
        [record] = session.records
        assert record.ok and record.delivered == len(expected) and [f.path for f in record.files] == files
        for file in record.files:  # all of it from the bucket, by runai's reader
            assert file.by_source == {
                f"{store_env}{bundled.store_key(bundled.get(name))}{file.path} at endpoint "
                f"{os.environ['AWS_ENDPOINT_URL']}": file.tensors
            }
            assert file.refused == [] and file.failures == []


def flip_in_bucket(bundled: Catalog, sources: dict[str, Path], store: str, name: str, path: str, offset: int) -> None:
    data = bytearray((sources[name] / path).read_bytes())
    data[offset] ^= 0x01  # one bit, same size
    client = make_s3_client(S3Options(endpoint_url=os.environ["AWS_ENDPOINT_URL"], addressing_style="path"))
    client.put_object(
        Bucket=store.removeprefix("s3://").strip("/"), Key=bundled.store_key(bundled.get(name), path), Body=bytes(data)
    )


def tensor_at(bundled: Catalog, name: str, path: str, index: int) -> tuple[str, int]:
    """The name and first byte of the `index`-th tensor of a file, from the pins alone."""
    from catalog.load_plan import plan
    from resolver.loaders.common import pinned_tables

    manifest = bundled.get(name)
    [file] = [f for f in plan(manifest, pinned_tables(bundled, manifest)) if f.entry.path == path]
    tensor = file.tensors[index]
    return tensor.name, tensor.start


@pytest.mark.parametrize(
    ("name", "path"), [("tiny-qwen2", "model-00001-of-00002.safetensors"), ("tiny-llama-tensorizer", "model.tensors")]
)
def test_a_bit_flipped_in_the_bucket_is_refused_before_its_tensor_is_delivered(
    bundled: Catalog, sources: dict[str, Path], store_env: str, name: str, path: str
) -> None:
    upload(bundled, sources, name, store_env)
    victim, offset = tensor_at(bundled, name, path, 3)
    flip_in_bucket(bundled, sources, store_env, name, path, offset + 1)
    session = LoadSession.open(LoadRequest.from_config({"model": name}))
    delivered = []
    with pytest.raises(TensorRefused) as refused:
        for tensor_name, _ in session.tensors():
            delivered.append(tensor_name)
    assert victim not in delivered and len(delivered) < len(set(delivered) | {victim})
    message = str(refused.value)
    assert (
        message.startswith(f"{name}/{path}: tensor {victim} (bytes {offset}-")
        and "refused before the model saw it" in message
    )
    assert "no other source" in message
    [record] = session.records
    assert not record.ok and record.files[-1].refused[0]["tensor"] == victim


def test_a_refused_tensor_is_fetched_again_from_the_next_source(
    bundled: Catalog, sources: dict[str, Path], store_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mirror (tried first) serves one wrong tensor: that tensor alone comes from the primary store."""
    import torch

    name, path = "tiny-qwen2", "model-00002-of-00002.safetensors"
    upload(bundled, sources, name, store_env)
    mirror = tmp_path / "mirror"
    upload(bundled, sources, name, str(mirror))
    victim, offset = tensor_at(bundled, name, path, 0)
    mirrored = mirror / bundled.store_key(bundled.get(name), path)
    data = bytearray(mirrored.read_bytes())
    data[offset] ^= 0x80
    mirrored.write_bytes(bytes(data))
    monkeypatch.setenv("CATALOG_MIRRORS", str(mirror))
    got, session = loaded(name)
    want = {k: v for f in reference(sources, name).values() for k, v in f.items()}
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    [record] = session.records
    [second] = [f for f in record.files if f.path == path]
    assert [r["tensor"] for r in second.refused] == [victim] and second.refused[0]["from"].startswith(str(mirror))
    primary = next(where for where in second.by_source if where.startswith("s3://"))
    assert second.by_source[primary] == 1 and sum(second.by_source.values()) == second.tensors


@pytest.fixture
def proxied_store(
    bundled: Catalog, sources: dict[str, Path], store_env: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HttpFaultProxy]:
    """tiny-qwen2 in the bucket, reached through an HTTP fault proxy (the loader's endpoint)."""
    upload(bundled, sources, "tiny-qwen2", store_env)
    with HttpFaultProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        yield proxy


def test_bytes_that_change_in_flight_with_the_same_etag_are_refused(
    proxied_store: HttpFaultProxy, bundled: Catalog
) -> None:
    """A store that lists the verified object (same ETag, same size) but serves other bytes: no proof by ETag can see
    it; the loader does."""
    path = "model-00001-of-00002.safetensors"
    victim, offset = tensor_at(bundled, "tiny-qwen2", path, 1)
    proxied_store.add(Fault("flip", times=100, path_contains=path, after=0))  # the first byte of each GET's body
    session = LoadSession.open(LoadRequest.from_config({"model": "tiny-qwen2"}))
    with pytest.raises(TensorRefused) as refused:
        dict(session.tensors())
    assert f"tiny-qwen2/{path}: tensor " in str(refused.value)
    assert proxied_store.count("GET", path) >= 1


def test_a_truncated_object_ends_in_one_clear_error(bundled: Catalog, sources: dict[str, Path], store_env: str) -> None:
    name, path = "tiny-qwen2", "model-00002-of-00002.safetensors"
    upload(bundled, sources, name, store_env)
    data = (sources[name] / path).read_bytes()
    client = make_s3_client(S3Options(endpoint_url=os.environ["AWS_ENDPOINT_URL"], addressing_style="path"))
    client.put_object(
        Bucket=store_env.removeprefix("s3://").strip("/"),
        Key=bundled.store_key(bundled.get(name), path),
        Body=data[: len(data) // 2],
    )
    session = LoadSession.open(LoadRequest.from_config({"model": name}))
    with pytest.raises(LoadIncomplete) as incomplete:
        dict(session.tensors())
    message = str(incomplete.value)
    assert (
        message.startswith(f"{name}/{path}: ") and "could not be read" in message and "cannot stream s3://" in message
    )


def test_a_stalled_server_ends_in_one_clear_error_within_the_capped_wait(
    proxied_store: HttpFaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's minimum rate (here 3 s, runai's shortest, instead of the default 30) ends a read that delivers
    nothing; the load says which URI and endpoint stalled. The wait is bounded, not the time of the test."""
    monkeypatch.setenv("RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS", "3000")
    proxied_store.add(Fault("stall_body", times=1000, path_contains="model-00001", after=10, seconds=600))
    session = LoadSession.open(LoadRequest.from_config({"model": "tiny-qwen2"}))
    started = time.monotonic()
    with pytest.raises(LoadIncomplete) as incomplete:
        dict(session.tensors())
    assert time.monotonic() - started < 120
    assert "cannot stream s3://" in str(incomplete.value) and proxied_store.url in str(incomplete.value)


def test_an_unpinned_model_or_an_unknown_key_is_one_clear_error(store_env: str) -> None:
    with pytest.raises(CatalogError, match="unknown loader config key"):
        LoadRequest.from_config({"model": "tiny-qwen2", "tensorizer_uri": "s3://x/y"})
    with pytest.raises(CatalogError, match="needs the model's logical name"):
        LoadRequest.from_config({})
    with pytest.raises(CatalogError, match="no model named 'nope'"):
        LoadSession.open(LoadRequest.from_config({"model": "nope"}))


def test_a_tensor_is_hashed_exactly_as_pinned(bundled: Catalog, sources: dict[str, Path]) -> None:
    """The digest the loader checks is the sha256 of the tensor's bytes in the file (what lock recorded)."""
    from catalog.load_plan import plan
    from resolver.loaders.common import pinned_tables

    manifest = bundled.get("tiny-llama")
    for file in plan(manifest, pinned_tables(bundled, manifest)):
        raw = (sources["tiny-llama"] / file.entry.path).read_bytes()
        assert all(hashlib.sha256(raw[t.start : t.end]).hexdigest() == t.sha256 for t in file.tensors)
