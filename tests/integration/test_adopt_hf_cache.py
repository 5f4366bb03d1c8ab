"""What CI already has, adopted: a Hugging Face cache filled by huggingface_hub's own `snapshot_download` from the
Hub double is a read-only tier (`hf:DIR`), the source of `catalog import --from-hf-cache` and of
`catalog sync --from-hf-cache`, with zero Hub requests. Hashes are read from the bundled manifests."""

from __future__ import annotations

import hashlib
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
import yaml
from helpers import tree_state
from hubdouble import HubDouble
from servers import SeaweedServer, new_bucket

import catalog
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hf_layout import hf_repo_folder
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]


def hf_env(hub: HubDouble, hub_cache: Path, home: Path) -> dict[str, str]:
    """A clean environment for huggingface_hub and the CLI: no HF_* or CATALOG_* of this machine, a temp HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "CATALOG_"))}
    return env | {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HOME": str(home / "hf-home"),
        "HOME": str(home),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def snapshot_download(hub: HubDouble, hub_cache: Path, home: Path, pins: list[tuple[str, str, str]]) -> None:
    """Fill `hub_cache` the way CI does: huggingface_hub's snapshot_download from the (double) Hub, per pin."""
    script = textwrap.dedent(f"""
        from huggingface_hub import snapshot_download
        for repo, revision, repo_type in {pins!r}:
            snapshot_download(repo, revision=revision, repo_type=repo_type)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], env=hf_env(hub, hub_cache, home), capture_output=True, text=True, timeout=300
    )
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


def blob_of(hf_cache: Path, cat: Catalog, name: str, path: str) -> Path:
    m = cat.get(name)
    return (
        hf_cache / hf_repo_folder(m.source.hf_repo, m.source.repo_type) / "snapshots" / m.source.revision / path
    ).resolve()


def test_a_cold_resolve_of_every_bundled_model_over_the_hf_cache_needs_no_store_get_and_no_hub_request(
    hub: HubDouble, hf_cache: Path, filled_bucket: str, bundled: Catalog, tmp_path: Path
) -> None:
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
    hub: HubDouble,
    hf_cache: Path,
    filled_bucket: str,
    bundled: Catalog,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
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
        result = resolve(
            bundled,
            "tiny-llama",
            cache=Cache(tmp_path / "cache"),
            store=store,
            options=ResolveOptions(tiers=(Path(f"hf:{copy}"),)),
        )
    assert result.sources[victim.path] == store.url
    assert {p for p, s in result.sources.items() if s == f"hf-cache:{copy}"} == {e.path for e in m.files} - {
        victim.path
    }
    assert store.requests["GetObject"] == 1 and hub.hub_requests() == asked
    assert any(
        victim.path in r.getMessage() and victim.sha256 in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )
    assert tree_state(copy) == before


def test_the_cli_takes_hf_tiers_from_the_flag_and_the_environment(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    store = tmp_path / "empty-store"  # nothing there: every byte must come from the HF cache
    base = hf_env(hub, tmp_path / "unused-hf-cache", tmp_path) | {
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": str(store),
    }
    runs = [
        (["--shared-cache", f"hf:{hf_cache}"], {}),
        ([], {"CATALOG_SHARED_CACHE": f"{tmp_path / 'no-tier'}:hf:{hf_cache}"}),
    ]
    for number, (flags, extra) in enumerate(runs):
        env = base | extra | {"CATALOG_CACHE": str(tmp_path / f"cache-{number}")}
        done = subprocess.run(
            [sys.executable, "-m", "catalog", "resolve", "tiny-llama", "--format", "json", *flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert set(answer["sources"]) == {e.path for e in bundled.get("tiny-llama").files}
        assert set(answer["sources"].values()) == {f"hf-cache:{hf_cache}"}


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, timeout=300
    )


def empty_catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "manifests" / "catalog.yaml", folder / "catalog.yaml")
    return folder


def test_import_then_validate_then_sync_round_trips_the_bundled_models_with_no_hub_request(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, s3_server: SeaweedServer, tmp_path: Path
) -> None:
    folder = empty_catalog(tmp_path)
    bucket = new_bucket(s3_server.url)
    env = hf_env(hub, tmp_path / "unused-hf-cache", tmp_path) | {
        "CATALOG_DIR": str(folder),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_STORE": f"s3://{bucket}/",
    }
    asked = hub.hub_requests()
    imported = run_cli(env, "import", "--from-hf-cache", str(hf_cache), "--deep", "--format", "json")  # every byte read
    assert imported.returncode == 0, imported.stdout + imported.stderr
    results = json.loads(imported.stdout)["results"]
    assert {r["outcome"] for r in results} == {"written"} and len(results) == len(pins_of(bundled))

    mine = catalog.load(folder)
    for m in bundled:  # every bundled pin is in the imported manifest of its repo@revision, byte for byte
        [twin] = [
            i
            for i in mine
            if (i.source.hf_repo, i.source.revision, i.source.repo_type)
            == (m.source.hf_repo, m.source.revision, m.source.repo_type)
        ]
        for entry in m.files:
            got = twin.file(entry.path)
            assert got is not None and (got.size, got.sha256) == (entry.size, entry.sha256), (m.name, entry.path)
            # Tensor pins as `catalog lock` from a folder writes them for the same bytes: headers with each tensor's
            # digest (--deep reads every byte), weight_maps, tensorizer tables.
            assert (got.header, got.weight_map, got.table) == (entry.header, entry.weight_map, entry.table), (
                m.name,
                entry.path,
            )
        if any(e.header is not None for e in m.files):
            assert (folder / f"{twin.name}.tensors.json").is_file(), twin.name
    assert (
        mine.get("tiny-sts").load_format.value == "dataset"
        and mine.get("tiny-llama").load_format.value == "safetensors"
    )
    assert run_cli(env, "validate").returncode == 0

    synced = run_cli(env, "sync", "--from-hf-cache", str(hf_cache), "--format", "json")
    assert synced.returncode == 0, synced.stderr
    report = json.loads(synced.stdout)
    assert len(report["uploaded"]) == sum(len(m.files) for m in mine) and report["errors"] == []
    assert run_cli(env, "sync", "--check").returncode == 0
    assert hub.hub_requests() == asked  # import, validate and sync: not one Hub request


def remove_snapshot_file(hf: Path, cat: Catalog, name: str, path: str, *, blob_too: bool) -> Path:
    m = cat.get(name)
    link = hf / hf_repo_folder(m.source.hf_repo, m.source.repo_type) / "snapshots" / m.source.revision / path
    blob = link.resolve()
    if blob_too:
        blob.unlink()
    else:
        link.unlink()
    return blob


def test_import_refuses_an_incomplete_snapshot_naming_what_is_missing_and_writes_nothing_for_it(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    qwen = bundled.get("tiny-qwen2")
    shards = sorted(p for e in qwen.files for p in (e.shards or ()))
    remove_snapshot_file(copy, bundled, "tiny-qwen2", shards[-1], blob_too=False)  # the index names a shard not there
    remove_snapshot_file(copy, bundled, "tiny-llama", "config.json", blob_too=True)  # a dangling link
    blob = remove_snapshot_file(copy, bundled, "all-minilm-l6-v2", "model.safetensors", blob_too=True)
    blob.with_name(blob.name + ".incomplete").write_bytes(b"half")  # a download cut short
    folder = empty_catalog(tmp_path)
    env = hf_env(hub, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)}
    asked = hub.hub_requests()
    done = run_cli(env, "import", "--from-hf-cache", str(copy))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, done.stderr
    assert any(
        "tiny-qwen2" in e and f"names {shards[-1]}, which the cached snapshot does not hold" in e for e in errors
    )
    assert any("tiny-llama" in e and "config.json: its blob" in e and "is missing" in e for e in errors)
    assert any(
        "all-MiniLM-L6-v2" in e and "model.safetensors: its download is in flight or was interrupted" in e
        for e in errors
    )
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml", "tiny-sts.yaml"]  # only the complete snapshot
    assert hub.hub_requests() == asked


def test_import_pins_blob_names_and_deep_rehashes_them(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    weights = bundled.get("tiny-llama").file("model.safetensors")
    assert weights is not None
    blob = blob_of(copy, bundled, "tiny-llama", weights.path)
    data = bytearray(blob.read_bytes())
    data[-100] ^= 0xFF  # a weight byte (the header, read to pin it, would refuse a change in itself)
    blob.write_bytes(bytes(data))  # same size: only a hash can tell
    env = hf_env(hub, tmp_path / "unused", tmp_path)
    fast = empty_catalog(tmp_path / "fast")
    done = run_cli(env | {"CATALOG_DIR": str(fast)}, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama")
    assert done.returncode == 0, done.stderr
    pinned = {f["path"]: f["sha256"] for f in yaml.safe_load((fast / "tiny-llama.yaml").read_text())["files"]}
    assert pinned[weights.path] == weights.sha256  # the blob's name is the pin; the bytes are verified on use
    deep = empty_catalog(tmp_path / "deep")
    done = run_cli(
        env | {"CATALOG_DIR": str(deep)}, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama", "--deep"
    )
    assert done.returncode == 1
    assert f"model.safetensors: expected sha256 {weights.sha256} (its blob's name) but got" in done.stderr
    assert not (deep / "tiny-llama.yaml").exists()
    config = blob_of(copy, bundled, "tiny-llama", "config.json")
    config.write_bytes(config.read_bytes().replace(b"{", b"[", 1))  # a small file: hashed always, checked by its git id
    again = run_cli(
        env | {"CATALOG_DIR": str(fast)}, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama"
    )
    revision = bundled.get("tiny-llama").source.revision[:12]
    assert (
        again.returncode == 0
        and f"skipped model-catalog/tiny-llama@{revision}: already pinned as 'tiny-llama'" in again.stdout
    )
    (fast / "tiny-llama.yaml").unlink()
    broken = run_cli(
        env | {"CATALOG_DIR": str(fast)}, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama"
    )
    assert (
        broken.returncode == 1
        and "config.json: expected git blob id" in broken.stderr
        and "the cached blob is corrupt" in broken.stderr
    )


def test_a_repo_cached_at_two_revisions_gets_two_manifests_one_primary(
    sources: dict[str, Path], bundled: Catalog, tmp_path: Path
) -> None:
    old = bundled.get("tiny-llama").source.revision
    new = "f" * 40
    double = HubDouble()
    try:
        double.add_repo("model-catalog/tiny-llama", old, sources["tiny-llama"], refs=())
        changed = {p.name: p.read_bytes() for p in sources["tiny-llama"].iterdir() if p.is_file()}
        changed["generation_config.json"] = b'{"max_new_tokens": 4}\n'
        double.add_files("model-catalog/tiny-llama", new, changed, refs=("main",))
        cache = tmp_path / "hub"
        snapshot_download(
            double,
            cache,
            tmp_path,
            [("model-catalog/tiny-llama", old, "model"), ("model-catalog/tiny-llama", "main", "model")],
        )  # main: refs/main written
        folder = empty_catalog(tmp_path)
        env = hf_env(double, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)}
        asked = double.hub_requests()
        done = run_cli(env, "import", "--from-hf-cache", str(cache))
        assert done.returncode == 0, done.stderr
        main = yaml.safe_load((folder / "tiny-llama.yaml").read_text())
        other = yaml.safe_load((folder / f"tiny-llama-{old[:12]}.yaml").read_text())
        assert main["source"]["revision"] == new and main["primary"] is True
        assert other["source"]["revision"] == old and "primary" not in other and main["s3_prefix"] != other["s3_prefix"]
        assert run_cli(env, "validate").returncode == 0
        again = run_cli(env, "import", "--from-hf-cache", str(cache), "model-catalog/tiny-llama@main")
        assert (
            again.returncode == 0
            and again.stdout.count("skipped") == 1
            and "already pinned as 'tiny-llama'" in again.stdout
        )
        missing = run_cli(env, "import", "--from-hf-cache", str(cache), "model-catalog/tiny-llama@v2", "org/absent")
        assert missing.returncode == 1
        assert (
            "holds model-catalog/tiny-llama but not at 'v2'" in missing.stderr
            and "org/absent: the HF cache at" in missing.stderr
        )
        assert double.hub_requests() == asked
    finally:
        double.close()


def test_import_refuses_a_blob_whose_size_differs_from_the_caches_tree_listing(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    weights = bundled.get("tiny-llama").file("model.safetensors")
    assert weights is not None
    blob = blob_of(copy, bundled, "tiny-llama", weights.path)
    with blob.open("ab") as f:
        f.write(b"\0" * 8)  # a blob named by its sha256 is not hashed without --deep: only its size can tell
    folder = empty_catalog(tmp_path)
    done = run_cli(
        hf_env(hub, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)},
        "import",
        "--from-hf-cache",
        str(copy),
        "model-catalog/tiny-llama",
    )
    assert done.returncode == 1
    assert (
        f"model.safetensors has {weights.size + 8} bytes, the cache's tree listing says {weights.size}" in done.stderr
    )
    assert not (folder / "tiny-llama.yaml").exists()


def snapshot_link(hf: Path, cat: Catalog, name: str, path: str) -> Path:
    m = cat.get(name)
    return hf / hf_repo_folder(m.source.hf_repo, m.source.repo_type) / "snapshots" / m.source.revision / path


def test_nothing_outside_the_hf_cache_is_pinned_or_uploaded(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    """Attacked: `ln -sf /secret/credentials <snapshot>/generation_config.json` in a shared cache. Before, import pinned
    the secret and `sync --from-hf-cache` put its bytes in the bucket."""
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    secret = tmp_path / "secret" / "credentials"
    secret.parent.mkdir()
    secret.write_bytes(b"aws_secret_access_key = SECRET-MARKER\n")
    secret.chmod(0o600)
    link = snapshot_link(copy, bundled, "tiny-llama", "generation_config.json")
    link.unlink()
    link.symlink_to(secret)
    folder = empty_catalog(tmp_path)
    env = hf_env(hub, tmp_path / "unused", tmp_path) | {
        "CATALOG_DIR": str(folder),
        "CATALOG_STORE": str(tmp_path / "store"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
    }
    done = run_cli(env, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama")
    assert done.returncode == 1 and not (folder / "tiny-llama.yaml").exists()
    assert f"generation_config.json links outside model-catalog/tiny-llama's blobs/ (to {secret})" in done.stderr

    # A manifest that pins the secret's bytes anyway (written by hand, or by an import before the fix): the HF cache
    # is no source of them, so sync takes the file from the Hub (which serves other bytes: nothing is uploaded).
    shutil.copy(ROOT / "manifests" / "tiny-llama.yaml", folder / "tiny-llama.yaml")
    text = (folder / "tiny-llama.yaml").read_text()
    pinned = bundled.get("tiny-llama").file("generation_config.json")
    assert pinned is not None
    forged = hashlib.sha256(secret.read_bytes()).hexdigest()
    text = text.replace(pinned.sha256, forged).replace(
        f"size: {pinned.size}\n    sha256: {forged}", f"size: {secret.stat().st_size}\n    sha256: {forged}"
    )
    (folder / "tiny-llama.yaml").write_text(text)
    synced = run_cli(env, "sync", "tiny-llama", "--from-hf-cache", str(copy))
    assert synced.returncode == 1
    stored = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert stored and not any(b"SECRET-MARKER" in p.read_bytes() for p in stored)


def test_fifo_and_device_blobs_are_refused_unread(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    """Attacked: a blob replaced by a FIFO (import blocked forever) or linked to /dev/zero (hashed forever)."""
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    fifo = snapshot_link(copy, bundled, "tiny-llama", "config.json").resolve()
    fifo.unlink()
    os.mkfifo(fifo)
    zero = snapshot_link(copy, bundled, "tiny-qwen2", "tokenizer.json").resolve()
    zero.unlink()
    zero.symlink_to("/dev/zero")
    folder = empty_catalog(tmp_path)
    env = hf_env(hub, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)}
    done = run_cli(env, "import", "--from-hf-cache", str(copy), "model-catalog/tiny-llama", "model-catalog/tiny-qwen2")
    assert done.returncode == 1
    assert "config.json is a FIFO, not a regular file" in done.stderr
    assert "tokenizer.json links outside model-catalog/tiny-qwen2's blobs/ (to /dev/zero)" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml"]


def test_a_snapshot_of_regular_files_is_imported(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    """huggingface_hub writes files into the snapshot where symlinks are unavailable: inside the cache, taken."""
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    link = snapshot_link(copy, bundled, "tiny-llama", "config.json")
    data = link.read_bytes()
    link.unlink()
    link.write_bytes(data)
    folder = empty_catalog(tmp_path)
    done = run_cli(
        hf_env(hub, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)},
        "import",
        "--from-hf-cache",
        str(copy),
        "model-catalog/tiny-llama",
    )
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(data).hexdigest() in (folder / "tiny-llama.yaml").read_text()


def test_a_tree_listing_nested_past_the_parser_is_no_crash(
    hub: HubDouble, hf_cache: Path, bundled: Catalog, tmp_path: Path
) -> None:
    """Before: json's RecursionError on trees/<rev>.json was exit 3. A listing that cannot be read is no listing."""
    copy = tmp_path / "hf"
    shutil.copytree(hf_cache, copy, symlinks=True)
    m = bundled.get("tiny-llama")
    tree = copy / hf_repo_folder(m.source.hf_repo) / "trees" / f"{m.source.revision}.json"
    tree.write_text("[" * 100_000 + "]" * 100_000)
    folder = empty_catalog(tmp_path)
    done = run_cli(
        hf_env(hub, tmp_path / "unused", tmp_path) | {"CATALOG_DIR": str(folder)},
        "import",
        "--from-hf-cache",
        str(copy),
        "model-catalog/tiny-llama",
    )
    assert done.returncode == 0, done.stderr
