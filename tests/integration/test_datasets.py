"""Datasets: `source.repo_type: dataset` manifests are pinned, locked, resolved and looked up like models; the
hf-cache layout puts them under datasets--org--name, where huggingface_hub finds them offline."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REV, files_yaml, manifest_text, write_catalog
from hubdouble import HubDouble

import catalog
from catalog.formats import LoadFormat
from catalog.loading import load_dir
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hf_layout import hf_repo_folder
from resolver.hub import HubOptions, HubStore
from resolver.lock import lock_manifest
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout, ViewSpec

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-sts"


@pytest.fixture
def dataset_hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    """The dataset only under /api/datasets/ and /datasets/...: a model-URL request would 404."""
    double = HubDouble()
    m = bundled.get(NAME)
    double.add_repo(m.source.hf_repo, m.source.revision, sources[NAME], repo_type="dataset")
    yield double
    double.close()


def filled_store(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> str:
    store = str(tmp_path / "store")
    upload_from_dir(bundled, NAME, sources[NAME], open_store(store))
    return store


def test_the_bundled_dataset_is_looked_up_by_name(bundled: Catalog) -> None:
    m = bundled.get(NAME)
    assert m.is_dataset and m.source.repo_type == "dataset" and m.load_format is LoadFormat.DATASET
    assert bundled.gpu_class(m) == "cpu" and "gpu" not in (bundled.sources[NAME].read_text())  # gpu is optional
    assert m.weight_files == ()
    assert [d.name for d in bundled.filter(tag="dataset")] == [NAME]
    assert catalog.load(ROOT / "manifests", only=[NAME]).get(NAME) == m
    assert all(not other.is_dataset for other in bundled if other.name != NAME)  # repo_type defaults to model


def test_dataset_rules(tmp_path: Path) -> None:
    files = files_yaml(("data/train.jsonl", 10, "a" * 64))
    ok = manifest_text("ds", fmt="dataset", files=files).replace("  revision:", "  repo_type: dataset\n  revision:")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert load_dir(write_catalog(tmp_path / "ok", {"ds.yaml": ok})).problems == []
        model_format = ok.replace("load_format: dataset", "load_format: safetensors")
        found = load_dir(write_catalog(tmp_path / "a", {"ds.yaml": model_format})).problems
        assert "repo-type" in [p.rule for p in found]
        assert ("repo-type", 7) in [(p.rule, p.line) for p in found]
        typo = ok.replace("repo_type: dataset", "repo_type: space")
        assert [p.rule for p in load_dir(write_catalog(tmp_path / "c", {"ds.yaml": typo})).problems] == ["schema"]


def test_resolve_gives_a_verified_folder(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store = filled_store(bundled, sources, tmp_path)
    result = resolve(bundled, NAME, cache=Cache(tmp_path / "cache"), store=open_store(store))
    for entry in bundled.get(NAME).files:
        assert (result.path / entry.path).read_bytes() == (sources[NAME] / entry.path).read_bytes()
    again = resolve(bundled, NAME, cache=Cache(tmp_path / "cache"), store=open_store(store))
    assert again.source == "cache" and again.path == result.path


def test_the_cli_resolves_it_by_name(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store = filled_store(bundled, sources, tmp_path)
    env = {**os.environ, "CATALOG_STORE": store, "CATALOG_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests"), "resolve", NAME, "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    path = Path(json.loads(done.stdout)["path"])
    assert (path / "data" / "train.jsonl").read_bytes() == (sources[NAME] / "data" / "train.jsonl").read_bytes()


def hf_env(hub_cache: Path, hub: HubDouble, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    return env | {
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf"),
    }


def test_the_hf_cache_layout_writes_datasets_folder_found_offline(
    bundled: Catalog, sources: dict[str, Path], dataset_hub: HubDouble, tmp_path: Path
) -> None:
    m = bundled.get(NAME)
    store = filled_store(bundled, sources, tmp_path)
    cache = Cache(tmp_path / "cache")
    resolve(bundled, NAME, cache=cache, store=open_store(store))  # the blobs, verified
    spec = ViewSpec(NAME, m.source.hf_repo, m.source.revision, Layout.HF_CACHE, m.files, repo_type="dataset")
    path = cache.build_view(spec)
    assert path == cache.hub / "datasets--model-catalog--tiny-sts" / "snapshots" / m.source.revision
    assert hf_repo_folder(m.source.hf_repo, "dataset") == "datasets--model-catalog--tiny-sts"
    script = f"""
        import json
        from huggingface_hub import snapshot_download, hf_hub_download
        snap = snapshot_download({m.source.hf_repo!r}, repo_type="dataset", revision={m.source.revision!r}, local_files_only=True)
        train = hf_hub_download({m.source.hf_repo!r}, "data/train.jsonl", repo_type="dataset", revision={m.source.revision!r})
        try:
            snapshot_download({m.source.hf_repo!r}, revision={m.source.revision!r}, local_files_only=True)  # as a model
            as_model = "found"
        except Exception as exc:
            as_model = type(exc).__name__
        print(json.dumps({{"snap": snap, "train": train, "as_model": as_model}}))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=hf_env(cache.hub, dataset_hub, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "snap": str(path),
        "train": str(path / "data" / "train.jsonl"),
        "as_model": "LocalEntryNotFoundError",
    }
    assert dataset_hub.hub_requests() == 0


def test_resolve_with_the_hf_cache_layout_uses_the_datasets_folder(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = filled_store(bundled, sources, tmp_path)
    result = resolve(
        bundled,
        NAME,
        cache=Cache(tmp_path / "cache"),
        store=open_store(store),
        options=ResolveOptions(layout=Layout.HF_CACHE),
    )
    assert result.path.parent.parent.name == "datasets--model-catalog--tiny-sts"


def test_lock_and_fetch_from_the_hubs_dataset_endpoints(
    bundled: Catalog, sources: dict[str, Path], dataset_hub: HubDouble, tmp_path: Path
) -> None:
    m = bundled.get(NAME)
    copy = tmp_path / f"{NAME}.yaml"
    shutil.copy(bundled.sources[NAME], copy)
    result = lock_manifest(m, copy, from_dir=None, hub=HubOptions(endpoint=dataset_hub.url), write=True)
    assert not result.changed
    assert [(e.path, e.size, e.sha256) for e in result.new] == [(e.path, e.size, e.sha256) for e in m.files]
    assert all(e.blob_id is not None and len(e.blob_id) == 40 for e in result.new)  # the Hub's git blob ids, recorded
    assert "blob_id:" in copy.read_text()
    assert dataset_hub.requests[f"GET /api/datasets/{m.source.hf_repo}/tree/{m.source.revision}"] == 1
    store = HubStore(m.source.hf_repo, m.source.revision, HubOptions(endpoint=dataset_hub.url), repo_type="dataset")
    stream = store.open("data/test.jsonl")
    buffer = memoryview(bytearray(4096))
    count = stream.readinto(buffer)
    stream.close()
    assert bytes(buffer[:count]) == (sources[NAME] / "data" / "test.jsonl").read_bytes()[:count]


def test_the_pytest_plugin_hands_it_out_by_name(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store = filled_store(bundled, sources, tmp_path)
    project = tmp_path / "user"
    project.mkdir()
    (project / "test_data.py").write_text(
        textwrap.dedent("""\
        import pytest

        @pytest.mark.catalog_model("tiny-sts")
        def test_marked(catalog_resolution):
            assert (catalog_resolution.path / "data" / "train.jsonl").read_text().startswith('{"score": ')

        def test_factory(catalog_model):
            assert (catalog_model("tiny-sts").path / "data" / "test.jsonl").is_file()
    """)
    )
    env = {
        **os.environ,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": store,
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_GPU_CLASS": "l4",
        "CATALOG_MODE": "ci",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_data.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout


def test_a_dataset_needs_no_gpu_and_may_still_name_one(tmp_path: Path) -> None:
    files = files_yaml(("data/train.jsonl", 10, "a" * 64))
    text = manifest_text("ds", fmt="dataset", files=files).replace(
        f"  revision: {REV}", f"  repo_type: dataset\n  revision: {REV}"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        cat = catalog.load(write_catalog(tmp_path / "a", {"ds.yaml": text.replace("gpu: {class: cpu}\n", "")}))
        assert cat.gpu_class(cat.get("ds")) == "cpu"
        cat = catalog.load(write_catalog(tmp_path / "b", {"ds.yaml": text.replace("{class: cpu}", "{class: l4}")}))
        assert cat.gpu_class(cat.get("ds")) == "l4"


def _cli(store: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(ROOT / "manifests"),
            *args,
            "--store",
            store,
            "--cache",
            str(cache),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_datasets_loads_the_resolved_folder_and_the_hf_cache_snapshot_offline(
    bundled: Catalog, sources: dict[str, Path], dataset_hub: HubDouble, tmp_path: Path
) -> None:
    """What the README promises for a dataset: `datasets.load_dataset(<resolved folder>)`, and by repo id through the
    hf-cache layout as `load_dataset(snapshot_download(REPO, repo_type="dataset", revision=REV, local_files_only=True))`
    in the environment `--format env` exports, with no request to the Hub."""
    m = bundled.get(NAME)
    store = filled_store(bundled, sources, tmp_path)
    rows = {
        split: [json.loads(line) for line in (sources[NAME] / "data" / f"{split}.jsonl").read_text().splitlines()]
        for split in ("train", "test")
    }
    folder = _cli(store, tmp_path / "cache", "resolve", NAME).stdout.strip()
    exported = _cli(store, tmp_path / "cache", "resolve", NAME, "--layout", "hf-cache", "--format", "env").stdout
    env = hf_env(tmp_path, dataset_hub, tmp_path) | {"HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    for line in exported.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0]
    script = f"""
        import json, sys
        from datasets import load_dataset
        from huggingface_hub import snapshot_download
        by_folder = load_dataset(sys.argv[1])
        by_repo = load_dataset(snapshot_download({m.source.hf_repo!r}, repo_type="dataset", revision={m.source.revision!r},
                                                 local_files_only=True))
        print(json.dumps([{{split: ds[split].to_list() for split in ("train", "test")}} for ds in (by_folder, by_repo)]))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), folder],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    by_folder, by_repo = json.loads(done.stdout.strip().splitlines()[-1])
    assert by_folder == by_repo == rows
    assert dataset_hub.hub_requests() == 0


def test_a_dataset_has_no_engine_arguments(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    store = filled_store(bundled, sources, tmp_path)
    done = _cli(store, tmp_path / "cache", "resolve", NAME, "--format", "vllm-args")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[0] == (
        "error: --format vllm-args: tiny-sts is a dataset: no engine loads it, so it has "
        "no engine arguments; use --format path or json"
    )
    listed = json.loads(_cli(store, tmp_path / "cache", "resolve", NAME, "--format", "json").stdout)
    assert listed["engine_args"] is None
