"""Integrity under abuse (second round), the sync side: corrupt cache blobs, edited plan files, manifests
behind symlinked folders, and a prune of thousands of objects.

Each test is a case that once went wrong (docs/reliability.md, "Abuse (second round)"): it failed before
its fix and passes now. They run the real CLI against the folder store and SeaweedFS.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import catalog
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.stores import Store, open_store
from resolver.stream_check import read_small, read_state

from .support import explain, run_catalog, s3_client, write_generated_catalog

CATALOG_BUCKET = "abuse-catalog"  # the bucket catalog.yaml names; CATALOG_STORE points the tests elsewhere
MiB = 1 << 20
PART = "5MiB"  # S3 refuses smaller parts (but the last)


def env_for(manifests: Path, store_url: str, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CATALOG_DIR": str(manifests),
        "CATALOG_STORE": store_url,
        "CATALOG_CACHE": str(cache),
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def object_sha256(store: Store, key: str) -> str:
    return hashlib.sha256(read_small(store, key)).hexdigest()


def flip_byte(path: Path, offset: int) -> None:
    mode = path.stat().st_mode
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    path.chmod(mode)


def synced_catalog(
    tmp_path: Path, store_url: str, models: int = 2, unit: int = 4096
) -> tuple[Path, Path, list[str], Catalog, dict[str, str]]:
    manifests, data, names = write_generated_catalog(tmp_path, CATALOG_BUCKET, models, files=3, unit=unit)
    env = env_for(manifests, store_url, tmp_path / "cache")
    first = run_catalog(["sync", "--from-dir", str(data), "--part-size", PART], env)
    assert first.returncode == 0, explain(first)
    return manifests, data, names, catalog.load(manifests), env


# -- case 2: a corrupt cached blob is never uploaded, nor recorded as verified ---------------------------
def test_a_blob_flipped_in_the_cache_is_not_uploaded_and_sync_heals_it(store_url: str, tmp_path: Path) -> None:
    """The 12 MiB weight goes multipart on S3 (5 MiB parts): the flipped byte sits in its second part."""
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url, models=1, unit=4 * MiB)
    m = cat.get(names[0])
    big = m.files[-1]
    assert big.size == 12 * MiB
    store = open_store(store_url)
    key = cat.store_key(m, big.path)
    store.delete(key)
    flip_byte(Cache(tmp_path / "cache").blob_path(big.sha256), 7 * MiB)

    done = run_catalog(["sync", "--from-dir", str(data), "--part-size", PART], env)
    assert done.returncode == 0, explain(done)
    assert object_sha256(store, key) == big.sha256  # the corrupt blob was dropped and fetched again, verified
    assert "corrupt" in done.stderr
    deep = run_catalog(["sync", "--check", "--deep"], env)
    assert deep.returncode == 0, explain(deep)


def test_a_corrupt_blob_with_no_good_source_fails_and_records_nothing(store_url: str, tmp_path: Path) -> None:
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url, models=1, unit=4 * MiB)
    m = cat.get(names[0])
    big = m.files[-1]
    store = open_store(store_url)
    key = cat.store_key(m, big.path)
    recorded_before = read_state(store, m.name)[big.path]
    store.delete(key)
    flip_byte(Cache(tmp_path / "cache").blob_path(big.sha256), 7 * MiB)
    flip_byte(data / m.name / big.path, 10)  # the --from-dir copy is bad too

    done = run_catalog(["sync", "--from-dir", str(data), "--part-size", PART], env)
    assert done.returncode == 1, explain(done)
    assert f"{m.name}/{big.path}" in done.stderr and "Traceback" not in done.stderr
    assert store.head(key) is None  # nothing uploaded
    assert read_state(store, m.name)[big.path] == recorded_before  # and nothing recorded as verified
    check = run_catalog(["sync", "--check"], env)
    assert check.returncode == 1 and "upload" in check.stdout, explain(check)


# -- case 3: --apply recomputes every key and refuses a plan made from another catalog ------------------
def edit_plan(path: Path, action: str, new_key: str) -> None:
    plan = json.loads(path.read_text())
    (item,) = [i for i in plan["items"] if i["action"] == action]
    item["key"] = new_key
    path.write_text(json.dumps(plan))


def put_stray(tmp_path: Path, store: Store, key: str) -> None:
    """An object no manifest pins (what `--prune` plans to delete as an extra)."""
    stray = tmp_path / "stray.bin"
    stray.write_bytes(b"stray")
    store.put(key, stray)


def test_an_edited_extra_key_cannot_delete_another_models_pinned_weights(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    store = open_store(store_url)
    put_stray(tmp_path, store, cat.store_key(cat.get(names[0]), "stray.bin"))
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--prune", "--out", str(plan)], env).returncode == 0
    victim = cat.store_key(cat.get(names[1]), cat.get(names[1]).files[-1].path)
    edit_plan(plan, "extra", victim)

    done = run_catalog(["sync", "--apply", str(plan)], env)
    assert done.returncode == 2, explain(done)
    assert victim in done.stderr and "nothing was done" in done.stderr
    assert store.head(victim) is not None
    assert store.head(cat.store_key(cat.get(names[0]), "stray.bin")) is not None


def test_an_edited_upload_key_cannot_overwrite_another_models_file(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    store = open_store(store_url)
    mine, theirs = cat.store_key(cat.get(names[0]), "config.json"), cat.store_key(cat.get(names[1]), "config.json")
    before = read_small(store, theirs)
    store.delete(mine)
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--out", str(plan)], env).returncode == 0
    edit_plan(plan, "upload", theirs)

    done = run_catalog(["sync", "--apply", str(plan), "--from-dir", str(data)], env)
    assert done.returncode == 2, explain(done)
    assert theirs in done.stderr
    assert read_small(store, theirs) == before
    assert store.head(mine) is None


def test_a_plan_made_before_a_pr_pinned_an_extra_object_is_refused(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    store = open_store(store_url)
    stray = tmp_path / "extra.json"
    stray.write_bytes(b'{"extra": true}\n')
    key = cat.store_key(cat.get(names[0]), "extra.json")
    store.put(key, stray)
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--prune", "--out", str(plan)], env).returncode == 0
    # the PR merged after the plan was saved: extra.json is now pinned
    manifest = manifests / f"{names[0]}.yaml"
    sha = hashlib.sha256(stray.read_bytes()).hexdigest()
    manifest.write_text(
        manifest.read_text() + f"  - path: extra.json\n    size: {stray.stat().st_size}\n    sha256: {sha}\n"
    )
    assert run_catalog(["validate"], env).returncode == 0

    done = run_catalog(["sync", "--apply", str(plan)], env)
    assert done.returncode == 2, explain(done)
    assert "catalog changed" in done.stderr
    assert store.head(key) is not None


def test_an_unedited_plan_still_applies(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    store = open_store(store_url)
    put_stray(tmp_path, store, cat.store_key(cat.get(names[0]), "stray.bin"))
    store.delete(cat.store_key(cat.get(names[1]), "config.json"))
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--prune", "--out", str(plan)], env).returncode == 0
    done = run_catalog(["sync", "--apply", str(plan), "--from-dir", str(data)], env)
    assert done.returncode == 0, explain(done)
    assert run_catalog(["sync", "--check", "--prune"], env).returncode == 0


# -- case 4: a manifest behind a symlinked folder is never taken for an orphan --------------------------
def test_a_symlinked_manifest_folder_outside_the_catalog_is_refused_not_skipped(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    outside = tmp_path / "elsewhere" / "team"
    outside.mkdir(parents=True)
    shutil.move(str(manifests / f"{names[1]}.yaml"), outside / f"{names[1]}.yaml")
    (manifests / "team").symlink_to(outside, target_is_directory=True)

    checked = run_catalog(["validate"], env)
    assert checked.returncode == 1, explain(checked)
    assert "team" in checked.stdout + checked.stderr and "symlink" in checked.stdout + checked.stderr
    pruned = run_catalog(["sync", "--prune", "--delete-orphans", "--max-delete", "100"], env)
    assert pruned.returncode != 0, explain(pruned)
    m = cat.get(names[1])
    assert all(open_store(store_url).head(cat.store_key(m, e.path)) is not None for e in m.files)


def test_a_symlinked_manifest_folder_inside_the_catalog_is_followed_once(tmp_path: Path) -> None:
    store_url = str(tmp_path / "store")
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url)
    real = manifests / "zz-real"
    real.mkdir()
    shutil.move(str(manifests / f"{names[1]}.yaml"), real / f"{names[1]}.yaml")
    (manifests / "aa-link").symlink_to(real, target_is_directory=True)
    (real / "loop").symlink_to(manifests, target_is_directory=True)  # a loop must not hang

    checked = run_catalog(["validate"], env, timeout=60)
    assert checked.returncode == 0, explain(checked)
    pruned = run_catalog(["sync", "--prune", "--delete-orphans", "--check"], env, timeout=60)
    assert pruned.returncode == 0, explain(pruned)


# -- case 12: a large prune is batched ---------------------------------------------------------------
def test_pruning_thousands_of_objects_uses_batched_deletes(
    s3_server: Any, bucket: str, tmp_path: Path, long_run: bool
) -> None:
    count = 5_003 if long_run else 2_100
    store_url = f"s3://{bucket}/"
    manifests, data, names, cat, env = synced_catalog(tmp_path, store_url, models=1)
    client = s3_client(s3_server.url)
    prefix = cat.store_key(cat.get(names[0]))
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(lambda i: client.put_object(Bucket=bucket, Key=f"{prefix}extra/{i:05d}", Body=b"x"), range(count))
        )

    done = run_catalog(["sync", "--prune", "--max-delete", str(count), "--format", "json"], env)
    assert done.returncode == 0, explain(done)
    report = json.loads(done.stdout)
    assert len(report["deleted"]) == count
    assert report["requests"].get("DeleteObjects") == -(-count // 1000)
    assert "DeleteObject" not in report["requests"]
    assert run_catalog(["sync", "--check", "--prune"], env).returncode == 0
