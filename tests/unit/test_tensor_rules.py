"""validate's checkpoint rules over what `catalog lock` pinned: real checkpoints written to a folder, locked from it,
then validated with no store and no Hub (each problem at its exact file:line)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checkpoints import INDEX, u8, write_checkpoint
from helpers import manifest_text, write_catalog

from catalog.errors import Problem
from catalog.loading import load_dir
from catalog.tensor_tables import parse, render
from resolver.examples import Tensor
from resolver.hub import HubOptions
from resolver.lock import lock_manifest

S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def locked(tmp_path: Path, shards: dict[str, dict[str, Tensor]], weight_map: dict[str, str]) -> Path:
    """A catalog with one manifest, `tiny`, locked from a checkpoint folder; its manifests/ folder."""
    source = write_checkpoint(tmp_path / "src", shards, weight_map)
    folder = write_catalog(tmp_path, {"tiny.yaml": manifest_text(files="")[: -len("files:\n")]})
    [doc] = load_dir(folder).docs
    assert doc.manifest is not None
    lock_manifest(doc.manifest, doc.path, from_dir=source, hub=HubOptions(), write=True)
    return folder


def problems_of(tmp_path: Path, folder: Path, *selected: Path) -> list[Problem]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        return load_dir(folder, list(selected) or None, tables=True).problems


def where(problems: list[Problem]) -> list[str]:
    return [f"{p.path}:{p.line}: {p.rule}" for p in problems]


GOOD = {S1: {"a": u8(1, 2), "b": u8(3, 4)}, S2: {"c": u8(5, 6)}}
GOOD_MAP = {"a": S1, "b": S1, "c": S2}


def test_a_consistent_checkpoint_locks_and_validates(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    assert problems_of(tmp_path, folder) == []
    tables = parse((folder / "tiny.tensors.json").read_text())
    assert tables.headers[S1] == (("a", "U8", (2,)), ("b", "U8", (2,))) and tables.weight_maps[INDEX] == GOOD_MAP


def test_an_index_naming_a_tensor_no_shard_holds_or_another_shard_holds_fails_at_its_line(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, {"a": S1, "b": S1, "c": S1, "ghost": S2})
    found = problems_of(tmp_path, folder)
    # lines 11-16: the index's section, "a", "b", "c", "ghost" (one entry a line, files sorted by path)
    assert where(found) == [
        "manifests/tiny.tensors.json:14: tensor-missing",
        "manifests/tiny.tensors.json:15: tensor-missing",
    ]
    misplaced, ghost = found
    assert f"weight_map maps tensor 'c' to '{S1}', which does not hold it; '{S2}' does" in misplaced.message
    assert misplaced.field == INDEX
    assert f"tensor 'ghost' to '{S2}', which does not hold it; nor does any other shard" in ghost.message
    assert (folder / "tiny.tensors.json").read_text().splitlines()[14] == f'      "ghost": "{S2}"'


def test_a_tensor_in_two_shards_fails_at_the_second_naming_the_first(tmp_path: Path) -> None:
    folder = locked(tmp_path, {S1: GOOD[S1], S2: {"a": u8(9, 9), "c": u8(5, 6)}}, GOOD_MAP)
    [found] = problems_of(tmp_path, folder)
    assert where([found]) == ["manifests/tiny.tensors.json:9: tensor-duplicate"]
    assert found.message.startswith(
        f"tensor 'a' is in '{S1}' (manifests/tiny.tensors.json:5) and in '{S2}', both shards of '{INDEX}'"
    )


def test_a_sidecar_edited_by_hand_no_longer_matches_its_pin(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    sidecar = folder / "tiny.tensors.json"
    sidecar.write_text(sidecar.read_text().replace('"b": ["U8", [2],', '"b": ["I8", [2],'))
    [found] = problems_of(tmp_path, folder)
    header_line = (folder / "tiny.yaml").read_text().splitlines().index("    header:") + 1
    assert where([found]) == ["manifests/tiny.tensors.json:4: tensor-table"]
    assert f"differs from the one pinned in manifests/tiny.yaml:{header_line} (edited, or stale)" in found.message


def test_a_missing_or_unreadable_sidecar_or_one_for_other_files_is_a_problem(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    sidecar = folder / "tiny.tensors.json"
    text = sidecar.read_text()
    header_line = (folder / "tiny.yaml").read_text().splitlines().index("    header:") + 1

    sidecar.unlink()
    [missing] = problems_of(tmp_path, folder)
    assert where([missing]) == [f"manifests/tiny.yaml:{header_line}: tensor-table"]
    assert "no manifests/tiny.tensors.json; run `catalog lock tiny`" in missing.message

    sidecar.write_text(text[:-20])
    [broken] = problems_of(tmp_path, folder)
    assert (
        broken.rule == "tensor-table" and broken.path == "manifests/tiny.tensors.json" and "not JSON" in broken.message
    )

    tables = parse(text)
    extra = {**tables.headers, "other.safetensors": (("x", "U8", (1,)),)}
    sidecar.write_text(render("tiny", extra, tables.weight_maps, tables.digests))
    [stray] = problems_of(tmp_path, folder)
    assert where([stray]) == ["manifests/tiny.tensors.json:16: tensor-table"]  # sorted after the index's section
    assert "'other.safetensors' is not a file of tiny with a pinned header, table or weight_map" in stray.message


def test_validating_one_manifest_reports_its_sidecar_too(tmp_path: Path) -> None:
    """pre-commit passes the changed files: the manifest's sidecar problems belong to it."""
    folder = locked(tmp_path, GOOD, {**GOOD_MAP, "ghost": S2})
    assert where(problems_of(tmp_path, folder, folder / "tiny.yaml")) == [
        "manifests/tiny.tensors.json:15: tensor-missing"
    ]


def test_header_pins_must_belong_to_the_file(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    manifest = folder / "tiny.yaml"
    lines = manifest.read_text().splitlines()
    at = lines.index("    header:")
    size_line = at - 2  # path, size, sha256, header
    lines[size_line] = lines[size_line].replace("size: ", "size: 1")
    lines[at + 5] = lines[at + 5].replace("{U8:", "{Q4:")
    manifest.write_text("\n".join(lines) + "\n")
    found = [p for p in problems_of(tmp_path, folder) if p.rule == "header"]
    assert where(found) == [f"manifests/tiny.yaml:{at + 1}: header", f"manifests/tiny.yaml:{at + 6}: header"]
    assert "the header is not this file's; run `catalog lock tiny`" in found[0].message
    assert "'Q4': not a safetensors dtype" in found[1].message


def test_header_and_weight_map_only_on_their_kind_of_file(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    manifest = folder / "tiny.yaml"
    text = manifest.read_text()
    manifest.write_text(
        text.replace(f"path: {INDEX}", "path: model.bin.index.json")
        .replace(f"path: {S1}", "path: s1.bin")
        .replace("- model-00001-of-00002.safetensors", "- s1.bin")
    )
    found = [p for p in problems_of(tmp_path, folder) if p.rule in ("header", "weight-map")]
    assert sorted(p.rule for p in found) == ["header", "weight-map"]
    assert any("'s1.bin' is not a *.safetensors file" in p.message for p in found)
    assert any("'model.bin.index.json' is not a *.safetensors.index.json" in p.message for p in found)


GIB = 1024**3


def test_gpu_memory_counts_the_tensors_exactly_when_headers_are_pinned(tmp_path: Path) -> None:
    """16 GiB / 1.2 is 13.33 GiB: tensors of 14,316,557,000 bytes fit, the file with a 100 MB header does not."""
    tensor_bytes, length = 14_316_557_000, 100_000_000
    size = 8 + length + tensor_bytes
    files = (
        f"  - path: config.json\n    size: 2\n    sha256: {'a' * 64}\n"
        f"  - path: model.safetensors\n    size: {size}\n    sha256: {'b' * 64}\n"
    )
    header = (
        f"    header:\n      length: {length}\n      sha256: {'c' * 64}\n      tensors: 1\n      parameters: 1\n"
        f"      bytes_by_dtype: {{U8: {tensor_bytes}}}\n      table_sha256: {'d' * 64}\n"
    )
    for text, fits in ((manifest_text(files=files), False), (manifest_text(files=files + header), True)):
        shutil.rmtree(tmp_path / "manifests", ignore_errors=True)
        folder = write_catalog(tmp_path, {"tiny.yaml": text})
        memory = [p for p in problems_of(tmp_path, folder) if p.rule == "gpu-memory"]
        assert (memory == []) is fits, memory
    assert "weights are 13.4 GiB" in memory_message(tmp_path, manifest_text(files=files))


def memory_message(tmp_path: Path, text: str) -> str:
    shutil.rmtree(tmp_path / "manifests", ignore_errors=True)
    folder = write_catalog(tmp_path, {"tiny.yaml": text})
    return next(p.message for p in problems_of(tmp_path, folder) if p.rule == "gpu-memory")


def test_lock_from_a_folder_pins_the_sha256_of_every_tensors_own_bytes(tmp_path: Path) -> None:
    import hashlib

    folder = locked(tmp_path, GOOD, GOOD_MAP)
    tables = parse((folder / "tiny.tensors.json").read_text())
    assert tables.digests[S1] == {
        "a": hashlib.sha256(bytes([1, 2])).hexdigest(),
        "b": hashlib.sha256(bytes([3, 4])).hexdigest(),
    }
    assert tables.digests[S2] == {"c": hashlib.sha256(bytes([5, 6])).hexdigest()}
    sidecar = folder / "tiny.tensors.json"
    flipped = sidecar.read_text().replace(hashlib.sha256(bytes([3, 4])).hexdigest(), hashlib.sha256(b"x").hexdigest())
    sidecar.write_text(flipped)
    [found] = problems_of(tmp_path, folder)
    assert found.rule == "tensor-table" and "differs from the one pinned" in found.message  # a digest is pinned too


def repin(folder: Path, path: str, text: str) -> None:
    """Write `text` as the sidecar and pin its section for `path` in the manifest, as a hand edit of both would."""
    import re

    sidecar = folder / "tiny.tensors.json"
    old = parse(sidecar.read_text()).section_sha256(path)
    sidecar.write_text(text)
    new = parse(text).section_sha256(path)
    assert old is not None and new is not None
    manifest = folder / "tiny.yaml"
    manifest.write_text(re.sub(f"table_sha256: {old}", f"table_sha256: {new}", manifest.read_text()))


def test_digests_on_some_tensors_of_a_file_but_not_all_fail_at_the_first_without(tmp_path: Path) -> None:
    folder = locked(tmp_path, GOOD, GOOD_MAP)
    tables = parse((folder / "tiny.tensors.json").read_text())
    digests = {**tables.digests, S1: {"a": tables.digests[S1]["a"]}}
    repin(folder, S1, render("tiny", tables.headers, tables.weight_maps, digests))
    [found] = problems_of(tmp_path, folder)
    assert where([found]) == ["manifests/tiny.tensors.json:6: tensor-digests"]
    assert "tensor 'b' has no digest while 1 other(s) of the file do" in found.message
    none = {S2: tables.digests[S2]}  # a file with no digests at all is a manifest locked before them: fine
    repin(folder, S1, render("tiny", tables.headers, tables.weight_maps, none))
    assert problems_of(tmp_path, folder) == []


def test_a_tensorizer_table_pins_offsets_that_must_fit_the_file(tmp_path: Path) -> None:
    pytest.importorskip("tensorizer")
    from resolver.examples import write_model

    source = write_model("tiny-llama-tensorizer", tmp_path / "src")
    folder = write_catalog(tmp_path, {"tiny.yaml": manifest_text(files="", fmt="tensorizer")[: -len("files:\n")]})
    [doc] = load_dir(folder).docs
    assert doc.manifest is not None
    lock_manifest(doc.manifest, doc.path, from_dir=source, hub=HubOptions(), write=True)
    assert problems_of(tmp_path, folder) == []
    tables = parse((folder / "tiny.tensors.json").read_text())
    raw = (source / "model.tensors").read_bytes()
    import hashlib

    for name, dtype, shape in tables.headers["model.tensors"]:
        start = tables.offsets["model.tensors"][name]
        size = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
        assert (
            dtype == "F32"
            and hashlib.sha256(raw[start : start + size]).hexdigest() == tables.digests["model.tensors"][name]
        )
    first, second = tables.headers["model.tensors"][:2]
    offsets = {**tables.offsets["model.tensors"], second[0]: tables.offsets["model.tensors"][first[0]] + 4}
    repin(folder, "model.tensors", render("tiny", tables.headers, {}, tables.digests, {"model.tensors": offsets}))
    [found] = problems_of(tmp_path, folder)
    assert found.rule == "tensor-digests" and f"tensor {second[0]!r} starts at" in found.message
    assert "inside the tensor before it" in found.message
