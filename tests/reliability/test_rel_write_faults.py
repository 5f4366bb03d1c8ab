"""Faults during writes: `catalog resolve` and `catalog sync` killed (SIGKILL) at random points, a disk
that fills up, and what a killed writer leaves at each write site.

A SIGKILL runs no cleanup: whatever the cache or the bucket holds afterwards is what every later
process must cope with. After each kill: `verify --deep` is clean, every blob hashes to its name, and
no partial object is visible in the bucket; at the end a rerun succeeds with the right bytes and
`catalog gc` leaves no temp file.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.hf_layout import hf_repo_folder
from resolver.stores import LocalStore, open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout, ViewSpec

from .support import (
    BUNDLED,
    FaultProxy,
    blob_mismatches,
    bucket_objects,
    catalog_cmd,
    check_view_files,
    cli_env,
    explain,
    leftover_temps,
    parse_json_results,
    run_catalog,
    s3_client,
)

MINILM = "all-minilm-l6-v2"
WEIGHTS = "model.safetensors"


def evict(cache_dir: Path, sha256: str) -> None:
    """Make the next resolve cold for one blob, as an eviction would: the blob and every view go."""
    (cache_dir / "blobs" / sha256[:2] / sha256).unlink(missing_ok=True)
    for folder in ("models", "markers", "hub"):
        shutil.rmtree(cache_dir / folder, ignore_errors=True)


def test_resolve_killed_at_random_points_leaves_a_cache_that_verifies_and_recovers(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server,
    bucket: str,
    tmp_path: Path,
    rng,
    long_run: bool,  # type: ignore[no-untyped-def]
) -> None:
    url = f"s3://{bucket}/"
    upload_from_dir(bundled, MINILM, sources[MINILM], open_store(url))
    cache_dir = tmp_path / "cache"
    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": url,
            "CATALOG_CACHE": str(cache_dir),
            "HOME": str(tmp_path / "home"),
        }
    )
    big = bundled.get(MINILM).file(WEIGHTS)
    assert big is not None
    rounds = 40 if long_run else 10
    # Calibrate: one cold resolve, not killed, gives the span a kill is drawn from (start-up included).
    evict(cache_dir, big.sha256)
    started = time.monotonic()
    calibration = run_catalog(["resolve", MINILM, "--part-size", "8MiB", "--concurrency", "2"], env)
    span = time.monotonic() - started
    assert calibration.returncode == 0, explain(calibration)
    killed = mid_download = 0
    for round_ in range(rounds):
        evict(cache_dir, big.sha256)
        proc = subprocess.Popen(
            catalog_cmd("resolve", MINILM, "--part-size", "8MiB", "--concurrency", "2"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        launched = time.monotonic()
        timeout = rng.uniform(0.15, 0.95) * span
        if round_ % 2:
            # Every other round waits for this process's download to be in flight, then kills it a moment later: on a
            # busy machine start-up time varies more than the download takes, and a kill drawn from the calibrated
            # span alone may never land inside the download.
            while proc.poll() is None and not any((cache_dir / "tmp").glob(f"{proc.pid}-*.part")):
                time.sleep(0.005)
            timeout = rng.uniform(0.0, 0.05)
        try:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"round {round_}: an unkilled resolve failed:\n{err}"
        except subprocess.TimeoutExpired:
            in_flight = any((cache_dir / "tmp").glob(f"{proc.pid}-*.part"))  # its own download, not debris
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            killed += 1
            mid_download += in_flight
        verified = run_catalog(["verify", "--deep"], env)
        assert verified.returncode == 0, (
            f"round {round_} (killed after {time.monotonic() - launched:.2f}s): {explain(verified)}"
        )
        assert blob_mismatches(cache_dir) == [], f"round {round_}"
    print(f"resolve kill loop: {rounds} rounds, {killed} killed, {mid_download} of them mid-download")
    assert mid_download >= max(1, rounds // 3), (
        f"only {mid_download} of {rounds} kills landed mid-download ({killed} kills)"
    )

    rerun = run_catalog(["resolve", MINILM, "--format", "json"], env)
    assert rerun.returncode == 0, explain(rerun)
    assert check_view_files(parse_json_results(rerun.stdout)[0], bundled.get(MINILM)) == []
    collected = run_catalog(["gc"], env)
    assert collected.returncode == 0, explain(collected)
    assert leftover_temps(cache_dir) == []
    assert run_catalog(["verify", "--deep"], env).returncode == 0
    assert blob_mismatches(cache_dir) == []


def test_sync_killed_mid_upload_shows_no_partial_object_and_a_rerun_is_clean(
    bundled: Catalog,
    hub,
    s3_server,
    bucket: str,
    tmp_path: Path,
    rng,
    long_run: bool,  # type: ignore[no-untyped-def]
) -> None:
    manifest = bundled.get(MINILM)
    prefix = bundled.store_key(manifest)
    pins = {prefix + f.path: f for f in manifest.files}
    key = prefix + WEIGHTS
    cache_dir = tmp_path / "cache"
    base = {
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(BUNDLED),
        "CATALOG_CACHE": str(cache_dir),
        "CATALOG_STORE": f"s3://{bucket}/",
        "HOME": str(tmp_path / "home"),
    }
    client = s3_client(s3_server.url)
    rounds = 8 if long_run else 3
    killed_mid_upload = 0
    for round_ in range(rounds):
        proxy = FaultProxy(s3_server.port)
        try:
            proc = subprocess.Popen(
                catalog_cmd("sync", MINILM, "--part-size", "8MiB", "--concurrency", "2"),
                env=cli_env({**base, "AWS_ENDPOINT_URL": proxy.url}),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            parts = rng.randint(1, 10)  # 90 MB in 8 MiB parts: 11 parts
            deadline = time.monotonic() + 120
            while (
                proxy.requests[f"PUT /{bucket}/{key}"] < parts and proc.poll() is None and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed_mid_upload += 1
            _, err = proc.communicate(timeout=60)
        finally:
            proxy.close()
        objects = bucket_objects(s3_server.url, bucket, prefix)
        for name, size in objects.items():  # whatever is visible is whole and carries its pin
            assert name in pins and size == pins[name].size, (
                f"round {round_}: partial or stray object {name} ({size} bytes)"
            )
            head = client.head_object(Bucket=bucket, Key=name)
            assert head["Metadata"].get("sha256") == pins[name].sha256, f"round {round_}: {name}"
        assert blob_mismatches(cache_dir) == []
        if key in objects:  # it completed before the kill: take it away so the next round uploads again
            client.delete_object(Bucket=bucket, Key=key)
    print(f"sync kill loop: {rounds} rounds, {killed_mid_upload} killed mid-upload")
    assert killed_mid_upload >= 1

    rerun = run_catalog(["sync", MINILM, "--part-size", "8MiB"], cli_env(base))
    assert rerun.returncode == 0, explain(rerun)
    deep = run_catalog(["sync", MINILM, "--check", "--deep"], cli_env(base))
    assert deep.returncode == 0, explain(deep)
    assert bucket_objects(s3_server.url, bucket, prefix) == {k: f.size for k, f in pins.items()}


def limit_file_size(limit: int):  # type: ignore[no-untyped-def]
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead

    return preexec


# A write that crosses the limit is short and only the next one fails (EFBIG). The first case's odd limit
# falls inside a network read of a file cut into parts; in the second the file's last write is the short one,
# so no later write fails and only the written length can tell.
@pytest.mark.parametrize("limit_below_weights, part_size", [(None, "8MiB"), (100, "1GiB")], ids=["parts", "last-write"])
def test_a_full_disk_is_a_one_line_cache_error_and_leaves_nothing_partial(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server,
    bucket: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    limit_below_weights: int | None,
    part_size: str,
) -> None:
    url = f"s3://{bucket}/"
    upload_from_dir(bundled, MINILM, sources[MINILM], open_store(url))
    cache_dir = tmp_path / "cache"
    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": url,
            "CATALOG_CACHE": str(cache_dir),
            "HOME": str(tmp_path / "home"),
        }
    )
    started = time.monotonic()
    big = bundled.get(MINILM).file(WEIGHTS)
    assert big is not None
    limit = (1 << 20) + 12345 if limit_below_weights is None else big.size - limit_below_weights
    done = run_catalog(
        ["resolve", MINILM, "--part-size", part_size, "--concurrency", "2"], env, preexec_fn=limit_file_size(limit)
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, explain(done)
    assert "Traceback" not in done.stderr, explain(done)
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, explain(done)
    assert str(Cache(cache_dir).root) in errors[0], f"the error does not name the cache: {errors[0]}"
    assert "giving up" not in errors[0] and url not in errors[0], (
        f"a local write failure blamed on the store: {errors[0]}"
    )
    hints = [line for line in done.stderr.splitlines() if line.startswith("hint:")]
    assert hints and "ulimit -f" in hints[0], explain(done)  # the hint fits the cause (EFBIG), not a generic one
    assert elapsed < 30, f"a full disk was retried like a flaky network ({elapsed:.0f}s)"
    assert not (cache_dir / "blobs" / big.sha256[:2] / big.sha256).exists()
    assert blob_mismatches(cache_dir) == []
    assert leftover_temps(cache_dir) == [], "the failed download's temp file was left behind"
    again = run_catalog(["resolve", MINILM, "--format", "json"], env)  # room again: it resolves
    assert again.returncode == 0, explain(again)
    assert check_view_files(parse_json_results(again.stdout)[0], bundled.get(MINILM)) == []


# -- what a killed writer leaves, site by site -------------------------------------------------------------
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def plant_debris(bundled: Catalog, cache: Cache, pid: int) -> list[Path]:
    """At every place the cache code writes under a temporary name, what a SIGKILL at that moment leaves
    (names as resolver/cache.py makes them: `<pid>-<hex>.part`, `.<name>.<pid>-<hex>`, `.trash-...`)."""
    manifest = bundled.get("tiny-llama")
    token = secrets.token_hex(4)
    dir_spec = ViewSpec(manifest.name, manifest.source.hf_repo, manifest.source.revision, Layout.DIR, manifest.files)
    view = cache.view_dir(dir_spec)
    repo = cache.hub / hf_repo_folder(manifest.source.hf_repo)
    sha = manifest.files[0].sha256
    planted = {
        cache.tmp / f"{pid}-{secrets.token_hex(6)}.part": "file",  # a download in flight
        view.parent / f".{dir_spec.view_id}.{pid}-{token}": "dir",  # a view being staged
        view.parent / f".trash-{dir_spec.view_id}.{pid}-{token}": "dir",  # an old view being swapped out
        cache.marker_path(dir_spec).parent
        / f".{cache.marker_path(dir_spec).name}.{pid}-{token}": "file",  # atomic_write
        repo / "blobs" / f".{sha}.{pid}-{token}": "file",  # an hf-cache blob being linked in
        repo / "refs" / f".main.{pid}-{token}": "file",  # atomic_write of refs/main
        repo / "snapshots" / manifest.source.revision / f".config.json.{pid}-{token}": "link",  # a staged symlink
    }
    for path, kind in planted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir":
            path.mkdir()
            (path / "config.json").write_text("{}")
        elif kind == "link":
            path.symlink_to(os.path.relpath(repo / "blobs" / sha, path.parent))
        else:
            path.write_text("partial")
    return list(planted)


def resolved_cache(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> tuple[Cache, dict[str, str]]:
    store = tmp_path / "store"
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], LocalStore(store))
    cache = Cache(tmp_path / "cache")
    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": str(store),
            "CATALOG_CACHE": str(cache.root),
            "HOME": str(tmp_path / "home"),
        }
    )
    for layout in ("dir", "hf-cache"):
        done = run_catalog(["resolve", "tiny-llama", "--layout", layout], env)
        assert done.returncode == 0, explain(done)
    return cache, env


def test_gc_removes_what_a_killed_writer_leaves_at_every_write_site(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    cache, env = resolved_cache(bundled, sources, tmp_path)
    planted = plant_debris(bundled, cache, dead_pid())
    collected = run_catalog(["gc"], env)
    assert collected.returncode == 0, explain(collected)
    left = [str(p.relative_to(cache.root)) for p in planted if p.exists() or p.is_symlink()]
    assert left == [], f"gc left a dead writer's temp files: {left}"
    assert leftover_temps(cache.root) == []
    assert run_catalog(["verify", "--deep"], env).returncode == 0


def test_gc_keeps_the_in_flight_files_of_a_live_writer(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """The same names owned by a running process (this one) are in flight: gc must not pull them away
    (a resolve would then fail renaming its staged file into place)."""
    cache, env = resolved_cache(bundled, sources, tmp_path)
    planted = plant_debris(bundled, cache, os.getpid())
    collected = run_catalog(["gc"], env)
    assert collected.returncode == 0, explain(collected)
    gone = [str(p.relative_to(cache.root)) for p in planted if not (p.exists() or p.is_symlink())]
    assert gone == [], f"gc removed a live writer's in-flight files: {gone}"


def test_a_blob_rewritten_in_place_is_caught_by_verify_and_every_layout_refetches_it(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """The checks the kill loops rely on can fail: a blob whose bytes change in place (same inode, size
    and mtime: what a torn write or a bad disk does) makes `verify --deep` exit 1, and the next resolve
    of each layout (dir and hf-cache, which share the inode) serves the pinned bytes again."""
    cache, env = resolved_cache(bundled, sources, tmp_path)
    entry = bundled.get("tiny-llama").file(WEIGHTS)
    assert entry is not None
    blob = cache.blob_path(entry.sha256)
    before = blob.stat()
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as f:
        f.seek(100)
        original = f.read(1)
        f.seek(100)
        f.write(bytes([original[0] ^ 0xFF]))
    os.chmod(blob, 0o444)
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert blob_mismatches(cache.root) != []
    verified = run_catalog(["verify", "--deep"], env)
    assert verified.returncode == 1 and "tiny-llama/model.safetensors" in verified.stdout, explain(verified)
    for layout in ("dir", "hf-cache"):
        fixed = run_catalog(["resolve", "tiny-llama", "--layout", layout, "--format", "json"], env)
        assert fixed.returncode == 0, explain(fixed)
        assert check_view_files(json.loads(fixed.stdout), bundled.get("tiny-llama")) == [], f"--layout {layout}"
    assert blob_mismatches(cache.root) == []
    assert run_catalog(["verify", "--deep"], env).returncode == 0
