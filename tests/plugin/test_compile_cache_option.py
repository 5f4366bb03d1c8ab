"""The pytest plugin's `--catalog-compile-cache DIR`: a session restores the compile cache of the models its tests
mark into DIR and runs them with VLLM_CACHE_ROOT=DIR (and the rest); afterwards it publishes what the engine left.
A second session, in another folder on a fresh cache, starts with those files. The "engine" here is the test
itself writing into VLLM_CACHE_ROOT (the engine tier runs vLLM: tests/engine/test_compile_cache.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]

USER_TEST = """\
import os
from pathlib import Path

import pytest


@pytest.mark.catalog_model("tiny-llama")
def test_the_engine_runs_with_the_restored_cache(catalog_resolution):
    root = Path(os.environ["VLLM_CACHE_ROOT"])
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(root / "torchinductor")
    graph = root / "torchinductor" / "fxgraph" / "ab" / "graph"
    if os.environ["EXPECT"] == "restored":
        assert graph.read_bytes() == b"compiled once"
    else:
        assert not graph.exists()
        graph.parent.mkdir(parents=True)
        graph.write_bytes(b"compiled once")  # what the engine's compile leaves
"""


def session(tmp_path: Path, cache: str, engine_cache: str, expect: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "test_compiled.py").write_text(textwrap.dedent(USER_TEST))
    env = {
        **os.environ,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": str(tmp_path / "store"),
        "CATALOG_CACHE": str(tmp_path / cache),
        "CATALOG_MODE": "ci",
        "EXPECT": expect,
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "test_compiled.py",
            "--catalog-compile-cache",
            str(tmp_path / engine_cache),
            "--catalog-engine-args",
            "--dtype float32 --max-model-len 64",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_session_publishes_its_compile_cache_and_the_next_one_starts_with_it(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(tmp_path / "store")))
    first = session(tmp_path, "cache-1", "engine-1", "compiled")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "compile cache of tiny-llama: none (nothing stored under this key" in first.stdout
    assert "compile cache of tiny-llama: published 1 file(s)" in first.stdout
    second = session(tmp_path, "cache-2", "engine-2", "restored")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"compile cache of tiny-llama: restored 1 file(s) into {tmp_path / 'engine-2'}" in second.stdout
