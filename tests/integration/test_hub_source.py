"""The Hub as a source, against the Hub double: same bytes, same checks, waits on 429, resumes truncated bodies;
and CATALOG_MODE decides whether the Hub may be touched at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubdouble import HubDouble

from catalog.errors import IntegrityError
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.resolve import ResolveOptions, Source, resolve
from resolver.stores import open_store
from resolver.transfer import TransferConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    for name in ("all-minilm-l6-v2", "tiny-llama", "tiny-qwen2"):
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, sources[name])
    yield double
    double.close()


def options(hub: HubDouble, **kw: object) -> ResolveOptions:
    base: dict[str, object] = {
        "source": Source.HF,
        "hub": HubOptions(endpoint=hub.url),
        "transfer": TransferConfig(backoff=0.01),
    }
    base.update(kw)
    return ResolveOptions(**base)  # type: ignore[arg-type]


def test_resolve_from_the_hub_gives_the_pinned_bytes(
    bundled: Catalog, sources: dict[str, Path], hub: HubDouble, tmp_path: Path
) -> None:
    cache = Cache(tmp_path / "cache")
    for name in ("all-minilm-l6-v2", "tiny-qwen2"):
        result = resolve(bundled, name, cache=cache, store=open_store(str(tmp_path / "empty")), options=options(hub))
        assert result.source.startswith("hf://")
        assert result.streamed == ()  # nothing can be streamed from the Hub: all local
        for entry in bundled.get(name).files:
            assert (result.path / entry.path).read_bytes() == (sources[name] / entry.path).read_bytes()


def test_a_file_changed_on_the_hub_is_refused(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    m = bundled.get("tiny-llama")
    hub.add_files(m.source.hf_repo, m.source.revision, {"config.json": b'{"rewritten": true}\n'})
    with pytest.raises(IntegrityError) as caught:
        resolve(
            bundled,
            "tiny-llama",
            cache=Cache(tmp_path / "cache"),
            store=open_store(str(tmp_path / "s")),
            options=options(hub),
        )
    assert caught.value.path == "config.json"


def test_429_with_retry_after_is_waited_out(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    hub.fail(429, times=2, retry_after=0.5, path_contains="model.safetensors")
    started = time.monotonic()
    result = resolve(
        bundled,
        "tiny-llama",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "s")),
        options=options(hub),
    )
    assert time.monotonic() - started >= 1.0  # two waits of the 0.5 s the server asked for
    assert (result.path / "model.safetensors").is_file()
    m = bundled.get("tiny-llama")
    assert hub.requests[f"GET /{m.source.hf_repo}/resolve/{m.source.revision}/model.safetensors"] == 3


def test_a_truncated_body_resumes_with_a_range_request(
    bundled: Catalog, sources: dict[str, Path], hub: HubDouble, tmp_path: Path
) -> None:
    hub.truncate("model.safetensors", after_bytes=50_000)
    result = resolve(
        bundled,
        "tiny-llama",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "s")),
        options=options(hub),
    )
    assert (result.path / "model.safetensors").read_bytes() == (
        sources["tiny-llama"] / "model.safetensors"
    ).read_bytes()
    m = bundled.get("tiny-llama")
    assert hub.requests[f"GET /{m.source.hf_repo}/resolve/{m.source.revision}/model.safetensors"] == 2


def test_fallback_uses_the_hub_when_the_store_is_missing_and_pulls_streamed_weights(
    bundled: Catalog, sources: dict[str, Path], hub: HubDouble, tmp_path: Path
) -> None:
    result = resolve(
        bundled,
        "tiny-qwen2",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "empty")),
        options=options(hub, source=Source.FALLBACK),
    )
    assert result.source.startswith("hf://") and result.streamed == ()
    assert result.model == str(result.path) and (result.path / "model-00001-of-00002.safetensors").is_file()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests"), *args],
        capture_output=True,
        text=True,
        env=env,
    )


def test_ci_mode_without_bucket_access_fails_fast_and_never_touches_the_hub(hub: HubDouble, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}  # and HOME below: no ~/.s3cfg
    env |= {
        "CATALOG_MODE": "ci",
        "HF_ENDPOINT": hub.url,
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    started = time.monotonic()
    done = cli(env, "resolve", "tiny-llama")
    assert done.returncode == 1
    assert time.monotonic() - started < 20
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: no credentials for s3://vllm-ci-model-weights/")
    assert "AWS_ACCESS_KEY_ID" in done.stderr and "~/.s3cfg" in done.stderr  # every credential source tried is named
    assert hub.hub_requests() == 0


def test_dev_mode_falls_back_to_the_hub(hub: HubDouble, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CATALOG_MODE": "dev",
        "HF_ENDPOINT": hub.url,
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_STORE": str(tmp_path / "empty-store"),
    }
    done = cli(env, "resolve", "tiny-llama", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source"].startswith("hf://model-catalog/tiny-llama@")
    assert hub.hub_requests() > 0


def test_offline_mode_never_touches_anything(hub: HubDouble, tmp_path: Path) -> None:
    env = {**os.environ, "CATALOG_MODE": "offline", "HF_ENDPOINT": hub.url, "CATALOG_CACHE": str(tmp_path / "cache")}
    done = cli(env, "resolve", "tiny-llama")
    assert done.returncode == 1 and done.stderr.startswith("error: CATALOG_MODE=offline: ")
    assert hub.hub_requests() == 0
