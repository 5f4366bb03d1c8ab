"""Every load format end to end: runai-model-streamer and tensorizer read the weights from SeaweedFS over S3
(and from a folder store), safetensors and transformers from the verified cache. Real libraries, real
server, real bytes: nothing here is mocked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from servers import SeaweedServer, free_port

import catalog
from catalog.lookup import Catalog
from catalog.schema import LoadFormat
from resolver.cache import Cache
from resolver.hashing import hash_file
from resolver.loaders import LoadError, check_load, load_weights
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import S3Options, S3Store, make_s3_client, open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout

torch = pytest.importorskip("torch")
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = catalog.load(ROOT / "manifests")
STREAMED = [m.name for m in BUNDLED if m.load_format in (LoadFormat.RUNAI_STREAMER, LoadFormat.RUNAI_STREAMER_SHARDED)]


def fill(cat: Catalog, store_url: str, sources: dict[str, Path], names: list[str]) -> None:
    store = open_store(store_url)
    for name in names:
        upload_from_dir(cat, name, sources[name], store)


def assert_same_tensors(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name


def test_the_bundled_catalog_has_both_streaming_formats() -> None:
    assert {BUNDLED.get(n).load_format for n in STREAMED} == {
        LoadFormat.RUNAI_STREAMER,
        LoadFormat.RUNAI_STREAMER_SHARDED,
    }


@pytest.mark.parametrize("name", STREAMED)
def test_runai_streams_every_bundled_streaming_model(
    bundled: Catalog, sources: dict[str, Path], store_url: str, name: str, tmp_path: Path
) -> None:
    fill(bundled, store_url, sources, [name])
    store = open_store(store_url)
    cache = Cache(tmp_path / "cache")
    loaded = load_weights(bundled, name, store=store, cache=cache)
    prefix = store.stream_uri(bundled.store_key(bundled.get(name)))
    assert loaded.uri == prefix and not loaded.problems
    weights = [f.path for f in bundled.get(name).files if f.path.endswith(".safetensors")]
    assert sorted(loaded.files) == sorted(weights)
    for path in weights:  # every file's tensors, equal to the source file's
        assert_same_tensors(loaded.files[path], load_file(str(sources[name] / path)))
    report = check_load(bundled, name, store=store, cache=cache)
    assert report.ok, report.problems
    assert report.tensors == loaded.count and report.bytes == loaded.bytes > 0
    assert report.seconds > 0 and report.throughput_mib_s > 0
    # The weights stayed in the store: only configs and tokenizers are in the cache's view.
    assert not any(
        p.name.endswith(".safetensors") for p in resolve(bundled, name, cache=cache, store=store).path.iterdir()
    )


def test_tensorizer_from_s3_equals_tiny_llama(
    bundled: Catalog, sources: dict[str, Path], s3_server: SeaweedServer, tmp_path: Path
) -> None:
    from servers import new_bucket

    store_url = f"s3://{new_bucket(s3_server.url)}/"
    fill(bundled, store_url, sources, ["tiny-llama-tensorizer", "tiny-llama"])
    store = open_store(store_url)
    cache = Cache(tmp_path / "cache")
    loaded = load_weights(bundled, "tiny-llama-tensorizer", store=store, cache=cache)
    assert loaded.uri.startswith(store_url) and loaded.uri.endswith("/model.tensors")
    assert_same_tensors(loaded.merged(), load_file(str(sources["tiny-llama"] / "model.safetensors")))
    report = check_load(bundled, "tiny-llama-tensorizer", store=store, cache=cache)
    assert report.ok, report.problems
    assert report.compared_with == "tiny-llama" and report.tensors == 21


def test_tensorizer_weights_that_differ_from_the_safetensors_twin_are_reported(
    bundled: Catalog,
    sources: dict[str, Path],
    tmp_path: Path,
) -> None:
    """A tensorizer artifact written from the wrong state dict: same names, shapes and dtypes, one value off."""
    from tensorizer import TensorSerializer

    state = load_file(str(sources["tiny-llama"] / "model.safetensors"))
    state["model.norm.weight"] = state["model.norm.weight"] + 1
    folder = tmp_path / "src"
    shutil.copytree(sources["tiny-llama-tensorizer"], folder)
    serializer = TensorSerializer(str(folder / "model.tensors"))
    serializer.write_state_dict(state)
    serializer.close()
    size, sha = hash_file(folder / "model.tensors")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in ("catalog", "tiny-llama"):
        shutil.copy(ROOT / "manifests" / f"{name}.yaml", manifests)
    data = yaml.safe_load((ROOT / "manifests" / "tiny-llama-tensorizer.yaml").read_text())
    data["files"] = [dict(f, size=size, sha256=sha) if f["path"] == "model.tensors" else f for f in data["files"]]
    (manifests / "tiny-llama-tensorizer.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    cat = catalog.load(manifests)
    store_url = str(tmp_path / "store")
    fill(
        cat,
        store_url,
        {"tiny-llama": sources["tiny-llama"], "tiny-llama-tensorizer": folder},
        ["tiny-llama", "tiny-llama-tensorizer"],
    )
    report = check_load(cat, "tiny-llama-tensorizer", store=open_store(store_url), cache=Cache(tmp_path / "cache"))
    assert report.compared_with == "tiny-llama"
    assert report.problems == ["tiny-llama-tensorizer: tensor model.norm.weight differs from tiny-llama's"]


def test_an_object_changed_under_its_pin_is_caught_while_streaming(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server: SeaweedServer,
    tmp_path: Path,
) -> None:
    """Streaming bypasses the resolver's download-time hash check, so check-load rebuilds each file from its
    header and the streamed tensors and compares the pin."""
    from servers import new_bucket

    bucket = new_bucket(s3_server.url)
    fill(bundled, f"s3://{bucket}/", sources, ["tiny-qwen2"])
    shard = "model-00002-of-00002.safetensors"
    data = bytearray((sources["tiny-qwen2"] / shard).read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor: same size, same header, still a valid file
    key = bundled.store_key(bundled.get("tiny-qwen2"), shard)
    make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path")).put_object(
        Bucket=bucket, Key=key, Body=bytes(data)
    )
    report = check_load(bundled, "tiny-qwen2", store=open_store(f"s3://{bucket}/"), cache=Cache(tmp_path / "cache"))
    assert len(report.problems) == 1, report.problems
    assert report.problems[0].startswith(f"tiny-qwen2/{shard}: the streamed bytes hash to ")
    assert bundled.get("tiny-qwen2").file(shard).sha256 in report.problems[0]  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama-tensorizer"])
def test_a_dead_endpoint_gives_one_error_naming_the_uri_and_the_endpoint(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server: SeaweedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    """A warm cache (so resolving needs no request) and a store whose endpoint nothing listens on: the loader's
    own terse failure ("File access error") comes back naming what was read and where."""
    from servers import new_bucket

    bucket = new_bucket(s3_server.url)
    fill(bundled, f"s3://{bucket}/", sources, [name])
    cache = Cache(tmp_path / "cache")
    resolve(
        bundled,
        name,
        cache=cache,
        store=open_store(f"s3://{bucket}/"),
        options=ResolveOptions(materialize_weights=True),
    )
    dead = f"http://127.0.0.1:{free_port()}"
    store = S3Store(bucket, "", S3Options(endpoint_url=dead, addressing_style="path"))
    monkeypatch.setenv("RUNAI_STREAMER_S3_MAX_RETRIES", "1")  # runai's default backs off for ~8 s
    started = time.monotonic()
    with pytest.raises(LoadError) as caught:
        check_load(bundled, name, store=store, cache=cache)
    message = str(caught.value)
    assert f"s3://{bucket}/{bundled.store_key(bundled.get(name))}" in message
    assert f"(endpoint {dead})" in message and "\n" not in message
    assert caught.value.hint
    assert time.monotonic() - started < 20


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real `catalog` entry point."""
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_check_load_cli_json(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    fill(bundled, str(store), sources, sorted(bundled.models))
    env = {**os.environ, "CATALOG_DIR": str(ROOT / "manifests"), "CATALOG_CACHE": str(tmp_path / "cache")}
    done = run_cli(["check-load", "--all", "--format", "json", "--store", str(store)], env)
    assert done.returncode == 0, done.stderr
    reports = {r["name"]: r for r in json.loads(done.stdout)}
    assert sorted(reports) == sorted(bundled.models)
    loaded = {n: r for n, r in reports.items() if not r["skipped"]}
    assert sorted(n for n in reports if n not in loaded) == ["tiny-sts"]  # a dataset: skipped, not passed
    assert all(r["ok"] and r["tensors"] > 0 and r["bytes"] > 0 for r in loaded.values()), reports
    assert reports["tiny-llama-tensorizer"]["compared_with"] == "tiny-llama"
    assert reports["tiny-qwen2"]["uri"].startswith(str(store.resolve()))  # streamed from the folder store
    # A store missing the model: exit 1, the problem in the report, no traceback.
    empty = run_cli(["check-load", "tiny-qwen2", "--format", "json", "--store", str(tmp_path / "empty")], env)
    assert empty.returncode == 1 and "Traceback" not in empty.stderr
    report = json.loads(empty.stdout)
    assert not report["ok"] and "missing from the store" in report["problems"][0]
    # An unknown name: the usual one-line error with a suggestion.
    unknown = run_cli(["check-load", "tiny-lama"], env)
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "no model named 'tiny-lama'" in unknown.stderr and "did you mean" in unknown.stderr


def test_importing_the_loaders_and_their_cli_imports_no_heavy_library() -> None:
    code = (
        "import sys, resolver.loaders, catalog_app.commands.check_load\n"
        "print(sorted(m for m in ('torch', 'safetensors', 'tensorizer', 'runai_model_streamer', 'boto3') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


EMBED = """\
import json, sys
import torch
from transformers import AutoModel, AutoTokenizer

def embed(where, **kwargs):
    tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    model = AutoModel.from_pretrained(where, **kwargs).eval()
    batch = tokenizer(["Pinned models load offline, by repo id."], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return ((hidden * mask).sum(1) / mask.sum(1))[0].tolist()

print(json.dumps({"by_repo": embed("sentence-transformers/all-MiniLM-L6-v2", revision=sys.argv[1]),
                  "original": embed(sys.argv[2])}))
"""


def test_transformers_loads_minilm_by_repo_id_from_the_hf_cache_layout(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store_url = str(tmp_path / "store")
    fill(bundled, store_url, sources, ["all-minilm-l6-v2"])
    result = resolve(
        bundled,
        "all-minilm-l6-v2",
        cache=Cache(tmp_path / "cache"),
        store=open_store(store_url),
        options=ResolveOptions(layout=Layout.HF_CACHE),
    )
    assert result.hub_cache is not None
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_CACHE": str(result.hub_cache),
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", EMBED, result.revision, str(sources["all-minilm-l6-v2"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    vectors = json.loads(done.stdout)
    assert len(vectors["by_repo"]) == 384
    assert vectors["by_repo"] == vectors["original"]  # same bytes, same code: bit-identical
