"""Integrity under abuse, the cache side: a blob edited through a view, gc across catalogs and PID namespaces,
files dropped into views, hangs (Ctrl-C, a stopped lock holder) and a cache that is no folder, read-only or
deleted mid-resolve.

Each test is a case that once went wrong (docs/reliability.md, "Abuse (cache side)"): it failed before its
fix and passes now.
"""

from __future__ import annotations

import _thread
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from catalog.errors import CatalogError
from catalog.lookup import Catalog
from catalog.schema import FileEntry
from resolver.cache import UNRECORDED_BELOW, Cache
from resolver.fsutil import staging_owner
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore
from resolver.transfer import TransferConfig, Wanted, fetch
from resolver.upload import upload_from_dir
from resolver.view_stamps import STAGING_MARK, staging_name

from .support import BUNDLED, explain, run_catalog, sha256_file, write_generated_catalog
from .test_rel_abuse_inputs import add_file, one_line_error

CONFIG = "config.json"


def env_for(manifests: Path, store: Path, cache: Path, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CATALOG_DIR": str(manifests),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(cache),
        "HOME": str(home),
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@pytest.fixture
def llama(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, str]:
    """tiny-llama and tiny-llama-sharded (they share config.json and the tokenizer) in a folder store."""
    store = tmp_path / "store"
    for name in ("tiny-llama", "tiny-llama-sharded"):
        upload_from_dir(bundled, name, sources[name], LocalStore(store))
    return env_for(BUNDLED, store, tmp_path / "cache", tmp_path / "home")


def resolved(env: dict[str, str], *args: str) -> Path:
    done = run_catalog(["resolve", *args], env)
    assert done.returncode == 0, explain(done)
    return Path(done.stdout.strip())


def flip_first_byte(path: Path, keep_mtime: bool) -> None:
    """A normal write as root through the view's hard link, same size; with `keep_mtime`, `touch -r` after."""
    before = os.stat(path)
    data = path.read_bytes()
    with open(path, "r+b") as f:
        f.write(bytes([data[0] ^ 1]))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


# -- case 1: an edit through a view must not reach a new view, nor pass verify ----------------------------------
def test_an_edit_through_a_view_is_never_linked_into_another_view(llama: dict[str, str], bundled: Catalog) -> None:
    pin = bundled.get("tiny-llama").file(CONFIG)
    assert pin is not None
    first = resolved(llama, "tiny-llama")
    flip_first_byte(first / CONFIG, keep_mtime=False)  # through the hard link: the shared blob changes too
    for args in (
        ("tiny-llama-sharded",),
        ("tiny-llama-sharded", "--materialize-weights"),
        ("tiny-llama", "--layout", "hf-cache"),
    ):
        view = resolved(llama, *args)
        assert sha256_file(view / CONFIG) == pin.sha256, f"{args}: a corrupted blob was linked into a new view"
    verify = run_catalog(["verify"], llama)
    assert verify.returncode == 1 and "tiny-llama" in verify.stdout, explain(verify)
    again = resolved(llama, "tiny-llama")
    assert sha256_file(again / CONFIG) == pin.sha256
    assert run_catalog(["verify", "--deep"], llama).returncode == 0


def test_a_same_size_edit_that_keeps_mtime_is_caught_without_deep(llama: dict[str, str], bundled: Catalog) -> None:
    pin = bundled.get("tiny-llama").file(CONFIG)
    assert pin is not None
    view = resolved(llama, "tiny-llama")
    resolved(llama, "tiny-llama-sharded")  # a second view of the same blob: its link moved the blob's ctime
    assert run_catalog(["verify"], llama).returncode == 0  # links the cache made itself are no problem
    flip_first_byte(view / CONFIG, keep_mtime=True)
    verify = run_catalog(["verify"], llama)
    assert verify.returncode == 1 and "changed since it was verified" in verify.stdout, explain(verify)
    # The warm index must not answer with the edited file either; the resolve repairs it.
    again = resolved(llama, "tiny-llama")
    assert sha256_file(again / CONFIG) == pin.sha256
    assert sha256_file(resolved(llama, "tiny-llama-sharded") / CONFIG) == pin.sha256
    assert run_catalog(["verify", "--deep"], llama).returncode == 0


def test_a_warm_resolve_re_reads_no_blob_after_another_view_linked_it(
    llama: dict[str, str], monkeypatch: pytest.MonkeyPatch, bundled: Catalog, tmp_path: Path
) -> None:
    """Linking moves ctime; a blob's own record vouches for it, so warm resolves never re-hash a blob that has one.
    Blobs under UNRECORDED_BELOW have none (a record costs what their re-hash does): each is re-hashed once, then
    the view's marker holds again."""
    resolved(llama, "tiny-llama")
    resolved(llama, "tiny-llama", "--layout", "hf-cache")  # a second view linking the same blobs moved their ctime
    resolved(llama, "tiny-llama-sharded")  # a twin's view links the small files they share
    from resolver import hashing

    rehashed: list[Path] = []
    real_hash_file = hashing.hash_file

    def recorded_blobs_unread(path: Path) -> Any:
        if path.stat().st_size >= UNRECORDED_BELOW:
            raise AssertionError(f"a warm resolve re-hashed {path}, whose record vouches for it")
        rehashed.append(path)
        return real_hash_file(path)

    monkeypatch.setattr(hashing, "hash_file", recorded_blobs_unread)

    def resolve_both() -> None:
        cache = Cache(tmp_path / "cache")
        for name in ("tiny-llama", "tiny-llama-sharded"):
            resolve(
                bundled,
                name,
                cache=cache,
                store=LocalStore(tmp_path / "store"),
                options=ResolveOptions(materialize_weights=True) if name == "tiny-llama" else ResolveOptions(),
            )

    resolve_both()
    assert len(set(rehashed)) == len(rehashed)  # each small blob at most once
    rehashed.clear()
    resolve_both()
    assert rehashed == []  # then nothing: the markers hold again
    assert any(e.size >= UNRECORDED_BELOW for e in bundled.get("tiny-llama").files)  # the guard covers a recorded blob


# -- case 5: gc and other catalogs, other PID namespaces, pinned names that look like staging names ------------
def two_catalogs(tmp_path: Path) -> tuple[dict[str, str], dict[str, str], list[str], list[str]]:
    store = tmp_path / "store"
    from .support import upload_generated

    made = []
    for label in ("alpha", "beta"):
        manifests, data, names = write_generated_catalog(tmp_path / label, "abuse-cache", 1, prefix=label)
        upload_generated(manifests, data, names, str(store))
        made.append((env_for(manifests, store, tmp_path / "shared-cache", tmp_path / "home"), names))
    return made[0][0], made[1][0], made[0][1], made[1][1]


def test_gc_of_one_catalog_keeps_the_views_of_another(tmp_path: Path) -> None:
    alpha, beta, alpha_names, _ = two_catalogs(tmp_path)
    view = resolved(alpha, alpha_names[0])
    held = open(view / "model-00001-of-00002.safetensors", "rb")  # noqa: SIM115 - closed at the test's end; a job holds the weights open
    try:
        done = run_catalog(["gc"], beta)
        assert done.returncode == 0, explain(done)
        assert view.is_dir() and run_catalog(["verify", "--deep"], alpha).returncode == 0, (
            "gc removed another catalog's view"
        )
        assert str(view) not in done.stdout
        wide = run_catalog(["gc", "--all-catalogs"], beta)
        assert wide.returncode == 0 and not view.exists(), explain(wide)
    finally:
        held.close()
    assert resolved(alpha, alpha_names[0]).is_dir()


def test_gc_keeps_a_temp_file_whose_writer_holds_its_lock_whatever_its_pid(tmp_path: Path) -> None:
    """A download in another PID namespace: its PID means nothing here, its flock does."""
    alpha, _, names, _ = two_catalogs(tmp_path)
    resolved(alpha, names[0])
    tmp = tmp_path / "shared-cache" / "tmp"
    tmp.mkdir(exist_ok=True)
    other_namespace = tmp / "999999999-0123456789ab.part"  # no such PID here
    fd = os.open(other_namespace, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert run_catalog(["gc"], alpha).returncode == 0
        assert other_namespace.exists(), "gc deleted a live download's temp file"
    finally:
        os.close(fd)
    assert run_catalog(["gc"], alpha).returncode == 0
    assert not other_namespace.exists(), "an unlocked temp file of a dead writer stayed"


@pytest.mark.parametrize("layout", ["dir", "hf-cache"])
def test_gc_never_deletes_a_pinned_file_that_looks_like_a_staging_name(tmp_path: Path, layout: str) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, "abuse-cache", 1)
    pinned = ".tokenizer.json.99999-deadbeef"
    add_file(manifests, data, names[0], pinned, b'{"pinned": true}')
    store = tmp_path / "store"
    from .support import upload_generated

    upload_generated(manifests, data, names, str(store))
    env = env_for(manifests, store, tmp_path / "cache", tmp_path / "home")
    view = resolved(env, names[0], "--layout", layout)
    assert run_catalog(["gc"], env).returncode == 0
    assert (view / pinned).is_file(), "gc deleted a pinned file"
    assert run_catalog(["verify", "--deep"], env).returncode == 0
    own = staging_name("tokenizer.json")
    assert STAGING_MARK in own and staging_owner(own) == os.getpid()


# -- case 6: views hold exactly the pinned files ----------------------------------------------------------------
def test_a_file_dropped_into_a_view_is_reported_and_never_handed_out(llama: dict[str, str]) -> None:
    view = resolved(llama, "tiny-llama")
    snapshot = resolved(llama, "tiny-llama", "--layout", "hf-cache")
    (view / "modeling_llama.py").write_text("import os; os.system('echo owned')\n")
    (snapshot / "chat_template.json").write_text('{"chat_template": "{{ evil }}"}')
    (view / "nested").mkdir()
    (view / "nested" / "extra.py").write_text("pass\n")
    for args in ([], ["--deep"]):
        verify = run_catalog(["verify", *args], llama)
        assert verify.returncode == 1, explain(verify)
        assert "modeling_llama.py" in verify.stdout and "chat_template.json" in verify.stdout, explain(verify)
    again = resolved(llama, "tiny-llama")  # the warm index must not answer past the extra files
    assert not (again / "modeling_llama.py").exists() and not (again / "nested").exists()
    snap = resolved(llama, "tiny-llama", "--layout", "hf-cache")
    assert not (snap / "chat_template.json").exists()
    assert run_catalog(["verify", "--deep"], llama).returncode == 0


# -- case 7: hangs ----------------------------------------------------------------------------------------------
class SlowStore(LocalStore):
    """A folder store whose bodies trickle (64 KiB a read, 20 ms apart)."""

    def open(self, key: str, start: int = 0, end: int | None = None) -> Any:
        inner = super().open(key, start, end)

        class Slow:
            total = inner.total

            def readinto(self, buffer: memoryview) -> int:
                time.sleep(0.02)
                return int(inner.readinto(buffer[: 64 * 1024]))

            def close(self) -> None:
                inner.close()

        return Slow()


def many_files(root: Path, count: int, size: int) -> list[Wanted]:
    import hashlib

    root.mkdir(parents=True)
    wanted = []
    for i in range(count):
        data = hashlib.sha256(str(i).encode()).digest() * (size // 32)
        (root / f"f{i:03d}.bin").write_bytes(data)
        wanted.append(
            Wanted(
                "m",
                FileEntry(path=f"f{i:03d}.bin", size=len(data), sha256=hashlib.sha256(data).hexdigest()),
                f"f{i:03d}.bin",
            )
        )
    return wanted


def test_ctrl_c_cancels_queued_downloads_at_once_and_leaves_no_temp_file(tmp_path: Path) -> None:
    wanted = many_files(tmp_path / "store", 24, 2 * 1024 * 1024)  # 32 reads of 20 ms each: ~0.7 s a file
    cache = Cache(tmp_path / "cache")
    # interrupt_main() does nothing unless SIGINT has Python's own handler: set it, whatever ran before in this worker.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            fetch(
                SlowStore(tmp_path / "store"), wanted, cache, TransferConfig(concurrency=2, part_size=64 * 1024 * 1024)
            )
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    took = time.monotonic() - started
    assert took < 3, f"Ctrl-C took {took:.1f}s to take effect (the queue was drained first)"
    assert sum(cache.has_blob(w.entry) for w in wanted) < 6
    assert not list(cache.tmp.glob("*")), "a temp file outlived the interrupted download"


def test_ctrl_c_in_the_cli_exits_130() -> None:
    from catalog_app import main

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("catalog_app.cli.cli.main", lambda **_: (_ for _ in ()).throw(KeyboardInterrupt()))
        assert main.run(["resolve", "x"]) == main.INTERRUPTED


def test_a_stopped_lock_holder_is_said_and_waited_for_only_so_long(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = many_files(tmp_path / "store", 1, 1024 * 1024)
    cache = Cache(tmp_path / "cache")
    cache.locks.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom filelock import FileLock\n"
                f"lock = FileLock({str(cache.locks / (wanted[0].entry.sha256 + '.lock'))!r})\nlock.acquire()\n"
                "print('held', flush=True)\n"
                "time.sleep(120)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        caplog.set_level(logging.INFO, logger="resolver.transfer")
        started = time.monotonic()
        fetch(LocalStore(tmp_path / "store"), wanted, cache, TransferConfig(lock_threshold=1, lock_wait=2.0))
        took = time.monotonic() - started
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]  # its pipe: the test read it, nobody else will
    assert took < 10 and cache.has_blob(wanted[0].entry)
    waiting = [r for r in caplog.records if "waiting for another process's download" in r.getMessage()]
    assert len(waiting) == 1 and waiting[0].levelno >= logging.INFO
    assert any("gave up waiting" in r.getMessage() for r in caplog.records)


# -- case 8: one-line errors, never a traceback ---------------------------------------------------------------
def test_a_cache_path_that_is_a_file_is_one_line(llama: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("not a folder")
    done = run_catalog(["resolve", "tiny-llama"], llama)
    assert done.returncode == 1 and one_line_error(done.stderr) and str(tmp_path / "cache") in done.stderr, explain(
        done
    )


def test_a_locks_folder_that_is_a_file_only_costs_the_lock(tmp_path: Path) -> None:
    manifests, data, names = write_generated_catalog(tmp_path, "abuse-cache", 1, files=2, unit=17 * 1024 * 1024)
    store = tmp_path / "store"
    from .support import upload_generated

    upload_generated(manifests, data, names, str(store))
    env = env_for(manifests, store, tmp_path / "cache", tmp_path / "home")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "locks").write_text("not a folder")
    done = run_catalog(["resolve", names[0]], env)
    assert done.returncode == 0, explain(done)
    assert run_catalog(["gc"], env).returncode == 0


def test_a_cache_folder_this_user_cannot_write_is_one_line(bundled: Catalog, sources: dict[str, Path]) -> None:
    """Root writes through any permission, so as root the resolve runs as another user (setpriv to nobody) in a
    folder every user can enter; as anyone else, as this user."""
    shared = Path(tempfile.mkdtemp(prefix="catalog-shared-"))
    try:
        os.chmod(shared, 0o755)
        upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], LocalStore(shared / "store"))
        shutil.copytree(BUNDLED, shared / "manifests")
        (shared / "cache").mkdir()
        os.chmod(shared / "cache", 0o555)
        (shared / "home").mkdir()
        os.chmod(shared / "home", 0o777)
        env = env_for(shared / "manifests", shared / "store", shared / "cache", shared / "home")
        command = [sys.executable, "-m", "catalog", "resolve", "tiny-llama"]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and one_line_error(done.stderr), explain(done)
        assert "not writable by this user" in done.stderr, explain(done)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_cache_deleted_during_a_resolve_is_one_error(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], LocalStore(store))
    cache = Cache(tmp_path / "cache")

    class Vanishing(LocalStore):
        def open(self, key: str, start: int = 0, end: int | None = None) -> Any:
            shutil.rmtree(cache.root, ignore_errors=True)
            return super().open(key, start, end)

    with pytest.raises(CatalogError) as caught:
        resolve(bundled, "tiny-llama", cache=cache, store=Vanishing(store))
    assert str(cache.root) in caught.value.message


def test_gc_with_a_ds_store_in_models(llama: dict[str, str], tmp_path: Path) -> None:
    resolved(llama, "tiny-llama")
    (tmp_path / "cache" / "models" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    done = run_catalog(["gc"], llama)
    assert done.returncode == 0 and "Traceback" not in done.stderr, explain(done)
    assert run_catalog(["verify", "--deep"], llama).returncode == 0


def _bind_read_only(source: Path, target: Path) -> bool:
    target.mkdir()
    return (
        subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a read-only bind mount needs root")
def test_a_read_only_warm_cache_answers_without_writing(llama: dict[str, str], tmp_path: Path) -> None:
    view = resolved(llama, "tiny-llama")
    resolved(llama, "tiny-llama", "--offline")
    os.utime(view / CONFIG)  # touched (same bytes): the view must be re-proven, by hashing, not rebuilt
    read_only = tmp_path / "ro-cache"
    if not _bind_read_only(tmp_path / "cache", read_only):
        pytest.skip("this machine refuses bind mounts")
    try:
        env = {**llama, "CATALOG_CACHE": str(read_only)}
        for args in ([], ["--offline"], ["--format", "json"]):
            done = run_catalog(["resolve", "tiny-llama", *args], env)
            assert done.returncode == 0, explain(done)
        assert run_catalog(["verify"], env).returncode == 0
        for args in (["tiny-llama-sharded"], ["tiny-llama", "--layout", "hf-cache", "--offline"]):
            cold = run_catalog(["resolve", *args], env)  # must write: one line naming the cache
            assert cold.returncode == 1 and one_line_error(cold.stderr) and str(read_only) in cold.stderr, explain(cold)
    finally:
        subprocess.run(["umount", str(read_only)], check=False)
    assert json.loads(run_catalog(["resolve", "tiny-llama", "--format", "json"], llama).stdout)["name"] == "tiny-llama"
