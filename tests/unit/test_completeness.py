"""Complete pins: every file a weights index names is pinned. `lock` refuses a selection that drops a shard
(naming it and the pattern that dropped it) and records the shards; `validate` checks the record without
the network; the cache refuses to hand out a view whose local index names an unpinned file."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers import REV, SHA, files_yaml, manifest_text, write_catalog

import catalog
from catalog.errors import UsageError
from catalog.formats import is_index_file
from catalog.loading import load_dir
from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver.cache import Cache
from resolver.completeness import BadIndexError, IncompleteModelError, index_shards, missing_shards, view_gaps
from resolver.examples import safetensors_bytes
from resolver.lock import files_from_dir, lock_manifest, render_files_block
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout, ViewSpec

SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def index_bytes(*shards: str) -> bytes:
    return json.dumps(
        {"metadata": {"total_size": 8}, "weight_map": {f"t{i}": s for i, s in enumerate(shards)}}
    ).encode()


# -- pure ---------------------------------------------------------------------------------------------------
def test_index_files_are_recognised() -> None:
    for path in (
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
        "unet/diffusion_pytorch_model.safetensors.index.json",
        "model.fp16.safetensors.index.json",
    ):
        assert is_index_file(path), path
    for path in ("config.json", "index.json", "tokenizer.json", "model.safetensors"):
        assert not is_index_file(path), path


def test_index_shards_are_repo_paths_once_each() -> None:
    raw = json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s1.safetensors"}}).encode()
    assert index_shards("model.safetensors.index.json", raw) == ("s1.safetensors", "s2.safetensors")
    # a diffusers subfolder's index names files beside it
    assert index_shards("unet/diffusion_pytorch_model.safetensors.index.json", raw) == (
        "unet/s1.safetensors",
        "unet/s2.safetensors",
    )
    for bad in (
        b"not json",
        b"[]",
        b'{"weight_map": {"a": 1}}',
        json.dumps({"weight_map": {"a": "../escape.bin"}}).encode(),
    ):
        with pytest.raises(BadIndexError):
            index_shards("model.safetensors.index.json", bad)
    assert missing_shards(["s1"], {"i.json": ["s1", "s2"], "j.json": ["s1"]}) == {"i.json": ["s2"]}


# -- validate -----------------------------------------------------------------------------------------------
def problems(tmp_path: Path, text: str) -> list[tuple[int, str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        folder = write_catalog(tmp_path, {"tiny.yaml": text})
        return [(p.line, p.rule, p.message) for p in load_dir(folder).problems]


def sharded(shards_block: str, extra_files: tuple[tuple[str, int, str], ...] = (), extra: str = "") -> str:
    files = (
        files_yaml(
            ("config.json", 10, SHA),
            (SHARDS[0], 1000, "b" * 64),
            *extra_files,
            ("model.safetensors.index.json", 100, "c" * 64),
        )
        + shards_block
    )
    return manifest_text(files=files, extra=extra)


def test_a_recorded_complete_index_is_valid(tmp_path: Path) -> None:
    block = f"    shards:\n      - {SHARDS[0]}\n      - {SHARDS[1]}\n"
    assert problems(tmp_path, sharded(block, ((SHARDS[1], 1000, "d" * 64),))) == []


def test_a_missing_shard_is_reported_at_its_line_naming_the_pattern(tmp_path: Path) -> None:
    block = f"    shards:\n      - {SHARDS[0]}\n      - {SHARDS[1]}\n"
    text = sharded(block).replace(f"  revision: {REV}\n", f'  revision: {REV}\n  exclude: ["*-00002-of-*"]\n')
    found = problems(tmp_path, text)
    assert [(line, rule) for line, rule, _ in found] == [(21, "shard-missing")]  # the line of that shard
    assert (
        "names 'model-00002-of-00002.safetensors', which is not pinned: source.exclude '*-00002-of-*' drops it"
        in found[0][2]
    )


def test_an_unrecorded_index_asks_for_a_lock(tmp_path: Path) -> None:
    found = problems(tmp_path, sharded(""))
    assert [(line, rule) for line, rule, _ in found] == [(15, "index-unrecorded")]
    assert "catalog lock tiny" in found[0][2]


def test_hub_metadata_shapes_are_checked(tmp_path: Path) -> None:
    files = (
        files_yaml(("config.json", 10, SHA))
        + "    blob_id: ABC\n"
        + files_yaml(("model.safetensors", 1000, "b" * 64))
        + f"    blob_id: {'e' * 40}\n    xet_hash: {'f' * 63}\n    shards: []\n"
    )
    found = problems(tmp_path, manifest_text(files=files))
    assert [(line, rule) for line, rule, _ in found] == [(12, "blob-id"), (17, "xet-hash"), (18, "shards")]


# -- lock ---------------------------------------------------------------------------------------------------
def test_lock_records_the_shards_of_the_bundled_sharded_model(bundled: Catalog, sources: dict[str, Path]) -> None:
    m = bundled.get("tiny-qwen2")
    index = m.file("model.safetensors.index.json")
    assert index is not None and index.shards == tuple(SHARDS)
    entries = files_from_dir(sources["tiny-qwen2"], (), ())
    assert {e.path: e.shards for e in entries}["model.safetensors.index.json"] == tuple(SHARDS)


def test_lock_refuses_a_selection_that_drops_a_shard(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    m = bundled.get("tiny-qwen2")
    narrowed = m.model_copy(
        update={"source": m.source.model_copy(update={"exclude": ("*-00002-of-00002.safetensors",)})}
    )
    copy = tmp_path / "tiny-qwen2.yaml"
    shutil.copy(bundled.sources["tiny-qwen2"], copy)
    before = copy.read_text()
    with pytest.raises(UsageError) as caught:
        lock_manifest(narrowed, copy, from_dir=sources["tiny-qwen2"], hub=None, write=True)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "model.safetensors.index.json names model-00002-of-00002.safetensors" in message
    assert "source.exclude '*-00002-of-00002.safetensors' drops it" in message
    assert copy.read_text() == before  # nothing was written
    only = m.model_copy(update={"source": m.source.model_copy(update={"include": ("*.json", "model-00001-*")})})
    with pytest.raises(UsageError, match=r"no source.include pattern \('\*.json', 'model-00001-\*'\) selects it"):
        lock_manifest(only, copy, from_dir=sources["tiny-qwen2"], hub=None, write=True)  # type: ignore[arg-type]


def test_lock_refuses_an_index_naming_a_file_the_source_lacks(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / SHARDS[0]).write_bytes(b"x")
    (folder / "model.safetensors.index.json").write_bytes(index_bytes(*SHARDS))
    with pytest.raises(UsageError, match=f"names {SHARDS[1]} \\(--from-dir .* has no such file\\)"):
        files_from_dir(folder, (), ())


def test_a_diffusers_subfolder_index_is_checked_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "unet").mkdir(parents=True)
    (folder / "unet" / "diffusion_pytorch_model.safetensors.index.json").write_bytes(
        index_bytes("d-1.safetensors", "d-2.safetensors")
    )
    (folder / "unet" / "d-1.safetensors").write_bytes(safetensors_bytes({}, {"part": "1"}))  # lock reads each header
    (folder / "unet" / "d-2.safetensors").write_bytes(safetensors_bytes({}, {"part": "2"}))
    entries = {e.path: e for e in files_from_dir(folder, (), ())}
    assert entries["unet/diffusion_pytorch_model.safetensors.index.json"].shards == (
        "unet/d-1.safetensors",
        "unet/d-2.safetensors",
    )
    with pytest.raises(UsageError, match="unet/d-2.safetensors"):
        files_from_dir(folder, (), ("unet/d-2*",))


def test_render_writes_the_shards_and_reads_back(tmp_path: Path) -> None:
    entry = FileEntry(path="model.safetensors.index.json", size=1, sha256=SHA, blob_id="e" * 40, shards=tuple(SHARDS))
    text = render_files_block([entry])
    assert text.endswith(f"    blob_id: {'e' * 40}\n    shards:\n      - {SHARDS[0]}\n      - {SHARDS[1]}\n")


# -- resolve ------------------------------------------------------------------------------------------------
def entry(path: str, data: bytes, shards: tuple[str, ...] | None = None) -> FileEntry:
    return FileEntry(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest(), shards=shards)


def test_a_view_whose_index_names_an_unpinned_file_is_refused(tmp_path: Path) -> None:
    """A hand-edited manifest recording one shard of two: validation passes (every recorded shard is pinned),
    the cache still refuses to mark the view, naming the index and the shard."""
    folder = tmp_path / "src" / "tiny"
    folder.mkdir(parents=True)
    files = {"config.json": b"{}", SHARDS[0]: b"shard one", "model.safetensors.index.json": index_bytes(*SHARDS)}
    for path, data in files.items():
        (folder / path).write_bytes(data)
    entries = [entry(p, d, (SHARDS[0],) if p.endswith(".index.json") else None) for p, d in files.items()]
    manifests = write_catalog(
        tmp_path, {"tiny.yaml": manifest_text(files="")[: -len("files:\n")] + render_files_block(entries)}
    )
    cat = catalog.load(manifests)
    store = open_store(str(tmp_path / "store"))
    upload_from_dir(cat, "tiny", folder, store)
    cache = Cache(tmp_path / "cache")
    for layout in Layout:
        with pytest.raises(IncompleteModelError) as caught:
            resolve(cat, "tiny", cache=cache, store=store, options=ResolveOptions(layout=layout))
        assert caught.value.missing == {"model.safetensors.index.json": [SHARDS[1]]}
        assert f"model.safetensors.index.json names {SHARDS[1]}" in str(caught.value)
        assert not cache.marker_path(ViewSpec("tiny", "org/tiny", REV, layout, cat.get("tiny").files)).exists()


def test_streamed_shards_count_as_pinned(bundled: Catalog, sources: dict[str, Path]) -> None:
    m = bundled.get("tiny-qwen2")
    local = [f for f in m.files if f not in m.weight_files]  # what a streamed view holds: the index, not the shards
    assert view_gaps(local, lambda e: (sources["tiny-qwen2"] / e.path).read_bytes()) == []
    bare = [f.model_copy(update={"shards": None}) for f in local]
    assert [g.shards for g in view_gaps(bare, lambda e: (sources["tiny-qwen2"] / e.path).read_bytes())] == [
        tuple(SHARDS)
    ]
