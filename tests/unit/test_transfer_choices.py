"""The transfer's pure choices: part size and concurrency from the file sizes, which files take the download
lock, how a file is cut into parts; and the hasher that follows the write frontier (a local store, no server)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from catalog.schema import FileEntry
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.stores import LocalStore
from resolver.transfer import (
    DEFAULT_CONCURRENCY,
    MAX_AUTO_PART,
    MIN_AUTO_PART,
    SMALL_FILES_CONCURRENCY,
    MiB,
    TransferConfig,
    Wanted,
    choose_concurrency,
    choose_part_size,
    fetch,
)

KiB = 1024


def test_settings_without_values_choose_both_from_the_sizes() -> None:
    config = TransferConfig.from_settings(Settings())
    assert config.auto_part_size and config.auto_concurrency
    chosen = config.for_sizes([256 * MiB] * 4 + [24])
    assert (chosen.part_size, chosen.concurrency) == (257 * MiB, DEFAULT_CONCURRENCY)
    assert not chosen.auto_part_size and not chosen.auto_concurrency


def test_values_given_are_kept_whatever_the_sizes() -> None:
    config = TransferConfig.from_settings(Settings(part_size=32 * MiB, concurrency=3))
    assert not config.auto_part_size and not config.auto_concurrency
    assert config.for_sizes([4 * KiB] * 1000) == config
    assert config.for_sizes([10 * 1024 * MiB]).part_size == 32 * MiB
    # a direct caller that names nothing gets the old fixed defaults (library callers, sync's uploads)
    assert TransferConfig().for_sizes([4 * KiB] * 1000) == TransferConfig()


def test_only_one_of_the_two_may_be_chosen() -> None:
    config = TransferConfig.from_settings(Settings(concurrency=2))
    chosen = config.for_sizes([1024 * MiB])
    assert chosen.concurrency == 2
    assert chosen.part_size == 1024 * MiB  # 2 x total / 2 streams, at the cap


def test_few_large_files_get_one_get_each() -> None:
    sizes = [256 * MiB] * 4 + [24]
    part = choose_part_size(sizes, DEFAULT_CONCURRENCY)
    assert all(len(TransferConfig(part_size=part).part_bounds(s)) == 1 for s in sizes)


def test_one_huge_file_is_cut_into_parallel_parts_of_bounded_size() -> None:
    part = choose_part_size([20 * 1024 * MiB], DEFAULT_CONCURRENCY)
    assert part == MAX_AUTO_PART
    assert len(TransferConfig(part_size=part).part_bounds(20 * 1024 * MiB)) == 20
    assert choose_part_size([3 * 1024 * MiB], DEFAULT_CONCURRENCY) == 768 * MiB


def test_part_size_never_below_the_floor_and_whole_mib() -> None:
    assert choose_part_size([4 * KiB] * 1000, SMALL_FILES_CONCURRENCY) == MIN_AUTO_PART
    assert choose_part_size([], DEFAULT_CONCURRENCY) == MIN_AUTO_PART
    assert choose_part_size([1000 * MiB + 1], 8) % MiB == 0


def test_many_small_files_run_many_at_once_one_get_each() -> None:
    assert choose_concurrency([4 * KiB] * 1000) == SMALL_FILES_CONCURRENCY
    assert choose_concurrency([4 * KiB] * 3) == 3  # never more threads than files
    assert choose_concurrency([4 * KiB] * 999 + [256 * MiB]) == DEFAULT_CONCURRENCY
    chosen = TransferConfig.from_settings(Settings()).for_sizes([4 * KiB] * 1000)
    assert len(chosen.part_bounds(4 * KiB)) == 1


def test_small_files_take_no_lock_large_ones_do() -> None:
    config = TransferConfig()
    assert not config.needs_lock(4 * KiB)
    assert not config.needs_lock(16 * MiB - 1)
    assert config.needs_lock(16 * MiB)
    assert config.needs_lock(10 * 1024 * MiB)


def test_part_bounds_cover_the_file_exactly() -> None:
    config = TransferConfig(part_size=10)
    assert config.part_bounds(25) == [(0, 10), (10, 20), (20, 25)]
    assert config.part_bounds(10) == [(0, 10)]
    assert config.part_bounds(0) == [(0, 0)]


def _entry(data: bytes, path: str) -> FileEntry:
    return FileEntry(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def test_small_files_leave_no_lock_file_and_large_ones_release_theirs(tmp_path: Path) -> None:
    store_root = tmp_path / "store"
    store_root.mkdir()
    small, large = b"s" * 4 * KiB, bytes(range(256)) * (17 * MiB // 256)
    (store_root / "small.json").write_bytes(small)
    (store_root / "large.bin").write_bytes(large)
    cache = Cache(tmp_path / "cache")
    taken: list[str] = []
    original = cache.download_lock

    def spy(sha256: str, timeout: float = 600.0):  # type: ignore[no-untyped-def]
        taken.append(sha256)
        return original(sha256, timeout)

    cache.download_lock = spy  # type: ignore[method-assign]
    wanted = [
        Wanted("m", _entry(small, "small.json"), "small.json"),
        Wanted("m", _entry(large, "large.bin"), "large.bin"),
    ]
    fetch(LocalStore(store_root), wanted, cache, TransferConfig(part_size=4 * MiB, concurrency=3, read_size=64 * KiB))
    assert taken == [wanted[1].entry.sha256]  # only the large file asked for the lock
    for item in wanted:
        assert cache.has_blob(item.entry)
    assert not cache.locks.exists() or not list(cache.locks.glob("*"))
    assert not list(cache.tmp.glob("*"))


def test_parts_arriving_out_of_order_hash_to_the_pin(tmp_path: Path) -> None:
    """The last parts finish first; the hasher waits at the frontier and reads them back in order."""
    data = hashlib.sha256(b"seed").digest() * (5 * MiB // 32)
    store_root = tmp_path / "store"
    store_root.mkdir()
    (store_root / "w.bin").write_bytes(data)
    first_part_may_go = threading.Event()

    class LateStart(LocalStore):
        def open(self, key: str, start: int = 0, end: int | None = None):  # type: ignore[no-untyped-def]
            if start == 0:
                assert first_part_may_go.wait(10)
            elif end == len(data):
                first_part_may_go.set()  # the last part has been opened: now the first may start
            return super().open(key, start, end)

    cache = Cache(tmp_path / "cache")
    entry = _entry(data, "w.bin")
    fetch(
        LateStart(store_root),
        [Wanted("m", entry, "w.bin")],
        cache,
        TransferConfig(part_size=1 * MiB, concurrency=5, read_size=64 * KiB),
    )
    assert cache.blob_path(entry.sha256).read_bytes() == data


def test_a_corrupt_part_is_caught_and_nothing_is_published(tmp_path: Path) -> None:
    from catalog.errors import IntegrityError

    data = b"a" * (3 * MiB)
    store_root = tmp_path / "store"
    store_root.mkdir()
    (store_root / "w.bin").write_bytes(data[:-1] + b"b")
    cache = Cache(tmp_path / "cache")
    entry = _entry(data, "w.bin")
    with pytest.raises(IntegrityError):
        fetch(
            LocalStore(store_root),
            [Wanted("m", entry, "w.bin")],
            cache,
            TransferConfig(part_size=1 * MiB, concurrency=2),
        )
    assert not cache.has_blob(entry)
    assert not list(cache.tmp.glob("*"))
