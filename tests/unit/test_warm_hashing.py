"""The warm path's input hashing (catalog_app/warm.py): the interpreter's built-in sha256 for inputs up to
BUILTIN_SHA256_MAX (no OpenSSL to load), hashlib's above it (where OpenSSL's speed pays for its load). Either way the
digest must be the file's sha256: the warm answer compares it with what the full CLI recorded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from catalog_app import warm


@pytest.mark.parametrize(
    "size", [0, 4096, warm.BUILTIN_SHA256_MAX, warm.BUILTIN_SHA256_MAX + 1, 3 * warm.BUILTIN_SHA256_MAX]
)
def test_sha256_of_is_the_sha256_on_both_sides_of_the_threshold(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "model.yaml"
    path.write_bytes(data)
    assert warm.sha256_of(str(path)) == hashlib.sha256(data).hexdigest()


def test_sha256_of_an_unreadable_input_is_none(tmp_path: Path) -> None:
    assert warm.sha256_of(str(tmp_path / "gone.yaml")) is None
    assert warm.sha256_of(str(tmp_path)) is None  # a folder where a manifest was
