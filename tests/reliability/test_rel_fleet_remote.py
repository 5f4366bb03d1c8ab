"""Issue 19, the remote side of the fleet's edges: mirrors and endpoints that hang, trickle, ignore Range, send
absurd headers or would receive credentials; settings and URLs that crashed commands; catalog.yaml checked by
`validate`; and the README's defaults. Each test is a case that failed before its fix. The hostile servers are
real HTTP servers on loopback (tests/reliability/hostile_http.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import ACCESS_KEY, SECRET_KEY, SeaweedServer

import catalog
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.lock import lock_manifest
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

from .hostile_http import HostileHttp
from .support import BUNDLED, HubDouble, cli_env, explain, run_catalog, sha256_file

SECRET = "hunter2-marker"


@pytest.fixture
def store_dir(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(folder)))
    return folder


@pytest.fixture
def hostile() -> Iterator[HostileHttp]:
    server = HostileHttp()
    yield server
    server.close()


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(
        {"CATALOG_DIR": str(BUNDLED), "CATALOG_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home"), **extra}
    )


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


# -- 3. hangs ------------------------------------------------------------------------------------------------------
def test_a_mirror_asking_to_retry_in_a_day_is_skipped_at_once_and_said(
    store_dir: Path, tmp_path: Path, hostile: HostileHttp
) -> None:
    hostile.mode, hostile.status, hostile.headers = "status", 503, {"Retry-After": "100000"}
    done = run_catalog(
        ["resolve", "tiny-llama", "--store", str(store_dir), "--mirror", f"{hostile.url}/m/", "--format", "json"],
        env_for(tmp_path),
        timeout=120,
    )  # the guard against a 28-hour sleep, not a speed target
    assert done.returncode == 0, explain(done)
    assert "asked to retry in 100000s" in done.stderr
    assert set(json.loads(done.stdout)["sources"].values()) == {f"{store_dir.resolve().as_uri()}/"}


@pytest.mark.parametrize("value", ["9" * 30, "\u00b2", "1e400", "Fri, 31 Dec 9999 23:59:59 GMT", "nan"])
def test_absurd_retry_after_values_from_a_mirror_never_crash(
    store_dir: Path, tmp_path: Path, hostile: HostileHttp, value: str
) -> None:
    hostile.mode, hostile.status, hostile.headers = "status", 503, {"Retry-After": value}
    done = run_catalog(
        ["resolve", "tiny-llama", "--store", str(store_dir), "--mirror", f"{hostile.url}/m/"],
        env_for(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0 and "internal error" not in done.stderr, explain(done)


def test_a_trickling_mirror_is_abandoned_after_a_window_and_the_primary_serves(
    bundled: Catalog, store_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mirror_root = tmp_path / "mirror"
    shutil.copytree(store_dir, mirror_root)
    with HostileHttp(mirror_root, mode="trickle") as trickle:
        trickle.interval = 0.2  # 5 bytes a second: never a read timeout, never done
        config = TransferConfig(min_rate=1024, rate_window=1.0, backoff=0.01)
        options = ResolveOptions(transfer=config, mirrors=(open_store(f"{trickle.url}/"),))
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["result"] = resolve(
                    bundled,
                    "tiny-llama",
                    cache=Cache(tmp_path / "cache"),
                    store=open_store(str(store_dir)),
                    options=options,
                )
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome["error"] = exc

        with caplog.at_level("WARNING"):
            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            worker.join(120)  # a hang guard: before the fix this never ended
        assert not worker.is_alive(), "resolve is still waiting on a trickling mirror"
    assert "error" not in outcome, outcome
    result = outcome["result"]
    primary = f"{store_dir.resolve().as_uri()}/"
    assert set(result.sources.values()) == {primary}  # type: ignore[attr-defined]
    assert "below 1024 bytes/s; abandoning this request" in caplog.text


def test_a_mirror_that_ignores_range_is_read_once_per_file_not_once_per_part(tmp_path: Path) -> None:
    payload = hashlib.sha256(b"seed").digest() * (8 * 1024 * 1024 // 32)  # 8 MiB of weights
    config = b'{"model_type": "llama"}'
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "catalog.yaml").write_text(
        "store: s3://ci-bucket/\ndefault_gpu: cpu\ngpu_classes:\n  cpu: {memory_gib: 16}\n"
    )
    files = "".join(
        f"  - path: {p}\n    size: {len(d)}\n    sha256: {hashlib.sha256(d).hexdigest()}\n"
        for p, d in (("config.json", config), ("model.safetensors", payload))
    )
    (manifests / "big.yaml").write_text(
        f"name: big\nsource:\n  hf_repo: org/big\n  revision: {'a' * 40}\n"
        f"s3_prefix: s3://ci-bucket/big/\nload_format: safetensors\nfiles:\n{files}"
    )
    cat = catalog.load(manifests)
    mirror_root = tmp_path / "mirror" / "big"
    mirror_root.mkdir(parents=True)
    (mirror_root / "config.json").write_bytes(config)
    (mirror_root / "model.safetensors").write_bytes(payload)
    with HostileHttp(tmp_path / "mirror", mode="ignore-range") as mirror:
        options = ResolveOptions(
            transfer=TransferConfig(part_size=1024 * 1024, concurrency=4), mirrors=(open_store(f"{mirror.url}/"),)
        )
        result = resolve(
            cat, "big", cache=Cache(tmp_path / "cache"), store=open_store(str(tmp_path / "empty")), options=options
        )
        assert result.sources["model.safetensors"] == f"{mirror.url}/"
        assert sha256_file(result.path / "model.safetensors") == hashlib.sha256(payload).hexdigest()
        assert mirror.sent <= 2 * len(payload), mirror.sent  # parts re-reading from byte 0 would send 4.5 times it


def test_lock_waits_out_a_hub_503_on_the_listing_and_on_a_file(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    m = bundled.get("tiny-llama")
    hub = HubDouble()
    try:
        hub.add_repo(m.source.hf_repo, m.source.revision, sources["tiny-llama"])
        hub.fail(503, times=1, path_contains="/tree/", headers={"Retry-After": "1"})
        hub.fail(503, times=1, path_contains="/config.json", headers={"Retry-After": "1"})
        copy = tmp_path / "tiny-llama.yaml"
        shutil.copy(bundled.sources["tiny-llama"], copy)
        result = lock_manifest(m, copy, from_dir=None, hub=HubOptions(endpoint=hub.url), write=False)
        assert not result.changed
        assert hub.requests[f"GET /api/models/{m.source.hf_repo}/tree/{m.source.revision}"] == 2
        assert hub.requests[f"GET /{m.source.hf_repo}/resolve/{m.source.revision}/config.json"] == 2
    finally:
        hub.close()


def test_the_hubs_absurd_rate_limit_is_one_line(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    m = bundled.get("tiny-llama")
    hub = HubDouble()
    try:
        hub.add_repo(m.source.hf_repo, m.source.revision, sources["tiny-llama"])
        hub.fail(429, times=10, path_contains="/tree/", headers={"RateLimit": '"api";r=0;t=' + "9" * 25})
        done = run_catalog(["lock", "tiny-llama", "--check"], env_for(tmp_path, HF_ENDPOINT=hub.url), timeout=120)
    finally:
        hub.close()
    assert done.returncode == 1, explain(done)
    assert "resets in 1e+09s" in one_error_line(done.stderr)


# -- 4. crashes ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CATALOG_CONCURRENCY", "\u00b2"),
        ("CATALOG_CACHE_MAX_SIZE", "9" * 400),
        ("CATALOG_S3_READ_TIMEOUT", "9" * 30),
        ("CATALOG_S3_UNSIGNED", "maybe"),
    ],
)
@pytest.mark.parametrize("command", [["validate"], ["list"], ["gc", "--dry-run"], ["resolve", "tiny-llama"]])
def test_a_bad_setting_is_exit_2_and_one_line_for_every_command(
    tmp_path: Path, variable: str, value: str, command: list[str]
) -> None:
    done = run_catalog(command, env_for(tmp_path, **{variable: value}))
    assert done.returncode == 2, explain(done)
    assert variable in one_error_line(done.stderr)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/m/", "http://[::1/m/", "s3://bucket/?endpoint=http://h:70000"])
def test_mirror_urls_with_a_bad_port_or_bracket_are_usage_errors(store_dir: Path, tmp_path: Path, url: str) -> None:
    done = run_catalog(["resolve", "tiny-llama", "--store", str(store_dir), "--mirror", url], env_for(tmp_path))
    assert done.returncode == 2, explain(done)
    one_error_line(done.stderr)


# -- 5. leaks --------------------------------------------------------------------------------------------------------
def test_an_s3_mirror_on_another_endpoint_never_receives_the_primarys_credentials(
    store_dir: Path, tmp_path: Path, hostile: HostileHttp
) -> None:
    hostile.mode, hostile.status = "status", 404
    env = env_for(
        tmp_path,
        AWS_ACCESS_KEY_ID="AKIAPRIMARYMARKER",
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_SESSION_TOKEN="session-token-marker",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
    )
    done = run_catalog(
        ["resolve", "tiny-llama", "--store", str(store_dir), "--mirror", f"s3://mirror-bucket/?endpoint={hostile.url}"],
        env,
    )
    assert done.returncode == 0, explain(done)
    assert hostile.requests, "the mirror was never asked"
    for method, path, headers in hostile.requests:
        text = json.dumps(headers)
        assert "authorization" not in headers and "x-amz-security-token" not in headers, (method, path, headers)
        assert "AKIAPRIMARYMARKER" not in text and "session-token-marker" not in text


def test_a_mirror_signs_with_its_own_profile_when_given_one(
    store_dir: Path, tmp_path: Path, hostile: HostileHttp
) -> None:
    hostile.mode, hostile.status = "status", 404
    (tmp_path / "aws").mkdir()
    (tmp_path / "aws" / "config").write_text("[profile mirror]\nregion = us-east-1\n")
    (tmp_path / "aws" / "credentials").write_text(
        "[mirror]\naws_access_key_id = AKIAMIRRORKEY\naws_secret_access_key = s\n"
    )
    env = env_for(
        tmp_path,
        AWS_ACCESS_KEY_ID="AKIAPRIMARYMARKER",
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_CONFIG_FILE=str(tmp_path / "aws" / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws" / "credentials"),
    )
    done = run_catalog(
        [
            "resolve",
            "tiny-llama",
            "--store",
            str(store_dir),
            "--mirror",
            f"s3://mirror-bucket/?endpoint={hostile.url}&profile=mirror",
        ],
        env,
    )
    assert done.returncode == 0, explain(done)
    signed = [h.get("authorization", "") for _, _, h in hostile.requests]
    assert (
        signed
        and all("Credential=AKIAMIRRORKEY/" in a for a in signed)
        and "AKIAPRIMARYMARKER" not in json.dumps(signed)
    )


def test_a_mirror_on_the_primarys_own_endpoint_is_signed_and_works(
    bundled: Catalog, sources: dict[str, Path], s3_server: SeaweedServer, bucket: str, tmp_path: Path
) -> None:
    """The real identity of the S3 server proves the right keys went there: unsigned or wrong, it refuses."""
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(f"s3://{bucket}/"))
    env = env_for(
        tmp_path, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_ENDPOINT_URL=s3_server.url
    )
    empty = str(tmp_path / "empty-store")
    done = run_catalog(
        [
            "resolve",
            "tiny-llama",
            "--store",
            empty,
            "--mirror",
            f"s3://{bucket}/?endpoint={s3_server.url}",
            "--format",
            "json",
        ],
        env,
    )
    assert done.returncode == 0, explain(done)
    assert set(json.loads(done.stdout)["sources"].values()) == {f"s3://{bucket}/"}
    refused = run_catalog(
        ["resolve", "tiny-llama", "--store", empty, "--mirror", f"s3://{bucket}/?endpoint={s3_server.url}&unsigned=1"],
        {**env, "CATALOG_CACHE": str(tmp_path / "cache2")},
    )
    assert refused.returncode == 1, explain(refused)  # anonymous requests: refused by the server's identity check


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["--mirror", f"s3://user:{SECRET}@bucket/"], {}),
        (["--mirror", f"s3://bucket/?token={SECRET}"], {}),
        (["--mirror", f"s3://bucket/?endpoint=http://user:{SECRET}@127.0.0.1:9"], {}),
        (["--mirror", f"http://user:{SECRET}@127.0.0.1:9/m/"], {}),
        (["--store", f"s3://user:{SECRET}@bucket/"], {}),
        ([], {"AWS_ENDPOINT_URL": f"http://user:{SECRET}@127.0.0.1:9"}),
        ([], {"CATALOG_MIRRORS": f"s3://bucket/?secret={SECRET}"}),
    ],
)
def test_credentials_in_urls_are_never_echoed(
    store_dir: Path, tmp_path: Path, args: list[str], extra: dict[str, str]
) -> None:
    command = ["resolve", "tiny-llama", *(["--store", str(store_dir)] if "--store" not in args else []), *args]
    done = run_catalog(command, env_for(tmp_path, **extra))
    assert done.returncode == 2, explain(done)
    one_error_line(done.stderr)
    assert SECRET not in done.stdout + done.stderr


# -- 6. validate checks catalog.yaml ------------------------------------------------------------------------------------
def test_validate_checks_catalog_yamls_mirrors_and_store_at_their_lines(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(BUNDLED, manifests)
    settings = (manifests / "catalog.yaml").read_text()
    lines = settings.count("\n")
    (manifests / "catalog.yaml").write_text(
        settings + "mirrors:\n  - http://mirror.local:99999/m/\n"
        f"  - s3://copy/?endpoint=http://u:{SECRET}@h:9000\n  - s3://copy/?colour=blue\n"
        "  - file:///srv/fine/\n"
    )
    done = run_catalog(["validate"], env_for(tmp_path, CATALOG_DIR=str(manifests)))
    assert done.returncode == 1, explain(done)
    found = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("manifests/catalog.yaml:") or "catalog.yaml:" in line
    ]
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in found] == [
        str(lines + 2),
        str(lines + 3),
        str(lines + 4),
    ], found
    assert all("mirrors[" in line and "[mirror]" in line for line in found)
    assert SECRET not in done.stdout + done.stderr


# -- 8. the README's defaults ---------------------------------------------------------------------------------------------
def test_sync_deletes_at_most_ten_objects_unless_told(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(BUNDLED / "catalog.yaml", manifests)
    shutil.copy(bundled.sources["tiny-llama"], manifests)
    cat = catalog.load(manifests)
    folder = tmp_path / "store"
    upload_from_dir(cat, "tiny-llama", sources["tiny-llama"], open_store(str(folder)))
    prefix = folder / cat.store_key(cat.get("tiny-llama"))
    for i in range(11):
        (prefix / f"stray-{i:02d}.bin").write_bytes(b"x")
    env = env_for(tmp_path, CATALOG_DIR=str(manifests))
    refused = run_catalog(["sync", "tiny-llama", "--prune", "--store", str(folder)], env)
    assert refused.returncode == 2 and "more than --max-delete 10" in refused.stderr, explain(refused)
    assert len(list(prefix.glob("stray-*"))) == 11
    (prefix / "stray-10.bin").unlink()
    done = run_catalog(["sync", "tiny-llama", "--prune", "--store", str(folder)], env)
    assert done.returncode == 0, explain(done)
    assert list(prefix.glob("stray-*")) == []


def test_hermetic_home(tmp_path: Path) -> None:
    """The suite never reads the machine's own config: HOME and the AWS files point into the session's folders."""
    home = os.environ["HOME"]
    assert "catalog-tests-home-" in home and os.environ["AWS_CONFIG_FILE"].startswith(home)
    assert os.environ["AWS_SHARED_CREDENTIALS_FILE"].startswith(home) and not Path(home, ".s3cfg").exists()
    assert not [k for k in os.environ if k.startswith(("S3_", "CATALOG_"))]
