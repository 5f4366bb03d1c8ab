"""The bundled models' bytes are what their manifests pin: the generated ones regenerate exactly."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from catalog.lookup import Catalog


def test_every_bundled_model_matches_its_manifest(bundled: Catalog, sources: dict[str, Path]) -> None:
    for name, folder in sources.items():
        manifest = bundled.get(name)
        for entry in manifest.files:
            data = (folder / entry.path).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (entry.size, entry.sha256), f"{name}/{entry.path}"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_generator_is_deterministic_across_processes(
    tmp_path: Path, sources: dict[str, Path], bundled: Catalog
) -> None:
    subprocess.run([sys.executable, "-m", "resolver.examples", str(tmp_path)], check=True, capture_output=True)
    for name in ("tiny-llama", "tiny-qwen2", "tiny-llama-sharded", "tiny-llama-tensorizer"):
        again = _files(tmp_path / name)
        # The same set of files (an empty or partial output cannot pass) with the same bytes ...
        assert sorted(again) == sorted(f.path for f in bundled.get(name).files), name
        assert again == _files(sources[name]), name
