"""Resolve from both stores: cold, warm, every load format, the HF cache layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.errors import NotCachedError
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout

ROOT = Path(__file__).resolve().parents[2]


def fill(cat: Catalog, store_url: str, sources: dict[str, Path], names: list[str]) -> None:
    store = open_store(store_url)
    for name in names:
        upload_from_dir(cat, name, sources[name], store)


def test_cold_then_warm_resolve_of_every_bundled_model(
    bundled: Catalog, sources: dict[str, Path], store_url: str, tmp_path: Path
) -> None:
    names = sorted(bundled.models)
    fill(bundled, store_url, sources, names)
    cache = Cache(tmp_path / "cache")
    store = open_store(store_url)
    for name in names:
        manifest = bundled.get(name)
        first = resolve(bundled, name, cache=cache, store=store, options=ResolveOptions(materialize_weights=True))
        assert first.source == store.url
        for entry in manifest.files:  # every byte local and equal to the source's
            assert (first.path / entry.path).read_bytes() == (sources[name] / entry.path).read_bytes()
        again = resolve(bundled, name, cache=cache, store=store, options=ResolveOptions(materialize_weights=True))
        assert again.source == "cache" and again.path == first.path


def test_streaming_formats_keep_weights_in_the_store(
    bundled: Catalog, sources: dict[str, Path], store_url: str, tmp_path: Path
) -> None:
    """For the formats' own streamers (CATALOG_ENGINE_LOADER=plain); the verified loader's hand-off is below."""
    from catalog.settings import Settings

    fill(bundled, store_url, sources, ["tiny-qwen2", "tiny-llama-tensorizer"])
    store = open_store(store_url)
    cache = Cache(tmp_path / "cache")
    plain = ResolveOptions.from_settings(Settings.build({"HOME": str(tmp_path), "CATALOG_ENGINE_LOADER": "plain"}))
    qwen = resolve(bundled, "tiny-qwen2", cache=cache, store=store, options=plain)
    assert qwen.streamed == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert "model.safetensors.index.json" in qwen.files and "tokenizer_config.json" in qwen.files
    assert not any(p.name.endswith(".safetensors") for p in qwen.path.iterdir())
    revision = bundled.get("tiny-qwen2").source.revision
    assert qwen.model == qwen.weights_uri == store.stream_uri(f"model-catalog/tiny-qwen2/{revision}/")
    assert qwen.tokenizer == str(qwen.path)
    tens = resolve(bundled, "tiny-llama-tensorizer", cache=cache, store=store, options=plain)
    assert tens.streamed == ("model.tensors",)
    # vLLM's tensorizer loader: --model is the local folder of configs and tokenizer, the weights URI goes in the
    # loader's extra config.
    assert tens.model == str(tens.path) and (tens.path / "config.json").is_file()
    assert tens.weights_uri is not None and tens.loader["tensorizer_uri"] == tens.weights_uri + "model.tensors"
    pulled = resolve(
        bundled, "tiny-llama-tensorizer", cache=cache, store=store, options=ResolveOptions(materialize_weights=True)
    )
    assert pulled.model == str(pulled.path) and pulled.weights_uri is None
    assert (
        pulled.loader["tensorizer_uri"] == str(pulled.path / "model.tensors")
        and (pulled.path / "model.tensors").is_file()
    )


def test_the_verified_loader_gets_the_local_folder_and_the_logical_name(
    bundled: Catalog, sources: dict[str, Path], store_url: str, tmp_path: Path
) -> None:
    """CATALOG_ENGINE_LOADER=catalog: --model is the verified folder of configs and tokenizer, the weights stay in the
    store (weights_uri), and the engine's loader gets the name and where the catalog and cache are; nothing of the
    format's own loader config (no tensorizer_uri)."""

    fill(bundled, store_url, sources, ["tiny-qwen2", "tiny-llama-tensorizer"])
    store = open_store(store_url)
    cache = Cache(tmp_path / "cache")
    verified = ResolveOptions(engine_loader="catalog")
    for name in ("tiny-qwen2", "tiny-llama-tensorizer"):
        got = resolve(bundled, name, cache=cache, store=store, options=verified)
        assert got.streamed and got.model == str(got.path) and got.weights_uri is not None
        assert got.verified_loader == {"model": name, "catalog": str(bundled.root.resolve()), "cache": str(cache.root)}
        assert "tensorizer_uri" not in got.loader


def test_blobs_are_shared_across_models(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources, ["tiny-llama", "tiny-llama-sharded"])
    cache = Cache(tmp_path / "cache")
    a = resolve(bundled, "tiny-llama", cache=cache, store=open_store(store_url))
    b = resolve(
        bundled,
        "tiny-llama-sharded",
        cache=cache,
        store=open_store(store_url),
        options=ResolveOptions(materialize_weights=True),
    )
    assert (a.path / "tokenizer.json").stat().st_ino == (b.path / "tokenizer.json").stat().st_ino
    shared = {e.sha256 for e in bundled.get("tiny-llama").files} | {
        e.sha256 for e in bundled.get("tiny-llama-sharded").files
    }
    assert sorted(p.name for p in cache.blobs.glob("*/*")) == sorted(shared)


def test_hf_cache_layout_loads_offline_by_repo_id(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources, ["all-minilm-l6-v2"])
    cache = Cache(tmp_path / "cache")
    result = resolve(
        bundled,
        "all-minilm-l6-v2",
        cache=cache,
        store=open_store(store_url),
        options=ResolveOptions(layout=Layout.HF_CACHE),
    )
    code = (
        "import sys, json\n"
        "from huggingface_hub import snapshot_download\n"
        "from safetensors.numpy import load_file\n"
        "path = snapshot_download('sentence-transformers/all-MiniLM-L6-v2', revision=sys.argv[1], local_files_only=True)\n"
        "plain = snapshot_download('sentence-transformers/all-MiniLM-L6-v2', local_files_only=True)\n"
        "tensors = load_file(path + '/model.safetensors')\n"
        "original = load_file(sys.argv[2] + '/model.safetensors')\n"
        "same = sorted(tensors) == sorted(original) and all((tensors[k] == original[k]).all() for k in tensors)\n"
        "print(json.dumps([path, plain, len(tensors), same, json.load(open(path + '/1_Pooling/config.json'))]))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(result.hub_cache),
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, result.revision, str(sources["all-minilm-l6-v2"])],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    path, plain, count, same, pooling = json.loads(done.stdout)
    assert Path(path) == result.path and Path(plain) == result.path
    assert count > 0 and same
    assert pooling["word_embedding_dimension"] == 384


def test_warm_resolve_reads_no_weight_bytes_and_imports_no_boto3(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    fill(bundled, str(tmp_path / "store"), sources, ["all-minilm-l6-v2"])
    env = {**os.environ, "CATALOG_STORE": "s3://never-contacted/", "CATALOG_CACHE": str(tmp_path / "cache")}
    cold = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            "resolve",
            "all-minilm-l6-v2",
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert cold.returncode == 0, cold.stderr
    # Warm, with an audit hook recording every file opened; the store points at an unreachable bucket.
    code = (
        "import sys, json\n"
        "opened = []\n"
        "sys.addaudithook(lambda e, a: opened.append(str(a[0])) if e == 'open' and isinstance(a[0], (str, bytes)) else None)\n"
        "from catalog_app.main import run\n"
        "code = run(sys.argv[1:])\n"
        "print(json.dumps({'code': code, 'opened': opened, 'boto3': 'boto3' in sys.modules,\n"
        "                  'botocore': 'botocore' in sys.modules}), file=sys.stderr)\n"
    )
    warm = subprocess.run(
        [sys.executable, "-c", code, "--catalog", str(ROOT / "manifests"), "resolve", "all-minilm-l6-v2"],
        capture_output=True,
        text=True,
        env=env,
    )
    report = json.loads(warm.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, warm.stderr
    assert warm.stdout.strip() == cold.stdout.strip()
    assert not report["boto3"] and not report["botocore"]
    cache = tmp_path / "cache"
    opened = [p for p in report["opened"] if p.startswith(str(cache))]
    assert any(p.startswith(str(cache / "markers")) for p in opened)  # the marker was read ...
    # ... and no model file but the two small configs the load-safety check reads for an auto_map (resolver/load_safety.py)
    assert not [
        p
        for p in opened
        if p.startswith((str(cache / "blobs"), str(cache / "models")))
        and Path(p).name not in ("config.json", "tokenizer_config.json")
    ]


def test_a_tokenizer_from_another_model_brings_only_its_non_weight_files(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources, ["tiny-qwen2", "tiny-llama"])
    qwen = bundled.get("tiny-qwen2").model_copy(update={"tokenizer": "tiny-llama"})
    cat = Catalog(bundled.root, bundled.settings, {**bundled.models, "tiny-qwen2": qwen}, bundled.sources)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(NotCachedError):
        resolve(cat, "tiny-qwen2", cache=cache, store=open_store(store_url), options=ResolveOptions(offline=True))
    result = resolve(cat, "tiny-qwen2", cache=cache, store=open_store(store_url))
    assert result.tokenizer is not None and len(result.markers) == 2
    tokenizer_dir = Path(result.tokenizer)
    assert sorted(p.name for p in tokenizer_dir.iterdir()) == sorted(
        f.path for f in bundled.get("tiny-llama").files if f.path != "model.safetensors"
    )
    # Offline hands out no stream URI (nothing could check it): the weights must be in the cache first.
    with pytest.raises(NotCachedError):
        resolve(
            cat,
            "tiny-qwen2",
            cache=cache,
            store=open_store(str(tmp_path / "gone")),
            options=ResolveOptions(offline=True),
        )
    resolve(
        cat, "tiny-qwen2", cache=cache, store=open_store(store_url), options=ResolveOptions(materialize_weights=True)
    )
    again = resolve(
        cat, "tiny-qwen2", cache=cache, store=open_store(str(tmp_path / "gone")), options=ResolveOptions(offline=True)
    )
    assert again.tokenizer == result.tokenizer and not again.streamed  # every view warm: no store needed


def test_an_hf_cache_snapshot_of_a_streamed_model_holds_its_weights(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """A repo-id load finds only local files: in the hf-cache layout a streamed format's weights are local too,
    and the engine is pointed at the repo id, not at the store."""
    from resolver.resolution import engine_args

    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources, ["tiny-qwen2"])
    result = resolve(
        bundled,
        "tiny-qwen2",
        cache=Cache(tmp_path / "cache"),
        store=open_store(store_url),
        options=ResolveOptions(layout=Layout.HF_CACHE),
    )
    assert not result.streamed
    qwen = bundled.get("tiny-qwen2")
    assert sorted(p.relative_to(result.path).as_posix() for p in result.path.rglob("*") if p.is_file()) == sorted(
        f.path for f in qwen.files
    )
    assert engine_args(result)[:4] == ["--model", "model-catalog/tiny-qwen2", "--revision", qwen.source.revision]


def test_a_file_another_process_brought_while_this_one_waited_is_reported_from_the_cache(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """The per-blob lock is held elsewhere; the holder publishes the blob and lets go: this resolve downloaded
    nothing, so its `sources` say cache for that file, not the store."""
    import threading

    from resolver.transfer import TransferConfig

    store_url = str(tmp_path / "store")
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(store_url))
    cache = Cache(tmp_path / "cache")
    weights = bundled.get("tiny-llama").file("model.safetensors")
    assert weights is not None
    config = TransferConfig(lock_threshold=1)  # every file takes the lock, as a large one would
    held, release = threading.Event(), threading.Event()

    def other_process() -> None:
        with cache.download_lock(weights.sha256) as locked:
            assert locked
            held.set()
            release.wait(30)
            fd, temp = cache.new_temp()
            os.write(fd, (sources["tiny-llama"] / "model.safetensors").read_bytes())
            os.close(fd)
            cache.publish_blob(temp, weights.sha256)

    holder = threading.Thread(target=other_process)
    holder.start()
    assert held.wait(10)
    threading.Timer(0.5, release.set).start()
    result = resolve(
        bundled, "tiny-llama", cache=cache, store=open_store(store_url), options=ResolveOptions(transfer=config)
    )
    holder.join()
    assert result.sources["model.safetensors"] == "cache"
    assert result.sources["config.json"] == open_store(store_url).url
