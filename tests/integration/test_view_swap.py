"""Two builders of one view, the second paused between each of its steps: in every gap the first one finishes its
marker and a reader resolves the path; neither ever finds the view absent or incomplete.

The second builder runs in a thread whose cache calls `between_steps` at each step of laying out the view; the test
takes its turn there (no sleep: the builder waits until told to go on). The first builder runs start to finish at the
first pause, then at the second, and so on, so every position of its build among the second builder's steps is tried.
Three starting points: no view yet; a stale view in place (a file dropped in, a pinned file rewritten); the same on a
filesystem without an atomic exchange of two folders.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog.schema import FileEntry
from resolver import fsutil
from resolver.cache import Cache
from resolver.views import Layout, ViewSpec, ViewState

CATALOG = "/catalogs/one"
FILES = {
    "config.json": b'{"model_type": "llama"}',
    "nested/deeper/tokenizer.json": b'{"version": "1.0"}' * 50,
    "model.safetensors": bytes(range(256)) * 400,
}


def spec_of(layout: Layout) -> ViewSpec:
    files = tuple(
        FileEntry(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest()) for p, b in sorted(FILES.items())
    )
    return ViewSpec("swap-model", "org/swap-model", "0123456789abcdef0123456789abcdef01234567", layout, files)


def with_blobs(root: Path, spec: ViewSpec) -> None:
    cache = Cache(root)
    for entry in spec.files:
        fd, temp = cache.new_temp()
        with os.fdopen(fd, "wb") as f:
            f.write(FILES[entry.path])
        cache.publish_blob(temp, entry.sha256)


class PausedBuilder:
    """`Cache.build_view` in a thread that stops at each of its steps until `steps()` moves on."""

    def __init__(self, root: Path, spec: ViewSpec) -> None:
        self.cache = Cache(root)
        self.cache.between_steps = self._pause
        self.spec = spec
        self.reached: queue.Queue[str | None] = queue.Queue()
        self.go_on = threading.Semaphore(0)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._build, daemon=True)

    def _pause(self, step: str) -> None:
        self.reached.put(step)
        self.go_on.acquire()

    def _build(self) -> None:
        try:
            self.cache.build_view(self.spec, CATALOG)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.reached.put(None)

    def steps(self) -> Iterator[str]:
        """Each step the builder stops at; the builder goes on when the loop body that received it is done."""
        self.thread.start()
        while (step := self.reached.get(timeout=60)) is not None:
            yield step
            self.go_on.release()
        self.thread.join(timeout=60)


def reader_problems(root: Path, spec: ViewSpec) -> list[str]:
    """What a resolve of the view would find wrong now: its marker no longer holding (a resolve would rebuild it,
    removing what others were handed), or a pinned file missing or other bytes at the path it hands out."""
    cache = Cache(root)
    state = cache.view_state(spec)
    problems = [] if state is ViewState.FRESH else [f"the view is {state.value} to a reader"]
    for entry in spec.files:
        try:
            data = (cache.view_dir(spec) / entry.path).read_bytes()
        except OSError as exc:
            problems.append(f"{entry.path}: {exc.strerror}")
            continue
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            problems.append(f"{entry.path}: other bytes")
    return problems


def make_stale(root: Path, spec: ViewSpec) -> None:
    """A view built and marked, then a file dropped into it and a pinned file rewritten (a new inode: the blob
    itself is intact)."""
    cache = Cache(root)
    cache.build_view(spec, CATALOG)
    view = cache.view_dir(spec)
    (view / "modeling_extra.py").write_text("print('not pinned')\n")
    if spec.layout is Layout.DIR:
        (view / "config.json").unlink()
        (view / "config.json").write_bytes(b'{"model_type": "other"}')
    assert cache.view_state(spec) is ViewState.STALE


def reset(root: Path) -> None:
    for folder in ("models", "markers", "hub"):
        shutil.rmtree(root / folder, ignore_errors=True)


@pytest.mark.parametrize(
    ("layout", "start", "atomic_exchange"),
    [
        (Layout.DIR, "empty", True),
        (Layout.DIR, "stale", True),
        (Layout.DIR, "stale", False),
        (Layout.DIR, "empty", False),
        (Layout.HF_CACHE, "empty", True),
        (Layout.HF_CACHE, "stale", True),
    ],
    ids=[
        "dir-empty",
        "dir-stale",
        "dir-stale-no-exchange",
        "dir-empty-no-exchange",
        "hf-cache-empty",
        "hf-cache-stale",
    ],
)
def test_a_second_builder_never_takes_the_view_from_the_first_nor_from_a_reader(
    tmp_path: Path, layout: Layout, start: str, atomic_exchange: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not atomic_exchange:  # as on NFS: the C library's renameat2 refuses RENAME_EXCHANGE there
        monkeypatch.setattr(fsutil, "_renameat2", lambda: None)
    root = tmp_path / "cache"
    spec = spec_of(layout)
    with_blobs(root, spec)
    first_at = 0
    while True:
        reset(root)
        if start == "stale":
            make_stale(root, spec)
        second = PausedBuilder(root, spec)
        first_done = False
        seen: list[str] = []
        for step in second.steps():
            seen.append(step)
            if len(seen) - 1 == first_at:
                Cache(root).build_view(spec, CATALOG)  # the first builder, start to finish, in this gap
                first_done = True
            if first_done:
                where = f"first builder done at the second's step {first_at} ({seen[first_at]}), now at {step!r}"
                try:
                    Cache(root).write_marker(spec, CATALOG)  # the first builder's marker, taken in this gap
                except FileNotFoundError as exc:
                    pytest.fail(f"{where}: the first builder could not write its marker: {exc}")
                assert reader_problems(root, spec) == [], where
        assert second.error is None, f"the second builder failed after steps {seen}: {second.error!r}"
        assert reader_problems(root, spec) == [], f"after both builders (steps {seen})"
        leftovers = [p.name for p in Cache(root).view_dir(spec).parent.iterdir() if p.name.startswith(".")]
        assert leftovers == [], f"staging or swapped-out folders left: {leftovers}"
        if not first_done:
            break  # the second builder finished before its step `first_at`: every position was tried
        first_at += 1
    assert first_at >= 2, f"the second builder stopped at too few steps to prove anything: {seen}"
