"""`catalog lock` at its edges: derived artifacts are never pinned from the Hub, diffs show whole hashes,
and --from-dir means DIR/<name>/ when present, as it does for sync."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubdouble import HubDouble

from catalog.lookup import Catalog

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    return folder


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    """The Hub as it really is: tiny-llama's repo holds safetensors, not the tensorizer or per-rank files."""
    double = HubDouble()
    t = bundled.get("tiny-llama")
    double.add_repo(t.source.hf_repo, t.source.revision, sources["tiny-llama"])
    for name in ("tiny-qwen2", "all-minilm-l6-v2"):
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, sources[name])
    yield double
    double.close()


def cli(hub: HubDouble, catalog_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(catalog_dir),
        "HF_HOME": str(catalog_dir.parent / "hf"),
    }
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


def test_lock_all_refuses_to_pin_derived_artifacts_from_the_hub(hub: HubDouble, catalog_dir: Path) -> None:
    before = {p.name: p.read_text() for p in catalog_dir.glob("tiny-llama-*.yaml")}
    done = cli(hub, catalog_dir, "lock", "--all", "--check")
    assert done.returncode == 1
    for name in ("tiny-llama-tensorizer", "tiny-llama-sharded"):
        assert f"error: {name}: model-catalog/tiny-llama@" in done.stderr and "--from-dir DIR" in done.stderr, name
    written = cli(hub, catalog_dir, "lock", "--all")
    assert written.returncode == 1
    assert {p.name: p.read_text() for p in catalog_dir.glob("tiny-llama-*.yaml")} == before  # nothing was written
    assert cli(hub, catalog_dir, "validate").returncode == 0  # the catalog stays valid


def test_lock_diffs_show_whole_hashes(hub: HubDouble, catalog_dir: Path, bundled: Catalog) -> None:
    t = bundled.get("tiny-llama")
    hub.add_files(t.source.hf_repo, t.source.revision, {"tokenizer_config.json": b'{"changed": true}\n'})
    done = cli(hub, catalog_dir, "lock", "--check", "tiny-llama")
    assert done.returncode == 1
    old = t.file("tokenizer_config.json")
    assert old is not None and f"sha256 {old.sha256} (" in done.stdout and ".." not in done.stdout


def test_lock_from_a_folder_of_several_models_takes_the_models_own_subfolder(
    hub: HubDouble, catalog_dir: Path, sources: dict[str, Path], tmp_path: Path
) -> None:
    several = tmp_path / "artifacts"
    for name in ("tiny-llama-tensorizer", "tiny-llama"):
        shutil.copytree(sources[name], several / name)
    path = catalog_dir / "tiny-llama-tensorizer.yaml"
    original = path.read_text()
    path.write_text(original[: original.index("\nfiles:") + 1])
    done = cli(hub, catalog_dir, "lock", "tiny-llama-tensorizer", "--from-dir", str(several))
    assert done.returncode == 0, done.stderr
    assert path.read_text() == original  # exactly its own files, no `name/` prefix, no other model's files


def test_add_with_an_unknown_load_format_fails_before_any_hub_call(hub: HubDouble, catalog_dir: Path) -> None:
    before = hub.hub_requests()
    done = cli(hub, catalog_dir, "add", "model-catalog/tiny-llama", "--load-format", "streamer", "--name", "new-one")
    assert done.returncode == 2 and done.stderr.startswith("error: unknown load format 'streamer'"), done.stderr
    assert "runai_streamer" in done.stderr and "Traceback" not in done.stderr
    assert hub.hub_requests() == before and not (catalog_dir / "new-one.yaml").exists()
