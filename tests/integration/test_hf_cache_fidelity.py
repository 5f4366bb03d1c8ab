"""The hf-cache layout as today's huggingface_hub and transformers read it: offline, by repo id at the pinned
revision, with zero HTTP requests (HF_ENDPOINT points at a Hub double that counts every one); the tree
listing huggingface_hub caches (`trees/<revision>.json`); and refs/main only while one revision is cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import SETTINGS
from hubdouble import HubDouble

import catalog
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.examples import safetensors_bytes
from resolver.hf_layout import hf_repo_folder
from resolver.lock import files_from_dir, render_files_block
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout

REV_A = "a" * 39 + "1"
REV_B = "b" * 39 + "2"


@pytest.fixture
def empty_hub() -> Iterator[HubDouble]:
    """A Hub that knows no repo and counts every request: any call the libraries make shows up here."""
    double = HubDouble()
    yield double
    double.close()


def run_hf(script: str, hub_cache: Path, hub: HubDouble, tmp_path: Path, offline: bool = True) -> dict[str, object]:
    """Run `script` in a fresh interpreter (huggingface_hub reads HF_* once, at import) and return its JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env |= {
        "HF_HUB_CACHE": str(hub_cache),
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
    }
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def resolve_hf(cat: Catalog, name: str, folder: Path, tmp_path: Path) -> Path:
    store = open_store(str(tmp_path / "store"))
    upload_from_dir(cat, name, folder, store)
    return resolve(
        cat, name, cache=Cache(tmp_path / "cache"), store=store, options=ResolveOptions(layout=Layout.HF_CACHE)
    ).path


def test_offline_loads_by_repo_id_at_the_pin_with_no_http(
    bundled: Catalog, sources: dict[str, Path], empty_hub: HubDouble, tmp_path: Path
) -> None:
    m = bundled.get("tiny-llama")
    snapshot = resolve_hf(bundled, "tiny-llama", sources["tiny-llama"], tmp_path)
    hub_cache = tmp_path / "cache" / "hub"
    repo_dir = hub_cache / hf_repo_folder(m.source.hf_repo)
    # the tree listing huggingface_hub caches, listing what the snapshot holds
    tree = json.loads((repo_dir / "trees" / f"{m.source.revision}.json").read_text())
    assert tree["format_version"] == 1 and sorted(tree["files"]) == sorted(f.path for f in m.files)
    weights = tree["files"]["model.safetensors"]
    assert weights["lfs_sha256"] == m.file("model.safetensors").sha256 and weights["size"] == weights["lfs_size"]  # type: ignore[union-attr]
    assert "lfs_sha256" not in tree["files"]["config.json"]
    assert (repo_dir / "refs" / "main").read_bytes() == m.source.revision.encode()  # the one revision, no newline

    out = run_hf(
        f"""
        import json
        from huggingface_hub import snapshot_download, hf_hub_download, get_cached_repo_tree
        from transformers import AutoConfig
        repo, rev = {m.source.hf_repo!r}, {m.source.revision!r}
        snap = snapshot_download(repo, revision=rev, local_files_only=True)
        snap_offline = snapshot_download(repo, revision=rev)  # HF_HUB_OFFLINE alone
        config_path = hf_hub_download(repo, "config.json", revision=rev)
        config = AutoConfig.from_pretrained(repo, revision=rev)
        by_id = AutoConfig.from_pretrained(repo)  # refs/main: the one pin in the cache
        tree = sorted(f.path for f in get_cached_repo_tree(repo, revision=rev))
        print(json.dumps({{"snap": snap, "snap_offline": snap_offline, "config": config_path, "arch": config.architectures,
                          "by_id": by_id.hidden_size, "tree": tree}}))
    """,
        hub_cache,
        empty_hub,
        tmp_path,
    )
    assert out["snap"] == out["snap_offline"] == str(snapshot)
    assert out["config"] == str(snapshot / "config.json")
    assert (
        out["arch"] == ["LlamaForCausalLM"]
        and out["by_id"] == json.loads((snapshot / "config.json").read_text())["hidden_size"]
    )
    assert out["tree"] == sorted(f.path for f in m.files)
    assert empty_hub.hub_requests() == 0, empty_hub.requests


def test_online_at_the_pin_makes_no_request_either(
    bundled: Catalog, sources: dict[str, Path], empty_hub: HubDouble, tmp_path: Path
) -> None:
    """Without HF_HUB_OFFLINE, a commit-hash request is answered from the cached tree listing and snapshot."""
    m = bundled.get("tiny-llama")
    snapshot = resolve_hf(bundled, "tiny-llama", sources["tiny-llama"], tmp_path)
    out = run_hf(
        f"""
        import json
        from huggingface_hub import snapshot_download, hf_hub_download
        snap = snapshot_download({m.source.hf_repo!r}, revision={m.source.revision!r})
        path = hf_hub_download({m.source.hf_repo!r}, "model.safetensors", revision={m.source.revision!r})
        print(json.dumps({{"snap": snap, "path": path}}))
    """,
        tmp_path / "cache" / "hub",
        empty_hub,
        tmp_path,
        offline=False,
    )
    assert out == {"snap": str(snapshot), "path": str(snapshot / "model.safetensors")}
    assert empty_hub.hub_requests() == 0, empty_hub.requests


def two_revisions(tmp_path: Path) -> Catalog:
    """Two manifests pinning one repo at two commits, with different configs (two-a answers for the repo id)."""
    entries = {}
    for name, rev, vocab in (("two-a", REV_A, 64), ("two-b", REV_B, 96)):
        folder = tmp_path / "src" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(
            json.dumps(
                {
                    "model_type": "llama",
                    "vocab_size": vocab,
                    "hidden_size": 32,
                    "num_attention_heads": 4,
                    "num_hidden_layers": 1,
                }
            )
        )
        (folder / "model.safetensors").write_bytes(safetensors_bytes({}, {"name": name}))  # no tensors, a valid header
        entries[name] = (rev, render_files_block(files_from_dir(folder, (), ())))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "catalog.yaml").write_text(SETTINGS)
    for name, (rev, block) in entries.items():
        (manifests / f"{name}.yaml").write_text(
            f"name: {name}\nsource:\n  hf_repo: org/two\n  revision: {rev}\ns3_prefix: s3://ci-bucket/org/{name}/\n"
            f"load_format: safetensors\ngpu: {{class: cpu}}\n{'primary: true' + chr(10) if name == 'two-a' else ''}{block}"
        )
    return catalog.load(manifests)


def test_two_revisions_of_one_repo_each_load_by_revision(tmp_path: Path, empty_hub: HubDouble) -> None:
    cat = two_revisions(tmp_path)
    store = open_store(str(tmp_path / "store"))
    cache = Cache(tmp_path / "cache")
    refs_main = cache.hub / hf_repo_folder("org/two") / "refs" / "main"
    for name in ("two-a", "two-b"):
        upload_from_dir(cat, name, tmp_path / "src" / name, store)
    resolve(cat, "two-a", cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE))
    assert refs_main.read_text() == REV_A
    resolve(cat, "two-b", cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE))
    assert not refs_main.exists()  # never silently re-pointed at the second pin
    resolve(cat, "two-a", cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE))
    assert not refs_main.exists()
    out = run_hf(
        f"""
        import json
        from transformers import AutoConfig
        from huggingface_hub import snapshot_download
        a = AutoConfig.from_pretrained("org/two", revision={REV_A!r}).vocab_size
        b = AutoConfig.from_pretrained("org/two", revision={REV_B!r}).vocab_size
        try:
            snapshot_download("org/two", local_files_only=True)
            unpinned = "loaded"
        except Exception as exc:
            unpinned = type(exc).__name__
        print(json.dumps({{"a": a, "b": b, "unpinned": unpinned}}))
    """,
        cache.hub,
        empty_hub,
        tmp_path,
    )
    assert out == {"a": 64, "b": 96, "unpinned": "LocalEntryNotFoundError"}
    assert empty_hub.hub_requests() == 0, empty_hub.requests


OLDEST_HUB = Path(__file__).resolve().parents[2] / ".venv" / "hub-oldest"  # installed by `dev.py test`


@pytest.mark.skipif(
    not (OLDEST_HUB / "huggingface_hub").is_dir(),
    reason="the oldest supported huggingface_hub is installed by `python3 dev.py test` into .venv/hub-oldest",
)
def test_the_oldest_supported_huggingface_hub_loads_the_cache_offline(
    bundled: Catalog, sources: dict[str, Path], empty_hub: HubDouble, tmp_path: Path
) -> None:
    """pyproject says huggingface_hub>=0.24: that version, too, finds a model and a dataset by repo id at the pin."""
    model, dataset = bundled.get("tiny-llama"), bundled.get("tiny-sts")
    resolve_hf(bundled, "tiny-llama", sources["tiny-llama"], tmp_path)
    resolve_hf(bundled, "tiny-sts", sources["tiny-sts"], tmp_path)
    script = f"""
        import json, sys
        sys.path.insert(0, {str(OLDEST_HUB)!r})
        import huggingface_hub
        from huggingface_hub import hf_hub_download, snapshot_download
        snap = snapshot_download({model.source.hf_repo!r}, revision={model.source.revision!r}, local_files_only=True)
        config = hf_hub_download({model.source.hf_repo!r}, "config.json", revision={model.source.revision!r}, local_files_only=True)
        data = snapshot_download({dataset.source.hf_repo!r}, repo_type="dataset", revision={dataset.source.revision!r},
                                 local_files_only=True)
        print(json.dumps({{"version": huggingface_hub.__version__, "snap": snap, "config": config, "data": data}}))
    """
    out = run_hf(script, tmp_path / "cache" / "hub", empty_hub, tmp_path)
    assert out["version"] == "0.24.0"
    assert Path(str(out["config"])).name == "config.json" and Path(str(out["snap"])).name == model.source.revision
    assert "datasets--" in str(out["data"])
    assert empty_hub.hub_requests() == 0  # found offline, with no request
