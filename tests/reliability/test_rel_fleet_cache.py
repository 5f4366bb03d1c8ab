"""Issue 19, the local side of the fleet's edges: shared tiers, views, stream proofs, sync records, eviction and
publishing under deliberate abuse. Each test is a case that failed before its fix (docs/reliability.md, "Abuse
(fleet edges)"). Real components only: folder stores, real tier folders, the CLI as a user runs it, other users
and read-only mounts where it matters (as root here: setpriv to another uid, a read-only bind mount in a
private mount namespace)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import pytest

import catalog
from catalog.errors import CacheWriteError
from catalog.lookup import Catalog
from resolver import capacity
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.maintenance import verify
from resolver.publish import publish
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, open_store
from resolver.sync import Action, SourceOfBytes, apply, make_plan
from resolver.tiers import Tier
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

from .support import BUNDLED, cli_env, explain, run_catalog, sha256_file

Usage = namedtuple("Usage", "total used free")
ROOT_USER = os.geteuid() == 0
OTHER_UID = 65534  # nobody: a user that owns nothing here


@pytest.fixture
def store_dir(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    store = open_store(str(folder))
    for name in ("tiny-llama", "tiny-qwen2", "tiny-llama-sharded"):
        upload_from_dir(bundled, name, sources[name], store)
    return folder


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return cli_env(
        {"CATALOG_DIR": str(BUNDLED), "CATALOG_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home"), **extra}
    )


def edit_in_place(path: Path) -> None:
    """Flip one byte through the same inode, then put the mode and the mtime back (`touch -r`): only ctime tells."""
    st = os.stat(path)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, st.st_mode & 0o7777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def largest(cat: Catalog, name: str):  # type: ignore[no-untyped-def]
    return max(cat.get(name).files, key=lambda e: e.size)


# -- 1. unverified bytes -------------------------------------------------------------------------------------------
def test_a_tier_blob_edited_with_its_mtime_put_back_is_hashed_again_not_relinked(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    store, cache = open_store(str(store_dir)), Cache(tmp_path / "cache")
    options = ResolveOptions(tiers=(tier,))
    resolve(bundled, "tiny-llama", cache=cache, store=store, options=options)
    victim = largest(bundled, "tiny-llama")
    edit_in_place(Tier(tier).blob_path(victim.sha256))  # the local blob is a hard link of it: edited too
    report = verify(bundled, cache, ["tiny-llama"], deep=True)
    assert any(victim.path in p for p in report.problems)  # --deep caught it and removed the local copy
    again = resolve(bundled, "tiny-llama", cache=cache, store=store, options=options)
    assert again.sources[victim.path] == store.url  # the edited tier blob was hashed, refused, and fetched instead
    assert sha256_file(again.path / victim.path) == victim.sha256
    assert verify(bundled, cache, ["tiny-llama"], deep=True).problems == []


def test_a_tier_blob_that_hashed_wrong_is_never_hashed_again_while_unchanged(
    bundled: Catalog, store_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    victim = largest(bundled, "tiny-llama")
    edit_in_place(Tier(tier).blob_path(victim.sha256))
    store, cache = open_store(str(store_dir)), Cache(tmp_path / "cache")
    with caplog.at_level("WARNING"):
        first = resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(tiers=(tier,)))
    assert first.sources[victim.path] == store.url and "hashes to" in caplog.text
    for folder in (cache.blobs, cache.models, cache.markers, cache.blob_stamps):  # the cache loses it; tier-checks stay
        shutil.rmtree(folder)
    caplog.clear()
    with caplog.at_level("WARNING"):
        second = resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(tiers=(tier,)))
    assert second.sources[victim.path] == store.url
    assert "hashes to" not in caplog.text and "hashed wrong here before" in caplog.text  # skipped by its identity


def test_the_folder_stores_etag_sees_a_same_size_rewrite_with_the_mtime_put_back(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    manifest = bundled.get("tiny-qwen2")
    weight = largest(bundled, "tiny-qwen2")
    edit_in_place(store_dir / bundled.store_key(manifest, weight.path))
    env = env_for(tmp_path)
    check = run_catalog(["sync", "tiny-qwen2", "--check", "--store", str(store_dir)], env)
    assert check.returncode == 1, explain(check)  # drift: the object is no longer the one sync verified
    streamed = run_catalog(["resolve", "tiny-qwen2", "--store", str(store_dir)], env)
    assert streamed.returncode == 1 and "rewritten since sync verified it" in streamed.stderr, explain(streamed)
    assert streamed.stdout == ""


def test_a_file_dropped_into_a_dir_view_with_the_folder_mtime_put_back_is_removed(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    store, cache = open_store(str(store_dir)), Cache(tmp_path / "cache")
    first = resolve(bundled, "tiny-llama", cache=cache, store=store)
    st = os.stat(first.path)
    (first.path / "modeling_llama.py").write_text("import os  # not pinned by anyone\n")
    os.utime(first.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(first.path).st_mtime_ns == st.st_mtime_ns
    again = resolve(bundled, "tiny-llama", cache=cache, store=store)
    assert not (again.path / "modeling_llama.py").exists()
    assert sorted(p.name for p in again.path.iterdir()) == sorted(e.path for e in bundled.get("tiny-llama").files)


def test_a_warm_stream_answer_rests_on_a_proof_of_bounded_age(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    """For the format's own streamer, which reads the URI unverified (the verified loader needs no proof: below)."""
    env = env_for(tmp_path, CATALOG_STORE=str(store_dir), CATALOG_ENGINE_LOADER="plain")
    cold = run_catalog(["resolve", "tiny-qwen2", "--format", "json"], env)
    assert cold.returncode == 0, explain(cold)
    assert json.loads(cold.stdout)["streamed"]
    [entry] = sorted((tmp_path / "cache" / "warm-index").glob("*.json"))
    weight = largest(bundled, "tiny-qwen2")
    other = tmp_path / "other"
    data = bytearray((store_dir / bundled.store_key(bundled.get("tiny-qwen2"), weight.path)).read_bytes())
    data[len(data) // 2] ^= 0xFF
    other.write_bytes(bytes(data))
    open_store(str(store_dir)).put(bundled.store_key(bundled.get("tiny-qwen2"), weight.path), other)  # replaced
    record = json.loads(entry.read_bytes())
    record["proved_at"] -= 301  # the default bound is 300 s: this proof is too old to answer from
    record["valid_until"] -= 301
    entry.write_text(json.dumps(record))
    stale = run_catalog(["resolve", "tiny-qwen2", "--format", "json"], env)
    assert stale.returncode == 1 and "rewritten since sync verified it" in stale.stderr, explain(stale)
    assert stale.stdout == ""


def test_a_warm_answer_for_the_verified_loader_needs_no_proof_of_the_objects(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    """`--load-format catalog`: the engine hashes every tensor itself, so a warm answer stays valid past the proof's
    age (and the object it names may change: the engine refuses the changed tensor, tests/integration/
    test_verified_load.py); a changed engine choice misses."""
    env = env_for(tmp_path, CATALOG_STORE=str(store_dir), CATALOG_ENGINE_LOADER="catalog")
    cold = run_catalog(["resolve", "tiny-qwen2", "--format", "vllm-args"], env)
    assert cold.returncode == 0 and "--load-format catalog" in cold.stdout, explain(cold)
    [entry] = sorted((tmp_path / "cache" / "warm-index").glob("*.json"))
    record = json.loads(entry.read_bytes())
    assert record["valid_until"] is None
    record["proved_at"] -= 3600
    entry.write_text(json.dumps(record))
    warm = run_catalog(["resolve", "tiny-qwen2", "--format", "vllm-args"], env)
    assert warm.returncode == 0 and warm.stdout == cold.stdout, explain(warm)
    plain = run_catalog(["resolve", "tiny-qwen2", "--format", "vllm-args"], {**env, "CATALOG_ENGINE_LOADER": "plain"})
    assert plain.returncode == 0 and "--load-format runai_streamer" in plain.stdout, explain(plain)


def test_offline_after_an_online_resolve_never_answers_a_stream_uri(store_dir: Path, tmp_path: Path) -> None:
    env = env_for(tmp_path, CATALOG_STORE=str(store_dir))
    online = run_catalog(["resolve", "tiny-qwen2", "--format", "json"], env)
    assert online.returncode == 0 and json.loads(online.stdout)["streamed"], explain(online)
    offline = run_catalog(["resolve", "tiny-qwen2", "--offline", "--format", "json"], env)
    assert offline.returncode == 1 and offline.stderr.startswith("error: --offline: "), explain(offline)
    assert offline.stdout == ""


class _ReplacedAfterRead(LocalStore):
    """A folder store with a concurrent writer: right after a GET of `victim` ends, the object is replaced by other
    bytes of the same size (a new file, so a new ETag)."""

    def __init__(self, root: Path, victim: str, other: bytes) -> None:
        super().__init__(root)
        self.victim, self.other, self.replaced = victim, other, False

    def open(self, key: str, start: int = 0, end: int | None = None):  # type: ignore[no-untyped-def]
        stream = super().open(key, start, end)
        if key != self.victim or self.replaced:
            return stream
        store, close = self, stream.close

        def close_then_replace() -> None:
            close()
            if not store.replaced:
                store.replaced = True
                temp = store.root / "replacement"
                temp.write_bytes(store.other)
                os.replace(temp, store.root / key)

        stream.close = close_then_replace  # type: ignore[method-assign]
        return stream


def test_sync_records_the_etag_of_the_get_it_hashed(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    manifest = bundled.get("tiny-llama")
    folder = tmp_path / "store"
    plain = open_store(str(folder))
    for entry in manifest.files:  # put there by another tool: nothing vouches for them yet
        plain.put(bundled.store_key(manifest, entry.path), sources["tiny-llama"] / entry.path)
    config = TransferConfig()
    plan = make_plan(bundled, ["tiny-llama"], plain, prune=False, delete_orphans=False, deep=False, config=config)
    assert {i.action for i in plan.items} == {Action.VERIFY}
    victim = largest(bundled, "tiny-llama")
    key = bundled.store_key(manifest, victim.path)
    data = bytearray((folder / key).read_bytes())
    data[0] ^= 0xFF
    racing = _ReplacedAfterRead(folder, key, bytes(data))
    source = SourceOfBytes(bundled, Cache(tmp_path / "cache"), HubOptions(), None, config)
    report = apply(plan, bundled, racing, source, max_delete=10, check_fresh=False, config=config)
    assert racing.replaced and not report.errors
    again = make_plan(
        bundled, ["tiny-llama"], open_store(str(folder)), prune=False, delete_orphans=False, deep=False, config=config
    )
    item = next(i for i in again.items if i.key == key)
    assert item.action is Action.VERIFY, item  # the bytes now there were never hashed: never recorded as verified


# -- 2. data lost ----------------------------------------------------------------------------------------------------
HOLDER = """
import os, sys, time
from pathlib import Path
import catalog
from resolver import capacity
from resolver.cache import Cache
cat = catalog.load(Path(sys.argv[1]))
cache = Cache(Path(sys.argv[2]))
held = capacity.active(cache, ["tiny-llama"], [f.sha256 for f in cat.get("tiny-llama").files])
held.__enter__()
if os.fork() == 0:  # the child inherits the locked record; the PID it names is gone a moment later
    while not Path(sys.argv[3]).exists():
        time.sleep(0.05)
    os._exit(0)
os._exit(0)
"""


def test_a_running_resolve_is_known_by_its_lock_not_by_a_pid(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    """The record's writer is not visible by PID (as in another PID namespace sharing the hostname); the lock on its
    record is still held, so its view is not evicted. Once nobody holds it, the record is swept and the view goes."""
    store, cache = open_store(str(store_dir)), Cache(tmp_path / "cache")
    resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(materialize_weights=True))
    release = tmp_path / "release"
    done = subprocess.run([sys.executable, "-c", HOLDER, str(BUNDLED), str(cache.root), str(release)], timeout=60)
    assert done.returncode == 0
    try:
        kept = capacity.evict(cache, max_size=0)
        assert kept.views == [] and kept.kept_in_use and kept.unmet
        assert {m.name for _, m in cache.markers_all() if m} == {"tiny-llama"}
        [record] = list((cache.root / "active").iterdir())
        week = time.time() - 7 * 24 * 3600
        os.utime(record, (week, week))  # however old: a held lock is a running resolve (no 6-hour rule any more)
        assert capacity.evict(cache, max_size=0).views == []
    finally:
        release.touch()
    deadline = time.monotonic() + 30
    while capacity.in_use(cache).names and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = capacity.evict(cache, max_size=0)
    assert [v.split()[0] for v in gone.views] == ["tiny-llama"] and not gone.unmet
    assert list((cache.root / "active").iterdir()) == []  # the record nobody held was swept


def test_a_size_limit_smaller_than_one_commands_models_fails_before_anything(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    names = ["tiny-llama", "tiny-llama-sharded"]
    need = sum({e.sha256: e.size for n in names for e in bundled.get(n).files}.values())
    assert all(bundled.get(n).total_bytes < need - 1 for n in names)  # each alone would fit
    env = env_for(tmp_path, CATALOG_STORE=str(store_dir), CATALOG_CACHE_MAX_SIZE=str(need - 1))
    done = run_catalog(["resolve", *names, "--materialize-weights", "--format", "json"], env)
    assert done.returncode == 1 and done.stdout == "", explain(done)
    assert "CATALOG_CACHE_MAX_SIZE" in done.stderr and "nothing was fetched or evicted" in done.stderr
    assert not (tmp_path / "cache" / "blobs").exists()
    fits = run_catalog(
        ["resolve", *names, "--materialize-weights", "--format", "json"], {**env, "CATALOG_CACHE_MAX_SIZE": str(need)}
    )
    assert fits.returncode == 0, explain(fits)
    assert all(Path(r["path"]).is_dir() for r in json.loads(fits.stdout))  # neither evicted by the other


def test_an_edited_plan_naming_syncs_state_records_is_refused(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(BUNDLED / "catalog.yaml", manifests)
    shutil.copy(bundled.sources["tiny-llama"], manifests)
    folder = tmp_path / "store"
    upload_from_dir(catalog.load(manifests), "tiny-llama", sources["tiny-llama"], open_store(str(folder)))
    state = folder / ".model-catalog" / "state" / "tiny-llama.json"
    assert state.is_file()
    env = env_for(tmp_path, CATALOG_DIR=str(manifests))
    made = run_catalog(["sync", "--store", str(folder), "--out", str(tmp_path / "plan.json")], env)
    assert made.returncode == 0, explain(made)
    plan = json.loads((tmp_path / "plan.json").read_text())
    plan["prune"] = plan["delete_orphans"] = True
    plan["items"].append(
        {"action": "orphan", "key": ".model-catalog/state/tiny-llama.json", "size": state.stat().st_size}
    )
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = run_catalog(["sync", "--store", str(folder), "--apply", str(tmp_path / "plan.json")], env)
    assert done.returncode == 2 and "sync's own state records" in done.stderr, explain(done)
    assert state.is_file()


def test_gc_that_cannot_reach_its_size_says_so(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    resolve(bundled, "tiny-llama", cache=cache, store=open_store(str(store_dir)))
    with capacity.active(cache, ["tiny-llama"], [e.sha256 for e in bundled.get("tiny-llama").files]):
        done = run_catalog(["gc", "--max-size", "0"], env_for(tmp_path))
    assert done.returncode == 1 and "could not reach at most 0 B in the cache" in done.stderr, explain(done)
    assert "kept tiny-llama" in done.stderr


def test_an_unreadable_activity_record_nobody_holds_is_swept(tmp_path: Path) -> None:
    active = tmp_path / "cache" / "active"
    active.mkdir(parents=True)
    (active / "junk.json").write_bytes(b"\x00not json")
    done = run_catalog(["gc"], env_for(tmp_path))
    assert done.returncode == 0, explain(done)
    assert not (active / "junk.json").exists()


# -- 6. tiers and publishing ---------------------------------------------------------------------------------------
@pytest.fixture
def other_fs() -> Iterator[Path]:
    """A folder on another filesystem than the test's temp folder: /dev/shm (tmpfs)."""
    shm = Path("/dev/shm")
    assert shm.is_dir() and os.stat(shm).st_dev != os.stat(tempfile.gettempdir()).st_dev, "needs /dev/shm (tmpfs)"
    folder = Path(tempfile.mkdtemp(prefix="tier-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_tier_on_another_filesystem_is_checked_for_free_space_before_copying(
    bundled: Catalog, store_dir: Path, tmp_path: Path, other_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same_fs = tmp_path / "tier"
    for tier in (other_fs, same_fs):
        publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    monkeypatch.setattr(capacity.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1000, 1000))
    cache = Cache(tmp_path / "cache")
    with pytest.raises(CacheWriteError, match="needs"):
        resolve(
            bundled,
            "tiny-llama",
            cache=cache,
            store=open_store(str(store_dir)),
            options=ResolveOptions(tiers=(other_fs,)),
        )
    assert not cache.blobs.exists()
    # A hard link costs nothing: the same shortage is no reason to refuse a tier on the cache's own filesystem.
    linked = resolve(
        bundled, "tiny-llama", cache=cache, store=open_store(str(store_dir)), options=ResolveOptions(tiers=(same_fs,))
    )
    assert set(linked.sources.values()) == {Tier(same_fs).url}


def test_the_size_limit_counts_what_a_tier_serves(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    resolve(
        bundled,
        "tiny-llama-sharded",
        cache=cache,
        store=open_store(str(store_dir)),
        options=ResolveOptions(materialize_weights=True),
    )
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    limit = sum({e.sha256: e.size for e in bundled.get("tiny-llama").files}.values())
    options = ResolveOptions(tiers=(tier,), max_size=limit)
    result = resolve(bundled, "tiny-llama", cache=cache, store=open_store(str(store_dir)), options=options)
    assert result.sources[largest(bundled, "tiny-llama").path] == Tier(tier).url  # (files both share were cached)
    assert {m.name for _, m in cache.markers_all() if m} == {"tiny-llama"}  # the older view made room
    assert capacity.cache_size(cache) <= limit


def test_offline_resolves_from_a_shared_tier(bundled: Catalog, store_dir: Path, tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    done = run_catalog(
        ["resolve", "tiny-llama", "--offline", "--shared-cache", str(tier), "--format", "json"], env_for(tmp_path)
    )
    assert done.returncode == 0, explain(done)
    assert set(json.loads(done.stdout)["sources"].values()) == {f"tier:{tier}"}


def test_a_missing_tier_folder_is_said(store_dir: Path, tmp_path: Path) -> None:
    done = run_catalog(
        ["resolve", "tiny-llama", "--store", str(store_dir), "--shared-cache", str(tmp_path / "not-mounted")],
        env_for(tmp_path),
    )
    assert done.returncode == 0, explain(done)
    assert f"shared tier {tmp_path / 'not-mounted'} cannot be read" in done.stderr


def test_a_folder_where_a_tier_blob_belongs_is_one_line_never_a_traceback(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    tier = tmp_path / "tier"
    publish(bundled, ["tiny-llama"], open_store(str(store_dir)), tier)
    victim = largest(bundled, "tiny-llama")
    blob = Tier(tier).blob_path(victim.sha256)
    blob.unlink()
    blob.mkdir()
    env = env_for(tmp_path)
    done = run_catalog(
        ["resolve", "tiny-llama", "--store", str(store_dir), "--shared-cache", str(tier), "--format", "json"], env
    )
    assert done.returncode == 0 and "is not a regular file" in done.stderr, explain(done)
    assert json.loads(done.stdout)["sources"][victim.path] != f"tier:{tier}"
    again = run_catalog(["publish", "tiny-llama", "--to", str(tier), "--store", str(store_dir)], env)
    assert again.returncode == 1 and f"{blob} is a folder" in again.stderr and "Traceback" not in again.stderr, explain(
        again
    )
    assert f"hint: remove the folder {blob}" in again.stderr and "free space" not in again.stderr, explain(
        again
    )  # not a full disk


def test_publish_checks_the_tiers_space_first_and_names_the_tier(
    bundled: Catalog, store_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity.shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1000, 1000))
    tier = tmp_path / "tier"
    store = open_store(str(store_dir))
    with pytest.raises(CacheWriteError) as caught:
        publish(bundled, ["tiny-llama"], store, tier)
    assert "in the tier at" in str(caught.value) and "--cache" not in (caught.value.hint or "")
    assert store.requests["GetObject"] == 0 and not (tier / "blobs").exists()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_publish_clean_removes_only_killed_publishers_temp_files_and_gc_refuses_a_tier(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    import fcntl

    tier = tmp_path / "tier"
    env = env_for(tmp_path)
    done = run_catalog(["publish", "tiny-llama", "--to", str(tier), "--store", str(store_dir)], env)
    assert done.returncode == 0, explain(done)
    blobs_before = sorted(p.name for p in (tier / "blobs").rglob("*") if p.is_file())
    (tier / "tmp").mkdir()
    killed = tier / "tmp" / f"{_dead_pid()}-0123456789ab.part"  # what a SIGKILLed publisher leaves
    killed.write_bytes(b"half a blob")
    running = tier / "tmp" / f"{os.getpid()}-ba9876543210.part"  # a publisher at work holds its temp file's lock
    running.write_bytes(b"in flight")
    held = os.open(running, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        check = run_catalog(["publish", "tiny-llama", "--to", str(tier), "--store", str(store_dir), "--check"], env)
        assert check.returncode == 1 and "publish --clean" in check.stdout and running.name not in check.stdout, (
            explain(check)
        )
        clean = run_catalog(["publish", "--clean", "--to", str(tier)], env)
        assert clean.returncode == 0 and str(killed) in clean.stdout, explain(clean)
        assert not killed.exists() and running.exists()
    finally:
        os.close(held)
    assert sorted(p.name for p in (tier / "blobs").rglob("*") if p.is_file()) == blobs_before
    gc = run_catalog(["gc", "--cache", str(tier)], env)
    assert gc.returncode == 2 and "is a shared tier" in gc.stderr and "publish --clean" in gc.stderr, explain(gc)
    assert sorted(p.name for p in (tier / "blobs").rglob("*") if p.is_file()) == blobs_before


def test_a_symlinked_tier_blobs_folder_is_refused_before_anything_is_made_outside(
    bundled: Catalog, store_dir: Path, tmp_path: Path
) -> None:
    tier, outside = tmp_path / "tier", tmp_path / "outside"
    tier.mkdir()
    outside.mkdir()
    (tier / "blobs").symlink_to(outside)
    done = run_catalog(["publish", "tiny-llama", "--to", str(tier), "--store", str(store_dir)], env_for(tmp_path))
    assert done.returncode == 1 and "outside" in done.stderr, explain(done)
    assert list(outside.iterdir()) == []


# -- 7. copies, read-only mounts and other users -----------------------------------------------------------------------
@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder every user can enter (pytest's own is private to this user)."""
    folder = Path(tempfile.mkdtemp(prefix="catalog-shared-"))
    os.chmod(folder, 0o755)
    yield folder
    subprocess.run(["chmod", "-R", "u+w", str(folder)], check=False)
    shutil.rmtree(folder, ignore_errors=True)


def as_other_user(command: list[str]) -> list[str]:
    """`command` run as another user: as root, setpriv to a uid that owns nothing here; otherwise this user is
    already not the one who made the files (the test says what it checks instead)."""
    return (
        ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", *command]
        if ROOT_USER
        else command
    )


def test_a_cp_a_copy_of_a_warm_cache_on_a_read_only_mount_answers_offline(
    bundled: Catalog, store_dir: Path, shared_tmp: Path
) -> None:
    warm = shared_tmp / "warm"
    env = env_for(shared_tmp, CATALOG_STORE=str(store_dir), CATALOG_CACHE=str(warm))
    first = run_catalog(["resolve", "tiny-llama", "--format", "json"], env)
    assert first.returncode == 0, explain(first)
    copy, mount = shared_tmp / "copy", shared_tmp / "mnt"
    subprocess.run(["cp", "-a", str(warm), str(copy)], check=True)
    mount.mkdir()
    argv = [
        sys.executable,
        "-m",
        "catalog",
        "resolve",
        "tiny-llama",
        "--offline",
        "--format",
        "json",
        "--cache",
        str(mount),
    ]
    if ROOT_USER:  # a real read-only mount, in a mount namespace of its own (nothing leaks to the machine's mounts)
        command = [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount --bind -o ro "$0" "$1" && shift && exec "$@"',
            str(copy),
            str(mount),
            *argv,
        ]
    else:
        subprocess.run(["chmod", "-R", "a-w", str(copy)], check=True)
        command = [*argv[:-1], str(copy)]
    done = subprocess.run(
        command, env={k: v for k, v in env.items() if k != "CATALOG_CACHE"}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, explain(done)
    answer = json.loads(done.stdout)
    assert answer["path"].startswith(str(mount if ROOT_USER else copy))
    for entry in bundled.get("tiny-llama").files:  # every byte re-hashed from the copy, none fetched
        assert answer["sources"][entry.path] == "cache"
    assert sorted(p.name for p in (copy / "blobs").rglob("*") if p.is_file()) == sorted(
        p.name for p in (warm / "blobs").rglob("*") if p.is_file()
    )


def test_folder_store_objects_are_readable_by_another_users_resolve(
    bundled: Catalog, sources: dict[str, Path], shared_tmp: Path
) -> None:
    folder = shared_tmp / "store"
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(folder)))
    manifest = bundled.get("tiny-llama")
    for entry in manifest.files:
        mode = os.stat(folder / bundled.store_key(manifest, entry.path)).st_mode
        assert mode & 0o044 == 0o044, oct(mode)  # group and others may read (0644 under the usual umask)
    cache = shared_tmp / "their-cache"
    cache.mkdir()
    if ROOT_USER:
        os.chown(cache, OTHER_UID, OTHER_UID)
    env = env_for(shared_tmp, CATALOG_CACHE=str(cache), HOME=str(cache))
    done = subprocess.run(
        as_other_user([sys.executable, "-m", "catalog", "resolve", "tiny-llama", "--store", str(folder)]),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, explain(done)
    assert Path(done.stdout.strip()).is_dir()
