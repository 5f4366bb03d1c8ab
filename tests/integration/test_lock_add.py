"""`catalog lock`, `add` and `tensorize` against the Hub double and real files."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hubdouble import HubDouble

from catalog.lookup import Catalog

ROOT = Path(__file__).resolve().parents[2]
MINILM_HEADER = """\
# The real all-MiniLM-L6-v2: keep this comment.
name: all-minilm-l6-v2
description: Sentence embeddings.   # trailing comment
source:
  hf_repo: sentence-transformers/all-MiniLM-L6-v2
  revision: c9745ed1d9f207416be6d2e6f8de32d1f16199bf
  include: ["*.json", "*.txt", "*.md", model.safetensors]
  exclude: [onnx/, openvino/]
s3_prefix: s3://vllm-ci-model-weights/sentence-transformers/all-MiniLM-L6-v2/c9745ed1d9f2/
load_format: safetensors
gpu: {class: l4}
"""


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    m = bundled.get("all-minilm-l6-v2")
    double.add_repo(m.source.hf_repo, m.source.revision, sources["all-minilm-l6-v2"])
    double.add_files(
        m.source.hf_repo, m.source.revision, {"onnx/model.onnx": b"not pinned", "pytorch_model.bin": b"pickle"}
    )
    t = bundled.get("tiny-llama")
    double.add_repo(t.source.hf_repo, t.source.revision, sources["tiny-llama"])
    yield double
    double.close()


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    return folder


def cli(hub: HubDouble, catalog_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(catalog_dir),
        "HF_HOME": str(catalog_dir.parent / "hf"),
    }
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


def test_lock_writes_exactly_the_original_text_plus_the_files_block(
    hub: HubDouble, catalog_dir: Path, bundled: Catalog
) -> None:
    path = catalog_dir / "all-minilm-l6-v2.yaml"
    path.write_text(MINILM_HEADER)
    done = cli(hub, catalog_dir, "lock", "all-minilm-l6-v2")
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert text.startswith(MINILM_HEADER)
    # The pins (lock also records the Hub's blob_id and xet_hash where it gives them).
    pinned = [
        {k: f[k] for k in ("path", "size", "sha256")} for f in yaml.safe_load(text[len(MINILM_HEADER) :])["files"]
    ]
    expected = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in bundled.get("all-minilm-l6-v2").files]
    assert pinned == expected  # the LFS file's hash came from metadata; small files were hashed
    m = bundled.get("all-minilm-l6-v2")
    weights = f"/{m.source.hf_repo}/resolve/{m.source.revision}/model.safetensors"
    assert hub.requests[f"GET {weights}"] == 1 and hub.sent[weights] < 200_000  # one ranged read of the header
    [entry] = [f for f in yaml.safe_load(text[len(MINILM_HEADER) :])["files"] if f["path"] == "model.safetensors"]
    assert entry["header"]["tensors"] > 100 and entry["header"]["bytes_by_dtype"] == {"F32": 90_852_864, "I64": 4_096}
    assert (catalog_dir / "all-minilm-l6-v2.tensors.json").is_file()
    assert cli(hub, catalog_dir, "lock", "--check", "all-minilm-l6-v2").returncode == 0


def test_lock_check_catches_a_hub_file_changed_at_the_same_revision(
    hub: HubDouble, catalog_dir: Path, bundled: Catalog
) -> None:
    t = bundled.get("tiny-llama")
    hub.add_files(t.source.hf_repo, t.source.revision, {"tokenizer_config.json": b'{"changed": true}\n'})
    before = (catalog_dir / "tiny-llama.yaml").read_text()
    done = cli(hub, catalog_dir, "lock", "--check", "tiny-llama")
    assert done.returncode == 1
    assert done.stdout.strip().startswith("~ tokenizer_config.json: sha256 ")
    assert (catalog_dir / "tiny-llama.yaml").read_text() == before  # --check changes nothing


def test_lock_waits_out_429_on_the_listing(hub: HubDouble, catalog_dir: Path) -> None:
    hub.fail(429, times=1, retry_after=0.2, path_contains="/tree/")
    done = cli(hub, catalog_dir, "lock", "--check", "tiny-llama")
    assert done.returncode == 0, done.stderr
    assert sum(n for k, n in hub.requests.items() if "/tree/" in k) >= 2


def test_lock_from_a_folder(hub: HubDouble, catalog_dir: Path, sources: dict[str, Path]) -> None:
    path = catalog_dir / "tiny-llama-tensorizer.yaml"
    original = path.read_text()
    path.write_text(original[: original.index("\nfiles:") + 1])
    done = cli(hub, catalog_dir, "lock", "tiny-llama-tensorizer", "--from-dir", str(sources["tiny-llama-tensorizer"]))
    assert done.returncode == 0, done.stderr
    assert path.read_text() == original
    assert hub.hub_requests() == 0


def test_add_pins_the_branch_commit_and_locks(hub: HubDouble, catalog_dir: Path, bundled: Catalog) -> None:
    clash = cli(hub, catalog_dir, "add", "sentence-transformers/all-MiniLM-L6-v2", "--name", "minilm-copy")
    assert clash.returncode == 2 and "is already pinned as 'all-minilm-l6-v2'" in clash.stderr  # refused before writing
    assert not (catalog_dir / "minilm-copy.yaml").exists()  # nothing half-made is left
    (catalog_dir / "all-minilm-l6-v2.yaml").unlink()
    done = cli(
        hub, catalog_dir, "add", "sentence-transformers/all-MiniLM-L6-v2", "--name", "minilm-copy", "--gpu", "cpu"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    path = catalog_dir / "minilm-copy.yaml"
    m = bundled.get("all-minilm-l6-v2")
    data = yaml.safe_load(path.read_text())
    assert data["source"]["revision"] == m.source.revision  # main was turned into its commit
    assert (
        data["s3_prefix"] == f"s3://vllm-ci-model-weights/sentence-transformers/all-MiniLM-L6-v2/{m.source.revision}/"
    )
    paths = [f["path"] for f in data["files"]]
    assert "model.safetensors" in paths and "onnx/model.onnx" not in paths and "pytorch_model.bin" not in paths
    assert cli(hub, catalog_dir, "validate").returncode == 0


def test_add_refuses_an_existing_manifest_and_unknown_repo(hub: HubDouble, catalog_dir: Path) -> None:
    assert cli(hub, catalog_dir, "add", "model-catalog/tiny-llama").returncode == 2  # tiny-llama.yaml exists
    missing = cli(hub, catalog_dir, "add", "nobody/nothing")
    assert missing.returncode == 1 and "nobody/nothing" in missing.stderr and "Traceback" not in missing.stderr
    assert not (catalog_dir / "nothing.yaml").exists()


V2 = "2222222222222222222222222222222222abcdef"


def test_add_at_two_tags_gets_two_prefixes_and_refuses_a_commit_or_prefix_already_used(
    hub: HubDouble, catalog_dir: Path, bundled: Catalog, sources: dict[str, Path]
) -> None:
    t = bundled.get("tiny-llama")
    hub.add_repo(t.source.hf_repo, t.source.revision, sources["tiny-llama"], refs=("main", "v1"))  # v1 is main's commit
    hub.add_repo(t.source.hf_repo, V2, sources["tiny-llama"], refs=("v2",))
    before = {p.name: p.read_text() for p in catalog_dir.iterdir()}

    # The commit tiny-llama.yaml already pins, through another tag and another name: refused, naming it.
    again = cli(hub, catalog_dir, "add", t.source.hf_repo, "--revision", "v1", "--name", "tiny-llama-v1")
    assert again.returncode == 2, again.stdout + again.stderr
    assert "already pinned as 'tiny-llama'" in again.stderr and "tiny-llama.yaml" in again.stderr
    assert "added" not in again.stderr

    # Another commit gets its own prefix, and the catalog stays valid.
    done = cli(hub, catalog_dir, "add", t.source.hf_repo, "--revision", "v2", "--name", "tiny-llama-v2")
    assert done.returncode == 0, done.stdout + done.stderr
    added = yaml.safe_load((catalog_dir / "tiny-llama-v2.yaml").read_text())
    assert added["s3_prefix"] == f"s3://vllm-ci-model-weights/{t.source.hf_repo}/{V2}/" != t.s3_prefix
    assert cli(hub, catalog_dir, "validate").returncode == 0

    # The same tag twice: refused before writing, naming the manifest from the first time.
    twice = cli(hub, catalog_dir, "add", t.source.hf_repo, "--revision", "v2", "--name", "tiny-llama-v2-again")
    assert twice.returncode == 2 and "already pinned as 'tiny-llama-v2'" in twice.stderr
    assert not (catalog_dir / "tiny-llama-v2-again.yaml").exists()

    # A prefix another model already covers (an umbrella) is refused too, naming that model and line.
    qwen = catalog_dir / "tiny-qwen2.yaml"
    qwen.write_text(
        qwen.read_text().replace(bundled.get("tiny-qwen2").s3_prefix, "s3://vllm-ci-model-weights/model-catalog/")
    )
    (catalog_dir / "tiny-llama-v2.yaml").unlink()
    (catalog_dir / "tiny-llama-v2.tensors.json").unlink()  # its tensor tables go with it
    umbrella = cli(hub, catalog_dir, "add", t.source.hf_repo, "--revision", "v2", "--name", "tiny-llama-v2")
    assert umbrella.returncode == 2
    assert "is inside the prefix of 'tiny-qwen2'" in umbrella.stderr and "tiny-qwen2.yaml:7" in umbrella.stderr
    assert not (catalog_dir / "tiny-llama-v2.yaml").exists()
    assert {p.name for p in catalog_dir.iterdir()} == set(before)


def test_tensorize_reproduces_the_pinned_tensorizer_artifact(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    from resolver.stores import open_store
    from resolver.upload import upload_from_dir

    store = tmp_path / "store"
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(store)))
    env = {
        **os.environ,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "tensorize", "tiny-llama", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    data = Path(done.stdout.strip()).read_bytes()
    pinned = bundled.get("tiny-llama-tensorizer").file("model.tensors")
    assert pinned is not None and hashlib.sha256(data).hexdigest() == pinned.sha256
    # out/ holds exactly what the tensorizer manifest pins (not tiny-llama's generation_config.json): a lock source.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f.path for f in bundled.get("tiny-llama-tensorizer").files
    )
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "lock",
            "tiny-llama-tensorizer",
            "--from-dir",
            str(tmp_path / "out"),
            "--check",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # Naming the tensorizer manifest itself takes the weights from its safetensors twin, to the same bytes.
    again = subprocess.run(
        [sys.executable, "-m", "catalog", "tensorize", "tiny-llama-tensorizer", "--out", str(tmp_path / "again")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "model.tensors").read_bytes() == data
