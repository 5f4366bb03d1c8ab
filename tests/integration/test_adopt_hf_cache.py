"""What CI already has, adopted: a Hugging Face cache filled by huggingface_hub's own `snapshot_download` from the
Hub double is a read-only tier (`hf:DIR`), with zero Hub requests. Hashes are read from the bundled manifests."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubdouble import HubDouble
from servers import SeaweedServer, new_bucket

from catalog.lookup import Catalog
from resolver.cache import Cache, hf_repo_folder
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]


def hf_env(hub: HubDouble, hub_cache: Path, home: Path) -> dict[str, str]:
    """A clean environment for huggingface_hub and the CLI: no HF_* or CATALOG_* of this machine, a temp HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "CATALOG_"))}
    return env | {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(hub_cache), "HF_HOME": str(home / "hf-home"), "HOME": str(home),
                  "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def snapshot_download(hub: HubDouble, hub_cache: Path, home: Path, pins: list[tuple[str, str, str]]) -> None:
    """Fill `hub_cache` the way CI does: huggingface_hub's snapshot_download from the (double) Hub, per pin."""
    script = textwrap.dedent(f"""
        from huggingface_hub import snapshot_download
        for repo, revision, repo_type in {pins!r}:
            snapshot_download(repo, revision=revision, repo_type=repo_type)
    """)
    done = subprocess.run([sys.executable, "-c", script], env=hf_env(hub, hub_cache, home), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def pins_of(cat: Catalog) -> list[tuple[str, str, str]]:
    return sorted({(m.source.hf_repo, m.source.revision, m.source.repo_type) for m in cat})


@pytest.fixture(scope="module")
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    for name, folder in sources.items():
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, folder, repo_type=m.source.repo_type)
    yield double
    double.close()


@pytest.fixture(scope="module")
def hf_cache(hub: HubDouble, bundled: Catalog, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full HF cache of every bundled pin (the sharded and tensorizer artifacts lie in tiny-llama's repo)."""
    home = tmp_path_factory.mktemp("hf-user")
    cache = home / "hub"
    snapshot_download(hub, cache, home, pins_of(bundled))
    return cache


@pytest.fixture(scope="module")
def filled_bucket(s3_server: SeaweedServer, bundled: Catalog, sources: dict[str, Path]) -> str:
    """A bucket holding every bundled model (the store a corrupt HF blob is fetched from instead)."""
    bucket = new_bucket(s3_server.url)
    store = open_store(f"s3://{bucket}/")
    for name, folder in sources.items():
        upload_from_dir(bundled, name, folder, store)
    return bucket


def tree_state(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path under `root` with (inode, size, mtime_ns, mode): what a reader must never change."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            found[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
    return found


def blob_of(hf_cache: Path, cat: Catalog, name: str, path: str) -> Path:
    m = cat.get(name)
    return (hf_cache / hf_repo_folder(m.source.hf_repo, m.source.repo_type) / "snapshots" / m.source.revision / path).resolve()


def test_a_cold_resolve_of_every_bundled_model_over_the_hf_cache_needs_no_store_get_and_no_hub_request(
        hub: HubDouble, hf_cache: Path, filled_bucket: str, bundled: Catalog, tmp_path: Path) -> None:
    before, asked = tree_state(hf_cache), hub.hub_requests()
    store = open_store(f"s3://{filled_bucket}/")
    options = ResolveOptions(materialize_weights=True, tiers=(Path(f"hf:{hf_cache}"),))
    for m in bundled:  # each into a cache of its own: every file cold
        result = resolve(bundled, m.name, cache=Cache(tmp_path / m.name), store=store, options=options)
        assert set(result.sources.values()) == {f"hf-cache:{hf_cache}"}, (m.name, result.sources)
        for entry in m.files:
            assert (result.path / entry.path).stat().st_size == entry.size
    assert dict(store.requests) == {}  # not one request: no listing, no GET
    assert hub.hub_requests() == asked
    assert tree_state(hf_cache) == before  # nothing written, renamed, chmod-ed or locked in the HF cache


def test_a_corrupt_blob_in_the_hf_cache_is_skipped_with_a_warning_and_that_file_alone_comes_from_the_store(
        hub: HubDouble, hf_cache: Path, filled_bucket: str, bundled: Catalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    m = bundled.get("tiny-llama")
    victim = m.file("model.safetensors")
    assert victim is not None
    blob = blob_of(copy, bundled, "tiny-llama", victim.path)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    blob.write_bytes(bytes(data))
    before, asked = tree_state(copy), hub.hub_requests()
    store = open_store(f"s3://{filled_bucket}/")
    with caplog.at_level(logging.WARNING, logger="resolver"):
        result = resolve(bundled, "tiny-llama", cache=Cache(tmp_path / "cache"), store=store,
                         options=ResolveOptions(tiers=(Path(f"hf:{copy}"),)))
    assert result.sources[victim.path] == store.url
    assert {p for p, s in result.sources.items() if s == f"hf-cache:{copy}"} == {e.path for e in m.files} - {victim.path}
    assert store.requests["GetObject"] == 1 and hub.hub_requests() == asked
    assert any(victim.path in r.getMessage() and victim.sha256 in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert tree_state(copy) == before


def test_the_cli_takes_hf_tiers_from_the_flag_and_the_environment(hub: HubDouble, hf_cache: Path, bundled: Catalog,
                                                                   tmp_path: Path) -> None:
    store = tmp_path / "empty-store"  # nothing there: every byte must come from the HF cache
    base = hf_env(hub, tmp_path / "unused-hf-cache", tmp_path) | {"CATALOG_DIR": str(ROOT / "manifests"), "CATALOG_STORE": str(store)}
    runs = [(["--shared-cache", f"hf:{hf_cache}"], {}),
            ([], {"CATALOG_SHARED_CACHE": f"{tmp_path / 'no-tier'}:hf:{hf_cache}"})]
    for number, (flags, extra) in enumerate(runs):
        env = base | extra | {"CATALOG_CACHE": str(tmp_path / f"cache-{number}")}
        done = subprocess.run([sys.executable, "-m", "catalog", "resolve", "tiny-llama", "--format", "json", *flags],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert set(answer["sources"]) == {e.path for e in bundled.get("tiny-llama").files}
        assert set(answer["sources"].values()) == {f"hf-cache:{hf_cache}"}
