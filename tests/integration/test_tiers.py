"""Shared cache tiers: read-only, consulted by sha256 first, verified, never written; `catalog publish` fills them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import tree_state

from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.publish import publish, verify_tier
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.tiers import Tier
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["tiny-llama", "all-minilm-l6-v2"]


@pytest.fixture
def store_dir(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    store = open_store(str(folder))
    for name in MODELS:
        upload_from_dir(bundled, name, sources[name], store)
    return folder


@pytest.fixture
def read_only() -> Iterator[list[Path]]:
    """Folders made read-only by a test (chmod -R a-w), made writable again afterwards so they can be removed."""
    made: list[Path] = []
    yield made
    for root in made:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)


def test_a_full_tier_serves_everything_with_zero_store_requests(
    bundled: Catalog, store_dir: Path, tmp_path: Path, read_only: list[Path]
) -> None:
    tier = tmp_path / "tier"
    report = publish(bundled, MODELS, open_store(str(store_dir)), tier)
    assert len(report.published) == sum(len(bundled.get(n).files) for n in MODELS)
    assert verify_tier(bundled, MODELS, tier).problems == []
    subprocess.run(["chmod", "-R", "a-w", str(tier)], check=True)
    read_only.append(tier)
    before = tree_state(tier)
    for run in ("first", "second"):  # the second runner process finds the tier check recorded
        store = open_store(str(store_dir))
        cache = Cache(tmp_path / f"cache-{run}")
        for name in MODELS:
            result = resolve(bundled, name, cache=cache, store=store, options=ResolveOptions(tiers=(tier,)))
            assert set(result.sources.values()) == {Tier(tier).url}
            assert result.source == Tier(tier).url
            for entry in bundled.get(name).files:
                assert (result.path / entry.path).stat().st_size == entry.size
        assert sum(store.requests.values()) == 0, store.requests
        again = resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(tiers=(tier,)))
        assert again.source == "cache" and set(again.sources.values()) == {"cache"}
    assert tree_state(tier) == before  # nothing written, renamed, chmod-ed or locked in the tier


def test_a_corrupt_tier_blob_is_fetched_from_the_store_and_the_tier_is_left_alone(
    bundled: Catalog, store_dir: Path, tmp_path: Path, read_only: list[Path]
) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    manifest = bundled.get("tiny-llama")
    victim = max(manifest.files, key=lambda e: e.size)
    blob = Tier(tier).blob_path(victim.sha256)
    os.chmod(blob, 0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    blob.write_bytes(bytes(data))
    subprocess.run(["chmod", "-R", "a-w", str(tier)], check=True)
    read_only.append(tier)
    before = tree_state(tier)
    store = open_store(str(store_dir))
    cache = Cache(tmp_path / "cache")
    result = resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(tiers=(tier,)))
    assert result.sources[victim.path] == store.url
    assert {p for p, s in result.sources.items() if s == Tier(tier).url} == {e.path for e in manifest.files} - {
        victim.path
    }
    assert store.requests["GetObject"] == 1
    assert (result.path / victim.path).read_bytes() == (
        store_dir / manifest.s3_prefix[len(bundled.settings.store) :] / victim.path
    ).read_bytes()
    assert tree_state(tier) == before
    assert (
        verify_tier(bundled, ["tiny-llama"], tier).problems[0].startswith(f"tiny-llama/{victim.path}: expected sha256")
    )


def test_a_tier_on_another_filesystem_is_copied_and_hashed(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) to put the tier on")
    tier = Path(tempfile.mkdtemp(prefix="tier-", dir=shm))
    try:
        publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
        store = open_store(str(store_dir))
        result = resolve(
            bundled, "tiny-llama", cache=Cache(tmp_path / "cache"), store=store, options=ResolveOptions(tiers=(tier,))
        )
        assert set(result.sources.values()) == {Tier(tier).url} and sum(store.requests.values()) == 0
        entry = bundled.get("tiny-llama").files[0]
        assert os.stat(result.path / entry.path).st_ino != os.stat(Tier(tier).blob_path(entry.sha256)).st_ino
    finally:
        shutil.rmtree(tier, ignore_errors=True)


def test_two_publishers_at_once_end_clean(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    command = [
        sys.executable,
        "-m",
        "catalog",
        "--catalog",
        str(ROOT / "manifests"),
        "publish",
        *MODELS,
        "--to",
        str(tier),
        "--store",
        str(store_dir),
        "--part-size",
        "1MiB",
    ]
    env = {**os.environ, "CATALOG_CACHE": str(tmp_path / "unused-cache")}
    runs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    check = verify_tier(bundled, MODELS, tier)
    assert check.problems == [] and check.checked == sum(len(bundled.get(n).files) for n in MODELS)
    assert not (tier / "locks").exists() and not (tier / "tmp").exists()
    done = subprocess.run(
        [*command[:5], "publish", "--all", "--to", str(tier), "--store", str(store_dir), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1  # --all: the models never uploaded to this store are missing ...
    assert "tiny-llama/" not in done.stdout  # ... while the published ones all check out


def test_cli_resolve_names_the_tier_per_file(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    env = {
        **os.environ,
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_SHARED_CACHE": f"{tmp_path / 'nothing'}:{tier}",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            "resolve",
            "tiny-llama",
            "--store",
            str(store_dir),
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer["sources"]) == {e.path for e in bundled.get("tiny-llama").files}
    assert set(answer["sources"].values()) == {f"tier:{tier}"}
