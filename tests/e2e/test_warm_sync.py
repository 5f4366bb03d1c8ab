"""A sync that changes nothing is answered again by the warm path (catalog_app.warm_sync) after the same listing of
SeaweedFS, before click, pydantic or boto3 load, with exactly what the full CLI printed; anything its plan rests on
that moved (an object in the store, a manifest, a file added to the catalog, where the credentials come from) sends
the call to the full CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubdouble import HubDouble
from servers import ACCESS_KEY, SECRET_KEY, SeaweedServer

from catalog.lookup import Catalog
from catalog_app.warm_sync import parse_argv
from resolver.stores import S3Options, make_s3_client

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys, json, runpy\n"
    "sys.argv = ['catalog'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('catalog', run_name='__main__')\n    code = 0\nexcept SystemExit as e:\n    code = e.code or 0\n"
    "heavy = [m for m in ('pydantic', 'click', 'yaml', 'boto3', 'botocore') if m in sys.modules]\n"
    "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
)


def sync(env: dict[str, str], *args: str) -> tuple[str, str, dict[str, object]]:
    """(stdout, stderr without the probe's line, {code, heavy}) of `catalog sync ARGS` run as the console script runs."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "sync", *args], capture_output=True, text=True, env=env, timeout=300
    )
    *said, last = done.stderr.splitlines(keepends=True)
    return done.stdout, "".join(said), json.loads(last)


@pytest.fixture
def synced(hub: HubDouble, bucket: str, bundled: Catalog, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Every bundled model in the bucket, synced by this runner (its cache holds the sync states), from a catalog copy."""
    catalog_dir = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", catalog_dir)
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(catalog_dir),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_STORE": f"s3://{bucket}/",
    }
    _, err, first = sync(env)
    assert first["code"] == 0, err
    return env, catalog_dir


@pytest.mark.parametrize(
    "args", [(), ("--check",), ("--dry-run", "--format", "json"), ("tiny-llama", "--dry-run", "--format", "markdown")]
)
def test_a_sync_that_changes_nothing_is_answered_again_without_the_full_cli(
    synced: tuple[dict[str, str], Path], args: tuple[str, ...]
) -> None:
    env, _ = synced
    full_out, full_err, full = sync(env, *args)
    warm_out, warm_err, warm = sync(env, *args)
    assert full["code"] == warm["code"] == 0, full_err + warm_err
    assert "pydantic" in full["heavy"]  # the call that recorded ran the full CLI
    assert warm["heavy"] == []  # the second was answered before click, pydantic, yaml or boto3 loaded
    assert (warm_out, warm_err) == (full_out, full_err)
    assert "No changes" in warm_out or "no drift" in warm_out or '"action": "ok"' in warm_out


def test_an_object_rewritten_in_the_store_goes_to_the_full_cli(
    synced: tuple[dict[str, str], Path], s3_server: SeaweedServer, bucket: str, bundled: Catalog
) -> None:
    env, _ = synced
    sync(env, "--check")
    model = bundled.get("tiny-llama")
    entry = model.file("config.json")
    assert entry is not None
    client = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    client.put_object(
        Bucket=bucket, Key=bundled.store_key(model, entry.path), Body=b"x" * entry.size
    )  # same size, other bytes
    out, err, again = sync(env, "--check")
    assert again["code"] == 1 and "pydantic" in again["heavy"], err  # the full CLI saw the new ETag: drift
    assert "tiny-llama/config.json" in out


def test_a_changed_manifest_or_a_file_added_to_the_catalog_goes_to_the_full_cli(
    synced: tuple[dict[str, str], Path],
) -> None:
    env, catalog_dir = synced
    sync(env, "--check")
    assert sync(env, "--check")[2]["heavy"] == []
    manifest = catalog_dir / "tiny-llama.yaml"
    manifest.write_text(manifest.read_text() + "\n# a comment\n")
    changed = sync(env, "--check")[2]
    assert changed["code"] == 0 and "pydantic" in changed["heavy"]
    assert sync(env, "--check")[2]["heavy"] == []  # recorded again
    (catalog_dir / "more").mkdir()
    (catalog_dir / "more" / "notes.txt").write_text("not a manifest, but the catalog changed\n")
    assert "pydantic" in sync(env, "--check")[2]["heavy"]


def test_credentials_boto3_finds_are_never_answered_warm(synced: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, _ = synced
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    from_file = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    from_file["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials)
    for _ in range(2):
        _, err, run = sync(from_file, "--check")
        assert run["code"] == 0 and "boto3" in run["heavy"], err  # listed by the full CLI each time


def test_only_calls_that_cannot_change_a_no_op_plan_are_answered() -> None:
    assert parse_argv(["sync", "--check", "--format", "json", "tiny-llama"]) == {}
    assert parse_argv(["--catalog", "m", "sync", "--from-dir=d", "--cache", "c"]) == {
        "catalog_dir": "m",
        "from_dir": "d",
        "cache_dir": "c",
    }
    for refused in (
        ["sync", "--deep"],
        ["sync", "--out", "plan.json"],
        ["sync", "--apply", "p"],
        ["-v", "sync"],
        ["sync", "--replicate-to", "s3://b/"],
        ["sync", "--format"],
        ["resolve", "x"],
    ):
        assert parse_argv(refused) is None, refused


def test_a_store_that_stalls_sends_the_call_to_the_full_cli_after_a_short_wait(tmp_path: Path) -> None:
    """The warm path waits at most LIST_WAIT_SECONDS in silence; the full CLI then retries and says it is waiting."""
    import socket
    import time

    from catalog_app import warm_sync

    catalog_dir, cache = tmp_path / "manifests", tmp_path / "cache"
    catalog_dir.mkdir()
    with socket.socket() as stalled:  # accepts connections, never answers
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(8)
        argv = ["--catalog", str(catalog_dir), "sync", "--check", "--cache", str(cache)]
        env = {"HOME": str(tmp_path)}
        found = warm_sync._entry_path(argv, warm_sync.parse_argv(argv) or {}, env)
        assert found is not None
        entry = {
            "version": warm_sync.ENTRY_VERSION,
            "inputs": {},
            "catalog": found[1],
            "folders": warm_sync.folder_identities(found[1]),
            "listed": [["m/", "0" * 64]],
            "stdout": "",
            "stderr": "",
            "code": 0,
            "access": {
                "bucket": "b",
                "endpoint": f"http://127.0.0.1:{stalled.getsockname()[1]}",
                "addressing": "path",
                "region": "us-east-1",
                "connect_timeout": 60.0,
                "read_timeout": 60.0,
                "unsigned": True,
            },
        }
        Path(found[0]).parent.mkdir(parents=True)
        Path(found[0]).write_text(json.dumps(entry))
        started = time.monotonic()
        assert warm_sync.answer(argv, env) is None
        assert time.monotonic() - started < warm_sync.LIST_WAIT_SECONDS + 10  # not the recorded 60 s
