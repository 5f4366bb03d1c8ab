"""Builders for test catalogs: real files in a temp folder, never mocked loaders."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

SETTINGS = """\
store: s3://ci-bucket/
default_gpu: l4
gpu_classes:
  cpu: {memory_gib: 16}
  l4: {memory_gib: 24}
  h200: {memory_gib: 141}
"""

REV = "0123456789abcdef0123456789abcdef01234567"
SHA = "a" * 64


def files_yaml(*entries: tuple[str, int, str]) -> str:
    """The items of a files block, three lines each (path, size, sha256), as `catalog lock` writes them."""
    return "".join(f"  - path: {path}\n    size: {size}\n    sha256: {sha}\n" for path, size, sha in entries)


def manifest_text(
    name: str = "tiny",
    *,
    prefix: str | None = None,
    fmt: str = "safetensors",
    revision: str = REV,
    files: str | None = None,
    extra: str = "",
) -> str:
    """A valid manifest (one key per line, so tests can name exact lines), with overrides."""
    if files is None:
        files = files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, "b" * 64))
    return (
        f"name: {name}\n"  # line 1
        "source:\n"  # line 2
        f"  hf_repo: org/{name}\n"  # line 3
        f"  revision: {revision}\n"  # line 4
        f"s3_prefix: {prefix or f's3://ci-bucket/org/{name}/'}\n"  # line 5
        f"load_format: {fmt}\n"  # line 6
        "gpu: {class: cpu}\n"  # line 7
        f"{extra}"
        "files:\n"
        f"{files}"
    )


def write_catalog(root: Path, manifests: dict[str, str], settings: str = SETTINGS) -> Path:
    """A manifests/ folder with catalog.yaml and the given files (name -> text)."""
    folder = root / "manifests"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "catalog.yaml").write_text(settings)
    for rel, text in manifests.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder


def tree_state(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path under `root` with (inode, size, mtime_ns, mode): what a reader of a shared folder must never change."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            found[os.path.relpath(os.path.join(dirpath, name), root)] = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_mode,
            )
    return found
