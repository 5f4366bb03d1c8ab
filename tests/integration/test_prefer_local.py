"""--prefer local (the default): a streamed format whose weights are all verified in the cache or a shared tier is
handed out as its local folder, with no request to the store; --prefer stream keeps the stream URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.publish import publish
from resolver.resolution import engine_args
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir

NAMES = ("tiny-qwen2", "tiny-llama-tensorizer")


@pytest.fixture
def store_url(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> str:
    url = str(tmp_path / "store")
    for name in NAMES:
        upload_from_dir(bundled, name, sources[name], open_store(url))
    return url


@pytest.mark.parametrize("name", NAMES)
def test_weights_at_hand_are_handed_out_locally_without_a_store_request(
    bundled: Catalog, store_url: str, tmp_path: Path, name: str
) -> None:
    cache = Cache(tmp_path / "cache")
    first = resolve(bundled, name, cache=cache, store=open_store(store_url))
    assert first.weights_uri is not None and first.streamed  # nothing at hand yet: it streams
    resolve(bundled, name, cache=cache, store=open_store(store_url), options=ResolveOptions(materialize_weights=True))
    store = open_store(store_url)  # a fresh store: its request counter starts at zero
    again = resolve(bundled, name, cache=cache, store=store)
    assert sum(store.requests.values()) == 0
    assert again.weights_uri is None and again.streamed == () and again.source == "cache"
    weights = [f.path for f in bundled.get(name).weight_files]
    assert all((again.path / w).is_file() for w in weights)
    args = engine_args(again)
    assert args[args.index("--model") + 1] == str(again.path)
    assert (
        args[args.index("--load-format") + 1] == bundled.get(name).load_format.value
    )  # the streamer reads local files
    streamed = resolve(bundled, name, cache=cache, store=open_store(store_url), options=ResolveOptions(prefer="stream"))
    assert streamed.weights_uri == first.weights_uri and streamed.streamed == first.streamed


def test_a_shared_tier_holding_the_weights_makes_the_answer_local(
    bundled: Catalog, store_url: str, tmp_path: Path
) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-qwen2"], open_store(store_url), tier)
    store = open_store(store_url)
    answer = resolve(
        bundled, "tiny-qwen2", cache=Cache(tmp_path / "cache"), store=store, options=ResolveOptions(tiers=(tier,))
    )
    assert answer.weights_uri is None and set(answer.sources.values()) == {f"tier:{tier}"}
    assert sum(store.requests.values()) == 0


def test_some_weights_missing_still_streams(bundled: Catalog, store_url: str, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    resolve(
        bundled,
        "tiny-qwen2",
        cache=cache,
        store=open_store(store_url),
        options=ResolveOptions(materialize_weights=True),
    )
    shard = bundled.get("tiny-qwen2").weight_files[0]
    cache.blob_path(shard.sha256).unlink()
    answer = resolve(bundled, "tiny-qwen2", cache=cache, store=open_store(store_url))
    assert answer.weights_uri is not None and shard.path in answer.streamed


def test_the_warm_index_never_answers_stream_once_the_weights_are_at_hand(
    bundled: Catalog, store_url: str, tmp_path: Path
) -> None:
    """The first call's answer (a stream URI) is recorded for warm answers; once a materializing resolve has brought the
    weights, the same call answers with the local folder, as the full CLI would."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CATALOG_STORE": store_url, "CATALOG_CACHE": str(tmp_path / "cache")}

    def cli(*args: str) -> dict[str, object]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "catalog",
                "--catalog",
                str(root / "manifests"),
                "resolve",
                "tiny-qwen2",
                "--format",
                "json",
                *args,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    assert cli()["weights_uri"] is not None
    assert cli()["weights_uri"] is not None  # answered warm, still streaming: nothing is at hand
    cli("--materialize-weights")
    again = cli()
    assert again["weights_uri"] is None and again["streamed"] == []
    assert cli("--prefer", "stream")["weights_uri"] is not None
