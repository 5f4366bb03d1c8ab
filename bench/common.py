"""Shared by the benchmarks: a one-model catalog for generated files, and a timing loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

Entry = tuple[str, int, str]  # path, size, sha256


def files_block(entries: Sequence[Entry]) -> str:
    return "".join(f"  - path: {p}\n    size: {s}\n    sha256: {h}\n" for p, s, h in sorted(entries))


def write_one_model_catalog(
    root: Path, *, name: str, bucket: str, prefix: str, revision: str, load_format: str, entries: Sequence[Entry]
) -> Path:
    """root/manifests with a catalog.yaml whose store is s3://bucket/ and one manifest `name`."""
    manifests = root / "manifests"
    manifests.mkdir(parents=True)
    (manifests / "catalog.yaml").write_text(
        f"store: s3://{bucket}/\ndefault_gpu: big\ngpu_classes:\n  big: {{memory_gib: 1000}}\n"
    )
    (manifests / f"{name}.yaml").write_text(
        f"name: {name}\nsource:\n  hf_repo: org/{name}\n  revision: {revision}\n"
        f"s3_prefix: s3://{bucket}/{prefix}\nload_format: {load_format}\nfiles:\n{files_block(entries)}"
    )
    return manifests


def timed(fn: Callable[[], object], runs: int, reset: Callable[[], None] = lambda: None) -> list[float]:
    """Wall time of `fn` over `runs` runs, calling `reset` (untimed) before each."""
    out = []
    for _ in range(runs):
        reset()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out
