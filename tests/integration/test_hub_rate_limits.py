"""The Hub's rate limits: `RateLimit: "api";r=0;t=N` (and `Retry-After`) say when to come back. A near reset
is waited out; a far one fails at once, naming when to retry, instead of holding a CI job for minutes."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hubdouble import HubDouble

from catalog.errors import StoreUnavailableError
from catalog.lookup import Catalog
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.hub import HubOptions, RateLimitedError, list_repo_files, parse_rate_limit, retry_delay
from resolver.lock import lock_manifest
from resolver.resolve import ResolveOptions, Source, resolve
from resolver.stores import open_store
from resolver.transfer import TransferConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    m = bundled.get("tiny-llama")
    double.add_repo(m.source.hf_repo, m.source.revision, sources["tiny-llama"])
    yield double
    double.close()


def options(hub: HubDouble) -> ResolveOptions:
    return ResolveOptions(source=Source.HF, hub=HubOptions(endpoint=hub.url), transfer=TransferConfig(backoff=0.01))


# -- pure: the headers ----------------------------------------------------------------------------------
def test_the_hubs_ratelimit_headers_are_read() -> None:
    limit = parse_rate_limit({"RateLimit": '"api";r=0;t=2', "RateLimit-Policy": '"fixed window";"api";q=1000;w=300'})
    assert (limit.reset, limit.policy, limit.remaining, limit.quota, limit.window) == (2.0, "api", 0, 1000, 300)
    # several limits: the spent one is the one that bit
    both = parse_rate_limit({"ratelimit": '"resolvers";r=12;t=40, "api";r=0;t=7'})
    assert (both.policy, both.reset) == ("api", 7.0)
    # Retry-After wins, in seconds or as an HTTP date
    assert parse_rate_limit({"Retry-After": "5", "RateLimit": '"api";r=0;t=2'}).reset == 5.0
    assert parse_rate_limit({"Retry-After": "Thu, 01 Jan 1970 00:01:40 GMT"}, now=40.0).reset == 60.0
    assert parse_rate_limit({}).reset is None
    assert parse_rate_limit({"RateLimit": "garbage"}).reset is None


def test_a_far_reset_fails_at_once_naming_when() -> None:
    assert retry_delay("x", 429, {"RateLimit": '"api";r=0;t=2'}, max_wait=60) == 2.0
    with pytest.raises(RateLimitedError) as caught:
        retry_delay(
            "listing org/m",
            429,
            {"RateLimit": '"api";r=0;t=900', "RateLimit-Policy": '"api";q=1000;w=300'},
            max_wait=60,
        )
    err = caught.value
    assert err.reset == 900 and not err.transient
    assert "'api' rate limit (1000 requests per 300s) resets in 900s" in str(err)
    assert err.retry_at.strftime("%Y-%m-%dT%H:%M") in str(err)
    assert err.hint is not None and "CATALOG_HUB_MAX_WAIT=901" in err.hint


def test_the_bound_is_a_setting() -> None:
    assert HubOptions.from_settings(Settings.build({})).max_wait == 60
    assert HubOptions.from_settings(Settings.build({"CATALOG_HUB_MAX_WAIT": "900"})).max_wait == 900
    with pytest.raises(ValueError):
        Settings.build({"CATALOG_HUB_MAX_WAIT": "soon"})


# -- against the Hub double -------------------------------------------------------------------------------
def test_lock_waits_out_a_two_second_reset_on_the_listing(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    m = bundled.get("tiny-llama")
    copy = tmp_path / "tiny-llama.yaml"
    shutil.copy(bundled.sources["tiny-llama"], copy)
    hub.rate_limit(reset=2, path_contains="/tree/")
    started = time.monotonic()
    result = lock_manifest(m, copy, from_dir=None, hub=HubOptions(endpoint=hub.url), write=False)
    assert time.monotonic() - started >= 2.0
    assert not result.changed
    assert hub.requests[f"GET /api/models/{m.source.hf_repo}/tree/{m.source.revision}"] == 2


def test_lock_fails_at_once_on_a_fifteen_minute_reset(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    m = bundled.get("tiny-llama")
    hub.rate_limit(reset=900, path_contains="/tree/")
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as caught:
        lock_manifest(m, bundled.sources["tiny-llama"], from_dir=None, hub=HubOptions(endpoint=hub.url), write=False)
    assert time.monotonic() - started < 5.0
    assert "resets in 900s" in str(caught.value) and m.source.hf_repo in str(caught.value)
    assert caught.value.retry_at > datetime.now(timezone.utc)
    assert hub.requests[f"GET /api/models/{m.source.hf_repo}/tree/{m.source.revision}"] == 1  # asked once, not retried


def test_resolve_waits_out_a_two_second_reset_on_a_download(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    hub.rate_limit(reset=2, path_contains="model.safetensors")
    started = time.monotonic()
    result = resolve(
        bundled,
        "tiny-llama",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "s")),
        options=options(hub),
    )
    assert time.monotonic() - started >= 2.0
    assert (result.path / "model.safetensors").is_file()


def test_resolve_fails_at_once_on_a_fifteen_minute_reset(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    hub.rate_limit(reset=900, times=10, path_contains="model.safetensors")
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as caught:
        resolve(
            bundled,
            "tiny-llama",
            cache=Cache(tmp_path / "cache"),
            store=open_store(str(tmp_path / "s")),
            options=options(hub),
        )
    assert time.monotonic() - started < 5.0
    assert "resets in 900s" in str(caught.value) and "model.safetensors" in str(caught.value)
    m = bundled.get("tiny-llama")
    assert hub.requests[f"GET /{m.source.hf_repo}/resolve/{m.source.revision}/model.safetensors"] == 1


def test_the_cli_names_the_reset_and_exits_1(bundled: Catalog, hub: HubDouble, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    hub.rate_limit(reset=900, times=10)
    env = {**os.environ, "HF_ENDPOINT": hub.url, "CATALOG_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests"), "lock", "tiny-llama", "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "resets in 900s" in done.stderr and "CATALOG_HUB_MAX_WAIT" in done.stderr


# -- hints that say what to do (issue 32) -----------------------------------------------------------------
def test_a_hint_never_names_a_wait_the_setting_refuses() -> None:
    """Before: a reset of a billion seconds said `set CATALOG_HUB_MAX_WAIT=1000000001`, which the parser refuses."""
    from catalog import envparse

    for headers in ({"Retry-After": "9" * 30}, {"RateLimit": '"api";r=0;t=' + "9" * 30}, {"Retry-After": "900"}):
        with pytest.raises(RateLimitedError) as caught:
            retry_delay("listing org/m", 429, headers, max_wait=60)
        named = re.findall(r"CATALOG_HUB_MAX_WAIT=(\S+?)\b", caught.value.hint or "")
        for value in named:  # whatever a hint names, the setting takes
            envparse.whole(value, "CATALOG_HUB_MAX_WAIT", maximum=envparse.MAX_SECONDS)
        assert named or "longer than any wait" in (caught.value.hint or "")


def test_a_rate_limit_or_an_outage_is_not_said_to_be_a_wrong_repo_id(bundled: Catalog, hub: HubDouble) -> None:
    """Before: a 429 with `Retry-After: inf` (no readable time) said "check the repo id"."""
    m = bundled.get("tiny-llama")
    for status in (429, 503):
        hub.fail(status, times=1, headers={"Retry-After": "inf"}, path_contains="/tree/")
        with pytest.raises(StoreUnavailableError) as caught:
            list_repo_files(m.source.hf_repo, m.source.revision, HubOptions(endpoint=hub.url, attempts=1))
        assert "repo id" not in (caught.value.hint or "") and "retry later" in (caught.value.hint or ""), (
            caught.value.hint
        )


def test_a_hub_download_that_keeps_failing_names_the_hub_not_the_store(
    bundled: Catalog, hub: HubDouble, tmp_path: Path
) -> None:
    """Before: `resolve --source hf` giving up said "check --store / AWS_ENDPOINT_URL"."""
    hub.fail(503, times=100, retry_after=0, path_contains="/resolve/")
    config = ResolveOptions(
        source=Source.HF, hub=HubOptions(endpoint=hub.url), transfer=TransferConfig(backoff=0.01, attempts=2)
    )
    with pytest.raises(StoreUnavailableError) as caught:
        resolve(
            bundled,
            "tiny-llama",
            cache=Cache(tmp_path / "cache"),
            store=open_store(str(tmp_path / "s")),
            options=config,
        )
    assert "AWS_ENDPOINT_URL" not in (caught.value.hint or "") and "the Hub" in (caught.value.hint or ""), (
        caught.value.hint
    )
