"""Every folder of the cache is bounded and cleaned by gc: no lock file outlives its download, warm-index and
sync-state entries do not grow without bound, and an internal error or a drift gets its own exit code."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from helpers import files_yaml, manifest_text, write_catalog

from catalog_app.cli import cli
from catalog_app.main import run
from resolver.cache import Cache
from resolver.maintenance import WARM_INDEX_MAX_ENTRIES

FILES = 1000


def catalog_cmd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


@pytest.fixture
def many_files(tmp_path: Path) -> tuple[Path, Path]:
    """A model of 1,000 small files in a folder store, and its catalog."""
    store = tmp_path / "store" / "org" / "many"
    store.mkdir(parents=True)
    entries = [("config.json", *_write(store / "config.json", b'{"model_type": "llama"}'))]
    entries.append(("model.safetensors", *_write(store / "model.safetensors", b"\x08" + b"\0" * 7 + b"{}      ")))
    for i in range(FILES - 2):
        entries.append((f"shards/{i:04d}.json", *_write(store / "shards" / f"{i:04d}.json", f'{{"i": {i}}}'.encode())))
    catalog = write_catalog(tmp_path, {"many.yaml": manifest_text("many", files=files_yaml(*entries))})
    return catalog, tmp_path / "store"


def _write(path: Path, data: bytes) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data), hashlib.sha256(data).hexdigest()


def test_no_lock_file_outlives_a_resolve_and_gc_removes_idle_ones(
    many_files: tuple[Path, Path], tmp_path: Path
) -> None:
    catalog, store = many_files
    cache = tmp_path / "cache"
    done = catalog_cmd("--catalog", str(catalog), "resolve", "many", "--store", str(store), "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    assert len(list((cache / "models").rglob("*.json"))) == FILES - 1  # every file is in the view
    assert not list((cache / "locks").glob("*"))  # each lock file went with its download
    # A lock left by a killed downloader: nobody holds it, so gc removes it.
    (cache / "locks").mkdir(exist_ok=True)
    (cache / "locks" / f"{'0' * 64}.lock").touch()
    done = catalog_cmd("--catalog", str(catalog), "gc", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    assert list((cache / "locks").glob("*")) == []


def test_warm_index_and_sync_state_entries_are_bounded(many_files: tuple[Path, Path], tmp_path: Path) -> None:
    catalog, store = many_files
    cache = Cache(tmp_path / "cache")
    done = catalog_cmd("--catalog", str(catalog), "resolve", "many", "--store", str(store), "--cache", str(cache.root))
    assert done.returncode == 0, done.stderr
    [live] = list(cache.warm_index.glob("*.json"))
    markers = json.loads(live.read_bytes())["markers"]
    # Entries whose views are gone, entries older than the bound, and more entries than the bound.
    gone = cache.warm_index / "gone.json"
    gone.write_text(json.dumps({"markers": [str(cache.markers / "gone" / "x.json")]}))
    old = cache.warm_index / "old.json"
    old.write_text(json.dumps({"markers": markers}))
    os.utime(old, (time.time() - 30 * 24 * 3600,) * 2)
    extra = [cache.warm_index / f"extra-{i}.json" for i in range(WARM_INDEX_MAX_ENTRIES + 5)]
    for i, path in enumerate(extra):
        path.write_text(json.dumps({"markers": markers}))
        os.utime(path, (time.time() - 3600 - i,) * 2)  # older than the live entry
    # A recorded sync state of a model the catalog no longer has, and one of a model it has.
    (cache.sync_state / "removed-model").mkdir(parents=True)
    (cache.sync_state / "removed-model" / "a.json").write_text("{}")
    (cache.sync_state / "many").mkdir()
    (cache.sync_state / "many" / "b.json").write_text("{}")
    done = catalog_cmd("--catalog", str(catalog), "gc", "--cache", str(cache.root))
    assert done.returncode == 0, done.stderr
    left = set(cache.warm_index.glob("*.json"))
    assert live in left and gone not in left and old not in left
    assert len(left) == WARM_INDEX_MAX_ENTRIES
    assert [p.name for p in cache.sync_state.iterdir()] == ["many"]


def test_an_internal_error_exits_3_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    @click.command("explode")
    def explode() -> None:
        raise ZeroDivisionError("a bug")

    cli.add_command(explode)
    try:
        monkeypatch.delenv("CATALOG_DEBUG", raising=False)
        assert run(["explode"]) == 3
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert err.splitlines()[0] == "error: internal error: ZeroDivisionError: a bug"
        assert "CATALOG_DEBUG=1" in err
        monkeypatch.setenv("CATALOG_DEBUG", "1")
        assert run(["explode"]) == 3
        assert "Traceback" in capsys.readouterr().err
    finally:
        cli.commands.pop("explode")


def test_drift_exits_1_and_a_usage_error_exits_2(many_files: tuple[Path, Path], tmp_path: Path) -> None:
    catalog, store = many_files
    empty = tmp_path / "empty-store"
    empty.mkdir()
    drift = catalog_cmd(
        "--catalog", str(catalog), "sync", "--check", "--store", str(empty), "--cache", str(tmp_path / "c")
    )
    assert drift.returncode == 1, drift.stderr
    usage = catalog_cmd("--catalog", str(catalog), "resolve", "many", "--concurrency", "0")
    assert usage.returncode == 2 and usage.stderr.startswith("error:"), usage.stderr


def test_gc_removes_what_killed_writers_left_in_every_folder_of_atomic_writes(
    many_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """A writer killed between writing its staging file and renaming it (warm index, blob stamps, sync state, tier
    checks) leaves `.<name>~catalog.<pid>-<hex>`: gc removes it once that pid is gone, and keeps a live writer's."""
    catalog, store = many_files
    cache = tmp_path / "cache"
    done = catalog_cmd("--catalog", str(catalog), "resolve", "many", "--store", str(store), "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    dead, live = [], []
    for folder in ("warm-index", "blob-stamps/ab", "sync-state/many", "tier-checks"):
        (cache / folder).mkdir(parents=True, exist_ok=True)
        dead.append(cache / folder / ".entry.json~catalog.999999999-0123abcd")  # no such pid here
        live.append(cache / folder / f".entry.json~catalog.{os.getpid()}-0123abcd")
    for path in dead + live:
        path.write_text("{")
    done = catalog_cmd("--catalog", str(catalog), "gc", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    assert [p for p in dead if p.exists()] == []
    assert [p for p in live if not p.exists()] == []
