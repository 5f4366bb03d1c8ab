"""Integrity under abuse (second round), the input side: broken plan files and output paths, odd file
names, and a manifest of 100,000 files.

Each test is a case that once went wrong (docs/reliability.md, "Abuse (second round)"): it failed before
its fix and passes now.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

import catalog
from catalog.loading import load_dir
from resolver.stores import open_store
from resolver.stream_check import read_small

from .support import explain, run_catalog, write_generated_catalog

CATALOG_BUCKET = "abuse-catalog"


def env_for(manifests: Path, store_url: str, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CATALOG_DIR": str(manifests),
        "CATALOG_STORE": store_url,
        "CATALOG_CACHE": str(cache),
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def one_line_error(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return (
        bool(lines)
        and lines[0].startswith("error: ")
        and "Traceback" not in stderr
        and "internal error" not in stderr
        and all(line.startswith(("error: ", "hint: ")) for line in lines)
    )


def add_file(manifests: Path, data: Path, name: str, path: str, content: bytes) -> None:
    """Pin one more file in a generated model (and put its bytes beside the others)."""
    target = data / name / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    manifest = manifests / f"{name}.yaml"
    manifest.write_text(
        manifest.read_text() + f"  - path: {json.dumps(path)}\n    size: {len(content)}\n"
        f"    sha256: {hashlib.sha256(content).hexdigest()}\n"
    )


# -- case 8: a broken plan file or --out path is a one-line usage error -------------------------------
@pytest.mark.parametrize("text", ["null", "[]", "42", '"plan"', "not json", "{}"])
def test_apply_of_a_file_that_is_no_plan_is_one_line(tmp_path: Path, text: str) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    done = run_catalog(["sync", "--apply", str(plan)], env_for(manifests, str(tmp_path / "store"), tmp_path / "cache"))
    assert done.returncode == 2 and one_line_error(done.stderr), explain(done)


@pytest.mark.parametrize(
    "field,value",
    [
        ("size", "12"),
        ("size", 1.5),
        ("size", None),
        ("size", True),
        ("size", -1),
        ("action", "explode"),
        ("key", 7),
        ("sha256", ["x"]),
        ("surprise", 1),
    ],
)
def test_apply_of_a_plan_with_a_mistyped_item_is_one_line(tmp_path: Path, field: str, value: object) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    env = env_for(manifests, str(tmp_path / "store"), tmp_path / "cache")
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--out", str(plan)], env).returncode == 0
    saved = json.loads(plan.read_text())
    saved["items"][0][field] = value
    plan.write_text(json.dumps(saved))
    done = run_catalog(["sync", "--apply", str(plan), "--from-dir", str(data)], env)
    assert done.returncode == 2 and one_line_error(done.stderr), explain(done)
    assert "items[0]" in done.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.safetensors"))


def test_sync_out_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    done = run_catalog(
        ["sync", "--out", str(tmp_path / "no" / "such" / "plan.json")],
        env_for(manifests, str(tmp_path / "store"), tmp_path / "cache"),
    )
    assert done.returncode == 2 and one_line_error(done.stderr), explain(done)
    assert "plan.json" in done.stderr


# -- case 10: odd paths --------------------------------------------------------------------------------
def test_a_non_ascii_file_name_syncs_and_resolves(store_url: str, tmp_path: Path) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    path = unicodedata.normalize("NFC", "données/modèle 100%.json")
    add_file(manifests, data, names[0], path, b'{"ok": true}\n')
    env = env_for(manifests, store_url, tmp_path / "cache")
    assert run_catalog(["validate"], env).returncode == 0
    done = run_catalog(["sync", "--from-dir", str(data)], env)
    assert done.returncode == 0, explain(done)
    cat = catalog.load(manifests)
    store = open_store(store_url)
    info = store.head(cat.store_key(cat.get(names[0]), path))
    assert info is not None and unquote(info.metadata["path"]) == path and info.metadata["path"].isascii()
    assert run_catalog(["sync", "--check"], env).returncode == 0
    resolved = run_catalog(["resolve", names[0]], env)
    assert resolved.returncode == 0, explain(resolved)
    assert (Path(resolved.stdout.strip()) / path).read_bytes() == b'{"ok": true}\n'


def test_a_pinned_part_file_is_listed_by_the_folder_store(tmp_path: Path) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    add_file(manifests, data, names[0], "weights.part", b"part of the model")
    store_dir = tmp_path / "store"
    env = env_for(manifests, str(store_dir), tmp_path / "cache")
    first = run_catalog(["sync", "--from-dir", str(data)], env)
    assert first.returncode == 0, explain(first)
    again = run_catalog(["sync", "--check"], env)
    assert again.returncode == 0, explain(again)  # once uploaded it is seen: no endless re-upload
    cat = catalog.load(manifests)
    assert (
        read_small(open_store(str(store_dir)), cat.store_key(cat.get(names[0]), "weights.part")) == b"part of the model"
    )
    assert not any((store_dir / ".catalog-tmp").iterdir())  # temp files live apart and are gone


@pytest.mark.parametrize("path", [".catalog-meta/x.json", "con", "nul.txt", "weights. ", "sub./x.json"])
def test_a_path_the_stores_cannot_hold_is_refused_by_validate_with_its_line(tmp_path: Path, path: str) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    manifest = manifests / f"{names[0]}.yaml"
    manifest.write_text(manifest.read_text() + f"  - path: {json.dumps(path)}\n    size: 1\n    sha256: {'ab' * 32}\n")
    line = manifest.read_text().count("\n") - 2
    done = run_catalog(["validate"], env_for(manifests, str(tmp_path / "store"), tmp_path / "cache"))
    assert done.returncode == 1, explain(done)
    assert f"{names[0]}.yaml:{line}: files[3].path:" in done.stdout + done.stderr


# -- case 12: a manifest of 100,000 files validates --------------------------------------------------------
def test_a_manifest_of_100000_files_validates(tmp_path: Path) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, 1)
    manifest = manifests / f"{names[0]}.yaml"
    entries = "".join(
        f"  - path: shards/part-{i:06d}.json\n    size: {i}\n    sha256: {hashlib.sha256(str(i).encode()).hexdigest()}\n"
        for i in range(100_000 - 3)
    )
    manifest.write_text(manifest.read_text() + entries)
    start = time.monotonic()
    result = load_dir(manifests)
    seconds = time.monotonic() - start
    assert result.problems == [], result.problems[:3]
    assert len(result.docs[0].manifest.files) == 100_000  # type: ignore[union-attr]
    assert seconds < 300, seconds  # about 20 s on a loaded 2-core machine (docs/reliability.md)
