"""`catalog resolve`, `verify` and `gc` as a user runs them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
TINY = ["tiny-llama", "tiny-qwen2", "tiny-llama-sharded", "tiny-llama-tensorizer"]


@pytest.fixture
def env(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, str]:
    store = tmp_path / "store"
    for name in TINY:
        upload_from_dir(bundled, name, sources[name], open_store(str(store)))
    return {
        **os.environ,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(tmp_path / "cache"),
    }


def catalog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


def test_resolve_prints_one_path(env: dict[str, str]) -> None:
    done = catalog(env, "resolve", "tiny-llama")
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert (path / "model.safetensors").is_file() and path.is_relative_to(env["CATALOG_CACHE"])


def test_resolve_json_env_and_vllm_args(env: dict[str, str]) -> None:
    env = {**env, "CATALOG_ENGINE_LOADER": "catalog"}  # what auto is where vLLM is installed (tests/engine/ loads it)
    data = json.loads(catalog(env, "resolve", "tiny-qwen2", "--format", "json").stdout)
    assert set(data) >= {
        "name",
        "revision",
        "load_format",
        "model",
        "path",
        "tokenizer",
        "files",
        "bytes",
        "source",
        "engine_args",
    }
    assert data["weights_uri"].startswith(env["CATALOG_STORE"]) and data["load_format"] == "runai_streamer"
    # the engine's verified loader gets the local folder (config, tokenizer) as --model
    assert data["engine_loader"] == "catalog" and data["model"] == data["path"]
    args = shlex.split(catalog(env, "resolve", "tiny-qwen2", "--format", "vllm-args").stdout)
    assert args == data["engine_args"]
    exports = catalog(env, "resolve", "tiny-llama", "--layout", "hf-cache", "--format", "env").stdout
    assert "export HF_HUB_OFFLINE=1" in exports and f"export HF_HUB_CACHE={env['CATALOG_CACHE']}/hub" in exports


def test_resolve_all_as_a_redirect_file(env: dict[str, str], bundled: Catalog, sources: dict[str, Path]) -> None:
    # all-minilm is not in this store: resolve just the tiny ones by name, then --all offline must fail fast
    done = catalog(env, "resolve", *TINY, "--format", "redirect")
    assert done.returncode == 0, done.stderr
    mapping = json.loads(done.stdout)
    assert set(mapping) == {"model-catalog/tiny-llama", "model-catalog/tiny-qwen2"}
    # Three manifests pin model-catalog/tiny-llama: the primary one answers for it, whatever the order.
    llama = catalog(env, "resolve", "tiny-llama").stdout.strip()
    assert mapping["model-catalog/tiny-llama"] == llama
    reordered = json.loads(catalog(env, "resolve", *reversed(TINY), "--format", "redirect").stdout)
    assert reordered == mapping
    # Without a primary among them, the ambiguity is refused instead of decided by the last writer.
    twins = catalog(env, "resolve", "tiny-llama-sharded", "tiny-llama-tensorizer", "--format", "redirect")
    assert twins.returncode == 2 and "primary: true" in twins.stderr and not twins.stdout
    offline = catalog(env, "resolve", "--all", "--offline")
    assert offline.returncode == 1 and offline.stderr.startswith("error: --offline: ")
    assert "all-minilm-l6-v2" in offline.stderr
    # --all, once every model is in the store: one entry per repo id, the primary answering for tiny-llama's.
    for name in ("all-minilm-l6-v2", "tiny-sts"):
        upload_from_dir(bundled, name, sources[name], open_store(env["CATALOG_STORE"]))
    everything = catalog(env, "resolve", "--all", "--format", "redirect")
    assert everything.returncode == 0, everything.stderr
    every_repo = json.loads(everything.stdout)
    assert sorted(every_repo) == sorted(
        {m.source.hf_repo for m in bundled if not m.is_dataset}
    )  # datasets are no model ids
    assert every_repo["model-catalog/tiny-llama"] == llama


def test_unknown_model_and_bad_usage(env: dict[str, str]) -> None:
    unknown = catalog(env, "resolve", "tiny-lama")
    assert unknown.returncode == 1 and "did you mean tiny-llama" in unknown.stderr
    assert catalog(env, "resolve").returncode == 2
    assert catalog(env, "resolve", "tiny-llama", "--part-size", "huge").returncode == 2


def test_verify_and_deep_verify_find_a_tampered_file(env: dict[str, str]) -> None:
    path = Path(catalog(env, "resolve", "tiny-llama").stdout.strip())
    assert catalog(env, "verify").returncode == 0
    assert catalog(env, "verify", "--deep").returncode == 0
    target = path / "config.json"
    data = target.read_bytes()
    before = os.stat(target)
    os.chmod(target, 0o644)
    with open(target, "r+b") as f:  # same size, one byte changed, mtime put back: the ctime still tells
        f.write(bytes([data[0] ^ 1]))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert catalog(env, "verify").returncode == 1  # size and mtime kept, but the ctime moved: not trusted
    deep = catalog(env, "verify", "--deep")
    assert deep.returncode == 1 and "tiny-llama/config.json: expected sha256" in deep.stdout
    repaired = catalog(env, "resolve", "tiny-llama")  # deep verify dropped the bad blob and view
    assert repaired.returncode == 0
    assert (Path(repaired.stdout.strip()) / "config.json").read_bytes() == data
    assert catalog(env, "verify", "--deep").returncode == 0


def test_verify_notices_a_modified_file_by_its_stats(env: dict[str, str]) -> None:
    path = Path(catalog(env, "resolve", "tiny-llama").stdout.strip())
    target = path / "tokenizer.json"
    os.chmod(target, 0o644)
    target.write_text("{}")
    shallow = catalog(env, "verify")
    assert shallow.returncode == 1 and "changed since it was verified" in shallow.stdout
    repaired = catalog(env, "resolve", "tiny-llama")
    assert (
        repaired.returncode == 0 and json.loads((Path(repaired.stdout.strip()) / "tokenizer.json").read_text())["model"]
    )


def test_gc_removes_what_no_manifest_references(env: dict[str, str], tmp_path: Path) -> None:
    catalog(env, "resolve", "tiny-llama")
    cache = Path(env["CATALOG_CACHE"])
    stray = cache / "blobs" / "ff" / ("f" * 64)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"orphan")
    (cache / "tmp").mkdir(exist_ok=True)
    dead = cache / "tmp" / "999999999-abc.part"
    dead.write_bytes(b"half")
    dry = catalog(env, "gc", "--dry-run")
    assert dry.returncode == 0 and f"would remove {stray}" in dry.stdout and stray.exists()
    done = catalog(env, "gc")
    assert not stray.exists() and not dead.exists()
    assert catalog(env, "verify", "--deep").returncode == 0  # live views untouched
    assert "removed" in done.stdout
