"""check-load compares the header of the bytes it loads with the pinned one: a shard whose header changed in the
store at the same size is refused naming the tensor; pins that do not describe the verified bytes are named too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import catalog
from catalog.lookup import Catalog
from resolver import examples
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.loaders import check_load
from resolver.lock import lock_manifest
from resolver.stores import open_store
from resolver.upload import upload_from_dir

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SHARD = "model-00002-of-00002.safetensors"
TENSOR = "model.layers.0.self_attn.v_proj.weight"


def locked_catalog(tmp_path: Path, sources: dict[str, Path], *names: str) -> Catalog:
    """The bundled manifests, with `names` locked again from their generated files: headers and tables pinned."""
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    cat = catalog.load(folder)
    for name in names:
        lock_manifest(cat.get(name), cat.sources[name], from_dir=sources[name], hub=HubOptions(), write=True)
    return catalog.load(folder)


def test_a_streamed_shard_whose_header_changed_at_the_same_size_is_refused_naming_the_tensor(
    sources: dict[str, Path], store_url: str, tmp_path: Path
) -> None:
    cat = locked_catalog(tmp_path, sources, "tiny-qwen2")
    store = open_store(store_url)
    upload_from_dir(cat, "tiny-qwen2", sources["tiny-qwen2"], store)
    assert check_load(cat, "tiny-qwen2", store=store, cache=Cache(tmp_path / "cache")).ok

    original = (sources["tiny-qwen2"] / SHARD).read_bytes()
    rows, columns = examples.KV_HEADS * examples.HEAD_DIM, examples.HIDDEN  # v_proj: one key/value head's rows
    old = f'"{TENSOR}":{{"dtype":"BF16","shape":[{rows},{columns}]'.encode()
    assert original.count(old) == 1
    changed = original.replace(
        old, old.replace(f"[{rows},{columns}]".encode(), f"[{columns},{rows}]".encode())
    )  # same size
    assert len(changed) == len(original)
    (tmp_path / "changed").write_bytes(changed)
    store.put(cat.store_key(cat.get("tiny-qwen2"), SHARD), tmp_path / "changed")

    report = check_load(cat, "tiny-qwen2", store=store, cache=Cache(tmp_path / "cache2"))
    assert not report.ok
    where = f"tiny-qwen2/{SHARD}"
    assert report.problems[0] == (
        f"{where}: tensor {TENSOR} is BF16 [{columns}, {rows}] in the file, pinned as BF16 [{rows}, {columns}]"
    )
    assert report.problems[1].startswith(f"{where}: the header is not the pinned one (sha256 ")
    assert any("the streamed bytes hash to" in p for p in report.problems[2:])  # and the whole file's pin, as before


def test_a_local_load_names_pins_that_do_not_describe_the_verified_bytes(
    sources: dict[str, Path], tmp_path: Path
) -> None:
    cat = locked_catalog(tmp_path, sources, "tiny-llama")
    store = open_store(str(tmp_path / "store"))
    upload_from_dir(cat, "tiny-llama", sources["tiny-llama"], store)
    assert check_load(cat, "tiny-llama", store=store, cache=Cache(tmp_path / "cache")).ok

    entry = cat.get("tiny-llama").file("model.safetensors")
    assert entry is not None and entry.header is not None
    manifest = cat.sources["tiny-llama"]
    manifest.write_text(manifest.read_text().replace(entry.header.sha256, "e" * 64))  # a pin of other header bytes
    stale = catalog.load(cat.root)
    report = check_load(stale, "tiny-llama", store=store, cache=Cache(tmp_path / "cache"))
    assert report.problems == [
        f"tiny-llama/model.safetensors: the header is not the pinned one (sha256 {entry.header.sha256}, pinned {'e' * 64}; "
        "every tensor's dtype and shape still match: its metadata or layout changed): the file changed under its pin "
        "(`catalog sync` re-uploads the pinned bytes) or the pin is stale (`catalog lock --check tiny-llama`)"
    ]
